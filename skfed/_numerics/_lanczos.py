"""Lanczos eigen-solvers over a matrix-product callback.

The matrix is never seen: :func:`lanczos` only calls ``matvec(c)``, so the
product can be a federated round (the server sends ``c``, clients return
their share of ``G c``, the server sums). Everything else -- the Krylov basis,
the tridiagonal matrix, its eigen-decomposition -- is server-side work.
:func:`block_lanczos` asks for the products with b vectors at once
(``matmat(C)``, C of shape (n, b)): about b times fewer rounds for more
products in all (see its docstring).

Floating point destroys the orthogonality of the plain three-term
recurrence; as in the federated kernel k-means paper's DSPGD (its
Appendix B) every new vector is re-orthogonalised against the whole basis
twice (classical Gram-Schmidt twice, "CGS2"), which costs server flops
only, never communication.
"""

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy.linalg import eigh, eigh_tridiagonal, qr
from sklearn.utils import check_random_state

__all__ = ["LanczosResult", "block_lanczos", "lanczos"]

# A Krylov vector whose norm falls below this fraction of the largest Ritz
# value spans (numerically) an invariant subspace: restart from a fresh
# direction instead of dividing by noise.
_BREAKDOWN = 1e-10
# A Ritz value at most this fraction of the largest is round-off: the Ritz
# values of a rank-r matrix beyond r are of order 1e-16 times its norm, of
# either sign and different on every BLAS. It never counts as above a
# threshold (threshold=0 asks for the nonzero spectrum, not for noise).
_ROUNDOFF = 1e-10


@dataclass(frozen=True)
class LanczosResult:
    """Converged top eigenpairs from :func:`lanczos`.

    Attributes
    ----------
    eigenvalues : ndarray of shape (n_found,)
        Ritz values, in decreasing order.
    eigenvectors : ndarray of shape (n, n_found)
        Ritz vectors (orthonormal columns), aligned with ``eigenvalues``.
    n_iter : int
        Number of products with the matrix (matrix-vector products: the
        columns of all the blocks :func:`block_lanczos` asked for).
    converged : bool
        Whether the stopping criterion was met before ``max_iter``.
    n_calls : int
        Calls of ``matvec`` or ``matmat`` (the rounds of a federated
        solve); ``n_iter`` for :func:`lanczos`.
    """

    eigenvalues: np.ndarray
    eigenvectors: np.ndarray
    n_iter: int
    converged: bool
    n_calls: int


def lanczos(
    matvec,
    n,
    *,
    n_components=None,
    threshold=None,
    tol=1e-8,
    tol_scale="largest",
    max_iter=None,
    random_state=None,
    v0=None,
):
    """Top eigenpairs of a symmetric ``n x n`` matrix known only by products.

    Stops when the wanted Ritz pairs have converged: the ``n_components``
    largest and/or every Ritz value above ``threshold``. A Ritz pair
    ``(θ, y)`` is converged when its residual bound ``‖G y − θ y‖ = β_q
    |e_qᵀ p|`` is at most ``tol · max|θ|``; the largest Ritz pair must
    always have converged. For ``threshold`` -- the criterion of DSPGD's
    distributed Lanczos, "all eigenvalues above η_t λ converge" -- the
    count of Ritz values above it must also be unchanged since the previous
    step and at least one Ritz value must lie at or below it, so that an
    eigenvalue just emerging from the Krylov space is not missed. Ritz
    values at most ``1e-10`` times the largest are round-off and never
    count as above ``threshold`` (so ``threshold=0`` gives the numerically
    nonzero spectrum on any BLAS).

    Like any single-vector Krylov method it finds one copy of an exactly
    repeated eigenvalue (the other copies are orthogonal to the Krylov
    space), and a pair closer than about ``tol`` times the largest Ritz
    value may be resolved late: with ``threshold``, such a copy above it can
    be missed. DSPGD's G, a sum of random-feature Gram blocks, has no exact
    repeats in practice.

    Parameters
    ----------
    matvec : callable
        ``matvec(c) -> G c`` for a 1-D float array ``c`` of length ``n``; may
        run a federated round. ``G`` must be symmetric.
    n : int
        Dimension of ``G``.
    n_components : int, default=None
        Number of largest eigenpairs wanted.
    threshold : float, default=None
        Every eigenpair whose eigenvalue exceeds it is wanted.
    tol : float, default=1e-8
        Relative residual tolerance of a converged Ritz pair.
    tol_scale : {"largest", "each"}, default="largest"
        What ``tol`` is relative to: the largest Ritz value (the usual
        criterion), or each pair's own Ritz value, so that a small wanted
        eigenvalue converges to the same relative accuracy as the largest
        (the largest Ritz value must still have converged; values at
        round-off level are measured against the round-off floor).
    max_iter : int, default=None
        Most products with ``G``; ``n`` when omitted (the Krylov space is then
        the whole space and the Ritz pairs are exact).
    random_state : int, RandomState instance or None, default=None
        Draws the start vector (and restart vectors after a breakdown).
    v0 : ndarray of shape (n,), default=None
        Start vector; random when omitted.

    Returns
    -------
    result : LanczosResult
        The wanted pairs: the ``n_components`` largest, together with all
        above ``threshold``. When ``max_iter`` is reached first, the best
        current Ritz pairs are returned and ``converged`` is False.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed._numerics._lanczos import lanczos
    >>> G = np.diag([5.0, 4.0, 1.0, 0.5])
    >>> res = lanczos(G.__matmul__, 4, threshold=2.0, random_state=0)
    >>> np.round(res.eigenvalues, 6)
    array([5., 4.])
    """
    n = int(n)
    _check_arguments(n, n_components, threshold, tol_scale)
    criteria = _Criteria(n_components, threshold, tol, tol_scale)
    max_iter = n if max_iter is None else min(int(max_iter), n)
    rng = check_random_state(random_state)

    # Grown by doubling: with n = N (Lanczos on an N x N matrix) the basis
    # must stay N x Q, never N x N.
    basis = np.empty((min(max_iter, 32), n))
    alphas = np.empty(max_iter)
    betas = np.empty(max_iter)
    c = rng.standard_normal(n) if v0 is None else np.array(v0, dtype=np.float64)
    c /= np.linalg.norm(c)
    beta_prev = 0.0
    n_above_prev = -1
    converged = False
    for q in range(max_iter):
        if q == basis.shape[0]:
            basis = np.concatenate([basis, np.empty_like(basis)])[:max_iter]
        basis[q] = c
        # A copy: g is updated in place and must not alias the caller's data.
        g = np.array(matvec(c), dtype=np.float64).reshape(-1)
        alpha = float(c @ g)
        g -= alpha * c
        if q:
            g -= beta_prev * basis[q - 1]
        active = basis[: q + 1]
        for _ in range(2):
            g -= active.T @ (active @ g)
        beta = float(np.linalg.norm(g))
        alphas[q], betas[q] = alpha, beta

        theta, P = _ritz(alphas[: q + 1], betas[:q])
        scale = max(float(np.abs(theta).max()), np.finfo(float).tiny)
        residual = beta * np.abs(P[-1])
        wanted, done, n_above_prev = _stopping(
            theta, residual, scale, n_above_prev, criteria
        )
        if done or q + 1 == n:
            converged = True
            break
        if q + 1 == max_iter:
            break
        if beta <= _BREAKDOWN * scale:
            # Invariant subspace found: its Ritz pairs are exact and decouple
            # from whatever a fresh orthogonal direction finds next.
            betas[q] = beta = 0.0
            c = rng.standard_normal(n)
            for _ in range(2):
                c -= active.T @ (active @ c)
            c /= np.linalg.norm(c)
        else:
            c = g / beta
        beta_prev = beta

    n_iter = q + 1
    vectors = basis[:n_iter].T @ P[:, wanted]
    return LanczosResult(theta[wanted], vectors, n_iter, converged, n_iter)


def block_lanczos(
    matmat,
    n,
    *,
    block_size,
    n_components=None,
    threshold=None,
    tol=1e-8,
    tol_scale="largest",
    max_iter=None,
    random_state=None,
):
    """Top eigenpairs of a symmetric ``n x n`` matrix known only by products
    with blocks of ``block_size`` vectors.

    The block Krylov space span{V, G V, G² V, ...} of a random orthonormal
    start block V (n x b) is grown one block per call of ``matmat``; every
    new block is re-orthogonalised against the whole basis twice (CGS2), and
    the Ritz pairs come from the Rayleigh-Ritz projection ``Qᵀ G Q`` of the
    whole basis, formed from the kept products (no recurrence to trust).
    Stopping is as in :func:`lanczos`, with the residuals ``‖G y − θ y‖``
    computed from the kept products: the wanted Ritz pairs have converged
    and, for ``threshold``, the count above it is unchanged since the
    previous block and some Ritz value lies at or below it.

    A federated solve asks all b products in one round, so it takes about b
    times fewer rounds than :func:`lanczos`; a block Krylov space of the same
    size is a polynomial of lower degree, so it needs more products in all
    (on federated kernel k-means' operators: 1.4 times as many with b = 4,
    1.8 times with b = 8). Unlike a single vector, a block also finds
    repeated eigenvalues, up to b copies.

    Parameters
    ----------
    matmat : callable
        ``matmat(C) -> G C`` for a float array ``C`` of shape ``(n, b')``,
        ``b' <= block_size`` (the last blocks may be narrower); may run a
        federated round. ``G`` must be symmetric.
    n : int
        Dimension of ``G``.
    block_size : int
        b, the vectors per product.
    n_components, threshold, tol, tol_scale
        As in :func:`lanczos`.
    max_iter : int, default=None
        Most matrix-vector products (columns over all blocks); ``n`` when
        omitted.
    random_state : int, RandomState instance or None, default=None
        Draws the start block (and fresh directions after a breakdown).

    Returns
    -------
    result : LanczosResult
        ``n_iter`` counts the products, ``n_calls`` the blocks.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed._numerics._lanczos import block_lanczos
    >>> G = np.diag([5.0, 4.0, 1.0, 0.5])
    >>> res = block_lanczos(
    ...     G.__matmul__, 4, block_size=2, threshold=2.0, random_state=0
    ... )
    >>> np.round(res.eigenvalues, 6), res.n_calls
    (array([5., 4.]), 2)
    """
    n = int(n)
    _check_arguments(n, n_components, threshold, tol_scale)
    if block_size < 1:
        raise ValueError(f"block_size={block_size} must be at least 1.")
    criteria = _Criteria(n_components, threshold, tol, tol_scale)
    max_iter = n if max_iter is None else min(int(max_iter), n)
    rng = check_random_state(random_state)

    Q = np.empty((n, 0))
    GQ = np.empty((n, 0))
    V = _extend(np.empty((n, 0)), Q, min(block_size, max_iter), 0.0, rng)
    n_above_prev = -1
    converged = False
    n_calls = 0
    while True:
        Z = np.array(matmat(V), dtype=np.float64).reshape(n, V.shape[1])
        n_calls += 1
        Q = np.hstack([Q, V])
        GQ = np.hstack([GQ, Z])
        T = Q.T @ GQ
        theta, Y = eigh((T + T.T) / 2)
        theta, Y = theta[::-1], Y[:, ::-1]
        scale = max(float(np.abs(theta).max()), np.finfo(float).tiny)
        # Residuals of the pairs the criterion reads (the wanted ones, at
        # least the largest): what is computed beyond them goes unused.
        n_read = _n_read(theta, scale, n_components, threshold)
        Yr = Y[:, :n_read]
        residual = np.full(theta.shape[0], np.inf)
        residual[:n_read] = np.linalg.norm(GQ @ Yr - (Q @ Yr) * theta[:n_read], axis=0)
        wanted, done, n_above_prev = _stopping(
            theta, residual, scale, n_above_prev, criteria
        )
        if done or Q.shape[1] == n:
            converged = True
            break
        if Q.shape[1] >= max_iter:
            break
        width = min(block_size, max_iter - Q.shape[1])
        V = _extend(Z, Q, width, _BREAKDOWN * scale, rng)

    vectors = Q @ Y[:, wanted]
    return LanczosResult(theta[wanted], vectors, Q.shape[1], converged, n_calls)


def _extend(Z, Q, width, floor, rng):
    """The next block: Z orthonormalised against Q (CGS2) and itself, its
    numerically dependent directions (norm at most ``floor``) dropped and the
    block filled up to ``width`` with fresh random directions orthogonal to
    everything -- an invariant subspace found, as a breakdown of
    :func:`lanczos`; ``width`` is cut to the directions left."""
    n = Q.shape[0]
    width = min(width, n - Q.shape[1])
    for _ in range(2):
        Z = Z - Q @ (Q.T @ Z)
    V = np.empty((n, 0))
    if Z.shape[1]:
        # Pivoted QR ranks the directions: those past the numerical rank of
        # Z have |R_ii| below the floor.
        V, R, _ = qr(Z, mode="economic", pivoting=True)
        rank = int(np.sum(np.abs(np.diag(R)) > floor))
        V = V[:, : min(rank, width)]
        V = V - Q @ (Q.T @ V)
        V, _ = np.linalg.qr(V)
    while V.shape[1] < width:
        known = np.hstack([Q, V])
        fresh = rng.standard_normal((n, width - V.shape[1]))
        for _ in range(2):
            fresh -= known @ (known.T @ fresh)
        fresh, R = np.linalg.qr(fresh)
        # A random direction is dependent on the basis only by accident.
        fresh = fresh[:, np.abs(np.diag(R)) > _BREAKDOWN]
        V = np.hstack([V, fresh])
    return V


def _check_arguments(n, n_components, threshold, tol_scale):
    if n_components is None and threshold is None:
        raise ValueError("Pass n_components, threshold or both.")
    if tol_scale not in ("largest", "each"):
        raise ValueError(f"tol_scale={tol_scale!r} must be 'largest' or 'each'.")
    if n_components is not None and not 1 <= n_components <= n:
        raise ValueError(f"n_components={n_components} must be in [1, n={n}].")


def _n_read(theta, scale, n_components, threshold):
    """How many of the leading Ritz pairs the stopping criterion reads."""
    count = 1
    if n_components is not None:
        count = max(count, n_components)
    if threshold is not None:
        floor = max(threshold, _ROUNDOFF * scale)
        count = max(count, int(np.sum(theta > floor)))
    return min(count, theta.shape[0])


class _Criteria(NamedTuple):
    """What a solve stops on (see :func:`lanczos`)."""

    n_components: object
    threshold: object
    tol: float
    tol_scale: str


def _stopping(theta, residual, scale, n_above_prev, criteria):
    """The wanted Ritz pairs, whether the solve may stop, and the count of
    Ritz values above the threshold (for the next step's comparison)."""
    n_components, threshold, tol, tol_scale = criteria
    floor = None if threshold is None else max(threshold, _ROUNDOFF * scale)
    if tol_scale == "each":
        atol = tol * np.maximum(np.abs(theta), _ROUNDOFF * scale)
    else:
        atol = scale * tol
    wanted, done = _wanted(theta, residual, atol, n_components, floor)
    if threshold is None:
        return wanted, done, np.inf
    n_above = int(np.sum(theta > floor))
    done = done and n_above == n_above_prev and n_above < theta.shape[0]
    return wanted, done, n_above


def _ritz(alphas, betas):
    """Ritz values (decreasing) and vectors of the tridiagonal T_q."""
    if alphas.shape[0] == 1:
        return alphas.copy(), np.ones((1, 1))
    theta, P = eigh_tridiagonal(alphas, betas)
    return theta[::-1], P[:, ::-1]


def _wanted(theta, residual, atol, n_components, threshold):
    """Indices of the wanted Ritz pairs and whether all have converged."""
    n_wanted = 0
    if n_components is not None:
        n_wanted = min(n_components, theta.shape[0])
    if threshold is not None:
        n_wanted = max(n_wanted, int(np.sum(theta > threshold)))
    wanted = np.arange(n_wanted)
    # The largest Ritz value must have converged even when none is wanted:
    # early Ritz values sit inside the spectrum, below its top.
    n_check = max(n_wanted, 1)
    atol = np.broadcast_to(atol, residual.shape)
    done = bool(np.all(residual[:n_check] <= atol[:n_check]))
    if n_components is not None:
        done = done and theta.shape[0] >= n_components
    return wanted, done
