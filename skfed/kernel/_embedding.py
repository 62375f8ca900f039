"""The kernel PCA embedding of shared random features: the top eigenpairs
of the features' centred covariance from the clients' summed statistics
(:func:`feature_covariance_basis`), and the rows' embedding H = Z V − z̄ᵀV
(:func:`feature_embedding`). Kernel PCA's random-feature solver and kernel
k-means' one-shot protocol share both.
"""

import numpy as np
from scipy.linalg import eigh

from .._numerics._signs import vector_signs
from ._private_features import FEATURE_CHUNK, feature_blocks, symmetric_from_upper

__all__ = ["feature_covariance_basis", "feature_embedding"]

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
