"""Kernel approximations shared by the estimators: random features, sketches,
and kernel-width heuristics computed without gathering the data."""

from ._random_features import (
    gamma_from_moments,
    moments_step,
    random_fourier_features,
    sample_fourier_weights,
)

__all__ = [
    "gamma_from_moments",
    "moments_step",
    "random_fourier_features",
    "sample_fourier_weights",
]
