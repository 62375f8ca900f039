"""Weighted Lloyd, the one of :mod:`skfed.cluster`: weights of any sign,
dense or CSR rows (the batched restarts of
:mod:`skfed.cluster._kmeans._batched` run the same iterations side by
side; a large client's positive-weight rows run scikit-learn's own
compiled iteration, :mod:`skfed.cluster._kmeans._sklearn_lloyd`)."""

import numpy as np

from ._assign import WEIGHT_EPS, assign, cluster_sums

__all__ = ["weighted_lloyd"]


def weighted_lloyd(X, w, centers, x_sq, max_iter, tol_abs, *, tie=0.0):
    """Weighted Lloyd iterations; weights of any sign.

    A cluster with no point, or with non-positive total weight, keeps its
    previous center (its weighted mean is undefined or would be pushed away
    from its points). With negative weights an update may raise the weighted
    cost, and plain Lloyd can then cycle between two labellings without
    ever meeting the tolerance; so an update that does not lower the cost
    is rejected and the iterations stop. With non-negative weights this
    never happens before convergence (Lloyd's cost cannot increase), so the
    iterations are those of ordinary weighted Lloyd: they stop on unchanged
    labels or a squared center shift of at most ``tol_abs``.

    Returns
    -------
    centers, labels, d2, n_iter
        ``labels`` and ``d2`` are consistent with the returned centers.
    """
    n_clusters = centers.shape[0]
    # A cluster of (nearly) no total weight keeps its center (WEIGHT_EPS).
    scale = WEIGHT_EPS * np.abs(w).sum()
    labels, d2 = assign(X, x_sq, centers, d2="expanded", tie=tie)
    cost = w @ d2
    n_iter = 0
    for iteration in range(1, max_iter + 1):
        n_iter = iteration
        sums, totals = cluster_sums(X, w, labels, n_clusters)
        movable = totals > scale
        new_centers = centers.copy()
        new_centers[movable] = sums[movable] / totals[movable, None]
        new_labels, d2 = assign(X, x_sq, new_centers, d2="expanded", tie=tie)
        new_cost = w @ d2
        if new_cost > cost:
            break
        shift = float(((new_centers - centers) ** 2).sum())
        converged = shift <= tol_abs or np.array_equal(new_labels, labels)
        centers, labels, cost = new_centers, new_labels, new_cost
        if converged:
            break
    labels, d2 = assign(X, x_sq, centers, tie=tie)
    return centers, labels, d2, n_iter
