"""The kernel width of :class:`~skfed.DistributedKernelPCA`: given,
scikit-learn's 1/d for "poly", the median heuristic over a federated
sample of rows (:mod:`skfed.kernel._median`), or, under
``raw_rows="refuse"``, the average-distance width from the clients' means
and spreads (:func:`skfed.kernel.federated_gamma`), which sends no row."""

from functools import partial

from ..._engine._ledger import raw_rows_of
from ..._engine._rounds import Round, per_client
from ..._numerics._seeds import SEED_MAX
from ...kernel import federated_gamma, width_rounds
from ...kernel._median import allocate_quota, median_distance, median_sample_step

__all__ = ["KERNEL_WIDTH", "MEDIAN_SAMPLE", "MEDIAN_SAMPLE_PROJECTED", "server_gamma"]

# Median heuristic: size of the pooled sample and projection dimension.
_MEDIAN_SAMPLES = 256
_MEDIAN_PROJECTIONS = 64

# The sampled rows as they are (d <= _MEDIAN_PROJECTIONS, or L1 distances),
MEDIAN_SAMPLE = Round("median sample", raw_rows_of())
# or randomly projected (the server knows the projection: per-sample values
# all the same).
MEDIAN_SAMPLE_PROJECTED = per_client("median sample")
# Under raw_rows="refuse" ("rbf"): γ = N² / (2 Σ_ij ‖x_i − x_j‖²) from each
# client's mean and spread (their sums under secure aggregation).
KERNEL_WIDTH = width_rounds("kernel width")


def server_gamma(fed, kernel, gamma, median_factor, rng):
    """γ: given, sklearn's 1/d for "poly", the federated median (one
    round, :data:`MEDIAN_SAMPLE` or :data:`MEDIAN_SAMPLE_PROJECTED`), or
    under ``raw_rows="refuse"`` with "rbf" the average-distance width
    (:data:`KERNEL_WIDTH`)."""
    if kernel == "linear":
        return None
    if gamma is not None:
        return float(gamma)
    if kernel == "poly":
        return 1.0 / fed.n_features
    if kernel == "rbf" and fed.raw_rows == "refuse":
        # The median needs rows; the average distance only moments.
        return federated_gamma(fed, KERNEL_WIDTH)
    metric = "manhattan" if kernel == "laplacian" else "euclidean"
    sizes = fed.client_sizes
    quota = allocate_quota(_MEDIAN_SAMPLES, sizes, sizes)
    seed = int(rng.randint(SEED_MAX))
    projected = metric == "euclidean" and fed.n_features > _MEDIAN_PROJECTIONS
    uploads = fed.run_round(
        MEDIAN_SAMPLE_PROJECTED if projected else MEDIAN_SAMPLE,
        partial(
            median_sample_step,
            metric=metric,
            n_projections=_MEDIAN_PROJECTIONS,
            stream="kernel_pca.median_sample",
        ),
        messages=[(seed, int(s)) for s in quota],
    )
    med = median_distance(uploads, metric=metric)
    sigma = median_factor * med
    return 1.0 / (2.0 * sigma**2) if kernel == "rbf" else 1.0 / sigma
