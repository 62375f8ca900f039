"""Explicit feature maps z with z(x)ᵀz(y) ≈ κ(x, y), drawn from a shared
generator so that every party drawing from the same seed applies the same
map: random Fourier features for the shift-invariant kernels, TensorSketch
for the polynomial kernel, the coordinates themselves for the linear one.
"""

from ._random_features import random_fourier_features, sample_fourier_weights
from ._sketch import sample_tensor_sketch, tensor_sketch

__all__ = ["explicit_feature_map"]


def explicit_feature_map(
    shared, n_features, kernel, gamma, degree, coef0, n_random_features, dtype
):
    """The map z of ``kernel`` drawn from the generator ``shared``.

    Parameters
    ----------
    shared : RandomState
        The generator every party draws the same map from (advanced by the
        draw, so that what the caller draws next is shared too).
    n_features : int
        d, the data's features.
    kernel : {"rbf", "laplacian", "poly", "linear"}
    gamma, degree, coef0 : float, int, float
        The kernel's parameters.
    n_random_features : int
        D, the map's dimension for "rbf", "laplacian" and "poly".
    dtype : dtype
        The features' type ("poly" and "linear"; the cosines are written
        into the caller's buffer).

    Returns
    -------
    features : callable
        ``features(B, out)``: the map of the rows B, written into ``out``
        (shape (len(B), dim)) where the map can.
    dim : int
        D, or d for "linear".
    """
    if kernel in ("rbf", "laplacian"):
        omega, offset = sample_fourier_weights(
            shared, n_features, n_random_features, gamma, kernel=kernel
        )

        def features(B, out):
            # Phases in the data's precision (float32 would overflow on data
            # of magnitude 1e38 and lose the spread far from the origin);
            # only the cosines are kept, written in float32 into ``out``.
            return random_fourier_features(B, omega, offset, out=out)

        return features, n_random_features
    if kernel == "poly":
        hashes = sample_tensor_sketch(shared, n_features, n_random_features, degree)

        def features(B, out):
            return tensor_sketch(
                B, hashes, n_random_features, gamma=gamma, coef0=coef0, dtype=dtype
            )

        return features, n_random_features

    def features(B, out):
        return B.astype(dtype)

    return features, n_features
