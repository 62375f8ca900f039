"""Fits through Flower: the ClientApp's node logic, and the simulation
engine against the in-memory fit (the localhost deployment is in
test_flower_deployment.py)."""

import os
import sys
from functools import partial

import joblib
import numpy as np
import pytest
from sklearn.datasets import make_blobs
from threadpoolctl import threadpool_limits

import skfed
from skfed._engine._federation import ClientValueError, Federation
from skfed._engine._protocol import PUBLIC, client_step, collectable
from skfed._testing import INTEGRATION_CASES, InProcessGrid, fail_on

pytest.importorskip("flwr")

from flwr.app import Context, RecordDict  # noqa: E402

from skfed.flower import NodeData, client_app, fit_on_grid, simulate  # noqa: E402
from skfed.flower._client import _Node  # noqa: E402

N_NODES = 3
NODE_ROWS = 150
SPEC = {"accept_sparse": False, "dtype": ["float64", "float32"]}


# The counting step's state may be collected (as a protocol declares it).
collectable("flowertest", None, PUBLIC)


@client_step("flowertest.count")
def _count(client, state, message):
    """Counts its calls in the state it keeps; uploads the count."""
    calls = (state or 0) + 1
    return calls, {"calls": calls, "rows": client.n_samples, "y": client.y}


@client_step("flowertest.blas")
def _blas(client, state, message):
    """Uploads the BLAS threads the step runs with."""
    from threadpoolctl import threadpool_info

    return state, [
        p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"
    ]


class _Context:
    """What a ClientApp reads of Flower's Context."""

    def __init__(self, partition_id, run_id=7):
        self.node_config = {"partition-id": partition_id}
        self.node_id = 1000 + partition_id
        self.run_id = run_id
        self.state = RecordDict()


def _node(X, y=None):
    return _Node(lambda context: X if y is None else (X, y), None, ("skfed",))


def _open(node, context, seed=3, classes=None):
    request = {"op": "open", "seed": seed, "spec": SPEC}
    request.update(classes=classes, use_y=classes is not None)
    return node.answer(request, context)


def _step(name, module=None, message=None):
    return {
        "op": "step",
        "name": name,
        "options": {},
        "module": module,
        "message": message,
    }


def test_node_keeps_its_state_in_the_context_not_in_the_process():
    X = np.arange(12.0).reshape(6, 2)
    context = _Context(0)
    node = _node(X)
    assert node.answer({"op": "describe"}, context) == {
        "client_id": 0,
        "n_samples": 6,
        "n_features": 2,
        "dtype": np.dtype(float).str,
        "has_y": False,
    }
    _open(node, context)
    assert node.answer(_step("flowertest.count"), context)["upload"]["calls"] == 1
    # A deployed node may run each message in a new process: a new node
    # object with the same context goes on where the last one stopped.
    again = _node(X).answer(_step("flowertest.count"), context)
    assert again["upload"] == {"calls": 2, "rows": 6, "y": None}
    assert node.answer(
        {"op": "values", "namespace": "flowertest", "key": None}, context
    ) == {"value": 2}
    # Another node's context has its own state, and must be opened first.
    with pytest.raises(RuntimeError, match="not been opened"):
        _node(X).answer(_step("flowertest.count"), _Context(1))


def test_node_builds_each_fit_its_own_client():
    # Two fits of one run with the same seed, the second with labels: the
    # node must not reuse the client it built (and cached) for the first.
    X, y = np.arange(12.0).reshape(6, 2), np.array([5, 7, 5, 7, 7, 5])
    context, node = _Context(0), _node(X, y)
    _open(node, context)
    assert node.answer(_step("flowertest.count"), context)["upload"]["y"] is None
    _open(node, context, classes=np.array([5, 7]))
    upload = node.answer(_step("flowertest.count"), context)["upload"]
    # Each fit starts from an empty state; labels are coded by the classes.
    assert upload["calls"] == 1
    np.testing.assert_array_equal(upload["y"], [0, 1, 0, 1, 1, 0])


def test_node_runs_only_registered_steps(tmp_path, monkeypatch):
    X = np.ones((4, 2))
    context = _Context(0)
    node = _node(X)
    _open(node, context)
    answer = node.answer(_step("flowertest.unknown"), context)
    assert "No client step is registered" in answer["error"]["text"]
    # A module outside the allowed packages is never imported, so a step it
    # would register does not run.
    (tmp_path / "rogue_steps.py").write_text(
        "from skfed._engine._protocol import client_step\n"
        "@client_step('rogue.step')\n"
        "def step(client, state, message):\n"
        "    return state, 'ran'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    answer = node.answer(_step("rogue.step", module="rogue_steps"), context)
    assert "error" in answer
    assert "rogue_steps" not in sys.modules


def test_node_checks_its_rows_and_names_itself():
    X = np.ones((5, 2))
    X[2, 1] = np.nan
    with pytest.raises(ValueError, match="Client 4: .*NaN"):
        _open(_node(X), _Context(4))


def _node_data(tmp_path):
    X, y = make_blobs(
        N_NODES * NODE_ROWS, n_features=4, centers=3, cluster_std=1.5, random_state=1
    )
    y = (y == 0).astype(int)
    for p in range(N_NODES):
        rows = slice(p * NODE_ROWS, (p + 1) * NODE_ROWS)
        np.save(tmp_path / f"X{p}.npy", X[rows])
        np.save(tmp_path / f"y{p}.npy", y[rows])
    folder = str(tmp_path)

    def load(context):
        p = context.node_config["partition-id"]
        return np.load(f"{folder}/X{p}.npy"), np.load(f"{folder}/y{p}.npy")

    return X, y, load


def _same_model(got, expected, X):
    for method in ("predict", "transform", "decision_function"):
        if hasattr(expected, method):
            a, b = getattr(got, method)(X), getattr(expected, method)(X)
            if a.dtype.kind == "f":
                np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-10)
            else:
                np.testing.assert_array_equal(a, b)
    if hasattr(expected, "labels_"):
        np.testing.assert_array_equal(got.labels_, expected.labels_)
    assert got.communication_.to_records() == expected.communication_.to_records()


def _check_wire(log):
    """Every protocol round's real Flower bytes per client cover the
    protocol's own bytes, plus at most a few KB of message envelope."""
    protocol = {(r.round, r.direction): r for r in log.records}
    for wire in log.wire_records:
        if wire.round < 0:  # setup and collection messages
            continue
        ours = protocol.get((wire.round, wire.direction))
        counted = dict(zip(ours.clients, ours.bytes)) if ours else {}
        for client, n_bytes in zip(wire.clients, wire.bytes):
            assert counted.get(client, 0) <= n_bytes <= counted.get(client, 0) + 4096
    assert log.wire_upload_bytes >= log.upload_bytes
    assert log.wire_download_bytes >= log.download_bytes


SECURE = dict(
    INTEGRATION_CASES["DistributedKMeans"][0], refine_iter=2, secure_aggregation=True
)


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    """All five estimators fitted in one Flower simulation (one start of its
    engine), and what a too-small client does."""
    pytest.importorskip("ray")
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation

    X, y, load = _node_data(tmp_path_factory.mktemp("nodes"))
    fitted, errors = {}, {}
    app = ServerApp()

    @app.main()
    def main(grid, context):
        for name, (params, _, _) in INTEGRATION_CASES.items():
            est = getattr(skfed, name)(**params)
            fitted[name] = fit_on_grid(
                est, grid, n_nodes=N_NODES, timeout=120, round_timeout=300
            )
        secure = skfed.DistributedKMeans(**SECURE)
        fitted["secure"] = fit_on_grid(
            secure, grid, n_nodes=N_NODES, timeout=120, round_timeout=300
        )
        try:
            fit_on_grid(skfed.KFed(n_clusters=N_NODES * NODE_ROWS + 1), grid, n_nodes=1)
        except ValueError as exc:
            errors["too many clusters"] = exc
        # A client step that raises on one node, under both failure policies.
        data = NodeData(grid, n_nodes=N_NODES, timeout=120, round_timeout=300)
        fed = Federation.from_remote(
            data.X, None, None, random_state=0, input_checks=SPEC
        )
        boom = partial(fail_on, bad=1, exc="ValueError")
        with fed:
            try:
                fed.run_round("boom", boom)
            except ClientValueError as exc:
                errors["raised"] = exc
            errors["kept"] = fed.run_round("boom", boom, tolerate=True)
            errors["failed"] = dict(fed.failed_clients)

    run_simulation(
        server_app=app,
        client_app=client_app(load),
        num_supernodes=N_NODES,
        backend_config={"client_resources": {"num_cpus": 1}},
    )
    return X, y, fitted, errors


@pytest.mark.parametrize("name", list(INTEGRATION_CASES))
def test_simulation_gives_the_in_memory_model(name, simulated):
    X, y, fitted, _ = simulated
    assert name in fitted, "the simulated fit did not finish"
    params = INTEGRATION_CASES[name][0]
    parts = np.repeat(np.arange(N_NODES), NODE_ROWS)
    with threadpool_limits(limits=1):
        expected = getattr(skfed, name)(**params).fit(X, y, partitions=parts)
    got = fitted[name]
    _same_model(got, expected, X)
    assert got.n_clients_ == N_NODES
    _check_wire(got.communication_)


def test_secure_aggregation_on_flower_nodes_gives_the_in_memory_model(simulated):
    # Each node keeps its key in its context and masks its sums there.
    X, y, fitted, _ = simulated
    parts = np.repeat(np.arange(N_NODES), NODE_ROWS)
    with threadpool_limits(limits=1):
        expected = skfed.DistributedKMeans(**SECURE).fit(X, partitions=parts)
    _same_model(fitted["secure"], expected, X)
    _check_wire(fitted["secure"].communication_)


def test_simulation_reports_errors_like_the_in_memory_fit(simulated):
    _, _, _, errors = simulated
    assert "should be >= n_clusters" in str(errors["too many clusters"])
    # A node's ValueError reaches the server as one, naming client and round.
    raised = errors["raised"]
    assert (raised.client_id, raised.round_name) == (1, "boom")
    assert "disk on fire" in str(raised)
    # Tolerated, the node is dropped and recorded; the others answer.
    assert errors["kept"] == [float(NODE_ROWS)] * (N_NODES - 1)
    assert list(errors["failed"]) == [1]


def test_simulate_fits_and_saves_the_model(tmp_path):
    pytest.importorskip("ray")
    X, y, load = _node_data(tmp_path)
    path = tmp_path / "model.joblib"
    params = INTEGRATION_CASES["KFed"][0]
    got = simulate(skfed.KFed(**params), load, N_NODES, save_to=path)
    expected = skfed.KFed(**params).fit(
        X, partitions=np.repeat(np.arange(N_NODES), NODE_ROWS)
    )
    _same_model(got, expected, X)
    _same_model(joblib.load(path), expected, X)


@pytest.fixture
def in_process(monkeypatch):
    """Build an in-process grid over ``data`` (node id -> X or (X, y))."""
    from flwr.supercore.task_identity import TaskIdentity

    # Messages are created outside any Flower run here.
    monkeypatch.setattr(TaskIdentity, "_run_id", 1)
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 0)

    def make(data, *, client_id=None, **failures):
        app = client_app(lambda context: data[context.node_id], client_id=client_id)
        return InProcessGrid(app, data, **failures)

    return make


def _blobs(n, d=3, seed=0):
    return make_blobs(n, n_features=d, centers=2, random_state=seed)[0]


def test_nodes_must_agree_on_their_data(in_process):
    grid = in_process({10: _blobs(30), 20: _blobs(40, d=4)})
    with pytest.raises(ValueError, match="same number of features"):
        NodeData(grid, n_nodes=2)
    grid = in_process({10: _blobs(30), 20: _blobs(40)}, client_id=lambda c: 0)
    with pytest.raises(ValueError, match="Two nodes say they are client 0"):
        NodeData(grid, n_nodes=2)
    grid = in_process({10: (_blobs(30), np.zeros(30)), 20: _blobs(40)})
    with pytest.raises(ValueError, match=r"Client\(s\) \[20\] hold no labels"):
        NodeData(grid, n_nodes=2)
    with pytest.raises(ValueError, match="needs labels"):
        fit_on_grid(
            skfed.FederatedRKHSClassifier(), in_process({1: _blobs(9)}), n_nodes=1
        )


def test_waiting_for_nodes_times_out(in_process):
    with pytest.raises(TimeoutError, match="2 of 3 Flower nodes"):
        NodeData(in_process({1: _blobs(9), 2: _blobs(9)}), n_nodes=3, timeout=0.1)


def test_a_silent_node_fails_its_round_and_can_be_dropped(in_process):
    data = {10: _blobs(60, seed=1), 20: _blobs(60, seed=2), 30: _blobs(60, seed=3)}
    grid = in_process(data, silent={20})
    nodes = NodeData(grid, n_nodes=3, round_timeout=0.5)
    # The node ids are the client ids here (no partition-id in node_config).
    with pytest.raises(
        skfed.ClientStepError,
        match=r"Client 20 failed .*node 20 sent no answer within 0.5 s",
    ):
        skfed.KFed(n_clusters=2, random_state=0).fit(nodes.X)
    km = skfed.KFed(n_clusters=2, random_state=0, on_client_error="drop")
    km.fit(NodeData(in_process(data, silent={20}), n_nodes=3, round_timeout=0.5).X)
    assert list(km.failed_clients_) == [20]
    expected = skfed.KFed(n_clusters=2, random_state=0).fit(
        np.vstack([data[10], data[30]]), partitions=np.repeat([10, 30], 60)
    )
    np.testing.assert_allclose(km.cluster_centers_, expected.cluster_centers_)


def test_server_app_reads_its_run_config_and_saves_the_model(in_process, tmp_path):
    from skfed.flower import server_app

    data = {1: _blobs(50, seed=1), 2: _blobs(50, seed=2)}
    path = tmp_path / "kfed.joblib"
    context = Context(
        run_id=1,
        node_id=0,
        node_config={},
        state=RecordDict(),
        run_config={"n-nodes": 2, "model-path": str(path)},
    )
    app = server_app(skfed.KFed(n_clusters=2, random_state=0))
    app(grid=in_process(data), context=context)
    expected = skfed.KFed(n_clusters=2, random_state=0).fit(
        np.vstack([data[1], data[2]]), partitions=np.repeat([1, 2], 50)
    )
    _same_model(joblib.load(path), expected, expected.cluster_centers_)
    assert app.fitted_estimator.n_clients_ == 2
    # Without n_nodes nor a run config entry it says what is missing.
    context.run_config.clear()
    with pytest.raises(ValueError, match="how many nodes"):
        server_app(skfed.KFed())(grid=in_process(data), context=context)


def test_round_timeout_defaults_to_tens_of_seconds():
    # A dead node must not hold a fit for the connection timeout's 600 s.
    import inspect

    for func in (NodeData, fit_on_grid, simulate):
        default = inspect.signature(func).parameters["round_timeout"].default
        assert 10 <= default <= 120


@pytest.mark.parametrize("failure", ["vanish", "flower_error"])
def test_a_node_that_dies_fails_the_fit_at_once_naming_it(in_process, failure):
    # A SuperNode that leaves the grid (or that Flower answers for with an
    # error) fails the round without waiting for the round timeout.
    data = {10: _blobs(60, seed=1), 20: _blobs(60, seed=2), 30: _blobs(60, seed=3)}
    grid = in_process(data, client_id=lambda c: f"site{c.node_id}", **{failure: {20}})
    nodes = NodeData(grid, n_nodes=3, round_timeout=600)
    expected = (
        "node 20 left the federation"
        if failure == "vanish"
        else r"node 20: Flower error \(code 5\)"
    )
    with pytest.raises(skfed.ClientStepError, match=f"Client 'site20' .*{expected}"):
        skfed.KFed(n_clusters=2, random_state=0).fit(nodes.X)


def test_a_silent_node_is_taken_as_lost_long_before_the_round_timeout(in_process):
    # A SuperNode killed outright stays among Flower's connected nodes for
    # about a minute (its missed heartbeats): once the other nodes have
    # answered, its silence fails the round after straggler_timeout.
    data = {10: _blobs(60, seed=1), 20: _blobs(60, seed=2), 30: _blobs(60, seed=3)}
    grid = in_process(data, client_id=lambda c: f"site{c.node_id}", silent={20})
    nodes = NodeData(grid, n_nodes=3, round_timeout=600, straggler_timeout=0.2)
    with pytest.raises(
        skfed.ClientStepError,
        match=r"Client 'site20' .*node 20 is taken as lost: no answer .* "
        r"when the other 2 answered",
    ):
        skfed.KFed(n_clusters=2, random_state=0).fit(nodes.X)
    # The straggler rule lives in the server's defaults, where a killed
    # node must be noticed well within half a minute.
    import inspect

    for func in (NodeData, fit_on_grid, simulate):
        default = inspect.signature(func).parameters["straggler_timeout"].default
        assert 5 <= default <= 25


def test_a_node_with_more_rows_gets_proportionally_longer(in_process):
    # Nodes run the same step on their own rows: a node with ten times the
    # rows of the ones that answered may take ten times as long.
    data = {1: _blobs(10), 2: _blobs(10), 3: _blobs(100)}
    nodes = NodeData(in_process(data), n_nodes=3, straggler_timeout=20)
    took = {1: 3.0, 2: 4.0}
    assert nodes._straggler_limit(3, took, 20) == pytest.approx(4 * 40.0)
    # Fewer rows than the answered nodes: no less than they took.
    nodes._rows[3] = 1
    assert nodes._straggler_limit(3, took, 20) == pytest.approx(20)
    assert nodes._straggler_limit(3, {1: 30.0}, 20) == pytest.approx(120)


def test_a_missed_heartbeat_is_seen_from_the_grids_node_info(in_process):
    # The SuperLink moves a node's online_until forward at each heartbeat
    # (every 0.9 x (interval - 5 s) at most); one that has not moved for
    # interval - 5 s means a missed heartbeat, well before Flower's own two
    # intervals.
    from types import SimpleNamespace

    nodes = NodeData(in_process({1: _blobs(9), 2: _blobs(9)}), n_nodes=2)
    beats = {1: 1000.0, 2: 1000.0}
    nodes.grid.get_nodes = lambda: [
        SimpleNamespace(node_id=n, online_until=u, heartbeat_interval=30.0)
        for n, u in beats.items()
    ]
    assert nodes._connected(now=0.0) == {1, 2}
    assert nodes._heartbeat_missed(1, now=24.0) is None
    beats[2] = 1020.0  # node 2's heartbeat came; node 1's did not
    nodes._connected(now=20.0)
    assert nodes._heartbeat_missed(1, now=26.0) == pytest.approx(26.0)
    assert nodes._heartbeat_missed(2, now=26.0) is None
    assert nodes._heartbeat_missed(2, now=46.0) == pytest.approx(26.0)
    # Without get_nodes (or a heartbeat interval), nothing is concluded.
    del nodes.grid.get_nodes
    nodes._beats.clear()
    assert nodes._connected(now=100.0) == {1, 2}
    assert nodes._heartbeat_missed(1, now=1000.0) is None


class _NoGrid:
    """A grid that must not be used: the app should fail before."""

    def get_node_ids(self):
        raise AssertionError("the app contacted the grid")


def _server_context(run_config):
    return Context(
        run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=run_config
    )


def test_run_config_sets_the_estimators_parameters(in_process, tmp_path):
    from skfed.flower import server_app

    data = {1: _blobs(50, seed=1), 2: _blobs(50, seed=2)}
    config = {"n-nodes": 2, "n-clusters": 3, "random-state": 4, "round-timeout": 30}
    app = server_app(skfed.KFed(n_clusters=8, random_state=0))
    app(grid=in_process(data), context=_server_context(config))
    got = app.fitted_estimator
    assert (got.n_clusters, got.random_state) == (3, 4)
    expected = skfed.KFed(n_clusters=3, random_state=4).fit(
        np.vstack([data[1], data[2]]), partitions=np.repeat([1, 2], 50)
    )
    _same_model(got, expected, expected.cluster_centers_)
    # An unknown key names the valid ones; a bad value is refused; both
    # before any node is contacted.
    app = server_app(skfed.KFed())
    with pytest.raises(ValueError, match="'n-cluster' is not a parameter of KFed; "):
        app(grid=_NoGrid(), context=_server_context({"n-nodes": 2, "n-cluster": 3}))
    with pytest.raises(ValueError, match="valid keys: .*n-clusters.*round-timeout"):
        app(grid=_NoGrid(), context=_server_context({"n-nodes": 2, "n-cluster": 3}))
    with pytest.raises(ValueError, match="n_clusters"):
        app(grid=_NoGrid(), context=_server_context({"n-nodes": 2, "n-clusters": 0}))
    with pytest.raises(ValueError, match="round-timeout"):
        app(grid=_NoGrid(), context=_server_context({"n-nodes": 2, "round-timeout": 0}))
    with pytest.raises(ValueError, match="straggler-timeout must be a positive"):
        app(
            grid=_NoGrid(),
            context=_server_context({"n-nodes": 2, "straggler-timeout": "1 min"}),
        )


def test_model_path_is_checked_before_the_fit(tmp_path, in_process):
    from skfed.flower import server_app

    # A missing directory is created ...
    path = tmp_path / "new" / "dir" / "kfed.joblib"
    config = {"n-nodes": 2, "n-clusters": 2, "model-path": str(path)}
    data = {1: _blobs(50, seed=1), 2: _blobs(50, seed=2)}
    server_app(skfed.KFed())(grid=in_process(data), context=_server_context(config))
    assert joblib.load(path).n_clients_ == 2
    # ... one that cannot be is refused before the grid is used.
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    config["model-path"] = str(blocker / "kfed.joblib")
    with pytest.raises(ValueError, match="Cannot save the fitted model at"):
        server_app(skfed.KFed())(grid=_NoGrid(), context=_server_context(config))
    config["model-path"] = str(tmp_path)
    with pytest.raises(ValueError, match="is a directory"):
        server_app(skfed.KFed())(grid=_NoGrid(), context=_server_context(config))


def test_a_failed_save_keeps_the_model_and_fails_the_app(
    tmp_path, in_process, monkeypatch
):
    from skfed.flower import server_app

    path = tmp_path / "kfed.joblib"
    dump = joblib.dump

    def full_disk(value, filename, *args, **kwargs):
        if str(filename) == str(path):
            raise OSError(28, "No space left on device")
        return dump(value, filename, *args, **kwargs)

    monkeypatch.setattr(joblib, "dump", full_disk)
    config = {"n-nodes": 2, "n-clusters": 2, "model-path": str(path)}
    data = {1: _blobs(50, seed=1), 2: _blobs(50, seed=2)}
    app = server_app(skfed.KFed())
    with pytest.raises(OSError, match="No space left.*it is kept at") as info:
        app(grid=in_process(data), context=_server_context(config))
    kept = str(info.value).rsplit("kept at ", 1)[1].strip("'.")
    try:
        assert joblib.load(kept).n_clients_ == 2
    finally:
        os.remove(kept)
    assert not path.exists()
    assert app.save_error is info.value


def test_sample_indices_are_global_across_nodes(in_process):
    # The classifier's support_ and sent samples number the nodes' rows
    # stacked in client order, as the in-memory fit numbers X's rows.
    X, y = make_blobs(90, n_features=2, centers=2, cluster_std=3.0, random_state=0)
    data = {7: (X[:30], y[:30]), 8: (X[30:], y[30:])}
    nodes = NodeData(in_process(data), n_nodes=2)
    assert nodes.first_rows == {7: 0, 8: 30}
    got = skfed.FederatedRKHSClassifier(random_state=0).fit(nodes.X, nodes.y)
    expected = skfed.FederatedRKHSClassifier(random_state=0).fit(
        X, y, partitions=np.repeat([7, 8], [30, 60])
    )
    assert expected.support_.max() >= 30  # the second node's rows count
    np.testing.assert_array_equal(got.support_, expected.support_)
    for c in (7, 8):
        np.testing.assert_array_equal(got.sent_samples_[c], expected.sent_samples_[c])
    # (client, row) back from a global index.
    clients, rows = nodes.locate(got.support_)
    for c, r, i in zip(clients, rows, got.support_):
        np.testing.assert_array_equal(data[c][0][r], X[i])
    with pytest.raises(ValueError, match=r"\[0, 90\)"):
        nodes.locate([90])


def test_row_free_classifier_on_nodes_is_the_in_memory_one(in_process):
    # method="auto" under raw_rows="refuse": a round of local centers, then
    # one sum of landmark-feature statistics per node, no row; the
    # landmarks are capped below the smallest node's rows, known to the
    # server as its size.
    X, y = make_blobs(150, n_features=3, centers=3, cluster_std=3.0, random_state=0)
    data = {7: (X[:70], y[:70]), 8: (X[70:], y[70:])}
    nodes = NodeData(in_process(data), n_nodes=2)
    kw = {"raw_rows": "refuse", "random_state": 0}
    got = skfed.FederatedRKHSClassifier(**kw).fit(nodes.X, nodes.y)
    expected = skfed.FederatedRKHSClassifier(**kw).fit(
        X, y, partitions=np.repeat([7, 8], [70, 80])
    )
    assert got.method_ == "random_features" and got.features_ == "landmarks"
    # 62 landmarks asked for (70 rows less a tenth, less one), 31 a node.
    assert len(got.landmarks_) <= 62 and got.n_random_features_ < 70
    assert got.communication_.raw_rows == 0
    np.testing.assert_allclose(
        got.decision_function(X), expected.decision_function(X), atol=1e-8
    )


def test_node_loads_and_checks_its_data_once(tmp_path):
    # A process that answers several messages reads the node's file once,
    # and again only when the file changes.
    path = tmp_path / "X.npy"
    np.save(path, _blobs(20))
    loads = []

    def load(context):
        loads.append(context.node_config["data"])
        return np.load(context.node_config["data"])

    node = _Node(load, None, ("skfed",))
    context = _Context(0)
    context.node_config["data"] = str(path)
    node.answer({"op": "describe"}, context)
    _open(node, context)
    for _ in range(3):
        node.answer(_step("flowertest.count"), context)
    assert len(loads) == 1
    np.save(path, _blobs(25))
    assert node.answer({"op": "describe"}, context)["n_samples"] == 25
    _open(node, context)
    assert node.answer(_step("flowertest.count"), context)["upload"]["rows"] == 25
    assert len(loads) == 2


def test_node_runs_steps_on_one_blas_thread_as_in_memory():
    # A node's process has the machine's BLAS threads; a client step must
    # run on one as in memory (skfed._numerics._threads), or BLAS rounds differently.
    node, context = _node(np.ones((4, 2))), _Context(0)
    _open(node, context)
    with threadpool_limits(limits=2, user_api="blas"):
        threads = node.answer(_step("flowertest.blas"), context)["upload"]
    assert threads and set(threads) == {1}


@pytest.mark.parametrize("threads", [1, 2])
def test_kernel_kmeans_through_flower_does_not_depend_on_blas_threads(
    in_process, threads
):
    X, _ = make_blobs(300, n_features=4, centers=3, random_state=3)
    data = {1: X[:100], 2: X[100:200], 3: X[200:]}
    params = dict(INTEGRATION_CASES["FederatedKernelKMeans"][0], eigen_solver="lanczos")
    with threadpool_limits(limits=1):
        expected = skfed.FederatedKernelKMeans(**params).fit(
            X, partitions=np.repeat([1, 2, 3], 100)
        )
    with threadpool_limits(limits=threads, user_api="blas"):
        got = fit_on_grid(
            skfed.FederatedKernelKMeans(**params), in_process(data), n_nodes=3
        )
    np.testing.assert_array_equal(got.labels_, expected.labels_)
