"""The minimum rows behind anything a refusing client uploads.

Under ``raw_rows="refuse"`` no upload may be, or determine, a row of a
client's data. A statistic of one row is that row (a k-FED center of a
singleton local cluster, the mean of a one-row client), and a statistic of
several copies of one row is that row too; so a client counts the
*distinct* rows behind each statistic it is about to send, and merges,
leaves out or refuses (:class:`RawRowsRefused`) any statistic of fewer
than the minimum. The decision is the client's, taken on what it sends.

The minimums:

``MIN_ROWS = 2``
    For first moments (sums, means, counts of a cluster or of a client,
    sums of random features). The sum or mean of two distinct rows fixes
    neither: one row moved by any vector and the other by its opposite give
    the same mean.
``MIN_SPREAD_ROWS = 3``
    For a count, mean and spread together (the kernel-width round). In one
    dimension the mean and the sum of squares of two values are two
    equations in two unknowns, which give both values; with three rows
    they leave a circle of solutions.
D, the number of random features
    For a Gram matrix of random features, whose range is the span of the
    rows' features (see
    :func:`skfed.kernel._random_features.feature_min_rows`).

What a minimum does not protect against: a server that knows the other
rows of a statistic. It subtracts them from an exact sum and recovers the
last one (of a two-row cluster, of a two-row client). Protection against
that server is what ``privacy=`` is for (noise calibrated to one row).
"""

import numpy as np

from .._numerics._rows import row_hashes

__all__ = [
    "MIN_ROWS",
    "MIN_SPREAD_ROWS",
    "RawRowsRefused",
    "n_distinct_rows",
    "require_distinct_rows",
]

#: Distinct rows below which a sum, mean or center is (or determines) a row.
MIN_ROWS = 2
#: Distinct rows below which a count, mean and spread determine the rows.
MIN_SPREAD_ROWS = 3


class RawRowsRefused(ValueError):
    """Raised by a client whose upload would be, or determine, one of its
    rows, which ``raw_rows="refuse"`` forbids; it uploads nothing."""


def n_distinct_rows(X, weights=None):
    """How many distinct rows of X take part (positive weight, if given).

    Equal rows always hash alike (:func:`skfed._numerics._rows.row_hashes`), so a hash
    collision can only lower the count: the check errs on refusing.
    """
    if weights is not None:
        X = X[np.flatnonzero(np.asarray(weights) > 0)]
    if X.shape[0] < 2:
        return int(X.shape[0])
    return int(np.unique(row_hashes(X)).size)


def require_distinct_rows(X, minimum, statistic, remedy, weights=None):
    """Raise :class:`RawRowsRefused` when ``statistic`` would be computed
    from fewer than ``minimum`` distinct rows of X (client side, before the
    upload). ``remedy`` says what the user can do instead."""
    n = n_distinct_rows(X, weights)
    if n < minimum:
        raise RawRowsRefused(
            f"this client holds {n} distinct row(s), fewer than the "
            f"{minimum} that raw_rows='refuse' needs behind its {statistic}, "
            f"which would otherwise be or determine its rows. {remedy}"
        )
