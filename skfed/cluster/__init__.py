"""Federated clustering: k-FED, federated kernel k-means, distributed k-means."""

from ._coreset import DistributedKMeans

__all__ = ["DistributedKMeans"]
