"""Federated clustering: k-FED, federated kernel k-means, distributed k-means."""

from ._distributed_kmeans import DistributedKMeans
from ._kernel_kmeans import FederatedKernelKMeans
from ._kfed import KFed

__all__ = ["DistributedKMeans", "FederatedKernelKMeans", "KFed"]
