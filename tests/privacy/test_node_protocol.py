"""A node answers the declared steps of a fit and nothing else.

A curious server runs the protocol as written, then sends the nodes more
``values`` requests: for their labels, their spectral embedding, their
exact costs and their secure-aggregation keys. Each is refused on the node
(over Flower's in-process path, the real ClientApp) and by the clients of
every other transport; the collections a fit does make are in the ledger.
"""

from functools import partial

import numpy as np
import pytest
from sklearn.datasets import make_blobs

import skfed
from skfed import ClientStepError
from skfed._engine._federation import Federation, client_config
from skfed._engine._protocol import check_collectable
from skfed._engine._secure_aggregation import keys_step
from skfed._engine._transports._common import StepFailure
from skfed._engine._validation import check_partitions
from skfed._testing import InProcessGrid, keep_message_as_labels
from skfed.cluster._protocols._coreset import cluster_sums_step
from skfed.privacy import DifferentialPrivacy

pytest.importorskip("flwr")

from skfed.flower import NodeData, client_app, fit_on_grid  # noqa: E402

# What a curious server asks a node for after the fit, beyond the protocol.
SECRETS = [
    ("secure_aggregation", "private"),
    ("secure_aggregation", "pair_keys"),
    ("secure_aggregation", None),
]
PER_ROW = [("kfed", "labels"), ("coreset", "labels"), ("kernel_kmeans", "H")]


@pytest.fixture
def grid(monkeypatch):
    """An in-process grid over ``data`` (node id -> X)."""
    from flwr.supercore.task_identity import TaskIdentity

    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 0)

    def make(data):
        app = client_app(lambda context: data[context.node_id])
        return InProcessGrid(app, data)

    return make


def _data(scale=1.0):
    X, _ = make_blobs(240, n_features=3, centers=3, random_state=0)
    X = X * scale
    return X, {1: X[:80], 2: X[80:160], 3: X[160:]}


def _ask(grid, requests):
    """The nodes' answers to one extra message each, as the server gets
    them (a new NodeData: the server's side after the fit)."""
    nodes = NodeData(grid, n_nodes=len(grid.contexts))
    answers = {}
    for namespace, key in requests:
        request = {"op": "values", "namespace": namespace, "key": key}
        answers[namespace, key] = nodes._exchange(
            dict.fromkeys(nodes.client_ids, request)
        )
    return answers


def _refused(answers, why):
    for (namespace, key), by_node in answers.items():
        for node, answer in by_node.items():
            assert isinstance(answer, StepFailure), (namespace, key, node, answer)
            assert "refused" in str(answer.exc), str(answer.exc)
            assert why in str(answer.exc), str(answer.exc)


def test_a_curious_server_gets_no_labels_costs_or_keys_under_privacy(grid):
    X, data = _data()
    nodes = grid(data)
    privacy = DifferentialPrivacy(
        epsilon=1.0, bounds=(X.min(axis=0) - 1, X.max(axis=0) + 1)
    )
    km = skfed.KFed(n_clusters=3, random_state=0, privacy=privacy, raw_rows="refuse")
    fit_on_grid(km, nodes, n_nodes=3)
    # The labels stayed on the nodes, and the fit says so.
    assert not hasattr(km, "labels_")
    assert np.isnan(km.inertia_)
    kinds = {r.name: r.disclosure for r in km.communication_.collections}
    assert kinds == {"collect kfed.raw": "public"}
    # Asked afterwards, each node refuses: its labels, its exact cost.
    answers = _ask(nodes, [("kfed", "labels")])
    _refused(answers, "one value per row")
    _refused(_ask(nodes, [("kfed", "inertia")]), "differential privacy")
    _refused(_ask(nodes, SECRETS), "not declared collectable")


def test_a_curious_server_gets_no_embedding_labels_or_keys_under_refuse(grid):
    # Kernel k-means under raw_rows="refuse" and privacy; epsilon=inf adds
    # no noise, so the model is the in-memory fit's, and privacy still
    # keeps every per-row output on the nodes.
    X, data = _data()
    nodes = grid(data)
    dp = DifferentialPrivacy(epsilon=float("inf"), bounds=(-15.0, 15.0))
    params = {
        "n_clusters": 3,
        "random_state": 0,
        "raw_rows": "refuse",
        "secure_aggregation": True,
        "privacy": dp,
        "gamma": 0.1,
    }
    km = skfed.FederatedKernelKMeans(**params)
    fit_on_grid(km, nodes, n_nodes=3)
    assert not hasattr(km, "labels_") and not hasattr(km, "embedding_")
    # The model is there: each node labels its own rows with predict.
    expected = skfed.FederatedKernelKMeans(**params).fit(
        X, partitions=np.repeat([1, 2, 3], 80)
    )
    np.testing.assert_array_equal(km.predict(X), expected.labels_)
    answers = _ask(nodes, PER_ROW[1:])
    _refused(answers, "stays on the client")
    # The node holds pair keys (it masked), and keeps them.
    _refused(_ask(nodes, SECRETS), "not declared collectable")
    with pytest.raises(ValueError, match="predict"):
        skfed.FederatedKernelKMeans(**params).fit_predict(NodeData(nodes, n_nodes=3).X)


def test_row_free_kernel_kmeans_keeps_every_per_row_output_on_the_nodes(grid):
    # Under raw_rows="refuse" without privacy kernel k-means clusters its
    # embedding from local centers and Lloyd sums; the model is the
    # in-memory fit's, and the labels and the embedding stay on the nodes.
    X, data = _data()
    nodes = grid(data)
    params = {
        "n_clusters": 3,
        "random_state": 0,
        "raw_rows": "refuse",
        "secure_aggregation": True,
        "gamma": 0.1,
    }
    km = skfed.FederatedKernelKMeans(**params)
    fit_on_grid(km, nodes, n_nodes=3)
    assert not hasattr(km, "labels_") and not hasattr(km, "embedding_")
    assert km.communication_.raw_rows == 0
    expected = skfed.FederatedKernelKMeans(**params).fit(
        X, partitions=np.repeat([1, 2, 3], 80)
    )
    np.testing.assert_array_equal(km.predict(X), expected.labels_)
    _refused(_ask(nodes, PER_ROW), "stays on the client")


def test_key_fetch_is_refused_even_when_labels_may_leave(grid):
    # Without raw_rows or privacy, the fit collects labels (declared, in the
    # ledger); the node's X25519 private key and pair keys never leave.
    X, data = _data()
    nodes = grid(data)
    km = skfed.DistributedKMeans(n_clusters=3, random_state=0, secure_aggregation=True)
    fit_on_grid(km, nodes, n_nodes=3)
    assert km.labels_.shape == (240,)
    (labels,) = km.communication_.collections
    assert (labels.name, labels.disclosure) == ("collect coreset.labels", "per_row")
    assert labels.floats == (80, 80, 80)
    answers = _ask(nodes, SECRETS + [("secure_aggregation", "public_keys")])
    _refused(answers, "not declared collectable")
    # An undeclared entry of a protocol's state is refused too.
    _refused(_ask(nodes, [("coreset", "secret")]), "not declared collectable")


def test_the_simulation_collects_per_row_outputs_in_a_declared_round():
    X, _ = _data()
    parts = np.repeat([1, 2, 3], 80)
    km = skfed.KFed(n_clusters=3, random_state=0).fit(X, partitions=parts)
    per_row = [r for r in km.communication_.collections if r.disclosure == "per_row"]
    # The labels (nearest final center) and the induced labels.
    assert [r.name for r in per_row] == [
        "collect kfed.labels",
        "collect kfed.induced_labels",
    ]
    assert all(r.floats == (80, 80, 80) for r in per_row)
    # Outside the protocol's totals: the ledger's figures are the protocol's.
    assert km.communication_.upload_floats == sum(
        r.total_floats for r in km.communication_.records if r.direction == "upload"
    )
    # Refused, the labels are computed here from the rows this process holds
    # (nothing crosses), and no per-row collection is recorded.
    refused = skfed.KFed(n_clusters=3, random_state=0, raw_rows="refuse").fit(
        X, partitions=parts
    )
    assert not [
        r for r in refused.communication_.collections if r.disclosure == "per_row"
    ]
    np.testing.assert_array_equal(refused.labels_, refused.predict(X))


def test_every_in_process_transport_refuses_keys_and_refused_outputs():
    # The clients' side of each transport's collection: the joblib
    # transport's, a worker process's and a dask worker's reads of what the
    # clients keep, all through skfed._engine._transports._common.collected.
    from skfed._engine._transports import _dask, _processes

    X, _ = _data()
    config = client_config(type("E", (), {"raw_rows": "refuse"})())
    partitioning = check_partitions(np.repeat([1, 2, 3], 80), X.shape[0])
    fed = Federation.from_arrays(
        X, None, partitioning, random_state=0, client_config=config
    )
    with fed:
        # Each client draws its X25519 key pair and keeps the private key.
        fed.run_round("keys", keys_step, disclosure="per_client")
        fed.run_round("labels", keep_message_as_labels, [4])
        storage = fed.transport._storage
        clients = {c: fed.transport.client(c) for c in fed.client_ids}
        # Nor can a step a server names read them (as rows to cluster, say).
        steal = partial(
            cluster_sums_step,
            rows=("secure_aggregation", "private"),
            weighted=False,
            min_rows=2,
        )
        with pytest.raises(ClientStepError, match="masking only"):
            fed.run_round("steal", steal, np.zeros((1, 1)))
        # The server's own check refuses a secret before asking anyone.
        with pytest.raises(ValueError, match="not declared collectable"):
            fed.local_results(*SECRETS[0])
        _processes._settle("spy", list(clients.values()))
        _processes._FITS["spy"] = (_processes._FITS["spy"][0], storage)
        for c in clients:
            _dask._STORE["spy", c] = storage[c]
        try:
            reads = [
                lambda ns, key: fed.transport.local_values(ns, key, fed.client_ids),
                lambda ns, key: _processes._read("spy", list(clients), ns, key),
                lambda ns, key: [
                    _dask._read(client, "spy", ns, key) for client in clients.values()
                ],
            ]
            for read in reads:
                for namespace, key in SECRETS:
                    with pytest.raises(PermissionError, match="not declared"):
                        read(namespace, key)
                with pytest.raises(PermissionError, match="raw_rows='refuse'"):
                    read("testing", "labels")
        finally:
            _processes._FITS.pop("spy", None)
            for c in clients:
                _dask._STORE.pop(("spy", c), None)


def test_the_collection_policy():
    allow = {"raw_rows": "allow", "private": False}
    assert check_collectable("kfed", "labels", allow) == "per_row"
    assert check_collectable("kfed", ("raw", "inertia"), allow) == "per_client"
    with pytest.raises(PermissionError, match="one value per row"):
        check_collectable("kfed", "labels", {"raw_rows": "refuse"})
    with pytest.raises(PermissionError, match="differential privacy"):
        check_collectable("kfed", ("raw", "inertia"), {"private": True})
    assert check_collectable("kfed", "raw", {"private": True}) == "public"
    for namespace, key in SECRETS:
        with pytest.raises(PermissionError, match="not declared"):
            check_collectable(namespace, key, allow)


def test_dask_workers_keep_per_row_outputs_and_keys():
    distributed = pytest.importorskip("distributed")
    da = pytest.importorskip("dask.array")
    X, _ = _data()
    with distributed.Client(
        processes=False, n_workers=2, threads_per_worker=1, dashboard_address=":0"
    ):
        Xd = da.from_array(X, chunks=(80, 3)).persist()
        km = skfed.KFed(n_clusters=3, random_state=0, raw_rows="refuse").fit(Xd)
        # The labels stay on the workers: not gathered, and fit_predict is
        # predict computed where the chunks are.
        assert not hasattr(km, "labels_")
        assert not [
            r for r in km.communication_.collections if r.disclosure == "per_row"
        ]
        again = skfed.KFed(n_clusters=3, random_state=0, raw_rows="refuse")
        labels = again.fit_predict(Xd)
        assert isinstance(labels, da.Array)
        np.testing.assert_array_equal(labels.compute(), km.predict(X))
        # A driver that asks the workers for more is refused there.
        spec = {"client": client_config(km)}
        fed = Federation.from_remote(Xd, None, None, random_state=0, input_checks=spec)
        with fed:
            fed.run_round("keys", keys_step, disclosure="per_client")
            fed.run_round("labels", keep_message_as_labels, [4])
            for namespace, key in [SECRETS[0], ("testing", "labels")]:
                with pytest.raises(PermissionError, match="refused"):
                    fed.transport.local_values(namespace, key, fed.client_ids)


def test_a_node_configured_to_refuse_raw_rows_keeps_its_labels(grid):
    # The node's own raw-rows="refuse" holds whatever the fit asks: a server
    # that would collect labels gets the node's refusal.
    _, data = _data()
    nodes = grid(data)
    for node in data:
        nodes.node_config(node, **{"raw-rows": "refuse"})
    # A fit that does not ask for the refusal is refused by the nodes in its
    # first round (KFed's local step asked to upload a small client's rows).
    with pytest.raises(RuntimeError, match="refuses to send raw rows"):
        fit_on_grid(skfed.KFed(n_clusters=3, random_state=0), nodes, n_nodes=3)
    km = fit_on_grid(
        skfed.KFed(n_clusters=3, random_state=0, raw_rows="refuse"), nodes, n_nodes=3
    )
    assert not hasattr(km, "labels_")
    nodes.node_config(1, **{"raw-rows": "sometimes"})
    with pytest.raises(ValueError, match="'raw-rows' is 'allow' or 'refuse'"):
        fit_on_grid(skfed.KFed(n_clusters=3, random_state=0), nodes, n_nodes=3)
