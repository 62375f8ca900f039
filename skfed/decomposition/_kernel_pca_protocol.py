"""The disKPCA protocol (Balcan, Liang, Song, Woodruff & Xie, KDD 2016,
Algorithms 1-4): client steps, server steps, and :func:`run_kernel_pca`,
which drives them on a federation.

Representative points Y are sampled by leverage scores of a sketched kernel
embedding (disLS) and adaptively by their residuals against span φ(P); the
top components are then solved for in span φ(Y) from the clients' sketched
low-rank factors (disLR), and one last round measures the energy they
capture and fixes their signs.
"""

import math
import warnings
from functools import lru_cache, partial
from typing import NamedTuple

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from sklearn.metrics.pairwise import pairwise_kernels
from sklearn.utils import check_random_state

from .._engine._ledger import PER_CLIENT, SUM_ONLY, Disclosure, raw_rows_of
from .._engine._protocol import client_step
from .._numerics._blocks import row_blocks
from .._numerics._reduce import content_sorted, order_free_sum
from .._numerics._seeds import SEED_MAX
from .._numerics._shift import shift_point, shifted_rows
from .._numerics._signs import extreme_signs, vector_signs
from ..kernel._median import (
    allocate_quota,
    canonical_row_order,
    median_distance,
    median_sample_step,
)
from ..kernel._random_features import random_fourier_features, sample_fourier_weights
from ..kernel._sketch import (
    count_sketch_matrix,
    sample_count_sketch,
    sample_tensor_sketch,
    sketch_columns,
    tensor_sketch,
)

__all__ = ["KernelPCAResult", "kernel_matrix", "run_kernel_pca"]

# Rows per block when a client evaluates kernels or features, so that memory
# stays O(block * |Y|) instead of O(n_m * |Y|).
_BLOCK = 2048
# Eigenvalues of K_YY below this fraction of the largest are treated as zero:
# their directions carry no energy and would only amplify rounding.
_EIG_RTOL = 1e-10
# Smallest wanted singular value, relative to the largest, for which the
# master takes the top singular vectors from the Gram matrix (see
# _lowrank_solve).
_GRAM_SAFE = 1e-3
# Residuals below this fraction of κ(a, a) are rounding noise (the point is
# already in the span), not a reason to sample it.
_RESIDUAL_RTOL = 1e-9
# Median heuristic: size of the pooled sample and projection dimension.
_MEDIAN_SAMPLES = 256
_MEDIAN_PROJECTIONS = 64
# Float32 random features a client holds at once in the embedding round.
_FEATURE_VALUES = 2**19


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
    gamma = _server_gamma(fed, opts, rng)
    spec["gamma"] = gamma
    if sampling == "uniform":
        Y = _uniform_sample(fed, opts)
    else:
        Y = _leverage_adaptive_sample(fed, opts, rng, spec, n_rep)
    Y = _unique_rows(Y)
    if Y.shape[0] == 0:
        raise ValueError(
            "No representative point could be sampled: κ(x, x) = 0 for every "
            "sample (all-zero data with a linear kernel or a polynomial "
            "kernel with coef0=0), so there is no principal component. Check "
            "the data, or use coef0 > 0."
        )
    R = _span_basis(_kernel(Y, Y, spec))
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
    # The representatives Y (rows of some clients' X) go to every client.
    forwards_y = {"forwarded": _forwarded_representatives}
    if center:
        # The mean needs only Σ_m Σ_a Qᵀφ(a).
        mean = (
            fed.run_round(
                "feature mean",
                partial(_project_step, **project),
                (Y, R, gamma),
                disclosure=Disclosure(SUM_ONLY, **forwards_y),
            )
            / n_samples
        )
        factors = fed.run_round("disLR", _lowrank_step, mean, disclosure=PER_CLIENT)
    else:
        factors = fed.run_round(
            "disLR",
            partial(_project_and_lowrank_step, project=project),
            (Y, R, gamma),
            disclosure=Disclosure(PER_CLIENT, **forwards_y),
        )
    W = _lowrank_solve(factors, k)
    # Sums of traces and energies, and each client's extreme projections
    # (for the signs): not a sum alone.
    stats = fed.run_round("error", _error_step, W, disclosure=PER_CLIENT)

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
    empty = energy <= _EIG_RTOL * np.max(energy, initial=0.0)
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


def kernel_matrix(X, Y, spec):
    """κ(X, Y) in float64 for the estimator's transform (see :func:`_kernel`)."""
    return _kernel(X, Y, spec)


def _server_gamma(fed, opts, rng):
    """γ: given, sklearn's 1/d for "poly", or the federated median."""
    if opts.kernel == "linear":
        return None
    if opts.gamma is not None:
        return float(opts.gamma)
    if opts.kernel == "poly":
        return 1.0 / fed.n_features
    metric = "manhattan" if opts.kernel == "laplacian" else "euclidean"
    sizes = fed.client_sizes
    quota = allocate_quota(_MEDIAN_SAMPLES, sizes, sizes)
    seed = int(rng.randint(SEED_MAX))
    uploads = fed.run_round(
        "median sample",
        partial(
            median_sample_step,
            metric=metric,
            n_projections=_MEDIAN_PROJECTIONS,
            stream="kernel_pca.median_sample",
        ),
        messages=[(seed, int(s)) for s in quota],
        # Rows are sent as they are unless randomly projected (the server
        # knows the projection: per-sample values all the same).
        disclosure=raw_rows_of()
        if metric == "manhattan" or fed.n_features <= _MEDIAN_PROJECTIONS
        else PER_CLIENT,
    )
    med = median_distance(uploads, metric=metric)
    sigma = opts.median_factor * med
    return 1.0 / (2.0 * sigma**2) if opts.kernel == "rbf" else 1.0 / sigma


def _uniform_sample(fed, opts):
    """Y sampled uniformly: client quotas proportional to n_m."""
    sizes = fed.client_sizes
    quota = allocate_quota(opts.n_representatives, sizes, sizes)
    rows = fed.run_round(
        "uniform sample",
        partial(_sample_step, scores_key=None, stream="kernel_pca.uniform"),
        messages=[int(s) for s in quota],
        disclosure=raw_rows_of(),
    )
    return _stack_rows(rows)


def _leverage_adaptive_sample(fed, opts, rng, spec, n_rep):
    """disLS then RepSample (Algorithms 1 and 2)."""
    seed = int(rng.randint(SEED_MAX))
    sizes = fed.client_sizes
    m1 = int(np.ceil(opts.leverage_fraction * n_rep))
    m2 = n_rep - m1
    P = None
    # With no leverage draws (leverage_fraction=0) disLS is skipped: its
    # embedding round would be paid for nothing.
    if m1 > 0:
        sketches = fed.run_round(
            "embedding",
            partial(
                _embedding_step,
                kernel=opts.kernel,
                degree=opts.degree,
                coef0=float(opts.coef0),
                n_random_features=opts.n_random_features,
                embedding_dim=opts.embedding_dim,
                sketch_size=opts.sketch_size,
            ),
            (seed, spec["gamma"]),
            disclosure=PER_CLIENT,
        )
        Z = _leverage_basis(sketches, opts.embedding_dim)
        summaries = fed.run_round(
            "leverage scores",
            partial(_leverage_step, budget=m1),
            Z,
            disclosure=PER_CLIENT,
        )
        quota = _inclusion_quota(summaries, m1, sizes)
        rows = fed.run_round(
            "leverage sample",
            partial(
                _sample_step,
                scores_key="kpca_scores",
                stream="kernel_pca.leverage",
            ),
            messages=[int(s) for s in quota],
            disclosure=raw_rows_of(),
        )
        P = _unique_rows(_stack_rows(rows))
    if m2 == 0:
        return P
    # The basis of span φ(P) is computed here once and sent, rather than
    # by every client from P (an eigendecomposition of K_PP each).
    R_P = None
    if P is not None and P.shape[0] > 0:
        R_P = _span_basis(_kernel(P, P, spec))
    summaries = fed.run_round(
        "adaptive residuals",
        partial(_residual_step, spec=spec, budget=m2),
        (P, R_P, spec["gamma"]),
        disclosure=Disclosure(PER_CLIENT, forwarded=_forwarded_representatives),
    )
    # Points already taken have zero residual, so they cannot be drawn
    # again and count for nothing in the expected shares.
    quota2 = _inclusion_quota(summaries, m2, sizes)
    rows = fed.run_round(
        "adaptive sample",
        partial(_sample_step, scores_key="kpca_scores", stream="kernel_pca.adaptive"),
        messages=[int(s) for s in quota2],
        disclosure=raw_rows_of(),
    )
    new = _stack_rows(rows)
    return new if P is None else _vstack([P, new])


# ---------------------------------------------------------------------------
# Shared math (used identically by clients and the server)


def _kernel(X, Y, spec):
    """κ(X, Y) in float64 (float32 kernels would limit the basis' accuracy).

    Shift-invariant kernels are computed on X and Y minus the mean of Y, a
    point every party holding Y gets alike: the squared distances inside
    "rbf" are expanded as ‖x‖² − 2x·y + ‖y‖², which cancels far from the
    origin (at an offset of 1e9 the kernel was noise). CSR rows are shifted
    on the columns both X and Y store in every row (``skfed._numerics._shift``), where
    an offset puts them. "linear" and "poly" are not shift-invariant and
    work on the coordinates as given.
    """
    X = X.astype(np.float64, copy=False)
    Y = Y.astype(np.float64, copy=False)
    kernel = spec["kernel"]
    if kernel in ("rbf", "laplacian"):
        reference = shift_point(np.asarray(Y.mean(axis=0)), X, Y)
        X, Y = shifted_rows(X, reference), shifted_rows(Y, reference)
    if kernel == "linear":
        K = X @ Y.T
        return K.toarray() if sp.issparse(K) else np.asarray(K)
    if kernel == "rbf" and not (sp.issparse(X) or sp.issparse(Y)):
        # Directly: pairwise_kernels validates both arrays on every call,
        # which cost more than the kernel itself for a client of 100 rows
        # (1.8 of 12 s of a fit over 1,000 such clients).
        K = X @ Y.T
        K *= -2.0
        K += np.einsum("ij,ij->i", X, X)[:, None]
        K += np.einsum("ij,ij->i", Y, Y)[None, :]
        np.maximum(K, 0.0, out=K)
        K *= -spec["gamma"]
        return np.exp(K, out=K)
    params = {"gamma": spec["gamma"]}
    if kernel == "poly":
        params.update(degree=spec["degree"], coef0=spec["coef0"])
    return pairwise_kernels(X, Y, metric=kernel, **params)


def _kernel_diag(X, spec):
    """κ(x, x) for every row of X."""
    kernel = spec["kernel"]
    if kernel in ("rbf", "laplacian"):
        return np.ones(X.shape[0])
    if sp.issparse(X):
        sq = np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
    else:
        sq = np.einsum("ij,ij->i", X, X, dtype=np.float64)
    if kernel == "linear":
        return sq
    return (spec["gamma"] * sq + spec["coef0"]) ** spec["degree"]


def _span_basis(K):
    """R with Rᵀ K R = I on the range of K (K = U Λ Uᵀ, R = U_r Λ_r^{-1/2}).

    Eigenvalues below ``_EIG_RTOL`` × the largest are dropped, which is the
    guard against duplicates and rank-deficient kernels. Eigenvector signs
    are fixed (:func:`skfed._numerics._signs.vector_signs`) so that every client
    computing R from the same Y gets the same basis.
    """
    lam, U = np.linalg.eigh(K)
    top = lam.max() if lam.size else 0.0
    keep = lam > _EIG_RTOL * top if top > 0 else np.zeros(lam.shape, dtype=bool)
    lam, U = lam[keep][::-1], U[:, keep][:, ::-1]
    return U * (vector_signs(U) / np.sqrt(lam))


def _forwarded_representatives(message):
    """Rows of X a client receives with a message whose first item is the
    representatives drawn so far (None before any)."""
    return 0 if message[0] is None else int(message[0].shape[0])


def _stack_rows(uploads):
    # Every client may send nothing (all residuals zero): keep one empty part
    # so the result still has the right width and format.
    parts = [u for u in uploads if u.shape[0]] or uploads[:1]
    return _vstack(parts)


def _vstack(parts):
    if any(sp.issparse(p) for p in parts):
        return sp.vstack([sp.csr_matrix(p) for p in parts], format="csr")
    return np.vstack(parts)


def _unique_rows(Y):
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


# ---------------------------------------------------------------------------
# Client steps
#
# Per-row quantities (embeddings, scores) are kept in the client's canonical
# row order (sorted by a hash of the row values), and row-indexed randomness
# (sketches, draws) is applied in that order, so that a client's
# contribution depends on which rows it holds, not on how they are stored.


def _row_order(client, state):
    """The client's canonical row order, computed once and kept in state."""
    order = state.get("kpca_order")
    if order is None:
        order = canonical_row_order(client.X)
        state["kpca_order"] = order
    return order


# Two entries: the embedding round of the current fit (and of one running
# beside it); the maps hold d · D + D · t floats each.
@lru_cache(maxsize=2)
def _shared_embedding(
    seed, n_features, kernel, gamma, degree, coef0, n_random_features, embedding_dim
):
    """The shared map z and Gaussian S of disLS, drawn from the round's seed.

    Every client draws the same ones; a process serving many clients (a
    thousand small ones in one joblib worker) draws them once.
    """
    shared = check_random_state(seed)
    # Leverage scores are only needed to a constant factor, so the embedding
    # is computed in float32: half the time and memory of the dominant cost
    # (n_m · D cosines or FFTs).
    f32 = np.float32
    if kernel in ("rbf", "laplacian"):
        omega, offset = sample_fourier_weights(
            shared, n_features, n_random_features, gamma, kernel=kernel
        )

        def features(B, out):
            # Phases in the data's precision (float32 would overflow on data
            # of magnitude 1e38 and lose the spread far from the origin);
            # only the cosines are kept, written in float32 into ``out``.
            return random_fourier_features(B, omega, offset, out=out)

        dim = n_random_features
    elif kernel == "poly":
        hashes = sample_tensor_sketch(shared, n_features, n_random_features, degree)

        def features(B, out):
            return tensor_sketch(
                B, hashes, n_random_features, gamma=gamma, coef0=coef0, dtype=f32
            )

        dim = n_random_features
    else:

        def features(B, out):
            return B.astype(f32)

        dim = n_features
    S = (shared.standard_normal((dim, embedding_dim)) / np.sqrt(embedding_dim)).astype(
        f32
    )
    S.flags.writeable = False
    return features, S


@client_step("kernel_pca.embedding")
def _embedding_step(
    client,
    state,
    message,
    *,
    kernel,
    degree,
    coef0,
    n_random_features,
    embedding_dim,
    sketch_size,
):
    """disLS, worker part 1: kernel subspace embedding and point sketch.

    E[m] = S z(X[m])ᵀ (t × n_m) with the shared map z and Gaussian S; the
    upload is G[m] = E[m] T_m (t × min(n_m, p)), T_m private to the client.
    E[m] stays on the client for the leverage scores.
    """
    seed, gamma = message
    X = client.X
    features, S = _shared_embedding(
        int(seed),
        X.shape[1],
        kernel,
        float(gamma) if gamma is not None else None,
        degree,
        coef0,
        n_random_features,
        embedding_dim,
    )
    n_rows = X.shape[0]
    Et = np.empty((n_rows, embedding_dim))
    # One float32 buffer of about 2 MB for every block's features, which
    # stays in cache for the product with S: a fresh float64 block of
    # 2,048 x D features and its float32 copy (48 MB at D = 2,000) for
    # every block made this round 1.5 times slower and, faulting in new
    # pages all the time, kept two client threads from running faster
    # than one.
    rows = min(n_rows, max(16, _FEATURE_VALUES // S.shape[0]))
    buffer = np.empty((rows, S.shape[0]), np.float32)
    for block in row_blocks(n_rows, rows):
        Z = features(X[block], buffer[: block.stop - block.start])
        Et[block] = np.asarray(Z @ S)
    state = dict(state or {})
    Et = Et[_row_order(client, state)]
    state["kpca_embedding"] = Et
    return state, sketch_columns(
        Et.T, sketch_size, client.random_state("kernel_pca.embedding_sketch")
    )


@client_step("kernel_pca.leverage_scores")
def _leverage_step(client, state, Z, *, budget):
    """disLS, worker part 2: ℓ_j = ‖Z⁻ᵀ E_{:,j}‖²; upload Σ_j ℓ_j and the
    ``budget`` largest scores (see :func:`_score_summary`)."""
    state = dict(state)
    Et = state.pop("kpca_embedding")
    diag = np.abs(np.diag(Z))
    if diag.size and diag.min() > 1e-10 * diag.max():
        scores = np.sum(scipy.linalg.solve_triangular(Z, Et.T, trans="T") ** 2, axis=0)
    else:
        # Rank-deficient embedding (duplicates, fewer points than t, constant
        # data): leverage scores w.r.t. the pseudo-inverse of ZᵀZ.
        _, s, Vt = np.linalg.svd(Z)
        keep = s > 1e-10 * s.max() if s.size and s.max() > 0 else s > np.inf
        scores = np.sum((Et @ Vt[keep].T / s[keep]) ** 2, axis=1)
    state["kpca_scores"] = scores
    return state, _score_summary(scores, budget)


def _score_summary(scores, budget):
    """(Σ_j s_j, the min(budget, n_m) largest s_j): enough for the server to
    find which points every draw would take anyway (π_j = 1 below)."""
    top = np.sort(scores)[::-1][:budget]
    return float(scores.sum()), np.ascontiguousarray(top)


def _inclusion_probabilities(scores, size):
    """π_j = min(1, c s_j) with Σ_j π_j = size: sampling without replacement
    "in proportion to s", where points whose share would exceed one draw
    are taken for sure instead of wasting draws on them."""
    pi = np.zeros(scores.shape[0])
    positive = scores > 0
    if size >= np.count_nonzero(positive):
        pi[positive] = 1.0
        return pi
    c = _saturation_scale(np.sort(scores[positive])[::-1], scores.sum(), size)
    return np.minimum(1.0, c * scores)


def _saturation_scale(top, total, size):
    """c with Σ_j min(1, c s_j) = size, from the largest scores ``top``
    (sorted decreasingly) and the sum of all scores. Every saturated score is
    among the ``size`` largest, so ``top`` needs no more than that."""
    head = np.concatenate([[0.0], np.cumsum(top)])
    c = 0.0
    for n_sat in range(min(size, top.shape[0]) + 1):
        # The points counted as saturated must stay so, also when rounding
        # leaves (almost) nothing for the others.
        floor = 1.0 / top[n_sat - 1] if n_sat else 0.0
        rest = total - head[n_sat]
        if rest <= 0:
            return floor
        c = max((size - n_sat) / rest, floor)
        if n_sat == top.shape[0] or top[n_sat] * c < 1:
            return c
    return c


@client_step("kernel_pca.sample")
def _sample_step(client, state, quota, *, scores_key, stream):
    """RepSample, worker part: draw ``quota`` rows without replacement,
    uniformly or with inclusion probabilities min(1, c s_j) from the stored
    scores s, and upload them.

    Fewer rows are sent when fewer rows have a positive score (e.g. every
    point already lies in the span of P).
    """
    state = dict(state or {})
    n = client.n_samples
    rng = client.random_state(stream)
    if scores_key is None:
        idx = rng.choice(n, size=min(int(quota), n), replace=False)
    else:
        scores = state[scores_key]
        size = min(int(quota), np.count_nonzero(scores > 0))
        idx = np.zeros(0, dtype=np.intp)
        if size:
            # Systematic sampling: exactly ``size`` distinct points, point j
            # included with probability π_j.
            cum = np.cumsum(_inclusion_probabilities(scores, size))
            cum *= size / cum[-1]
            idx = np.searchsorted(cum, rng.uniform() + np.arange(size), side="right")
            idx = np.unique(np.minimum(idx, n - 1))
        scores = scores.copy()
        scores[idx] = 0.0  # taken: not drawn again by a later round
        state[scores_key] = scores
    rows = client.X[_row_order(client, state)[np.sort(idx)]]
    return state, rows


@client_step("kernel_pca.residuals")
def _residual_step(client, state, message, *, spec, budget):
    """RepSample, adaptive part: d_j = κ(a_j, a_j) − ‖R_Pᵀ k_P(a_j)‖², the
    squared feature-space distance of a_j to span φ(P); upload Σ_j d_j and
    the ``budget`` largest d_j."""
    P, R, gamma = message
    spec = dict(spec, gamma=gamma)
    X = client.X
    diag = _kernel_diag(X, spec)
    if P is None or P.shape[0] == 0:
        resid = diag
    else:
        resid = np.empty(X.shape[0])
        for block in row_blocks(X.shape[0], _BLOCK):
            proj = _kernel(X[block], P, spec) @ R
            resid[block] = diag[block] - np.einsum("ij,ij->i", proj, proj)
    resid[resid <= _RESIDUAL_RTOL * diag] = 0.0
    state = dict(state or {})
    state["kpca_scores"] = resid[_row_order(client, state)]
    return state, _score_summary(resid, budget)


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
    state["kpca_trace"] = float(_kernel_diag(client.X, spec).sum())
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
    order = _row_order(client, state)
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
        for block, Pt in zip(
            row_blocks(n, _BLOCK), _centred_projections(client, state)
        ):
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
    for block in row_blocks(X.shape[0], _BLOCK):
        yield _kernel(X[block], Y, spec) @ R


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


def _leverage_basis(sketches, embedding_dim):
    """disLS, master: QR of [G[1] … G[M]]ᵀ = U Z; returns Z (t × t).

    The sketches are stacked in an order set by their content, so that
    renamed clients give the same Z, bit for bit."""
    stacked = np.hstack(content_sorted(sketches)).T
    Z = np.linalg.qr(stacked, mode="r")
    if Z.shape[0] < embedding_dim:  # fewer sketched points than t
        Z = np.vstack([Z, np.zeros((embedding_dim - Z.shape[0], Z.shape[1]))])
    return Z[:embedding_dim]


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
    rank = int(np.sum(s > _EIG_RTOL * s[0])) if s.size and s[0] > 0 else 0
    return U[:, : min(n_components, rank)]


def _inclusion_quota(summaries, total, sizes):
    """RepSample, master: split ``total`` draws over clients by the expected
    number of points each would contribute when every point j is drawn with
    probability min(1, c s_j), Σ_j min(1, c s_j) = total over all clients.

    A proportional split of the score sums would give a client holding one
    dominant point nearly every draw, which it can only spend on its small
    points (draws are without replacement), while large points elsewhere go
    unsampled.
    """
    sums = np.array([s for s, _ in summaries])
    tops = [np.asarray(t)[np.asarray(t) > 0] for _, t in summaries]
    # A client's summary lists all its positive scores when it shows fewer
    # than it was asked for (the rest are zero); otherwise it has at least
    # as many as it showed, and at most its size.
    n_positive = np.array(
        [top.size if top.size < min(total, n) else n for top, n in zip(tops, sizes)],
        dtype=np.intp,
    )
    if total >= n_positive.sum():
        # Every point with a positive score is drawn (π_j = 1); zero scores
        # never are, so the pooled scale would be infinite here.
        return n_positive
    pooled = np.sort(np.concatenate(tops))[::-1]
    c = _saturation_scale(pooled, sums.sum(), total)
    expected = np.empty(len(summaries))
    for m, (sum_m, top) in enumerate(zip(sums, tops)):
        saturated = top * c >= 1
        expected[m] = saturated.sum() + c * (sum_m - top[saturated].sum())
    # A client cannot contribute more points than it has with positive score,
    # and its expected count never exceeds that number.
    caps = np.minimum(n_positive, np.ceil(expected - 1e-9)).astype(np.intp)
    return allocate_quota(total, expected, caps)


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
