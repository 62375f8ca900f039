"""Compatibility with the oldest supported scikit-learn (1.6).

Only what differs between scikit-learn 1.6 and the newest supported
release lives here, so that every estimator behaves the same on each, and
every name skfed takes from scikit-learn's private modules, so that a move
in scikit-learn is mended in one place.
"""

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import _check_sample_weight

__all__ = ["Interval", "StrOptions", "check_sample_weight"]


def check_sample_weight(sample_weight, X, *, dtype=None, ensure_non_negative=False):
    """scikit-learn's ``_check_sample_weight``, refusing all-zero weights.

    From scikit-learn 1.7 on, weights that are all zero are refused with a
    ``ValueError``; scikit-learn 1.6 let them through, and a fit then failed
    later with another message (or a score came out as 0). This gives every
    supported version the newer behaviour and message.
    """
    sample_weight = _check_sample_weight(
        sample_weight, X, dtype=dtype, ensure_non_negative=ensure_non_negative
    )
    if not np.any(sample_weight):
        raise ValueError("Sample weights must contain at least one non-zero number.")
    return sample_weight
