"""The protocol of federated kernel k-means: DSPGD with the communication
efficient mechanism, then the distributed coreset k-means.

The top eigenpairs of the RBF kernel matrix K (N x N, never formed) are
tracked by distributed stochastic proximal gradient descent (DSPGD): every
iteration draws fresh random Fourier features, mixes their kernel estimate
into the running low-rank estimate Z_t, and soft-thresholds the spectrum.
With the communication efficient mechanism (CEM) the eigen-problem is solved
on the small (D + r_t) x (D + r_t) matrix G = Σ_m W[m]ᵀW[m] instead of the
N x N one, so what a client uploads per iteration does not depend on N.
k-means on the spectral embedding H = U Λ^½ (first s columns) is then run
with the distributed coreset k-means of
:mod:`skfed.cluster._protocols._coreset`.

:func:`run_kernel_kmeans` drives the rounds; the client steps and the server
steps follow it, then the replay of the iterations that embeds new points
(the estimator's ``transform``): one module, since the replay must repeat
the clients' features and products exactly, which keeping them side by side
makes plain. Paper: "A Communication Efficient Federated Kernel k-Means"
(ICLR 2021 submission).
"""

# Long module: the replay that embeds new points must repeat the clients'
# features and products exactly; it stays beside the steps it repeats.

import sys
import warnings
from functools import lru_cache, partial
from typing import NamedTuple

import numpy as np
from scipy.linalg import eigh
from scipy.linalg.blas import dspmv
from sklearn.exceptions import ConvergenceWarning

from ..._engine._protocol import PER_ROW, client_step, collectable
from ..._engine._rounds import download, per_client, sum_only
from ..._numerics._blocks import row_blocks
from ..._numerics._lanczos import block_lanczos, lanczos
from ..._numerics._seeds import SEED_MAX
from ..._numerics._signs import vector_signs
from ...kernel import (
    federated_gamma,
    random_fourier_features,
    sample_fourier_weights,
    width_rounds,
)
from ._coreset import coreset_rounds, embedded_min_rows, federated_coreset_kmeans
from ._kfed import kfed_rounds
from ._row_free_kmeans import run_row_free_kmeans

# Each client's rows of the spectral embedding H: one value per row.
collectable("kernel_kmeans", "H", PER_ROW)

__all__ = [
    "EIGENPAIRS",
    "EMBEDDING",
    "KERNEL_WIDTH",
    "KERNEL_WIDTH_BROADCAST",
    "LANCZOS",
    "LANCZOS_EXPAND",
    "LANCZOS_PROJECT",
    "RANDOM_FEATURES",
    "RANDOM_FEATURES_KEPT",
    "KernelKMeansResult",
    "cluster_embedding",
    "dspgd_rounds",
    "embedding_kmeans_rounds",
    "iteration_features",
    "replay_eigenvectors",
    "run_kernel_kmeans",
]

# The rounds (see run_kernel_kmeans). The kernel width, when not given, is
# estimated by skfed.kernel.federated_gamma in these rounds: each client's
# mean and spread (per client), or under secure aggregation their sums in
# two sum-only rounds.
KERNEL_WIDTH = width_rounds("kernel width")
KERNEL_WIDTH_BROADCAST = download("kernel width broadcast")
# DSPGD with CEM: each iteration's features, with the upper triangle of
# Σ_m W[m]ᵀW[m] (eigen_solver="gram") or kept for the Lanczos products.
RANDOM_FEATURES = sum_only("random features")
RANDOM_FEATURES_KEPT = download("random features")
LANCZOS = sum_only("lanczos")
EIGENPAIRS = download("eigenpairs")
# Without CEM (the paper's baseline): each Lanczos product in two halves,
# the second the clients' rows of it.
LANCZOS_PROJECT = sum_only("lanczos project")
LANCZOS_EXPAND = per_client("lanczos expand")
# The clients' rows of the spectral embedding (the one-shot protocol's too).
EMBEDDING = download("embedding")


def dspgd_rounds(*, gamma, secure_aggregation, use_cem, eigen_solver, refine_iter):
    """The rounds :func:`run_kernel_kmeans` runs, each once: how many
    iterations and Lanczos products a fit takes depends on its data (which
    is why differential privacy, which must count its releases before the
    fit, refuses DSPGD)."""
    if use_cem:
        gram = eigen_solver == "gram"
        iteration = (RANDOM_FEATURES,) if gram else (RANDOM_FEATURES_KEPT, LANCZOS)
        iteration += (EIGENPAIRS,)
    else:
        iteration = (RANDOM_FEATURES_KEPT, LANCZOS_PROJECT, LANCZOS_EXPAND)
    return (
        *(KERNEL_WIDTH.run(secure_aggregation) if gamma is None else ()),
        KERNEL_WIDTH_BROADCAST,
        *iteration,
        EMBEDDING,
        *coreset_rounds(refine_iter, embedded=True, candidates=True),
    )


def embedding_kmeans_rounds(refine_iter, *, row_free=False):
    """The rounds :func:`cluster_embedding` runs, the refinement once per
    run (at most ``refine_iter``)."""
    if row_free:
        return kfed_rounds(refine_iter=refine_iter)
    return coreset_rounds(refine_iter, embedded=True, candidates=True)


# The clients' rows of H, where the clustering step finds them.
EMBEDDED_ROWS = ("kernel_kmeans", "H")
# The row-free k-means' tolerance (the coreset k-means' default) and its
# clients' local Lloyd iterations (DistributedKMeans' default).
_ROW_FREE_TOL = 1e-4
_ROW_FREE_LOCAL_MAX_ITER = 20


# n_init="auto": many restarts where the server's k-means is small, where
# kernel k-means' solutions on non-convex clusters lie within the
# coreset's error of each other and the moons' own optimum has a small
# basin (NMI over 8 seeds: 0.39 with 10 restarts, 0.68 with 50); few
# where each restart costs much more and k-means++ seeds already spread
# (k = 50 on 100 components: 1.95 s a fit with 50, 1.05 s with 10).
_AUTO_RESTARTS = 50
_AUTO_RESTARTS_LARGE = 10
# k·s above which the server's k-means counts as large.
_AUTO_RESTARTS_SIZE = 1000


def auto_restarts(n_clusters, n_components, n_points):
    """The server's restarts for ``n_init="auto"``: 50 where k·s is at
    most 1,000, 10 above, and never more than the coreset's points (more
    would only repeat seedings)."""
    small = n_clusters * n_components <= _AUTO_RESTARTS_SIZE
    return min(_AUTO_RESTARTS if small else _AUTO_RESTARTS_LARGE, max(n_points, 1))


def cluster_embedding(
    fed,
    *,
    n_clusters,
    n_components,
    coreset_size,
    random_state,
    n_init,
    refine_iter,
):
    """k-means on the clients' rows of H, the one-shot protocols' last
    step: the coreset k-means
    (:func:`~skfed.cluster._protocols._coreset.federated_coreset_kmeans`),
    whose sampled rows of H determine rows of X, or under
    ``raw_rows="refuse"`` the row-free k-means
    (:func:`~skfed.cluster._protocols._row_free_kmeans.run_row_free_kmeans`: k-FED's
    local centers of H, then Lloyd rounds on summed per-cluster
    statistics, up to ``refine_iter``). A sum of n rows of H, s columns,
    is s equations in the n d unknowns of their rows of X, so there every
    local center and cluster sum comes from more than s / d distinct rows
    (:func:`~skfed.cluster._protocols._coreset.embedded_min_rows`). The
    coreset's restarts are decided on the clients' rows (``n_candidates``):
    kernel k-means on non-convex clusters has solutions within the
    coreset's error of each other, of which the data's cost picks the
    right one (two rings at γ = 10, 5 clients: NMI 1.000 on 6 seeds of 6,
    against 5 of 6 with the coreset's choice).

    Returns the coreset's result, or k-FED's, whose ``cluster_centers``,
    ``inertia`` and ``n_refine_iter`` the estimator reads.
    """
    if n_init == "auto" and fed.raw_rows == "refuse":
        # Over the pooled local centers, a few points: k-FED's 10.
        n_init = _AUTO_RESTARTS_LARGE
    elif n_init == "auto":
        n_init = auto_restarts(n_clusters, n_components, coreset_size + fed.n_samples)
    if fed.raw_rows != "refuse":
        return federated_coreset_kmeans(
            fed,
            n_clusters=n_clusters,
            coreset_size=coreset_size,
            random_state=random_state,
            n_init=n_init,
            rows=EMBEDDED_ROWS,
            refine_iter=refine_iter,
            n_candidates=n_init,
        )
    return run_row_free_kmeans(
        fed,
        n_clusters=n_clusters,
        random_state=random_state,
        server_n_init=n_init,
        refine_iter=refine_iter,
        tol=_ROW_FREE_TOL,
        local_max_iter=_ROW_FREE_LOCAL_MAX_ITER,
        rows=EMBEDDED_ROWS,
        min_rows=embedded_min_rows(n_components, fed.n_features),
        dtype=np.float64,
    )


# Rows per block when clients or the replay map many points to many features.
CHUNK = 4096
# Rows per block of W @ basis (see projected_features): 1,024 rows of
# D + r = 335 features (2.7 MB) stay near the core between the features'
# writing and the product's reading; 4,096 rows (11 MB) did not, and the
# product took 2.1-2.2 us a row against 1.7 (100,000 rows, 37 columns).
_PROJECT_CHUNK = 1024
# Eigenvalues below this fraction of the largest are numerically zero.
ROUNDOFF = 1e-10
# An iteration sums G in float32 (see _feature_gram) when its threshold η_t λ
# is at least this fraction of the previous iteration's largest eigenvalue.
# The float32 sums' errors leave eigenvalues of up to about 1e-6 of the
# largest where G has none (measured: 8.8e-7 at worst, on data of 2 to 8
# distinct rows repeated; 4e-8 on data without repeats), so below such a
# threshold they are discarded with the rest of the spectrum under it; a
# smaller threshold (the first iteration's, or one on a fast-decaying
# spectrum) keeps the float64 sums.
_FLOAT32_THRESHOLD = 2e-6


class KernelKMeansResult(NamedTuple):
    """What :func:`run_kernel_kmeans` returns.

    Attributes
    ----------
    gamma : float
        The RBF kernel's γ.
    threshold : float
        λ, the soft threshold.
    eigenvalues : ndarray of shape (n_components,)
        Estimates of the kernel matrix's top eigenvalues.
    labels : ndarray of shape (n_samples,)
        Cluster of each training sample (kept on the clients; gathered).
    embedding : ndarray of shape (n_samples, n_components)
        H, the spectral embedding of the training samples (kept on the
        clients; gathered).
    coreset : CoresetKMeansResult
        The k-means on H (centers, inertia, refinement rounds).
    replay : list of tuple
        Per iteration, what the server sent: the features' seed, η_t,
        V_t / √μ_t and √(μ_t − η_t λ) (see :func:`replay_eigenvectors`).
    scales : ndarray of shape (n_components,)
        √ of ``eigenvalues``: H = U scales.
    ranks, lanczos_steps : ndarray of int
        r_t and the Lanczos steps of every iteration.
    eigenvalue_history : list of ndarray
        The eigenvalue estimates after every iteration.
    client_ids : list
        The clients that took part.
    """

    gamma: float
    threshold: float
    eigenvalues: np.ndarray
    labels: np.ndarray
    embedding: np.ndarray
    coreset: tuple
    replay: list
    scales: np.ndarray
    ranks: np.ndarray
    lanczos_steps: np.ndarray
    eigenvalue_history: list
    client_ids: list


class _DSPGDOptions(NamedTuple):
    n_random_features: int
    n_components: int
    threshold: object
    step_size: str
    max_iter: int
    tol: float
    eigen_solver: str
    eigen_tol: float
    block_size: int
    verbose: int


class _Iterations(NamedTuple):
    estimates: np.ndarray
    threshold: float
    server_U: object
    replay: list
    ranks: list
    steps: list
    history: list


def run_kernel_kmeans(
    fed,
    *,
    n_clusters,
    n_components,
    random_state,
    coreset_size,
    n_init,
    n_random_features,
    gamma,
    threshold,
    step_size,
    max_iter,
    tol,
    eigen_solver,
    eigen_tol,
    lanczos_block_size,
    use_cem,
    refine_iter,
    verbose,
):
    """Federated kernel k-means on an open federation.

    Rounds: ``"kernel width"`` (with ``gamma=None``, d + 2 floats up per
    client) and ``"kernel width broadcast"``; per DSPGD iteration
    ``"random features"``, the Lanczos rounds (``"lanczos"``, or
    ``"lanczos project"``/``"lanczos expand"`` without CEM) and
    ``"eigenpairs"``; then ``"embedding"`` and the coreset k-means rounds
    on H (see :func:`~skfed.cluster._protocols._coreset.federated_coreset_kmeans`).

    Parameters
    ----------
    fed : Federation
        Open federation (inside its ``with`` block).
    n_clusters : int
        k, the number of clusters.
    n_components : int
        s, the columns of the embedding.
    random_state : RandomState
        The server's generator (the fit's ``rng``).
    coreset_size : int
        Of the coreset k-means, already clipped to the data.
    n_init : int or "auto"
        The server's restarts, already clipped to the data; ``"auto"`` as
        ``auto_restarts`` says.
    n_random_features, gamma, threshold, step_size, max_iter, tol, \
eigen_solver, eigen_tol, lanczos_block_size, use_cem, refine_iter, \
verbose
        As in :class:`~skfed.FederatedKernelKMeans`.

    Returns
    -------
    result : KernelKMeansResult
    """
    opts = _DSPGDOptions(
        n_random_features,
        n_components,
        threshold,
        step_size,
        max_iter,
        tol,
        eigen_solver,
        eigen_tol,
        lanczos_block_size,
        verbose,
    )
    n_samples = fed.n_samples
    # Separate streams, so that the features of iteration t do not depend
    # on how many Lanczos vectors earlier iterations drew: with and without
    # CEM the same R_t is decomposed.
    feature_seeds = random_state.randint(SEED_MAX, size=max_iter)
    lanczos_rng = np.random.RandomState(random_state.randint(SEED_MAX))

    if gamma is None:
        # Each client's mean and spread, or their sums when masked.
        gamma = federated_gamma(fed, KERNEL_WIDTH)
    else:
        gamma = float(gamma)
    fed.run_round(KERNEL_WIDTH_BROADCAST, _receive_gamma_step, gamma)

    dspgd = _dspgd_cem if use_cem else _dspgd_no_cem
    it = dspgd(fed, opts, n_samples, feature_seeds, lanczos_rng)
    if tol > 0 and not _converged(it.history, n_components, tol):
        warnings.warn(
            f"DSPGD stopped at max_iter={max_iter} iterations before its "
            f"eigenvalue estimates settled to tol={tol}; raise max_iter (or "
            "tol).",
            ConvergenceWarning,
            stacklevel=3,
        )
    eigvals, lam = it.estimates, it.threshold
    n_kept = eigvals.shape[0]
    if n_kept == 0:
        raise ValueError(
            f"No eigenvalue of the kernel estimate exceeds the threshold "
            f"λ={lam:.4g}, so there is no spectral embedding to cluster; "
            "lower threshold (or leave it at None)."
        )
    s = min(n_components, n_kept)
    if s < n_components:
        warnings.warn(
            f"Only {n_kept} eigenvalue(s) of the kernel estimate exceed the "
            f"threshold after {len(it.history)} iteration(s); the embedding "
            f"has {n_kept} column(s) instead of n_components={n_components}. "
            "Lower threshold or n_components.",
            ConvergenceWarning,
            stacklevel=3,
        )
    scales = np.sqrt(eigvals[:s])
    if use_cem:
        fed.run_round(EMBEDDING, _embedding_step, scales)
    else:
        # The server holds U and sends each client its rows of H.
        H = it.server_U[:, :s] * scales
        fed.run_round(
            EMBEDDING,
            _receive_embedding_step,
            messages=np.split(H, np.cumsum(fed.client_sizes)[:-1]),
        )

    coreset = cluster_embedding(
        fed,
        n_clusters=n_clusters,
        n_components=s,
        coreset_size=coreset_size,
        random_state=random_state,
        n_init=n_init,
        refine_iter=refine_iter,
    )
    return KernelKMeansResult(
        gamma=gamma,
        threshold=float(lam),
        eigenvalues=eigvals[:s],
        labels=None
        if not fed.per_row_allowed
        else fed.assemble("coreset", "labels", n_samples),
        embedding=None
        if not fed.per_row_allowed
        else fed.assemble("kernel_kmeans", "H", n_samples),
        coreset=coreset,
        replay=it.replay,
        scales=scales,
        ranks=np.asarray(it.ranks, dtype=np.intp),
        lanczos_steps=np.asarray(it.steps, dtype=np.intp),
        eigenvalue_history=it.history,
        client_ids=list(fed.client_ids),
    )


def _eta(step_size, t):
    """η_t of the chosen step-size rule (t starts at 1)."""
    return 1.0 / t if step_size == "1/t" else 2.0 / (t + 1)


def _eigen_solve(product, n, opts, **criteria):
    """Server: the wanted eigenpairs of the n x n matrix behind ``product``
    (one federated product per call), by Lanczos or, with
    ``lanczos_block_size`` b > 1, block Lanczos: b vectors per round, sent
    as the rows of a b x n array (each client's products then stay rows of
    contiguous memory)."""
    common = dict(tol=opts.eigen_tol, tol_scale="each", **criteria)
    if opts.block_size == 1:
        return lanczos(product, n, **common)
    return block_lanczos(
        lambda C: product(np.ascontiguousarray(C.T)).T,
        n,
        block_size=min(opts.block_size, n),
        **common,
    )


def _dspgd_cem(fed, opts, n_samples, feature_seeds, lanczos_rng):
    """DSPGD with CEM (the server never holds U).

    The eigen-problem of each iteration is on G = Σ_m W[m]ᵀW[m]; clients
    keep B[m] and, until the eigenpairs round, W[m] or its Gram matrix.
    """
    D, s = opts.n_random_features, opts.n_components
    gram = opts.eigen_solver == "gram"
    lam = None if opts.threshold is None else float(opts.threshold)
    r = 0
    largest = None
    ranks, steps, history, replay = [], [], [], []
    for t in range(1, opts.max_iter + 1):
        eta = _eta(opts.step_size, t)
        dim = D + r
        # Not before λ and a largest eigenvalue are known, nor with λ = 0.
        float32 = bool(lam and largest and eta * lam >= _FLOAT32_THRESHOLD * largest)
        # The server needs only Σ_m W[m]ᵀW[m] (its upper triangle).
        total = fed.run_round(
            RANDOM_FEATURES if gram else RANDOM_FEATURES_KEPT,
            partial(_random_features_step, n_features=D, upload_gram=gram),
            (int(feature_seeds[t - 1]), eta, float32),
        )
        if gram:
            mu, V = _eigh_descending(_triangle_to_matrix(total, dim))
            del total
            n_steps = 0
        else:
            # Each product needs only Σ_m W[m]ᵀ(W[m] c).
            step = partial(fed.run_round, LANCZOS, _gram_matvec_step)
            # No max_iter: at worst Lanczos spans all dim directions,
            # where its Ritz pairs are exact, so it always converges.
            res = _eigen_solve(
                lambda c, step=step: step(c),
                dim,
                opts,
                n_components=s + 2 if lam is None else None,
                threshold=None if lam is None else eta * lam,
                random_state=lanczos_rng,
            )
            mu, V, n_steps = res.eigenvalues, res.eigenvectors, res.n_calls
        if lam is None:
            lam = default_threshold(mu, s)
        largest = float(np.max(mu, initial=0.0))
        basis, shrink, kept = soft_threshold(mu, V, eta * lam)
        fed.run_round(EIGENPAIRS, _eigenpairs_step, (basis, shrink))
        replay.append((int(feature_seeds[t - 1]), eta, basis, shrink))
        ranks.append(r)
        steps.append(n_steps)
        r = kept.shape[0]
        estimate = kept + (1.0 - eta) * lam
        history.append(estimate)
        if opts.verbose > 1:
            print(
                f"[skfed] dspgd iteration {t}: η={eta:.3g}, "
                f"rank {ranks[-1]} -> {r}, {n_steps} Lanczos rounds, "
                f"upload so far {fed.log.upload_floats:,} floats",
                file=sys.stderr,
            )
        if _converged(history, s, opts.tol):
            break
    return _Iterations(history[-1], lam, None, replay, ranks, steps, history)


def _dspgd_no_cem(fed, opts, n_samples, feature_seeds, lanczos_rng):
    """The paper's baseline: Lanczos on the N x N matrix R_t.

    The server keeps B (N x r_t, rows in client order) and computes
    (1 − η) B Bᵀ c itself; the clients compute their part of
    (η / D) A Aᵀ c in two half rounds. Returns the kernel-eigenvalue
    estimates, λ and the server's U (N x s_T).
    """
    D, s = opts.n_random_features, opts.n_components
    sizes = fed.client_sizes
    splits = np.cumsum(sizes)[:-1]
    lam = None if opts.threshold is None else float(opts.threshold)
    B = np.zeros((n_samples, 0))
    ranks, steps, history, replay = [], [], [], []
    for t in range(1, opts.max_iter + 1):
        eta = _eta(opts.step_size, t)
        fed.run_round(
            RANDOM_FEATURES_KEPT,
            partial(_random_features_step, n_features=D, with_memory=False),
            (int(feature_seeds[t - 1]), eta),
        )

        # The Lanczos vectors c_j (orthonormal) and the features' part
        # of each product, Σ_m W[m]ᵀ c_j[m]: the Ritz vectors lie in
        # span{c_j}, so Wᵀ U follows without another round. A block of
        # vectors travels as rows (see _eigen_solve), split by columns.
        vectors, projections = [], []

        def matvec(c, B=B, eta=eta, vectors=vectors, projections=projections):
            projected = fed.run_round(
                LANCZOS_PROJECT,
                _project_step,
                messages=np.split(c, splits, axis=-1),
            )
            vectors.append(c.copy())
            projections.append(projected)
            # Each client's rows of the product: per-sample values the
            # server assembles into its N-vector (the baseline holds U).
            expanded = fed.run_round(LANCZOS_EXPAND, _expand_step, projected)
            memory = (1.0 - eta) * ((c @ B) @ B.T if c.ndim == 2 else B @ (B.T @ c))
            return np.concatenate(expanded, axis=-1) + memory

        res = _eigen_solve(
            matvec,
            n_samples,
            opts,
            # R_t is N x N: with N < s + 2 all its eigenvalues are wanted.
            n_components=min(s + 2, n_samples) if lam is None else None,
            threshold=None if lam is None else eta * lam,
            random_state=lanczos_rng,
        )
        mu, U = res.eigenvalues, res.eigenvectors
        if lam is None:
            lam = default_threshold(mu, s)
        keep = _above(mu, eta * lam)
        ranks.append(B.shape[1])
        steps.append(res.n_calls)
        U, mu_kept = U[:, keep], mu[keep]
        # The recursion in CEM form: U = [W, √(1 − η) B] basis with
        # basis = [W, √(1 − η) B]ᵀ U / μ.
        if vectors[0].ndim == 1:
            WtU = np.column_stack(projections) @ (np.vstack(vectors) @ U)
        else:
            WtU = np.vstack(projections).T @ (np.vstack(vectors) @ U)
        BtU = np.sqrt(1.0 - eta) * (B.T @ U)
        basis = np.vstack([WtU, BtU]) / mu_kept
        # The sign convention of soft_threshold, on v = basis √μ.
        flip = signs(basis)
        basis, U = basis * flip, U * flip
        shrink = np.sqrt(mu_kept - eta * lam)
        replay.append((int(feature_seeds[t - 1]), eta, basis, shrink))
        B = U * shrink
        estimate = mu[keep] + (1.0 - eta) * lam
        history.append(estimate)
        if opts.verbose > 1:
            print(
                f"[skfed] dspgd iteration {t} (no CEM): "
                f"rank {ranks[-1]} -> {B.shape[1]}, {res.n_calls} Lanczos "
                f"rounds, upload so far {fed.log.upload_floats:,} floats",
                file=sys.stderr,
            )
        if _converged(history, s, opts.tol):
            break
    return _Iterations(history[-1], lam, U, replay, ranks, steps, history)


# --------------------------------------------------------------------------
# Client steps


@client_step("kernel_kmeans.receive_gamma")
def _receive_gamma_step(client, state, gamma):
    """Client step: keep the kernel width γ."""
    state = dict(state or {})
    state["gamma"] = float(gamma)
    return state, None


# The Gram matrix is blocks of up to 4,096 rows times themselves, D + r
# wide: on large clients, products large enough for several BLAS threads.
@client_step("kernel_kmeans.random_features", large_products=True, sum_only=True)
def _random_features_step(
    client, state, message, *, n_features, upload_gram=False, with_memory=True
):
    """Client step: fresh random features A[m] and W[m] of iteration t.

    W[m] = [√(η_t / D) A[m], √(1 − η_t) B[m]] so that W Wᵀ = R_t. When
    ``with_memory`` is False (no CEM) the server holds B and the client only
    keeps √(η_t / D) A[m]. The local Gram W[m]ᵀW[m] is formed, block by
    block, whenever it is smaller than W[m] (then each Lanczos answer costs
    (D + r)² flops instead of 2 n_m (D + r)) or is uploaded
    (``upload_gram``); W[m] itself is then not kept but recomputed in the
    eigenpairs round from the iteration's seed and η_t, so a client holds
    O(n_m r + (D + r)²) floats between rounds instead of O(n_m (D + r)).

    The message: the seed of the iteration's features, η_t and (with CEM)
    whether the Gram matrix may be summed in float32 (see
    :func:`_feature_gram`).
    """
    state = dict(state)
    seed, eta = message[:2]
    float32 = len(message) > 2 and bool(message[2])
    X = client.X
    omega, offset = iteration_weights(seed, X.shape[1], n_features, state["gamma"])
    B = state.get("B") if with_memory else None
    dim = n_features + (0 if B is None else B.shape[1])
    if not (with_memory and (upload_gram or X.shape[0] >= dim)):
        # Lanczos products on W itself: it is smaller than its Gram matrix.
        state["W"] = iteration_features(X, omega, offset, eta, B)
        state["G"] = None
        return state, None
    # Only the Gram matrix is needed until the eigenpairs round, which
    # recomputes W block by block (see _eigenpairs_step): kept, W is n_m ·
    # (D + r) floats per client, 2.7 GB over a million rows.
    G = _feature_gram(X, omega, offset, eta, B, float32=float32)
    state["W"] = None
    state["features"] = (int(seed), float(eta), n_features)
    if upload_gram:
        # Uploaded, not kept: no Lanczos product follows, and a thousand
        # clients each keeping a (D + r)² matrix held 0.9 GB.
        state["G"] = None
        return state, np.take(G, _upper_triangle(dim))
    # Kept packed (the upper triangle, column by column, as BLAS spmv reads
    # it): half the memory of the full matrix, and a Lanczos round streams
    # every client's G from memory (1,000 clients of 1,000 rows kept 0.84 GB
    # as full matrices; the packed product took 20 us a client against 25).
    state["G"] = np.take(G, _upper_triangle(dim, by_columns=True))
    return state, None


def _feature_gram(X, omega, offset, eta, B, *, float32=False):
    """W[m]ᵀW[m] for the rows X, W = [√(η / D) A, √(1 − η) B] (see
    :func:`iteration_features`), a block of rows at a time (W is never
    held whole).

    With ``float32`` each block's product is taken in float32 and added to
    a float64 total: the features' cosines are float32 numbers already (see
    :func:`~skfed.kernel._random_features.scaled_cosines`), so a float32
    block holds A's values exactly, √(2η / D) outside; only B (relative
    6e-8) and the block's sums are rounded. The product is the largest cost
    of a fit at a million rows, and float32 takes it in 1.1 us a row
    instead of 2.3 (D + r = 310); the top 14 eigenvalues of G moved by at
    most 4e-8 of their own value on blobs of 20,000 and 100,000 rows.
    What the rounding adds where G has no spectrum is why the server asks
    for it only above a threshold (see ``_FLOAT32_THRESHOLD``).
    """
    n_features = omega.shape[1]
    rank = 0 if B is None else B.shape[1]
    scale = np.sqrt(2.0 * eta / n_features)
    G = None
    W = np.empty(
        (min(CHUNK, X.shape[0]), n_features + rank),
        np.float32 if float32 else np.float64,
    )
    for block in row_blocks(X.shape[0], CHUNK):
        rows = W[: block.stop - block.start]
        random_fourier_features(
            X[block], omega, offset, scale=1.0, out=rows[:, :n_features]
        )
        if rank:
            np.multiply(B[block], np.sqrt(1.0 - eta) / scale, out=rows[:, n_features:])
        # numpy computes Wᵀ W with BLAS syrk (half the flops of a product)
        # and releases the GIL, so clients in threads run it in parallel;
        # scipy's syrk wrappers hold the GIL (two threads: no speed-up).
        part = rows.T @ rows
        if G is None:
            # The first block's product is the total so far: no zeroed
            # matrix to add it to (a client of a few rows spent most of
            # its step on (D + r)² passes).
            G = part.astype(np.float64, copy=False)
        else:
            G += part
    G *= scale**2
    return G


# Index arrays of a (D + r)-sized triangle: building them took 0.2 ms per
# client and iteration (10 s of a fit over 1,000 clients), taking 24 us.
@lru_cache(maxsize=4)
def _upper_triangle(dim, *, by_columns=False):
    """Flat positions of the upper triangle of a dim x dim matrix, row by
    row (the upload) or column by column (BLAS packed storage, as ``spmv``
    reads it)."""
    if by_columns:
        cols, rows = np.tril_indices(dim)
    else:
        rows, cols = np.triu_indices(dim)
    flat = rows * dim + cols
    flat.flags.writeable = False
    return flat


def replay_eigenvectors(X, replay, gamma, n_random_features):
    """Server: U_T(x), the eigenvector estimates after the recorded
    iterations, for any rows X (see :meth:`skfed.FederatedKernelKMeans.transform`).

    ``replay`` holds, per iteration, the seed of its random features, η_t,
    V_t / √μ_t and √(μ_t − η_t λ), as sent to the clients; a prefix of it
    gives the estimates after that many iterations.
    """
    U = B = None
    # Iterations outer, rows inner: one iteration's Ω is d x D, and all of
    # them together would be T times that.
    for seed, eta, basis, shrink in replay:
        U = projected_features(X, seed, eta, B, basis, gamma, n_random_features)
        B = U * shrink
    return U


def projected_features(X, seed, eta, B, basis, gamma, n_random_features):
    """W @ basis for the rows X, W the features of the iteration drawn from
    ``seed`` (see :func:`iteration_features`), computed block by block so
    that W itself is never held whole: a client's eigenpairs round and the
    replay of :meth:`skfed.FederatedKernelKMeans.transform` share it."""
    omega, offset = iteration_weights(seed, X.shape[1], n_random_features, gamma)
    U = np.empty((X.shape[0], basis.shape[1]))
    buffer = np.empty((min(_PROJECT_CHUNK, X.shape[0]), basis.shape[0]))
    for block in row_blocks(X.shape[0], _PROJECT_CHUNK):
        rows = None if B is None else B[block]
        W = iteration_features(X[block], omega, offset, eta, rows, buffer=buffer)
        np.matmul(W, basis, out=U[block])
    return U


# Two entries: the current iteration of this fit (and of one running beside
# it); each holds d · D + D floats.
@lru_cache(maxsize=2)
def iteration_weights(seed, n_features, n_random_features, gamma):
    """Ω and b of the iteration drawn from ``seed``, read-only.

    Every client draws the same ones; a process serving many clients draws
    them once per iteration (1,000 clients drew 50,000 times in a fit, about
    130 us each).
    """
    omega, offset = sample_fourier_weights(
        int(seed), n_features, n_random_features, gamma
    )
    omega.flags.writeable = offset.flags.writeable = False
    return omega, offset


def iteration_features(X, omega, offset, eta, B, *, buffer=None):
    """W = [√(η / D) A, √(1 − η) B] for rows X: the clients' step and the
    replay of :meth:`skfed.FederatedKernelKMeans.transform` share it, so that new
    points follow the training rows' arithmetic exactly.

    ``buffer`` (at least as many rows as X, D + r columns) is written instead
    of a new array: callers that map block after block reuse one, since a
    fresh 10 MB array per block cost its first writes again every time."""
    n_features = omega.shape[1]
    rank = 0 if B is None else B.shape[1]
    if buffer is None:
        W = np.empty((X.shape[0], n_features + rank))
    else:
        W = buffer[: X.shape[0]]
    # A = √2 cos(XΩ + b), the unnormalised map, written straight into W with
    # its √(η / D).
    random_fourier_features(
        X, omega, offset, scale=np.sqrt(2.0 * eta / n_features), out=W[:, :n_features]
    )
    if rank:
        np.multiply(B, np.sqrt(1.0 - eta), out=W[:, n_features:])
    return W


@client_step("kernel_kmeans.gram_matvec", sum_only=True)
def _gram_matvec_step(client, state, c):
    """Client step: one Lanczos product, W[m]ᵀ(W[m] c) (D + r_t floats up),
    or, for a block of Lanczos vectors (the rows of ``c``), one per row."""
    G = state["G"]
    if c.ndim == 1:
        if G is not None:
            return state, dspmv(c.shape[0], 1.0, G, c)
        W = state["W"]
        return state, W.T @ (W @ c)
    if G is not None:
        # BLAS has no packed product with several vectors; the packed G
        # read for the first row stays in cache for the others.
        return state, np.array([dspmv(row.shape[0], 1.0, G, row) for row in c])
    W = state["W"]
    return state, (c @ W.T) @ W


@client_step("kernel_kmeans.eigenpairs")
def _eigenpairs_step(client, state, message):
    """Client step: U_i[m] = W[m] v_i / √μ_i and B_{t+1}[m] = U √(μ − η_t λ).

    The server sends the kept eigenvectors already divided by √μ_i, and the
    shrunk scales √(μ_i − η_t λ).
    """
    basis, shrink = message
    state = dict(state)
    W = state.pop("W")
    if W is not None:
        U = W @ basis
    else:
        seed, eta, n_features = state.pop("features")
        U = projected_features(
            client.X, seed, eta, state.get("B"), basis, state["gamma"], n_features
        )
    state["G"] = None
    # U itself is not kept: U = B / √(μ − η_t λ) whenever it is needed (the
    # embedding), and a second n_m x r matrix was 192 MB over a million rows.
    state["B"] = U * shrink
    state["shrink"] = shrink
    return state, None


@client_step("kernel_kmeans.embedding")
def _embedding_step(client, state, scales):
    """Client step: H[m] = [√(μ_i + (1 − η_T) λ) U_i[m]], first s columns,
    with U[m] = B[m] / √(μ_i − η_T λ) (see :func:`_eigenpairs_step`)."""
    state = dict(state)
    s = scales.shape[0]
    B, shrink = state.pop("B"), state.pop("shrink")
    state["H"] = B[:, :s] * (scales / shrink[:s])
    return state, None


@client_step("kernel_kmeans.project", sum_only=True)
def _project_step(client, state, c_part):
    """Client step (no CEM): √(η/D) A[m]ᵀ c[m], D floats up (per row of a
    block of vectors)."""
    W = state["W"]
    return state, W.T @ c_part if c_part.ndim == 1 else c_part @ W


@client_step("kernel_kmeans.expand")
def _expand_step(client, state, y):
    """Client step (no CEM): √(η/D) A[m] y, n_m floats up (per row of a
    block)."""
    W = state["W"]
    return state, W @ y if y.ndim == 1 else y @ W.T


@client_step("kernel_kmeans.receive_embedding")
def _receive_embedding_step(client, state, H_part):
    """Client step (no CEM): keep the rows of H the server computed."""
    state = dict(state)
    state.pop("W", None)
    state["H"] = H_part
    return state, None


# --------------------------------------------------------------------------
# Server steps


def _triangle_to_matrix(total, dim):
    """Server: G = Σ_m W[m]ᵀW[m] from the sum of the clients' upper
    triangles (the federation adds them one client at a time)."""
    G = np.zeros((dim, dim))
    G[np.triu_indices(dim)] = total
    return G + np.triu(G, 1).T


def _eigh_descending(G):
    """Server: all eigenpairs of a symmetric matrix, largest first."""
    mu, V = eigh(G)
    return mu[::-1], V[:, ::-1]


def default_threshold(eigenvalues, n_components):
    """Server: λ, the (s+2)-th largest eigenvalue of G at t = 1.

    The paper takes the (k+2)-th, which lets no more than k + 1 pairs
    survive the proximal step; with s = ``n_components`` > k columns wanted
    the threshold must sit below the s-th. Zero when fewer eigenvalues are
    given: without CEM the matrix is N x N, and with N < s + 2 its (s+2)-th
    eigenvalue is that of G (rank <= N), 0.
    """
    eigenvalues = np.sort(eigenvalues)[::-1]
    if eigenvalues.shape[0] <= n_components + 1:
        return 0.0
    return float(max(eigenvalues[n_components + 1], 0.0))


def soft_threshold(mu, V, shift):
    """Server: the proximal step of DSPGD on the spectrum of G.

    Keeps the pairs with μ_i > η_t λ (``shift``). Returns what clients need
    to form U and B_{t+1}: the kept eigenvectors divided by √μ_i, the shrunk
    scales √(μ_i − η_t λ), and the kept μ.
    """
    keep = _above(mu, shift)
    mu, V = mu[keep], V[:, keep]
    V = V * signs(V)
    return V / np.sqrt(mu), np.sqrt(mu - shift), mu


def signs(V):
    """Server: ±1 per column making its entry of largest magnitude positive
    (:func:`skfed._numerics._signs.vector_signs`, kernel PCA's convention).

    An eigenvector's sign is arbitrary; Lanczos' depends on how the start
    vector projects on it, which rounding can flip for a small eigenvalue,
    and secure aggregation rounds the sums it is computed from. Fixing it
    keeps the fit the same under reordered rows, renamed clients or
    masking.
    """
    return vector_signs(V)


def _above(mu, shift):
    """Server: which eigenvalues exceed the shift and are not roundoff.

    With λ = 0 (e.g. a rank-one kernel) eigenvalues of order 1e-16 would
    otherwise pass as signal.
    """
    floor = ROUNDOFF * max(float(np.max(mu, initial=0.0)), 0.0)
    return mu > max(shift, floor)


def _converged(history, s, tol):
    """Server: did each of the first s kernel-eigenvalue estimates move by
    at most ``tol`` times its own value in the last iteration?

    Relative to each value, not to the largest: the s-th eigenvalue of a
    kernel matrix is often 100 times smaller than the first, and its
    direction is the one still moving when the top ones have settled.
    """
    if len(history) < 2 or tol == 0:
        return False
    prev, cur = history[-2][:s], history[-1][:s]
    if prev.shape != cur.shape or cur.shape[0] == 0:
        return False
    return bool(np.all(np.abs(cur - prev) <= tol * np.abs(cur)))
