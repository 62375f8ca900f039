"""Federated preprocessing: statistics of all the clients' rows from sums
over clients, for the first step of a pipeline."""

from ._scaler import FederatedStandardScaler

__all__ = ["FederatedStandardScaler"]
