"""The one-shot protocol of federated kernel k-means: one summed statistic of
one shared random-feature map, then the distributed coreset k-means.

The server draws ONE map of D orthogonal random Fourier features z(x) (a
shared seed). Every client uploads, once, the upper triangle of its Gram
matrix Z[m]ᵀZ[m] and its feature sum Z[m]ᵀ1; the server needs only their
sums over the clients, from which it forms the covariance of the features,

    C = Σ_m Z[m]ᵀZ[m] − N z̄ z̄ᵀ,   z̄ = Σ_m Z[m]ᵀ1 / N,

and takes its top s eigenvectors V. C is the D x D side of the centred
feature matrix (Z − 1 z̄ᵀ), whose N x N side approximates the centred kernel
matrix; so H = (Z − 1 z̄ᵀ) V = U Λ^½ is the top-s kernel PCA embedding of
the random-feature kernel. The server sends V and the shift z̄ᵀV, each
client forms its rows of H, and k-means runs on H as with DSPGD.

Unlike DSPGD (see :mod:`skfed.cluster._protocols._kernel_kmeans`), which
solves an eigen-problem of fresh features every iteration, the Gram sums are
paid once: D(D+1)/2 + D floats up per client in all.

The sketched statistic (``sketch_size`` l) replaces the triangle by a
Nyström sketch of the same sum, so that D may grow for the same floats:
with a Gaussian test matrix Ω (D x l) that server and clients draw from the
map's seed, every client uploads Y[m] = Z[m]ᵀ(Z[m] Ω) and Z[m]ᵀ1, D l + D
floats, still linear in its rows (one sum-only round). The server centres
the sum exactly, C Ω = Σ_m Y[m] − N z̄ (z̄ᵀΩ), and takes the top eigenpairs
of the Nyström approximation C ≈ (CΩ)(ΩᵀCΩ)⁺(CΩ)ᵀ, computed with a small
shift, a Cholesky factor and a thin SVD (Tropp, Yurtsever, Udell and
Cevher, "Fixed-rank approximation of a positive-semidefinite matrix from
streaming data", NeurIPS 2017). The approximation is exact when C has rank
at most l, and close when C's spectrum decays past its top l eigenvalues.
The sketched features are those of the rows x − x̄ around the global mean
x̄ (one more sum-only round, ``"kernel centre"``: n_m and Σ x, d + 1 floats
up per client): a translation of the data rotates the features of raw rows
(the triangle's eigenvectors rotate with them, the model does not change),
but a fixed Ω would then sketch a rotated matrix, a different draw; around
x̄ the features, and so the model, do not depend on where the data sit.

Under differential privacy (the federation has an accountant) each client
clips its features to their norm bound and noises its triangle and
[Z[m]ᵀ1, n_m] (:func:`~skfed.kernel._private_features.private_statistics`),
and the private Lloyd of :mod:`skfed.cluster._protocols._kernel_kmeans_private`
replaces the coreset k-means, whose clients would upload rows of H.

:func:`run_one_shot` drives the rounds; the client steps follow it. The
map, the sketch's test matrix and the server's eigenpairs are
:mod:`skfed.kernel`'s (``_private_features``, ``_sketch``, ``_embedding``);
kernel PCA's random-feature solver draws the same map and takes the
triangle's eigenpairs the same way.
"""

import warnings
from functools import partial
from typing import NamedTuple

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..._engine._protocol import client_step
from ..._engine._rounds import sum_only
from ..._numerics._seeds import SEED_MAX
from ...kernel import federated_gamma
from ...kernel._embedding import (
    feature_covariance_basis,
    feature_embedding,
    sketched_covariance_basis,
)
from ...kernel._private_features import (
    FEATURE_STATISTICS,
    PRIVATE_STATISTICS,
    centred_map,
    feature_blocks,
    feature_gram_statistics,
    feature_norm_bound,
    feature_statistics_counting_rows,
    paired_fourier_map,
    private_statistics,
)
from ...kernel._random_features import (
    FEATURE_REMEDY,
    count_and_sum_raw_rows,
    count_and_sum_step,
    feature_min_rows,
)
from ...kernel._sketch import sketch_matrix
from ...privacy import concatenate_releases, gaussian_noise
from ...privacy._refusal import MIN_ROWS, require_distinct_rows
from ._kernel_kmeans import (
    CHUNK,
    EMBEDDING,
    KERNEL_WIDTH,
    cluster_embedding,
    embedding_kmeans_rounds,
)
from ._kernel_kmeans_private import private_kmeans, private_rounds

__all__ = [
    "KERNEL_CENTRE",
    "SKETCH_STATISTICS",
    "OneShotResult",
    "one_shot_rounds",
    "run_one_shot",
]


# The rounds (see run_one_shot); the kernel width's, when not given, and
# the embedding are DSPGD's (skfed.cluster._protocols._kernel_kmeans).
# With a sketch: the data's mean, then the sketched statistics around it.
KERNEL_CENTRE = sum_only("kernel centre", rows=count_and_sum_raw_rows)
SKETCH_STATISTICS = sum_only("random feature statistics")
# Without, skfed.kernel's FEATURE_STATISTICS: the upper triangle of
# Σ_m Z[m]ᵀZ[m] and Z[m]ᵀ1 (the ledger counts a client whose statistics
# give its rows away, see feature_statistics_counting_rows), or under
# differential privacy its PRIVATE_STATISTICS, both noised (two releases;
# skfed.kernel's private_statistics runs it).


def one_shot_rounds(
    *, gamma, secure_aggregation, sketch, private, refine_iter, row_free=False
):
    """The rounds :func:`run_one_shot` runs, a repeated round once per run
    (the refinement at most ``refine_iter`` times); ``row_free`` under
    ``raw_rows="refuse"`` without privacy."""
    if sketch:
        statistics = (KERNEL_CENTRE, SKETCH_STATISTICS)
    elif private:
        statistics = (PRIVATE_STATISTICS,)
    else:
        statistics = (FEATURE_STATISTICS,)
    if private:
        clustering = private_rounds(refine_iter)
    else:
        clustering = embedding_kmeans_rounds(refine_iter, row_free=row_free)
    return (
        *(KERNEL_WIDTH.run(secure_aggregation) if gamma is None else ()),
        *statistics,
        EMBEDDING,
        *clustering,
    )


class OneShotResult(NamedTuple):
    """What :func:`run_one_shot` returns.

    Attributes
    ----------
    gamma : float
        The RBF kernel's γ.
    eigenvalues : ndarray of shape (n_components,)
        The top eigenvalues of C, estimates of the centred kernel matrix's.
    labels : ndarray of shape (n_samples,)
        Cluster of each training sample (kept on the clients; gathered).
    embedding : ndarray of shape (n_samples, n_components)
        H of the training samples (kept on the clients; gathered).
    coreset : CoresetKMeansResult
        The k-means on H (centers, inertia, refinement rounds).
    seed : int
        The seed of the shared random features.
    basis : ndarray of shape (n_random_features, n_components)
        V, as sent to the clients.
    shift : ndarray of shape (n_components,)
        z̄ᵀV, as sent to the clients: H = Z V − shift.
    client_ids : list
        The clients that took part.
    center : ndarray of shape (n_features,) or None
        x̄, the point the sketched features are taken around (None for the
        triangle, whose features are those of the raw rows).
    """

    gamma: float
    eigenvalues: np.ndarray
    labels: np.ndarray
    embedding: np.ndarray
    coreset: tuple
    seed: int
    basis: np.ndarray
    shift: np.ndarray
    client_ids: list
    center: np.ndarray = None


def run_one_shot(
    fed,
    *,
    n_clusters,
    n_components,
    random_state,
    coreset_size,
    n_init,
    n_random_features,
    gamma,
    refine_iter,
    sketch_size=None,
):
    """One-shot federated kernel k-means on an open federation.

    Rounds: ``"kernel width"`` (with ``gamma=None``, d + 2 floats up per
    client), ``"random feature statistics"`` (down the seed and γ, up
    D(D+1)/2 + D; sketched, first ``"kernel centre"`` (up d + 1), then down
    the seed, γ, l and x̄, up D l + D),
    ``"embedding"`` (down V and z̄ᵀV, D s + s), then the
    coreset k-means rounds on H (see
    :func:`~skfed.cluster._protocols._coreset.federated_coreset_kmeans`).

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
    n_random_features, gamma, refine_iter
        As in :class:`~skfed.FederatedKernelKMeans`.
    sketch_size : int or None, default=None
        l, the columns of the sketch's test matrix; None uploads the
        triangle. Never set under differential privacy (the estimator
        refuses it there).

    Returns
    -------
    result : OneShotResult
    """
    # Drawn first, so that the map does not depend on whether γ is given.
    seed = int(random_state.randint(SEED_MAX))
    if gamma is None:
        # Each client's mean and spread, or their sums when masked.
        gamma = federated_gamma(fed, KERNEL_WIDTH)
    else:
        gamma = float(gamma)

    # Under raw_rows="refuse" each client checks, before it uploads, that
    # its statistics come from enough distinct rows (see feature_min_rows).
    refusing = fed.raw_rows == "refuse"
    refuse = {"min_rows": MIN_ROWS} if refusing else {}
    gram_refuse = {}
    if refusing:
        gram_refuse = {"min_rows": feature_min_rows(n_random_features)}
    center = None
    if sketch_size is not None:
        n_total, x_total = fed.run_round(
            KERNEL_CENTRE, partial(count_and_sum_step, **refuse)
        )
        center = np.asarray(x_total, dtype=np.float64) / n_total
        # Linear in each client's rows like the triangle, and read only as
        # a sum by the server step: sum-only as well (and may be masked).
        total = fed.run_round(
            SKETCH_STATISTICS,
            partial(_sketch_step, n_features=n_random_features, **gram_refuse),
            (seed, gamma, sketch_size, center),
        )
        eigenvalues, basis, shift = sketched_covariance_basis(
            total,
            fed.n_samples,
            sketch_matrix(seed, n_random_features, sketch_size),
            n_components,
        )
    else:
        if fed.accountant is None:
            # The server step below reads nothing but the sum of the
            # clients' statistics, so the round is sum-only (and may be
            # masked).
            total = fed.run_round(
                feature_statistics_counting_rows(n_random_features),
                partial(statistics_step, n_features=n_random_features, **gram_refuse),
                (seed, gamma),
            )
            n_samples = fed.n_samples
        else:
            total, n_samples = private_statistics(
                fed, statistics_step, (seed, gamma), n_random_features
            )
        eigenvalues, basis, shift = feature_covariance_basis(
            total, n_samples, n_random_features, n_components
        )
    if eigenvalues.shape[0] < n_components:
        warnings.warn(
            f"Only {eigenvalues.shape[0]} eigenvalue(s) of the random "
            "features' covariance stand above round-off (the data has too few "
            f"distinct rows); the embedding has {eigenvalues.shape[0]} "
            f"column(s) instead of n_components={n_components}. Lower "
            "n_components.",
            ConvergenceWarning,
            stacklevel=3,
        )
    fed.run_round(EMBEDDING, _embedding_step, (basis, shift))

    if fed.accountant is None:
        coreset = cluster_embedding(
            fed,
            n_clusters=n_clusters,
            n_components=basis.shape[1],
            coreset_size=coreset_size,
            random_state=random_state,
            n_init=n_init,
            refine_iter=refine_iter,
        )
    else:
        coreset = private_kmeans(
            fed,
            n_clusters=n_clusters,
            eigenvalues=eigenvalues,
            shift=shift,
            n_samples=n_samples,
            radius=feature_norm_bound(n_random_features),
            n_iter=refine_iter,
            n_init=n_init,
            random_state=random_state,
        )
    return OneShotResult(
        gamma=gamma,
        eigenvalues=eigenvalues,
        labels=None
        if not fed.per_row_allowed
        else fed.assemble("coreset", "labels", fed.n_samples),
        embedding=None
        if not fed.per_row_allowed
        else fed.assemble("kernel_kmeans", "H", fed.n_samples),
        coreset=coreset,
        seed=seed,
        basis=basis,
        shift=shift,
        client_ids=list(fed.client_ids),
        center=center,
    )


# --------------------------------------------------------------------------
# Client steps


@client_step("kernel_kmeans.one_shot_statistics", sum_only=True)
def statistics_step(client, state, message, *, n_features, noise=None, min_rows=None):
    """Client step: the upper triangle of Z[m]ᵀZ[m] (row by row) followed by
    Z[m]ᵀ1, D(D+1)/2 + D floats in one vector, so that the server's sum over
    clients is a plain vector sum.

    The message: the seed of the shared map and γ. Z[m] is not kept (n_m D
    floats): the embedding round recomputes it from the seed.

    Under differential privacy ``noise`` is ``(radius, gram_std,
    sum_std)``: every row of Z[m] is clipped to the features' norm bound
    (a no-op but for rounding), the client adds Gaussian noise of
    ``gram_std`` to the triangle and of ``sum_std`` to Z[m]ᵀ1 (two
    releases, drawn from fresh entropy), and its row count n_m, public,
    follows unnoised: D(D+1)/2 + D + 1 floats.

    With ``min_rows`` (``raw_rows="refuse"``) a client of fewer distinct
    rows raises ``RawRowsRefused`` (a ``ValueError``) and uploads nothing.
    """
    seed, gamma = message
    X = client.X
    if min_rows:
        require_distinct_rows(X, min_rows, "random-feature statistics", FEATURE_REMEDY)
    omega, offset = paired_fourier_map(seed, X.shape[1], n_features, gamma)
    radius = None if noise is None else noise[0]
    upper, sums = feature_gram_statistics(X, omega, offset, radius=radius, chunk=CHUNK)
    state = dict(state or {})
    state["one_shot_map"] = (int(seed), float(gamma), n_features, None)
    if noise is None:
        return state, np.concatenate([upper, sums])
    _, gram_std, sum_std = noise
    # n_m is public (replace-one adjacency): it follows the sums unnoised.
    return state, concatenate_releases(
        [
            gaussian_noise(upper, gram_std),
            gaussian_noise(sums, sum_std),
            [float(X.shape[0])],
        ]
    )


@client_step("kernel_kmeans.one_shot_sketch", sum_only=True)
def _sketch_step(client, state, message, *, n_features, min_rows=None):
    """Client step: Y[m] = Z[m]ᵀ(Z[m] Ω) (D x l, row by row) followed by
    Z[m]ᵀ1, D l + D floats in one vector, so that the server's sum over
    clients is a plain vector sum.

    The message: the seed of the shared map, γ, l and the global mean x̄,
    around which the features are taken
    (:func:`~skfed.kernel._private_features.centred_map`); Ω comes from the
    seed (:func:`~skfed.kernel._sketch.sketch_matrix`). Z[m] is held a block of rows at
    a time and not kept: the embedding round recomputes it from the seed.
    ``min_rows`` as in :func:`statistics_step`.
    """
    seed, gamma, sketch_size, center = message
    X = client.X
    if min_rows:
        require_distinct_rows(X, min_rows, "random-feature sketch", FEATURE_REMEDY)
    omega, offset = centred_map(seed, X.shape[1], n_features, gamma, center)
    test = sketch_matrix(seed, n_features, sketch_size)
    sketch = np.zeros((n_features, sketch_size))
    sums = np.zeros(n_features)
    for _, rows in feature_blocks(X, omega, offset, chunk=CHUNK):
        # Zᵀ(Z Ω): 2 n_m D l flops, never the D x D Gram matrix.
        sketch += rows.T @ (rows @ test)
        sums += rows.sum(axis=0)
    state = dict(state or {})
    state["one_shot_map"] = (int(seed), float(gamma), n_features, center)
    return state, np.concatenate([sketch.ravel(), sums])


@client_step("kernel_kmeans.one_shot_embedding")
def _embedding_step(client, state, message):
    """Client step: keep H[m] = Z[m] V − z̄ᵀV, the client's rows of the
    embedding (read by the coreset k-means as ``("kernel_kmeans", "H")``)."""
    basis, shift = message
    state = dict(state)
    seed, gamma, n_features, center = state.pop("one_shot_map")
    omega, offset = centred_map(seed, client.X.shape[1], n_features, gamma, center)
    state["H"] = feature_embedding(client.X, omega, offset, basis, shift)
    return state, None
