"""What disKPCA's clients and server compute alike: the basis of the span
of the representatives in feature space, the clients' canonical row
order, and the bookkeeping of the representatives (rows of X)."""

import numpy as np
import scipy.sparse as sp

from ..._numerics._signs import vector_signs
from ...kernel._median import canonical_row_order

__all__ = [
    "BLOCK",
    "EIG_RTOL",
    "forwarded_representatives",
    "row_order",
    "span_basis",
    "stack_rows",
    "unique_rows",
    "vstack_rows",
]

# Rows per block when a client evaluates kernels or features, so that memory
# stays O(block * |Y|) instead of O(n_m * |Y|).
BLOCK = 2048
# Eigenvalues of K_YY below this fraction of the largest are treated as zero:
# their directions carry no energy and would only amplify rounding.
EIG_RTOL = 1e-10


def span_basis(K):
    """R with Rᵀ K R = I on the range of K (K = U Λ Uᵀ, R = U_r Λ_r^{-1/2}).

    Eigenvalues below ``EIG_RTOL`` × the largest are dropped, which is the
    guard against duplicates and rank-deficient kernels. Eigenvector signs
    are fixed (:func:`skfed._numerics._signs.vector_signs`) so that every client
    computing R from the same Y gets the same basis.
    """
    lam, U = np.linalg.eigh(K)
    top = lam.max() if lam.size else 0.0
    keep = lam > EIG_RTOL * top if top > 0 else np.zeros(lam.shape, dtype=bool)
    lam, U = lam[keep][::-1], U[:, keep][:, ::-1]
    return U * (vector_signs(U) / np.sqrt(lam))


def forwarded_representatives(message):
    """Rows of X a client receives with a message whose first item is the
    representatives drawn so far (None before any)."""
    return 0 if message[0] is None else int(message[0].shape[0])


def stack_rows(uploads):
    # Every client may send nothing (all residuals zero): keep one empty part
    # so the result still has the right width and format.
    parts = [u for u in uploads if u.shape[0]] or uploads[:1]
    return vstack_rows(parts)


def vstack_rows(parts):
    if any(sp.issparse(p) for p in parts):
        return sp.vstack([sp.csr_matrix(p) for p in parts], format="csr")
    return np.vstack(parts)


def unique_rows(Y):
    """Remove duplicate rows and sort the rest in a canonical order.

    The order depends only on the rows' values (their nonzero positions and
    values, the same key for dense and CSR rows), so the model does not
    depend on the order in which clients sent them nor on the format.
    """
    if sp.issparse(Y):
        Y = sp.csr_matrix(Y, copy=True)
        Y.sum_duplicates()
        Y.eliminate_zeros()
        Y.sort_indices()
        rows = (
            (Y.indices[lo:hi], Y.data[lo:hi])
            for lo, hi in zip(Y.indptr[:-1], Y.indptr[1:])
        )
    else:
        Y = np.ascontiguousarray(Y)
        rows = ((np.flatnonzero(row), row[row != 0]) for row in Y)
    first = {}
    for i, (idx, val) in enumerate(rows):
        key = (
            idx.astype(np.int64).tobytes()
            + b"|"
            + (val.astype(np.float64) + 0.0).tobytes()
        )
        first.setdefault(key, i)
    order = [first[key] for key in sorted(first)]
    return Y[order]


# Per-row quantities (embeddings, scores) are kept in the client's canonical
# row order (sorted by a hash of the row values), and row-indexed randomness
# (sketches, draws) is applied in that order, so that a client's
# contribution depends on which rows it holds, not on how they are stored.
def row_order(client, state):
    """The client's canonical row order, computed once and kept in state."""
    order = state.get("kpca_order")
    if order is None:
        order = canonical_row_order(client.X)
        state["kpca_order"] = order
    return order
