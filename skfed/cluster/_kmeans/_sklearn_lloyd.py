"""Weighted Lloyd on one large dense client's rows, without per-call set-up.

A client above ``SMALL_ROWS`` dense rows runs Lloyd's method several times
on the same rows: on its projection after each seeding, from Algorithm 1's
θ, and once per round of split-and-merge moves. scikit-learn's
``KMeans.fit`` checks its input, computes its tolerance and sets up its
thread pools on every call, about 7 ms, as much as its Lloyd iterations
on a client of 10,000 rows in 20 features. Here the rows are prepared once
(:func:`lloyd_rows`: their weights and absolute tolerance) and each run is
a loop of BLAS products (:func:`lloyd`).

The iterations are those of ``KMeans(init=centers, n_init=1)``: every row
joins its nearest center (the first one on ties), every center moves to
its cluster's weighted mean, and the run stops when the labels do not
change, when the centers move by at most the tolerance in total squared
distance (``tol`` times the mean weighted variance of the features), or
after ``max_iter`` updates. A cluster left empty takes the row farthest
from its center, as ``KMeans`` does, so no center is lost to an empty
cluster. The distances are computed in the rows' dtype, a block of rows at
a time.

Each iteration is scikit-learn's own compiled one, the pass ``KMeans``
makes: blocks of 256 rows, each a BLAS product with the centers, the
nearest center of every row and the clusters' weighted sums in the same
loop, on one thread (several threads would sum the clusters in an order
that depends on their number, and the model must not depend on the
machine). It is private to scikit-learn, with no promise of stability, so
a release that moves it or changes its arguments sends every run to the
NumPy pass kept here (:func:`_numpy_lloyd`: the package's own assignment
and cluster sums, with ``KMeans``' relocation of empty clusters), which
makes the same iterations in float64 sums (slower: it is a fallback).
"""

from typing import NamedTuple

import numpy as np

from ..._sklearn_compat import lloyd_iter_chunked_dense as _compiled_iteration
from ._assign import (
    assign,
    cluster_sums,
    labelled_sq_distances,
    sq_norms,
    tolerance,
)

__all__ = ["LloydRows", "lloyd", "lloyd_rows"]


class LloydRows(NamedTuple):
    """A client's rows as :func:`lloyd` takes them (see :func:`lloyd_rows`)."""

    X: np.ndarray  # C-contiguous, in the dtype of the distances
    w: np.ndarray  # float64, positive
    tol_abs: float  # squared center shift at which Lloyd stops


def lloyd_rows(X, weights, tol):
    """Prepare dense rows for any number of :func:`lloyd` runs.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        Dense rows, best centered (squared distances are expanded), in the
        dtype the distances are to be computed in.
    weights : ndarray of shape (n_samples,)
        Positive sample weights.
    tol : float
        Relative tolerance, as ``KMeans``' ``tol``: Lloyd stops when the
        centers move by at most ``tol`` times the mean weighted variance of
        the features (the variance of the rows repeated by their weights).

    Returns
    -------
    rows : LloydRows
    """
    X = np.ascontiguousarray(X)
    w = np.asarray(weights, dtype=np.float64)
    return LloydRows(X, w, tolerance(X, w, tol))


def lloyd(rows, centers, *, max_iter):
    """Weighted Lloyd iterations from ``centers`` (see the module).

    Parameters
    ----------
    rows : LloydRows
    centers : ndarray of shape (n_clusters, n_features)
        The start.
    max_iter : int
        Center updates at most.

    Returns
    -------
    centers : ndarray of shape (n_clusters, n_features)
        In the rows' dtype. Like ``KMeans.cluster_centers_``, one update
        ahead of the means of ``labels`` when the run stopped on the
        tolerance or ``max_iter``.
    labels : ndarray of shape (n_samples,)
        The nearest center of each row (for the returned centers).
    n_iter : int
        Center updates made.
    """
    centers = np.array(centers, dtype=rows.X.dtype)
    if _compiled_iteration is not None:
        try:
            return _compiled_lloyd(rows, centers, max_iter)
        except TypeError:
            # The private iteration takes other arguments in this release
            # (a wrong argument fails before it runs).
            pass
    return _numpy_lloyd(rows, centers, max_iter)


def _compiled_lloyd(rows, centers, max_iter):
    """:func:`lloyd` with scikit-learn's compiled iteration.

    Each call of the iteration finds the nearest center of every row for
    the centers it is given and the clusters' new means (relocating empty
    clusters as ``KMeans`` does) with the squared shift of every center.
    The last call only finds the labels: once the shift is within the
    tolerance, or ``max_iter`` updates are made, no update follows.
    """
    X = rows.X
    w = rows.w.astype(X.dtype, copy=False)
    n_clusters = len(centers)
    labels = np.empty(X.shape[0], dtype=np.int32)
    new_labels = np.empty_like(labels)
    new_centers = np.empty_like(centers)
    spare = np.empty_like(centers)
    weights = np.empty(n_clusters, dtype=X.dtype)
    shift = np.empty(n_clusters, dtype=X.dtype)
    if max_iter < 1:
        _compiled_iteration(
            X, w, centers, new_centers, weights, labels, shift, 1, update_centers=False
        )
        return centers, labels.astype(np.intp), 0
    _compiled_iteration(X, w, centers, new_centers, weights, labels, shift, 1)
    n_iter = 1
    while True:
        # new_centers are the means of the clusters `labels` (the rows
        # nearest to `centers`) defines, `shift` how far each moved.
        moved = float(np.square(shift, dtype=np.float64).sum())
        last = moved <= rows.tol_abs or n_iter == max_iter
        _compiled_iteration(
            X,
            w,
            new_centers,
            spare,
            weights,
            new_labels,
            shift,
            1,
            update_centers=not last,
        )
        centers, new_centers, spare = new_centers, spare, centers
        if last or np.array_equal(new_labels, labels):
            return centers, new_labels.astype(np.intp), n_iter
        labels, new_labels = new_labels, labels
        n_iter += 1


def _numpy_lloyd(rows, centers, max_iter):
    """:func:`lloyd` in NumPy, for releases without the compiled iteration:
    the package's assignment and cluster sums
    (:mod:`skfed.cluster._kmeans._assign`), with ``KMeans``' relocation of
    empty clusters."""
    X = rows.X
    x_sq = sq_norms(X)
    labels, _ = assign(X, x_sq, centers, d2=None)
    n_iter = 0
    while n_iter < max_iter:
        n_iter += 1
        new_centers = _updated_centers(rows, centers, labels)
        shift = float(((new_centers - centers) ** 2).sum(dtype=np.float64))
        new_labels, _ = assign(X, x_sq, new_centers, d2=None)
        converged = shift <= rows.tol_abs or np.array_equal(new_labels, labels)
        centers, labels = new_centers, new_labels
        if converged:
            break
    return centers, labels, n_iter


def _updated_centers(rows, centers, labels):
    """The weighted mean of each cluster; an empty cluster takes a far row.

    As in ``KMeans``: the empty clusters take the rows farthest from their
    centers, the farthest first (ties to the lower row index), each row
    leaving the cluster it was in. A cluster that then holds no weight
    keeps its center.
    """
    X, w = rows.X, rows.w
    sums, totals = cluster_sums(X, w, labels, len(centers))
    empty = np.flatnonzero(np.bincount(labels, minlength=len(centers)) == 0)
    if empty.size:
        d2 = labelled_sq_distances(X, centers, labels)
        far = np.argsort(-d2, kind="stable")[: empty.size]
        for cluster, row in zip(empty, far):
            moved = w[row] * X[row]
            sums[labels[row]] -= moved
            totals[labels[row]] -= w[row]
            sums[cluster], totals[cluster] = moved, w[row]
    new_centers = centers.copy()
    filled = totals > 0
    new_centers[filled] = sums[filled] / totals[filled, None]
    return new_centers
