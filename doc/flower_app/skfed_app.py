"""The Flower App of skfed's deployment page: k-FED over the sites' data."""

import numpy as np

from skfed import KFed
from skfed.flower import client_app, server_app


def load(context):
    # X, or (X, y) for a classifier; the file comes from the node's
    # --node-config.
    return np.load(context.node_config["data"])


client = client_app(load)
# The defaults of the run; `flwr run --run-config` overrides any of them
# (n-clusters, random-state, ... : the estimator's parameters, spelled
# with dashes).
server = server_app(KFed(n_clusters=8, random_state=0))
