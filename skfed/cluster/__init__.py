"""Federated clustering: k-FED, federated kernel k-means, distributed k-means."""

__all__ = []
