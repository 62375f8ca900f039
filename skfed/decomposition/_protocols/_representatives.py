"""The disKPCA protocol (Balcan, Liang, Song, Woodruff & Xie, KDD 2016,
Algorithms 1-4): the driver :func:`run_kernel_pca`, the
low-rank rounds (disLR) and the error round with their client and server
steps; the representatives are sampled by :mod:`._sampling`.

Representative points Y are sampled by leverage scores of a sketched kernel
embedding (disLS) and adaptively by their residuals against span φ(P); the
top components are then solved for in span φ(Y) from the clients' sketched
low-rank factors (disLR), and one last round measures the energy they
capture and fixes their signs.
"""

import math
import warnings
from functools import partial
from typing import NamedTuple

import numpy as np
import scipy.linalg

from ..._engine._protocol import client_step
from ..._engine._rounds import per_client, sum_only
from ..._numerics._blocks import row_blocks
from ..._numerics._reduce import content_sorted, order_free_sum
from ..._numerics._signs import extreme_signs
from ...kernel._pairwise import kernel_diag, kernel_matrix
from ...kernel._sketch import count_sketch_matrix, sample_count_sketch, sketch_columns
from ._basis import (
    BLOCK,
    EIG_RTOL,
    forwarded_representatives,
    row_order,
    span_basis,
    unique_rows,
)
from ._kernel_width import server_gamma
from ._sampling import leverage_adaptive_sample, uniform_sample

__all__ = [
    "DISLR",
    "DISLR_UNCENTRED",
    "ERROR",
    "FEATURE_MEAN",
    "KernelPCAResult",
    "run_kernel_pca",
]

# The representatives Y (rows of some clients' X) go to every client with
# the first disLR round: the feature mean's sums (with ``center``), then
# each client's low-rank factor; without ``center`` the factor alone.
FEATURE_MEAN = sum_only("feature mean", forwarded=forwarded_representatives)
DISLR = per_client("disLR")
DISLR_UNCENTRED = per_client("disLR", forwarded=forwarded_representatives)
# Sums of traces and energies, and each client's extreme projections (for
# the signs): not a sum alone.
ERROR = per_client("error")

# Smallest wanted singular value, relative to the largest, for which the
# master takes the top singular vectors from the Gram matrix (see
# _lowrank_solve).
_GRAM_SAFE = 1e-3


class KernelPCAResult(NamedTuple):
    """What :func:`run_kernel_pca` returns.

    Attributes
    ----------
    representatives : ndarray of shape (n_representatives, n_features)
        Y (float64).
    dual_coef : ndarray of shape (n_representatives, n_components)
        C: component j of x is Σ_i C_ij κ(y_i, x) − offset_j.
    offset : ndarray of shape (n_components,)
        Wᵀm, the projection of the feature mean (zeros without centring).
    eigenvalues : ndarray of shape (n_components,)
        Energy of each component over the training data.
    total_energy : float
        Σ‖φ(a) − m‖² (or Σ κ(a, a) without centring).
    gamma : float or None
        The kernel's γ.
    rank : int
        Dimension of span φ(Y).
    client_ids : list
        The clients that took part.
    """

    representatives: np.ndarray
    dual_coef: np.ndarray
    offset: np.ndarray
    eigenvalues: np.ndarray
    total_energy: float
    gamma: object
    rank: int
    client_ids: list


class _Options(NamedTuple):
    kernel: str
    gamma: object
    degree: int
    coef0: float
    median_factor: float
    n_representatives: int
    leverage_fraction: float
    n_random_features: int
    embedding_dim: int
    sketch_size: int


def run_kernel_pca(
    fed,
    *,
    n_components,
    n_representatives,
    embedding_dim,
    random_state,
    kernel,
    gamma,
    degree,
    coef0=1.0,
    median_factor,
    sampling,
    leverage_fraction,
    n_random_features,
    sketch_size,
    center,
    local_rank,
    lowrank_upload,
    lowrank_sketch_size,
    stacklevel=2,
):
    """disKPCA on an open federation.

    Rounds: ``"median sample"`` (kernel width, only with the median
    heuristic); ``"uniform sample"``, or ``"embedding"``, ``"leverage
    scores"``, ``"leverage sample"``, ``"adaptive residuals"`` and
    ``"adaptive sample"`` (Algorithms 1-2); ``"feature mean"`` (with
    ``center``) and ``"disLR"`` (Algorithms 3-4); ``"error"``.

    Parameters
    ----------
    fed : Federation
        Open federation (inside its ``with`` block).
    n_components : int
        k, the number of components.
    n_representatives : int
        The number of representatives asked for, already clipped to the
        data.
    embedding_dim : int
        Width of the disLS embedding, already clipped.
    random_state : RandomState
        The server's generator (the fit's ``rng``).
    kernel, gamma, degree, coef0, median_factor, sampling, \
leverage_fraction, n_random_features, sketch_size, center, local_rank, \
lowrank_upload, lowrank_sketch_size
        As in :class:`~skfed.DistributedKernelPCA`.
    stacklevel : int, default=2
        Of the warning about a span smaller than k, seen from the caller.

    Returns
    -------
    result : KernelPCAResult
    """
    k, n_rep = n_components, n_representatives
    n_samples = fed.n_samples
    opts = _Options(
        kernel,
        gamma,
        degree,
        float(coef0),
        median_factor,
        n_rep,
        leverage_fraction,
        n_random_features,
        embedding_dim,
        sketch_size,
    )
    rng = random_state
    spec = {"kernel": kernel, "degree": degree, "coef0": float(coef0)}
    gamma = server_gamma(fed, kernel, gamma, median_factor, rng)
    spec["gamma"] = gamma
    if sampling == "uniform":
        Y = uniform_sample(fed, opts)
    else:
        Y = leverage_adaptive_sample(fed, opts, rng, spec, n_rep)
    Y = unique_rows(Y)
    if Y.shape[0] == 0:
        raise ValueError(
            "No representative point could be sampled: κ(x, x) = 0 for every "
            "sample (all-zero data with a linear kernel or a polynomial "
            "kernel with coef0=0), so there is no principal component. Check "
            "the data, or use coef0 > 0."
        )
    R = span_basis(kernel_matrix(Y, Y, spec))
    rank = R.shape[1]
    if rank == 0:
        # Uniform sampling can draw only such points; the score-based rounds
        # never draw them.
        raise ValueError(
            f"The {Y.shape[0]} representative point(s) span nothing in feature "
            "space: κ(y, y) = 0 for each of them (all-zero rows with a linear "
            "kernel or a polynomial kernel with coef0=0). Use "
            "sampling='leverage+adaptive', more representatives, or coef0 > 0."
        )
    project = {
        "spec": spec,
        "upload": lowrank_upload,
        "local_rank": 2 * k if local_rank is None else local_rank,
        "sketch_width": n_rep if lowrank_sketch_size is None else lowrank_sketch_size,
    }
    mean = None
    if center:
        # The mean needs only Σ_m Σ_a Qᵀφ(a).
        mean = (
            fed.run_round(
                FEATURE_MEAN, partial(_project_step, **project), (Y, R, gamma)
            )
            / n_samples
        )
        factors = fed.run_round(DISLR, _lowrank_step, mean)
    else:
        factors = fed.run_round(
            DISLR_UNCENTRED,
            partial(_project_and_lowrank_step, project=project),
            (Y, R, gamma),
        )
    W = _lowrank_solve(factors, k)
    stats = fed.run_round(ERROR, _error_step, W)

    trace, energy, top, bottom = _error_totals(stats)
    # KernelPCA's convention (svd_flip on its eigenvectors): the training
    # sample with the largest |projection| on a component projects
    # positively on it.
    W = W * _component_signs(top, bottom, R @ W)
    if mean is not None:
        # Σ‖φ(a) − Qm‖² = Σ κ(a, a) − N ‖m‖² because Σ Qᵀφ(a) = N m.
        trace -= n_samples * float(mean @ mean)
    order = np.argsort(-energy, kind="stable")
    W, energy = W[:, order], energy[order]
    C = R @ W
    offset = W.T @ mean if mean is not None else np.zeros(W.shape[1])
    # A direction of the span that carries no energy on the training data
    # (centering removes one; duplicated representatives) is no component:
    # its coefficients are rounding, and new points projected on it got
    # values of order one. Like KernelPCA's, such components are zero on
    # any input.
    empty = energy <= EIG_RTOL * np.max(energy, initial=0.0)
    C[:, empty], offset[empty], energy[empty] = 0.0, 0.0, 0.0
    n_available = int(np.count_nonzero(~empty))
    if n_available < k:
        warnings.warn(
            f"Only {n_available} directions are available in the span of the "
            "representatives (the rank of "
            + ("the centred K_YY" if center else "K_YY")
            + f"), fewer than n_components={k}; the remaining components "
            "are zero.",
            UserWarning,
            stacklevel=stacklevel + 1,
        )
    if C.shape[1] < k:
        pad = k - C.shape[1]
        C = np.hstack([C, np.zeros((C.shape[0], pad))])
        offset = np.concatenate([offset, np.zeros(pad)])
        energy = np.concatenate([energy, np.zeros(pad)])
    return KernelPCAResult(
        representatives=Y,
        dual_coef=C,
        offset=offset,
        eigenvalues=energy,
        total_energy=float(trace),
        gamma=gamma,
        rank=int(rank),
        client_ids=list(fed.client_ids),
    )


# ---------------------------------------------------------------------------
# Client steps


@client_step("kernel_pca.project", sum_only=True)
def _project_step(client, state, message, *, spec, upload, local_rank, sketch_width):
    """disLR, worker part 1: the column sums of Π[m] = Rᵀ K_{Y, X[m]}, for
    centering (r floats up).

    Π[m] is not kept between rounds: the next two rounds recompute it block
    by block. Kept, n_m · r floats per client add up to N · r over the
    federation (3.2 GB at N = 1M, r = 400), and its r × r Gram matrix to
    M · r² (1.3 GB for 1,000 clients); a kernel pass costs less than
    either.
    """
    Y, R, gamma = message
    spec = dict(spec, gamma=gamma)
    colsum = np.zeros(R.shape[1])
    for Pt in _projections(client.X, Y, R, spec):
        colsum += Pt.sum(axis=0)
    state = dict(state or {})
    state["kpca_basis"] = (Y, R, spec)
    state["kpca_trace"] = float(kernel_diag(client.X, spec).sum())
    state["kpca_upload"] = (upload, local_rank, sketch_width)
    return state, colsum


@client_step("kernel_pca.lowrank")
def _lowrank_step(client, state, mean):
    """disLR, worker part 2: upload Π[m] T_m ("sketch") or U_q Σ_q of Π[m]
    ("local_svd"), both centred on ``mean`` when it is not None."""
    state = dict(state)
    if mean is not None:
        state["kpca_mean"] = mean
    upload, local_rank, sketch_width = state["kpca_upload"]
    if upload == "sketch":
        return state, _sketched_factor(client, state, sketch_width)
    n, r = client.X.shape[0], state["kpca_basis"][1].shape[1]
    q = min(local_rank, n, r)
    if q == 0:
        return state, np.zeros((r, 0))
    if n < r:
        # A small client: with Πᵀ Π = V Σ² Vᵀ (n × n), U_q Σ_q = Π V_q.
        # O(n² r) against the r × r eigenproblem's O(r³), which dominated
        # with a thousand small clients, and a tenth of the time of the
        # n × r SVD.
        # numpy's eigh, not scipy's: its LAPACK call releases the GIL, so
        # client threads overlap (scipy's held it: two threads ran this
        # round 1.3 times faster than one).
        centred = np.vstack(list(_centred_projections(client, state)))
        _, V = np.linalg.eigh(centred @ centred.T)
        return state, centred.T @ V[:, ::-1][:, :q]
    gram = np.zeros((r, r))
    for Pt in _centred_projections(client, state):
        # numpy computes Ptᵀ Pt with BLAS syrk (half the flops of a product)
        # and releases the GIL; scipy's syrk wrapper held it, and two client
        # threads ran this round no faster than one.
        gram += Pt.T @ Pt
    # Only the top q eigenpairs are needed (q ≈ 2k ≪ r).
    lam, U = scipy.linalg.eigh(gram, subset_by_index=[r - q, r - 1])
    lam, U = lam[::-1], U[:, ::-1]
    return state, U * np.sqrt(np.clip(lam, 0, None))


def _sketched_factor(client, state, sketch_width):
    """(Π[m] − m1ᵀ) T_m: the client's centred projections, rows count-sketched
    to 4w when it has more, then columns sketched to w."""
    X = client.X
    n = X.shape[0]
    r = state["kpca_basis"][1].shape[1]
    order = row_order(client, state)
    n_mid = 4 * sketch_width
    if n > n_mid:
        buckets, signs = sample_count_sketch(
            client.random_state("kernel_pca.count_sketch"), n, n_mid
        )
        # Buckets belong to canonical positions; map them to storage order.
        rank = np.empty_like(order)
        rank[order] = np.arange(n)
        cs = count_sketch_matrix(buckets[rank], signs[rank], n_mid).T.tocsc()
        sketch = np.zeros((n_mid, r))
        for block, Pt in zip(row_blocks(n, BLOCK), _centred_projections(client, state)):
            sketch += cs[:, block] @ Pt
    else:
        sketch = np.vstack(list(_centred_projections(client, state)))[order]
    return sketch_columns(
        sketch.T, sketch_width, client.random_state("kernel_pca.lowrank_sketch")
    )


@client_step("kernel_pca.project_and_lowrank")
def _project_and_lowrank_step(client, state, message, *, project):
    """disLR in one round when there is no centering."""
    state, _ = _project_step(client, state, message, **project)
    return _lowrank_step(client, state, None)


@client_step("kernel_pca.error")
def _error_step(client, state, W):
    """Approximation error and sign, worker part: trace of the local kernel
    block, the energy ‖w_iᵀ Π[m]‖² captured by each component, and per
    component the client's largest and smallest projection (1 + 3k
    floats)."""
    energy = np.zeros(W.shape[1])
    top = np.full(W.shape[1], -np.inf)
    bottom = np.full(W.shape[1], np.inf)
    for Pt in _centred_projections(client, state):
        proj = Pt @ W
        energy += np.einsum("ij,ij->j", proj, proj)
        high, low = _extremes(proj)
        top, bottom = np.maximum(top, high), np.minimum(bottom, low)
    return state, (state["kpca_trace"], energy, top, bottom)


def _projections(X, Y, R, spec):
    """Blocks of Π[m]ᵀ = K_{X[m], Y} R, recomputed on every pass."""
    for block in row_blocks(X.shape[0], BLOCK):
        yield kernel_matrix(X[block], Y, spec) @ R


def _centred_projections(client, state):
    """Blocks of Π[m]ᵀ, minus the projected mean when centred."""
    Y, R, spec = state["kpca_basis"]
    mean = state.get("kpca_mean")
    for Pt in _projections(client.X, Y, R, spec):
        yield Pt if mean is None else Pt - mean


def _extremes(values):
    """Per column, the largest and the smallest entry (exact, and free of
    the rows' order)."""
    if values.shape[0] == 0:
        return np.full(values.shape[1], -np.inf), np.full(values.shape[1], np.inf)
    return values.max(axis=0), values.min(axis=0)


# ---------------------------------------------------------------------------
# Server steps


def _lowrank_solve(factors, n_components):
    """disLR, master: W = top-k left singular vectors of [Π[1]T_1 … Π[M]T_M].

    The r × (Σ q_m) matrix is wide when clients are many (20,000 columns
    from 1,000 clients): its left singular vectors are the eigenvectors of
    the r × r matrix Σ_m F_m F_mᵀ, a fifth of the SVD's time (0.87 s over
    1,000 clients, the largest sequential step of the fit). Squaring
    loses half the digits of the small singular values, so that path is
    taken only when the k-th singular value is at least 1e-3 of the
    largest (the rank cut at 1e-10 then keeps all k, as the SVD would, and
    the k directions are accurate to about 1e-13); otherwise the SVD
    decides. The factors are stacked in an order set by their content, so
    that renamed clients give the same W, bit for bit.
    """
    stacked = np.hstack(content_sorted(factors))
    k = min(n_components, *stacked.shape)
    if k and stacked.shape[1] > 2 * stacked.shape[0]:
        lam, V = np.linalg.eigh(stacked @ stacked.T)
        lam, V = lam[::-1], V[:, ::-1]
        if lam[0] > 0 and lam[k - 1] >= _GRAM_SAFE**2 * lam[0]:
            return V[:, :k]
    U, s, _ = np.linalg.svd(stacked, full_matrices=False)
    rank = int(np.sum(s > EIG_RTOL * s[0])) if s.size and s[0] > 0 else 0
    return U[:, : min(n_components, rank)]


def _error_totals(stats):
    """Σ_m trace(K_m), Σ_m energies (the error is their difference), and
    per component the largest and the smallest training projection over
    all clients."""
    # Exact (fsum) or in an order set by the content: the same totals
    # whichever client sent which.
    trace = math.fsum(t for t, _, _, _ in stats)
    energy = order_free_sum([e for _, e, _, _ in stats])
    top = np.max([t for _, _, t, _ in stats], axis=0)
    bottom = np.min([b for _, _, _, b in stats], axis=0)
    return trace, np.asarray(energy, dtype=np.float64), top, bottom


def _component_signs(top, bottom, C):
    """Server: ±1 per component, KernelPCA's convention made order-free.

    The training sample of largest absolute projection projects positively
    (``top`` and ``bottom``, the largest and the smallest projections).
    When the two extremes tie (data symmetric about its mean, where both
    signs satisfy the convention and the rows' order used to decide), the
    first significant coefficient of C over the representatives, which
    are in a canonical order, is made positive
    (:func:`skfed._numerics._signs.extreme_signs`).
    """
    return extreme_signs(top, bottom, C)
