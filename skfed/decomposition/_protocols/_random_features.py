"""Kernel PCA from one summed statistic of shared random features (the
``solver="random_features"`` of :class:`~skfed.DistributedKernelPCA`, and
its differentially private path).

The server draws one map of D paired random Fourier features z(x) (a
shared seed, see :func:`~skfed.kernel._private_features.paired_fourier_map`).
Every client uploads, once, the upper triangle of Z[m]ᵀZ[m] and Z[m]ᵀ1;
from their sums the server forms the features' centred covariance

    C = Σ_m Z[m]ᵀZ[m] − N z̄ z̄ᵀ,   z̄ = Σ_m Z[m]ᵀ1 / N,

and keeps its top k eigenvectors V. Z Zᵀ approximates the kernel matrix,
so the N x N side of the centred Z − 1 z̄ᵀ approximates the centred kernel
matrix, and (z(x) − z̄)ᵀ V is the kernel PCA projection of the
random-feature kernel; no row of X and no representative leaves a client.

Under differential privacy each client clips its feature rows to their
norm bound (a no-op but for rounding), adds Gaussian noise to the
triangle and to Z[m]ᵀ1 (two releases, replace-one sensitivities from D
alone) and appends its row count n_m, which is public, before uploading.
The rest is post-processing.
"""

from functools import partial
from typing import NamedTuple

import numpy as np

from ..._engine._protocol import client_step
from ..._numerics._seeds import SEED_MAX
from ...kernel._embedding import feature_covariance_basis, feature_embedding
from ...kernel._private_features import (
    feature_gram_statistics,
    feature_statistics_counting_rows,
    paired_fourier_map,
    private_statistics,
)
from ...kernel._random_features import (
    FEATURE_REMEDY,
    feature_min_rows,
)
from ...privacy import concatenate_releases, gaussian_noise
from ...privacy._refusal import require_distinct_rows
from ._kernel_width import server_gamma

__all__ = [
    "FeaturePCAResult",
    "feature_projection",
    "run_feature_pca",
    "statistics_step",
]


class FeaturePCAResult(NamedTuple):
    """What :func:`run_feature_pca` returns.

    Attributes
    ----------
    components : ndarray of shape (D, k')
        V, the top eigenvectors of C (k' ≤ k above round-off).
    offset : ndarray of shape (k',)
        z̄ᵀV: a projection is z(x)ᵀV − offset.
    eigenvalues : ndarray of shape (k',)
        The top eigenvalues of C: the energy each component captures on the
        training data (noised under privacy).
    total_energy : float
        trace(C), the centred features' total energy.
    seed : int
        The seed of the shared map.
    gamma : float
        The kernel's γ.
    client_ids : list
    """

    components: np.ndarray
    offset: np.ndarray
    eigenvalues: np.ndarray
    total_energy: float
    seed: int
    gamma: float
    client_ids: list


def run_feature_pca(
    fed,
    *,
    n_components,
    n_random_features,
    kernel,
    gamma,
    median_factor,
    random_state,
):
    """Random-feature kernel PCA on an open federation.

    One round, :data:`~skfed.kernel._private_features.FEATURE_STATISTICS`
    (under privacy :data:`~skfed.kernel._private_features.PRIVATE_STATISTICS`,
    :func:`~skfed.kernel._private_features.private_statistics`): down the
    seed and γ (2 floats), up D(D+1)/2 + D floats per client (one more, the
    public row count, under privacy), sum-only.

    Parameters
    ----------
    fed : Federation
        Open federation (inside its ``with`` block).
    n_components : int
        k.
    n_random_features : int
        D.
    kernel : {"rbf", "laplacian"}
    gamma : float or None
        γ; None takes the median heuristic (one ``"median sample"`` round,
        as the representatives' solver; under privacy the caller refuses
        it before the fit).
    median_factor : float
        As in :class:`~skfed.DistributedKernelPCA`.
    random_state : RandomState
        The server's generator.

    Returns
    -------
    result : FeaturePCAResult
    """
    seed = int(random_state.randint(SEED_MAX))
    gamma = float(server_gamma(fed, kernel, gamma, median_factor, random_state))
    message = (seed, gamma, kernel)
    if fed.accountant is None:
        refuse = {}
        if fed.raw_rows == "refuse":
            refuse = {"min_rows": feature_min_rows(n_random_features)}
        total = fed.run_round(
            feature_statistics_counting_rows(n_random_features),
            partial(statistics_step, n_features=n_random_features, **refuse),
            message,
        )
        n_samples = fed.n_samples
    else:
        total, n_samples = private_statistics(
            fed, statistics_step, message, n_random_features
        )
    eigenvalues, components, offset = feature_covariance_basis(
        total, n_samples, n_random_features, n_components
    )
    D = n_random_features
    upper = total[: D * (D + 1) // 2]
    mean = total[D * (D + 1) // 2 :] / n_samples
    # trace(Σ Z ᵀZ) is the triangle's diagonal: row i of the triangle starts
    # at entry i D − i (i − 1) / 2.
    rows = np.arange(D)
    trace = float(upper[rows * D - rows * (rows - 1) // 2].sum())
    total_energy = trace - n_samples * float(mean @ mean)
    return FeaturePCAResult(
        components=components,
        offset=offset,
        eigenvalues=eigenvalues,
        total_energy=float(total_energy),
        seed=seed,
        gamma=gamma,
        client_ids=list(fed.client_ids),
    )


def feature_projection(X, seed, n_random_features, gamma, kernel, components, offset):
    """(z(x) − z̄)ᵀ V for the rows X, a block of rows at a time (the
    estimator's transform): the random features' embedding with this
    kernel's map."""
    omega, offset_map = paired_fourier_map(
        seed, X.shape[1], n_random_features, gamma, kernel
    )
    return feature_embedding(X, omega, offset_map, components, offset)


# --------------------------------------------------------------------------
# Client step


@client_step("kernel_pca.feature_statistics", sum_only=True)
def statistics_step(client, state, message, *, n_features, noise=None, min_rows=None):
    """Client: the upper triangle of Z[m]ᵀZ[m] (row by row), then Z[m]ᵀ1:
    D(D+1)/2 + D floats.

    Under differential privacy ``noise`` is ``(radius, gram_std,
    sum_std)``: rows of Z[m] clipped to the norm bound, Gaussian noise
    added to the triangle and to Z[m]ᵀ1 (two releases, drawn from fresh
    entropy), and the public row count n_m appended without noise.

    With ``min_rows`` (``raw_rows="refuse"``) a client of fewer distinct
    rows raises ``RawRowsRefused`` (a ``ValueError``) and uploads nothing.
    """
    seed, gamma, kernel = message
    X = client.X
    if min_rows:
        require_distinct_rows(X, min_rows, "random-feature statistics", FEATURE_REMEDY)
    omega, offset = paired_fourier_map(seed, X.shape[1], n_features, gamma, kernel)
    radius = None if noise is None else noise[0]
    upper, sums = feature_gram_statistics(X, omega, offset, radius=radius)
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
