"""The Flower App of skfed's deployment page: k-FED over the sites' data."""

import numpy as np

from skfed import KFed
from skfed.flower import client_app, server_app


def load(context):
    # X, or (X, y) for a classifier; the file comes from the node's
    # --node-config.
    return np.load(context.node_config["data"])


client = client_app(load)
# Its parameters come from the run config (pyproject.toml, overridden by
# `flwr run --run-config`): n-clusters sets n_clusters, and so on.
server = server_app(KFed())
