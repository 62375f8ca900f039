"""Weighted k-means++ seeding, the one of :mod:`skfed.cluster` (the batched
restarts of :mod:`skfed.cluster._kmeans._batched` run the same algorithm
side by side)."""

import numpy as np

from ._assign import dense_rows, draw, sq_dist, sq_norms

__all__ = ["weighted_kmeans_plusplus"]


def weighted_kmeans_plusplus(X, w, n_clusters, rng, *, x_sq=None, noise=0.0):
    """Rows of X chosen by greedy weighted k-means++ over the rows of
    positive weight.

    Greedy, like scikit-learn's ``kmeans_plusplus``: each new center is the
    best of 2 + log(k) candidates drawn ∝ w_i D(x_i)², the one that lowers
    the weighted potential most. The squared distances are computed in X's
    dtype: float32 rows (a large client's) make the candidates' products
    four times faster than float64 ones, and they only decide which row is
    drawn; the potentials are summed in float64. When every positive-weight
    point already sits on a center -- within ``noise``, a squared distance
    that is rounding of the data's own magnitude, since the rows may arrive
    centered (see :func:`~skfed.cluster._kmeans.centered`) -- the remaining
    centers repeat an existing center: a copy of a point that differs from
    a center only by rounding would split identical data into clusters.

    Parameters
    ----------
    X : {ndarray, CSR matrix} of shape (n, d)
        Rows, best centered (squared distances are expanded).
    w : ndarray of shape (n,)
        Weights; only rows of positive weight are drawn (some must be).
    n_clusters : int
    rng : RandomState
    x_sq : ndarray of shape (n,), default=None
        The rows' squared norms, if known.
    noise : float, default=0.0
        Squared distance below which a row counts as on a center.

    Returns
    -------
    indices : ndarray of int of shape (n_clusters,)
        Rows of X, in the order drawn (repeated when the rows ran out).
    """
    if x_sq is None:
        x_sq = sq_norms(X)
    idx = np.flatnonzero(w > 0)
    if idx.size == len(w):
        # No copy of a large client's rows when every weight is positive.
        Xp, wp, xp_sq = X, w, x_sq
    else:
        Xp, wp, xp_sq = X[idx], w[idx], x_sq[idx]
    n_local_trials = 2 + int(np.log(n_clusters))
    chosen = np.empty(n_clusters, dtype=np.intp)
    chosen[0] = draw(rng, wp, None)
    d2 = sq_dist(Xp, xp_sq, dense_rows(Xp, chosen[:1]))[:, 0]
    for c in range(1, n_clusters):
        weighted = wp * np.where(d2 > noise, d2, 0.0)
        potential = weighted.sum()
        if not potential > 0:
            chosen[c] = chosen[rng.randint(c)]
            continue
        draws = rng.uniform(size=n_local_trials) * potential
        candidates = np.searchsorted(np.cumsum(weighted), draws)
        candidates = np.minimum(candidates, len(wp) - 1)
        to_candidates = sq_dist(Xp, xp_sq, dense_rows(Xp, candidates))
        cand_d2 = np.minimum(d2[None, :], to_candidates.T)
        best = int(np.argmin(cand_d2 @ wp))
        chosen[c] = candidates[best]
        d2 = cand_d2[best]
    return chosen if Xp is X else idx[chosen]
