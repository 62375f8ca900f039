"""Exact, storage-independent identities for rows of client data.

Client steps that draw rows at random, and the federation's per-client seeds,
must depend on *which* rows a client holds, never on how they are stored
(their order, dense or CSR, the client's name). Hashing each row exactly from
its values gives them that.
"""

import numpy as np
import scipy.sparse as sp

__all__ = ["canonical_row_order", "row_hashes", "rounded_row_hashes", "rows_equal"]

_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)
_BLOCK = 4096
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_CONSTANTS = {}


def _column_constants(n_columns):
    """Fixed odd 64-bit multipliers, identical on every client."""
    if n_columns not in _CONSTANTS:
        consts = np.random.RandomState(12345).randint(
            1, 2**62, size=n_columns, dtype=np.int64
        )
        _CONSTANTS[n_columns] = consts.astype(np.uint64) | np.uint64(1)
    return _CONSTANTS[n_columns]


def _mix(bits):
    """A bijective 64-bit mixer with _mix(0) == 0 (in place), so that nearby
    bit patterns do not give nearby hashes."""
    bits ^= bits >> np.uint64(31)
    bits *= _MULTIPLIER
    bits ^= bits >> np.uint64(29)
    return bits


def _bits(values):
    # float64 bits whatever the input dtype (float32 converts exactly);
    # + 0.0 maps -0.0 to 0.0, whose bits are zero like an absent entry.
    # (A new array either way, so its bits can be mixed in place.)
    values = np.ascontiguousarray(np.asarray(values, dtype=np.float64) + 0.0)
    return _mix(values.view(np.uint64))


def row_hashes(X, weights=None, *, cast=None):
    """An exact 64-bit hash of every row of X.

    Each value's bit pattern is mixed, multiplied by a fixed odd constant of
    its column and summed modulo 2**64. Equal rows get equal hashes, whatever
    their position and whether X is dense or sparse; a different value in any
    column almost surely changes the hash.

    Parameters
    ----------
    X : {ndarray, sparse matrix} of shape (n_samples, n_features)
    weights : ndarray of shape (n_samples,), default=None
        Folded into the hash as one more column (rows equal in value but not
        in weight then differ).
    cast : callable, default=None
        Applied to each block of dense rows before hashing (the rounding of
        :func:`rounded_row_hashes`).

    Returns
    -------
    hashes : ndarray of shape (n_samples,), dtype uint64
    """
    n_samples, n_features = X.shape
    consts = _column_constants(n_features + 1)
    # Integer arrays wrap modulo 2**64 without a warning (numpy checks
    # overflow on scalars only), so no errstate: entering one costs 10 us,
    # a tenth of a small client's hashing.
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        terms = _bits(X.data) * consts[X.indices]
        hashes = np.zeros(n_samples, dtype=np.uint64)
        nonempty = np.diff(X.indptr) > 0
        if terms.size:
            hashes[nonempty] = np.add.reduceat(terms, X.indptr[:-1][nonempty])
    else:
        hashes = np.empty(n_samples, dtype=np.uint64)
        for start in range(0, n_samples, _BLOCK):
            block = slice(start, start + _BLOCK)
            rows = X[block] if cast is None else cast(X[block])
            terms = _bits(rows) * consts[:n_features]
            hashes[block] = terms.sum(axis=1, dtype=np.uint64)
    if weights is not None:
        hashes += _bits(weights) * consts[n_features]
    return hashes


def rows_equal(A, B):
    """Whether two arrays or sparse matrices of one shape hold equal rows
    (the check behind trusting equal :func:`row_hashes`)."""
    if sp.issparse(A):
        return (A != B).nnz == 0
    return np.array_equal(A, B)


def rounded_row_hashes(X, weights=None):
    """:func:`row_hashes` of the rows rounded to float32.

    The same data passed as float64 or as float32 gets the same rounded
    hashes, so that what is derived from them (seeds, orders) does not
    depend on the dtype the user chose. Values beyond float32's range
    round to ±inf, which still hash exactly.
    """
    if weights is not None:
        weights = _as_float32(np.asarray(weights))
    if sp.issparse(X):
        with np.errstate(over="ignore"):
            X = sp.csr_matrix(X, dtype=np.float32)
        return row_hashes(X, weights)
    # Rounded a block at a time: a float32 copy of all the rows (40 MB for
    # half a million rows of 20 features) was a third of the hashing time.
    return row_hashes(X, weights, cast=_as_float32)


def _as_float32(values):
    """``values`` cast to float32; beyond its range to ±inf, silently (an
    errstate costs 10 us, so it is entered only when a value overflows)."""
    values = np.asarray(values)
    if values.dtype == np.float32:
        return values
    # Two reductions and no |values| temporary (160 MB for a million rows);
    # a NaN takes the careful path too.
    if values.size and not max(-values.min(), values.max()) <= _FLOAT32_MAX:
        with np.errstate(over="ignore"):
            return values.astype(np.float32)
    return values.astype(np.float32)


def canonical_row_order(X, weights=None):
    """A permutation sorting the rows of X by their content.

    Rows are sorted by ``rounded_row_hashes``, ties broken by the exact
    ``row_hashes``, then by ``weights``: the order of a float32 copy of the
    data is the order of the float64 data, except among rows that float32
    cannot tell apart. Rows that tie on all three are equal (in value and
    weight), hence interchangeable.

    The weights are compared by value, never hashed: scaling every weight
    by one positive constant (which a weighted algorithm must not notice)
    keeps the order.

    Returns
    -------
    order : ndarray of shape (n_samples,), dtype intp
    """
    rounded = rounded_row_hashes(X)
    order = np.argsort(rounded, kind="stable")
    ordered = rounded[order]
    # The exact hashes and the weights only break ties of the rounded
    # hashes: without ties, sorting by all is sorting by the rounded ones,
    # and hashing a small client's rows twice was half of its coreset
    # step's own work.
    if np.any(ordered[1:] == ordered[:-1]):
        keys = (row_hashes(X), rounded)
        if weights is not None:
            keys = (np.asarray(weights, dtype=np.float64), *keys)
        order = np.lexsort(keys)
    return order
