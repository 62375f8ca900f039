"""Distances, assignment and cluster sums: the k-means arithmetic that
every k-means of :mod:`skfed.cluster` shares.

Squared distances are expanded (‖x‖² − 2 x·c + ‖c‖²) for speed, on rows
taken around a point inside the data (:func:`centered`,
:func:`around_centers`) so that the terms do not cancel; the distance of
a row to its own center is taken from the difference
(:func:`labelled_sq_distances`), so that a row on its center costs exactly
0. Ties within rounding noise of the data's magnitude
(:func:`rounding_noise`) go to the center of lowest index.
"""

import numpy as np
import scipy.sparse as sp
from sklearn.utils.extmath import row_norms, safe_sparse_dot

from ..._numerics._blocks import row_blocks
from ..._numerics._shift import shift_point, shifted_rows

__all__ = [
    "CHUNK",
    "SMALL_ROWS",
    "WEIGHT_EPS",
    "assign",
    "assign_around_centers",
    "around_centers",
    "centered",
    "cluster_means",
    "cluster_sums",
    "dense_rows",
    "dot",
    "draw",
    "labelled_sq_distances",
    "nearest",
    "rounding_noise",
    "sq_dist",
    "sq_norms",
    "tolerance",
    "weighted_cost",
]

# Rows up to which a client's k-means is handed over to be solved with
# other clients' (see skfed.cluster._kmeans._batched); above, compiled
# k-means wins and the (n_init, n, k) arrays stop being small. Also where
# the one-hot product stops being cheaper than a sparse one for the sums.
SMALL_ROWS = 2048
# A cluster whose total weight is at most this fraction of the total
# absolute weight counts as empty: dividing by a weight that cancelled down
# to rounding noise would throw its center far away.
WEIGHT_EPS = 1e-10

# Rows per block when computing distances to the centers, so that memory
# stays O(block * k) instead of O(n_m * k).
CHUNK = 4096


def assign(X, x_sq, centers, *, d2="exact", tie=0.0):
    """Closest center of each row and the squared distance to it.

    Centers within ``tie`` (a squared distance, rounding noise of the data's
    magnitude: see :func:`rounding_noise`) of the closest count as equally
    close, and the one of lowest index wins: points that differ from one
    another only by rounding then get one label, not labels split by the
    last bits.

    ``d2`` is ``"exact"`` (computed from the difference for dense rows;
    CSR rows have no cheaper exact form and use the expanded one),
    ``"expanded"`` (‖x‖² − 2 x·c + ‖c‖², free but with rounding noise) or
    None.
    """
    n = X.shape[0]
    labels = np.empty(n, dtype=np.intp)
    sparse_exact = d2 == "exact" and sp.issparse(X)
    out = np.empty(n, dtype=np.float64) if d2 == "expanded" or sparse_exact else None
    c_sq = sq_norms(centers)
    for batch in row_blocks(n, CHUNK):
        cross = dot(X[batch], centers.T)
        # ‖x‖² is the same for every center: not needed for the argmin.
        dist = c_sq - 2.0 * cross
        if tie > 0:
            near = dist <= dist.min(axis=1, keepdims=True) + tie
            labels[batch] = np.argmax(near, axis=1)
        else:
            labels[batch] = np.argmin(dist, axis=1)
        rows = np.arange(dist.shape[0])
        if d2 == "expanded":
            closest = dist[rows, labels[batch]]
            out[batch] = np.maximum(closest + x_sq[batch], 0.0)
        elif sparse_exact:
            # From the products already at hand: a CSR row has no cheaper
            # exact form, and gathering each row's center as a dense (n, s)
            # array would cost as much memory as densifying X.
            own = labels[batch]
            out[batch] = np.maximum(
                x_sq[batch] - 2.0 * cross[rows, own] + c_sq[own], 0.0
            )
    if d2 != "exact" or sparse_exact:
        return labels, out
    # Subtracting directly makes a point that sits on its center cost exactly
    # 0 (the expanded form leaves rounding noise, which would make D²
    # sampling draw duplicates of centers).
    return labels, labelled_sq_distances(X, centers, labels)


def assign_around_centers(X, centers, *, d2="exact"):
    """:func:`assign` with rows and centers taken around the centers' mean
    (see :func:`centered`; CSR rows on the columns they all store)."""
    tie = rounding_noise(centers)
    X, centers = around_centers(X, centers)
    return assign(X, sq_norms(X), centers, d2=d2, tie=tie)


def around_centers(X, centers):
    """Rows and centers minus the centers' mean (CSR rows shifted on the
    columns they all store, see :func:`centered`)."""
    # The mean, without np.mean's dispatch (the same sum and division).
    reference = shift_point(centers.sum(axis=0) / len(centers), X)
    return shifted_rows(X, reference), centers - reference


def sq_dist(X, x_sq, centers, c_sq=None):
    """Squared distances ‖x − c‖² of rows to centers, clipped at 0."""
    if c_sq is None:
        c_sq = sq_norms(centers)
    dist = -2.0 * dot(X, centers.T)
    dist += x_sq[:, None]
    dist += c_sq[None, :]
    return np.maximum(dist, 0.0, out=dist)


def sq_norms(X):
    """‖x‖² of every row, as ``row_norms(X, squared=True)``: dense rows
    take its einsum directly (its array-namespace dispatch costs 10 us a
    call, more than the arithmetic on a small client's rows)."""
    if sp.issparse(X):
        return row_norms(X, squared=True)
    return np.einsum("ij,ij->i", X, X)


def dot(A, B):
    """A @ B, dense: ``safe_sparse_dot(A, B, dense_output=True)``, whose
    checks two dense arrays skip."""
    if sp.issparse(A) or sp.issparse(B):
        return safe_sparse_dot(A, B, dense_output=True)
    return A @ B


def dense_rows(X, idx):
    rows = X[np.asarray(idx)]
    return rows.toarray() if sp.issparse(rows) else np.asarray(rows)


def rounding_noise(X):
    """A squared distance that is rounding noise for rows of X's magnitude
    (taken before centering): ~1e-24 of the largest squared entry."""
    values = X.data if sp.issparse(X) else X
    if values.size == 0:
        return 0.0
    return (1e-12 * float(np.max(np.abs(values)))) ** 2


def centered(X, w=None):
    """Rows minus their (weighted) mean, and that mean.

    Squared distances are expanded (‖x‖² − 2 x·c + ‖c‖²) for speed; on raw
    coordinates far from the origin the terms cancel (at an offset of 1e9,
    distances of order 1 are lost entirely). Around a point inside the data
    they are as exact as the data. CSR rows are shifted on the columns
    every row stores (see ``skfed._numerics._shift``): they stay CSR, with the same
    entries, and data moved far from the origin (which fills those
    columns) is centred as dense data is.
    """
    if sp.issparse(X):
        w = None if w is None or not np.any(w > 0) else np.maximum(w, 0)
        total = X.shape[0] if w is None else w.sum()
        mean = np.asarray(X.sum(axis=0) if w is None else w @ X).ravel() / total
        shift = shift_point(mean, X)
        return shifted_rows(X, shift), shift
    X64 = np.asarray(X, dtype=np.float64)
    if w is None or not np.any(w > 0):
        shift = X64.mean(axis=0)
    else:
        w = np.maximum(w, 0)
        shift = (w @ X64) / w.sum()
    return X - shift.astype(X.dtype, copy=False), shift


def tolerance(X, w, tol):
    """tol times the mean weighted variance of the features (as KMeans)."""
    if tol == 0:
        return 0.0
    total = w.sum()
    if not total > 0:
        return 0.0
    mean = np.asarray(dot(w, X)).ravel() / total
    if sp.issparse(X):
        sq = np.asarray(dot(w, X.multiply(X))).ravel() / total
    else:
        # No (n, d) temporary: on a client of 10,000 rows its page faults
        # cost ten times the sum.
        sq = np.einsum("i,ij,ij->j", w, X, X) / total
    return float(np.mean(np.maximum(sq - mean**2, 0.0)) * tol)


def draw(rng, p, size):
    """``size`` indices drawn with replacement ∝ ``p`` (non-negative, some
    positive): ``rng.choice(len(p), size, p=p / p.sum())``, the same
    numbers, without its checks of ``p`` (20 us, half a small client's
    sampling step)."""
    cdf = np.cumsum(p / p.sum())
    cdf /= cdf[-1]
    return cdf.searchsorted(rng.random_sample(size), side="right")


def cluster_sums(X, w, labels, n_clusters):
    """Weighted sum of the rows of each cluster, and its total weight."""
    totals = np.bincount(labels, weights=w, minlength=n_clusters)
    if not sp.issparse(X) and X.shape[0] <= SMALL_ROWS:
        # A weighted one-hot product: no sparse-matrix set-up, which costs
        # more than the sums themselves on a small client.
        member = (labels == np.arange(n_clusters)[:, None]) * w
        return np.asarray(member @ X, dtype=np.float64), totals
    # One entry per column: built directly in CSC form, no COO sort.
    indicator = sp.csc_matrix(
        (w, labels, np.arange(X.shape[0] + 1)), shape=(n_clusters, X.shape[0])
    )
    sums = indicator @ X
    sums = sums.toarray() if sp.issparse(sums) else np.asarray(sums)
    return sums.astype(np.float64, copy=False), totals


def nearest(X, centers):
    """Index of the nearest center of each row (the first one on ties)."""
    return assign(X, sq_norms(X), centers, d2=None)[0]


def cluster_means(X, w, labels, centers, *, dtype=np.float64):
    """The weighted mean of each cluster ``labels`` defines, in ``dtype``;
    a cluster of no weight keeps its center."""
    sums, sizes = cluster_sums(X, w, labels, len(centers))
    means = np.array(centers, dtype=dtype)
    filled = sizes > 0
    means[filled] = sums[filled] / sizes[filled, None]
    return means


# Elements of one block of the labelled distances (rows times features):
# 512 kB, which stays in cache.
_BLOCK_ELEMENTS = 2**16


def labelled_sq_distances(X, centers, labels):
    """‖x_i − c_{labels_i}‖² of every dense row, from the differences (no
    cancellation), a block of rows at a time."""
    d2 = np.empty(X.shape[0], dtype=np.float64)
    rows = max(1, _BLOCK_ELEMENTS // max(X.shape[1], 1))
    for block in row_blocks(X.shape[0], rows):
        diff = X[block] - centers[labels[block]]
        d2[block] = np.einsum("ij,ij->i", diff, diff)
    return d2


def weighted_cost(X, w, centers, labels):
    """Σ_i w_i ‖x_i − c_{labels_i}‖² of dense rows, from the differences."""
    return float(w @ labelled_sq_distances(X, centers, labels))
