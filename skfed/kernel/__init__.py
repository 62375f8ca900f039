"""Kernels shared by the estimators: exact evaluation (``_pairwise``, the
multi-width Gaussian atoms of ``_multiwidth``), random features and their
private statistics, sketches and explicit feature maps, and kernel-width
heuristics computed without gathering the data."""

from ._median import (
    allocate_quota,
    canonical_row_order,
    median_distance,
    median_sample_step,
)
from ._random_features import (
    WidthRounds,
    ZeroSpreadError,
    federated_gamma,
    gamma_from_moments,
    mean_from_moments,
    moments_step,
    random_fourier_features,
    sample_fourier_weights,
    width_rounds,
)
from ._sketch import (
    count_sketch_matrix,
    sample_count_sketch,
    sample_tensor_sketch,
    sketch_columns,
    tensor_sketch,
)

__all__ = [
    "WidthRounds",
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
    "width_rounds",
]
