"""Rows moved near the origin before squared distances are expanded.

Squared distances expanded as ‖x‖² − 2 x·y + ‖y‖² cancel on data far from
the origin: at an offset of 1e9, distances of order 1 are lost entirely.
Around a point inside the data they are as exact as the data. Dense rows
are shifted by that point; CSR rows only on the columns every row stores,
so that they keep their entries and stay sparse. Translating sparse data by
an offset fills every column it moves, so those are the columns whose
distances would cancel (k-FED clustered CSR data at 1e9 at random, and
kernel PCA on CSR data at 1e8 was off by a quarter, while dense data were
exact).
"""

import numpy as np
import scipy.sparse as sp

__all__ = ["filled_columns", "shift_point", "shifted_rows"]


def filled_columns(X):
    """The columns every row of ``X`` stores (a boolean mask); all columns
    of a dense array."""
    if not sp.issparse(X):
        return np.ones(X.shape[1], dtype=bool)
    X = sp.csr_matrix(X)
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()
    return np.bincount(X.indices, minlength=X.shape[1]) == X.shape[0]


def shift_point(point, *arrays):
    """``point`` (float64) restricted to the columns every one of
    ``arrays`` can be shifted on (:func:`filled_columns`), zero elsewhere
    (in ``point``'s dtype): one point for rows that are compared with one
    another."""
    point = np.asarray(point).ravel()
    mask = np.ones(point.shape, dtype=bool)
    for X in arrays:
        if sp.issparse(X):
            mask &= filled_columns(X)
    return np.where(mask, point, 0.0)


def shifted_rows(X, point):
    """``X − point``, CSR kept CSR with the same entries.

    Parameters
    ----------
    X : {ndarray, sparse matrix} of shape (n_samples, n_features)
    point : ndarray of shape (n_features,)
        For CSR ``X``, used only on the columns every row stores (pass
        :func:`shift_point` to shift rows compared with other rows alike).

    Returns
    -------
    shifted : ndarray, or CSR matrix (``X`` itself when nothing moves)
    """
    if not sp.issparse(X):
        return X - np.asarray(point).astype(X.dtype, copy=False)
    point = shift_point(point, X)
    if not np.any(point):
        return X
    X = sp.csr_matrix(X, copy=True)
    X.sum_duplicates()
    X.data -= point.astype(X.dtype, copy=False)[X.indices]
    return X
