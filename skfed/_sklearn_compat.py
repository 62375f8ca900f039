"""Every private scikit-learn name skfed uses, and what differs between
the oldest supported scikit-learn (1.6) and the newest.

scikit-learn's private modules can change in any release: importing them
here alone means one file to read when a release moves one, and gives every
estimator the same behaviour on each supported version.
"""

import numpy as np
from sklearn.base import _fit_context
from sklearn.utils._param_validation import (
    Hidden,
    Interval,
    StrOptions,
    validate_params,
)
from sklearn.utils.validation import _check_sample_weight

try:
    # scikit-learn's compiled Lloyd iteration, private to it: None on a
    # release that moved it (skfed.cluster._kmeans._sklearn_lloyd then runs
    # its NumPy pass).
    from sklearn.cluster._k_means_lloyd import lloyd_iter_chunked_dense
except ImportError:  # pragma: no cover - depends on the installed release
    lloyd_iter_chunked_dense = None

try:
    # scikit-learn's binding of libsvm, private to it: None on a release
    # that moved or changed it (the classifier's dual solves then go
    # through SVC.fit, to the same solution).
    from sklearn.svm import _libsvm as libsvm
except ImportError:  # pragma: no cover - depends on the installed release
    libsvm = None

__all__ = [
    "fit_context",
    "Hidden",
    "Interval",
    "StrOptions",
    "check_sample_weight",
    "libsvm",
    "lloyd_iter_chunked_dense",
    "validate_params",
]


#: scikit-learn's decorator of ``fit``: validates the parameters once per
#: fit, and skips the nested estimators' validation when asked.
fit_context = _fit_context


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
