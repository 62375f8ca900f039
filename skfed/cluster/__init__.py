"""Federated clustering: k-FED, federated kernel k-means, distributed k-means."""

from ._coreset import DistributedKMeans
from ._kfed import KFed

__all__ = ["DistributedKMeans", "KFed"]
