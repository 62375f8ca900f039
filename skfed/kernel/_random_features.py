"""Random Fourier features (Rahimi & Recht, 2007) and the federated
average-distance kernel width."""

import numpy as np
from sklearn.utils import check_random_state


def sample_fourier_weights(
    random_state, n_features, n_components, gamma, *, kernel="rbf", dtype=np.float64
):
    """Draw the frequencies Ω and phases b of a random Fourier feature map.

    Parameters
    ----------
    random_state : int or RandomState
        Shared seed: every client drawing with the same seed gets the same map.
    n_features : int
        d, the input dimension.
    n_components : int
        D, the number of random features.
    gamma : float
        Kernel parameter: ``exp(-gamma ||x - y||^2)`` for ``"rbf"``,
        ``exp(-gamma ||x - y||_1)`` for ``"laplacian"``.
    kernel : {"rbf", "laplacian"}, default="rbf"
        Shift-invariant kernel whose spectral measure Ω is drawn from:
        Gaussian N(0, 2γ I) for ``"rbf"``, Cauchy with scale γ for
        ``"laplacian"``.
    dtype : dtype, default=np.float64

    Returns
    -------
    omega : ndarray of shape (n_features, n_components)
    offset : ndarray of shape (n_components,)
        Uniform on [0, 2π).
    """
    rng = check_random_state(random_state)
    if kernel == "rbf":
        omega = np.sqrt(2 * gamma) * rng.standard_normal((n_features, n_components))
    elif kernel == "laplacian":
        omega = gamma * rng.standard_cauchy((n_features, n_components))
    else:
        raise ValueError(f"kernel must be 'rbf' or 'laplacian', got {kernel!r}.")
    offset = rng.uniform(0, 2 * np.pi, size=n_components)
    return omega.astype(dtype, copy=False), offset.astype(dtype, copy=False)


def random_fourier_features(X, omega, offset, *, scale=None):
    """Map rows of X to ``scale * cos(X Ω + b)``.

    Parameters
    ----------
    X : {ndarray, sparse matrix} of shape (n_samples, n_features)
    omega, offset : ndarrays
        From :func:`sample_fourier_weights`.
    scale : float, default=None
        ``sqrt(2 / D)`` when omitted, so that ``Z Zᵀ`` estimates the kernel
        matrix (as ``sklearn.kernel_approximation.RBFSampler``); pass
        ``sqrt(2)`` for the unnormalised map with ``E[A Aᵀ / D] = K``.

    Returns
    -------
    Z : ndarray of shape (n_samples, n_components)
    """
    if scale is None:
        scale = np.sqrt(2.0 / omega.shape[1])
    Z = X @ omega
    Z += offset
    np.cos(Z, out=Z)
    Z *= scale
    return Z


def moments_step(client, state, message):
    """Client step: (n_m, Σ x, Σ ‖x‖²) of the client's rows.

    Upload: d + 2 floats. From the sums of all clients the server gets the
    mean squared interpoint distance without seeing any point.
    """
    X = client.X
    sq = X.multiply(X).sum() if hasattr(X, "multiply") else np.einsum("ij,ij->", X, X)
    return state, (
        float(X.shape[0]),
        np.asarray(X.sum(axis=0), dtype=np.float64).ravel(),
        float(sq),
    )


def gamma_from_moments(uploads):
    """Server step: γ = N² / (2 Σ_ij ‖x_i − x_j‖²) from client moments.

    Uses Σ_ij ‖x_i − x_j‖² = 2 N Σ‖x‖² − 2 ‖Σ x‖², so γ is one over twice the
    mean squared distance over all ordered pairs.

    Raises
    ------
    ValueError
        If every point is the same (the distance is zero).
    """
    n = sum(u[0] for u in uploads)
    total = sum(u[1] for u in uploads)
    sq = sum(u[2] for u in uploads)
    pair_sum = 2 * n * sq - 2 * float(total @ total)
    if not pair_sum > 1e-12 * max(n * sq, 1e-300):
        raise ValueError(
            "All samples are identical, so the average-distance kernel width "
            "is undefined; set the kernel width explicitly or check the data."
        )
    return n * n / (2 * pair_sum)
