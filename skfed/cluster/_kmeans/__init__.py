"""The k-means core of :mod:`skfed.cluster`: every k-means of the package
(the coreset's clients and server, k-FED's clients and merge, kernel
k-means' embedding) is built from these, each defined once.

- :mod:`._assign`: squared distances, the assignment to the nearest center
  (ties within rounding to the lowest index), the clusters' weighted sums
  and means, the tolerance and the centering that keeps expanded distances
  exact;
- :mod:`._seeding`: greedy weighted k-means++;
- :mod:`._lloyd`: weighted Lloyd (weights of any sign, dense or CSR);
- :mod:`._batched`: the same seeding and Lloyd for many restarts and many
  small clients side by side, as arrays (a client step hands its
  :class:`KMeansProblem` over to be solved with other clients');
- :mod:`._sklearn_lloyd`: scikit-learn's compiled Lloyd iteration driven
  on a large client's rows prepared once (as ``KMeans(init=...)``);
- :mod:`._restarts`: the best of ``n_init`` runs, and swap local search.
"""

from ._assign import (
    CHUNK,
    SMALL_ROWS,
    WEIGHT_EPS,
    around_centers,
    assign,
    assign_around_centers,
    centered,
    cluster_means,
    cluster_sums,
    dense_rows,
    dot,
    draw,
    labelled_sq_distances,
    nearest,
    rounding_noise,
    sq_dist,
    sq_norms,
    tolerance,
    weighted_cost,
)
from ._batched import KMeansProblem, kmeans_restarts, solve_kmeans_problems
from ._lloyd import weighted_lloyd
from ._restarts import SAME_COST, swap_centers, weighted_kmeans
from ._seeding import weighted_kmeans_plusplus
from ._sklearn_lloyd import LloydRows, lloyd, lloyd_rows

__all__ = [
    "CHUNK",
    "SAME_COST",
    "SMALL_ROWS",
    "WEIGHT_EPS",
    "KMeansProblem",
    "LloydRows",
    "assign",
    "assign_around_centers",
    "around_centers",
    "centered",
    "cluster_means",
    "cluster_sums",
    "dense_rows",
    "dot",
    "draw",
    "kmeans_restarts",
    "labelled_sq_distances",
    "lloyd",
    "lloyd_rows",
    "nearest",
    "rounding_noise",
    "solve_kmeans_problems",
    "sq_dist",
    "sq_norms",
    "swap_centers",
    "tolerance",
    "weighted_cost",
    "weighted_kmeans",
    "weighted_kmeans_plusplus",
    "weighted_lloyd",
]
