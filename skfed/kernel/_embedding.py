"""The kernel PCA embedding of shared random features: the top eigenpairs
of the features' centred covariance from the clients' summed statistics
(:func:`feature_covariance_basis`; from summed Nyström sketches of it,
:func:`sketched_covariance_basis`), and the rows' embedding H = Z V − z̄ᵀV
(:func:`feature_embedding`). Kernel PCA's random-feature solver and kernel
k-means' one-shot protocol share them.
"""

import numpy as np
from scipy.linalg import LinAlgError, cholesky, eigh, solve_triangular, svd

from .._numerics._signs import vector_signs
from ._private_features import (
    FEATURE_CHUNK,
    feature_blocks,
    feature_norm_bound,
    symmetric_from_upper,
)

__all__ = [
    "feature_covariance_basis",
    "feature_embedding",
    "sketched_covariance_basis",
]

# Eigenvalues below this fraction of the features' total square are
# round-off.
_ROUNDOFF = 1e-10


def feature_covariance_basis(total, n_samples, n_random_features, n_components):
    """Server: the top eigenpairs of the features' covariance C from the
    clients' summed statistics.

    Parameters
    ----------
    total : ndarray of shape (D(D+1)/2 + D,)
        Σ_m of the clients' uploads: the upper triangle of Σ_m Z[m]ᵀZ[m],
        row by row, then Σ_m Z[m]ᵀ1. Only this sum is read, so any split
        of the rows over clients gives the same result (up to the rounding
        of the sum).
    n_samples : int
        N (public protocol metadata).
    n_random_features : int
        D.
    n_components : int
        s, the eigenpairs wanted.

    Returns
    -------
    eigenvalues : ndarray of shape (s',)
        The largest eigenvalues of C, s' ≤ s of them above round-off; when
        none is (every sample has the same features), one 0 with a zero
        eigenvector, so that the embedding has a column, 0 on every row.
    basis : ndarray of shape (D, s')
        V, their eigenvectors, each signed so that its entry of largest
        magnitude is positive (reordered rows or renamed clients give the
        same model).
    shift : ndarray of shape (s',)
        z̄ᵀV, which centres the embedding.
    """
    D = n_random_features
    n_upper = D * (D + 1) // 2
    gram = symmetric_from_upper(total[:n_upper], D)
    mean = total[n_upper:] / n_samples
    # Centred: k-means is blind to a shift of H, but not to which
    # directions are kept; uncentred, the first would be mostly z̄ itself
    # (and kernel PCA's components are those of the centred features).
    cov = gram - n_samples * np.outer(mean, mean)
    s = min(n_components, D)
    mu, V = eigh(cov, subset_by_index=(D - s, D - 1))
    mu, V = mu[::-1], V[:, ::-1]
    # Round-off relative to the features' total square, trace(Σ ZᵀZ) ≈ N
    # (‖z(x)‖² ≈ 1), not to the largest eigenvalue of C, which is itself
    # round-off when every row has the same features.
    keep = mu > _ROUNDOFF * np.trace(gram)
    if not keep.any():
        # No direction in which the features vary: one zero column, so that
        # every row of H is exactly 0 and k-means puts them in one cluster
        # (a round-off eigenvector would scatter them by 1e-17).
        return np.zeros(1), np.zeros((D, 1)), np.zeros(1)
    mu, V = mu[keep], V[:, keep]
    V = V * vector_signs(V)
    return mu, V, mean @ V


def sketched_covariance_basis(total, n_samples, test, n_components):
    """Server: the top eigenpairs of the Nyström approximation of the
    features' covariance C from the clients' summed sketches.

    Parameters
    ----------
    total : ndarray of shape (D l + D,)
        Σ_m of the clients' uploads: Σ_m Z[m]ᵀZ[m] Ω (D x l, row by row),
        then Σ_m Z[m]ᵀ1. Only this sum is read.
    n_samples : int
        N (public protocol metadata).
    test : ndarray of shape (D, l)
        Ω, the sketch's test matrix
        (:func:`~skfed.kernel._sketch.sketch_matrix`).
    n_components : int
        s, the eigenpairs wanted (at most l are available).

    Returns
    -------
    eigenvalues, basis, shift
        As :func:`feature_covariance_basis`'s, of C ≈ (CΩ)(ΩᵀCΩ)⁺(CΩ)ᵀ.
    """
    D, sketch_size = test.shape
    n_sketch = D * sketch_size
    mean = total[n_sketch:] / n_samples
    # Centred exactly: (Σ ZᵀZ − N z̄ z̄ᵀ) Ω.
    Y = total[:n_sketch].reshape(D, sketch_size) - n_samples * np.outer(
        mean, mean @ test
    )
    # Tropp et al. (2017), Algorithm 3: the Nyström approximation of the
    # shifted C + νI, whose core ΩᵀY_ν is positive definite (a Cholesky
    # factor exists even when C has rank below l), then the shift removed
    # from the eigenvalues. ν is round-off of Y's scale; if the centring's
    # round-off still leaves the core indefinite, a larger ν is taken.
    nu = np.sqrt(D) * np.spacing(np.linalg.norm(Y, 2))
    for _ in range(8):
        shifted = Y + nu * test
        core = test.T @ shifted
        try:
            factor = cholesky((core + core.T) / 2, lower=False)
            break
        except LinAlgError:
            nu = max(nu * 100, np.finfo(float).tiny)
    else:  # pragma: no cover - a core indefinite by more than 1e12 ν
        raise LinAlgError("the sketch's core matrix is not positive definite")
    # E = Y_ν R⁻¹ (core = RᵀR): E Eᵀ = Y_ν (ΩᵀY_ν)⁻¹ Y_νᵀ.
    E = solve_triangular(factor, shifted.T, trans="T", lower=False).T
    U, sigma, _ = svd(E, full_matrices=False)
    s = min(n_components, sketch_size)
    mu, V = np.maximum(sigma[:s] ** 2 - nu, 0.0), U[:, :s]
    # Round-off relative to the features' total square, N R² (‖z(x)‖ ≤ R
    # for every x, 1 for even D), as trace(Σ ZᵀZ) is for the triangle.
    keep = mu > _ROUNDOFF * n_samples * feature_norm_bound(D) ** 2
    if not keep.any():
        return np.zeros(1), np.zeros((D, 1)), np.zeros(1)
    mu, V = mu[keep], V[:, keep]
    V = V * vector_signs(V)
    return mu, V, mean @ V


def feature_embedding(X, omega, offset, basis, shift):
    """H = Z V − z̄ᵀV for the rows X, Z = √(2/D) cos(X Ω + b) a block of
    rows at a time (Z is never held whole). The clients' embedding steps and
    the estimators' ``transform`` (:class:`~skfed.FederatedKernelKMeans`,
    :class:`~skfed.DistributedKernelPCA`) share it, so that new points
    follow the training rows' arithmetic exactly."""
    H = np.empty((X.shape[0], basis.shape[1]))
    for block, rows in feature_blocks(X, omega, offset, chunk=FEATURE_CHUNK):
        np.matmul(rows, basis, out=H[block])
    H -= shift
    return H
