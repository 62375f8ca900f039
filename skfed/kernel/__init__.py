"""Kernel approximations shared by the estimators: random features, sketches,
and kernel-width heuristics computed without gathering the data."""

from ._median import (
    allocate_quota,
    canonical_row_order,
    median_distance,
    median_sample_step,
)
from ._random_features import (
    ZeroSpreadError,
    federated_gamma,
    gamma_from_moments,
    mean_from_moments,
    moments_step,
    random_fourier_features,
    sample_fourier_weights,
)
from ._sketch import (
    count_sketch_matrix,
    sample_count_sketch,
    sample_tensor_sketch,
    sketch_columns,
    tensor_sketch,
)

__all__ = [
    "ZeroSpreadError",
    "allocate_quota",
    "canonical_row_order",
    "count_sketch_matrix",
    "federated_gamma",
    "gamma_from_moments",
    "mean_from_moments",
    "median_distance",
    "median_sample_step",
    "moments_step",
    "random_fourier_features",
    "sample_count_sketch",
    "sample_fourier_weights",
    "sample_tensor_sketch",
    "sketch_columns",
    "tensor_sketch",
]
