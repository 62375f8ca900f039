"""A real Flower deployment on localhost, from the deployment page's own
files: its commands (``doc/flower_app/localhost.sh``: a SuperLink and three
SuperNodes, each loading its own site's file) and its Flower App
(``doc/flower_app/``: pyproject.toml and skfed_app.py, fitting KFed with
hyperparameters from ``--run-config``). A second run of a Flower App of
the test's own fits DistributedKMeans and, with secure aggregation of its
sum-only rounds, FederatedKernelKMeans on the same SuperNodes.

Every message starts a ClientApp process on its node (Flower's default
isolation), several seconds per round trip here, so the test takes
minutes: it is marked ``deployment`` and left out of the default run; CI
runs it as a step of its own (``pytest -m deployment``).
"""

import importlib.util
import json
import re
import textwrap
import time
from pathlib import Path

import joblib
import numpy as np
import pytest
from sklearn.datasets import make_blobs

import skfed
from skfed._testing import INTEGRATION_CASES

pytest.importorskip("flwr")
try:
    import tomllib
except ImportError:  # Python 3.10: Flower depends on tomli there
    import tomli as tomllib

pytestmark = pytest.mark.deployment

APP_DIR = Path(__file__).parents[2] / "doc" / "flower_app"
NODE_ROWS = 120
# (key, estimator, parameters beyond the integration case's)
FITS = (
    ("DistributedKMeans", "DistributedKMeans", {}),
    # γ given: the masked kernel-width rounds are tested in simulation.
    (
        "masked kernel k-means",
        "FederatedKernelKMeans",
        {"secure_aggregation": True, "gamma": 0.05},
    ),
)

APP = """
import joblib
import numpy as np
from flwr.serverapp import ServerApp

import skfed
from skfed._testing import INTEGRATION_CASES
from skfed.flower import client_app, fit_on_grid


def load(context):
    return np.load(context.node_config["data"])


client = client_app(load)
server = ServerApp()


@server.main()
def main(grid, context):
    fitted = {{}}
    for key, name, extra in {fits!r}:
        est = getattr(skfed, name)(**INTEGRATION_CASES[name][0], **extra)
        fitted[key] = fit_on_grid(
            est, grid, n_nodes={n_nodes}, round_timeout=300, straggler_timeout=120
        )
    joblib.dump(fitted, context.run_config["model-path"])
"""

PYPROJECT = """
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "skfeddeploytest"
version = "1.0.0"
description = "skfed's localhost deployment test"
license = "BSD-3-Clause"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "skfed"

[tool.flwr.app.components]
serverapp = "skfed_deploy_app:server"
clientapp = "skfed_deploy_app:client"

[tool.flwr.app.config]
model-path = "{model_path}"
"""


def _localhost():
    spec = importlib.util.spec_from_file_location(
        "skfed_localhost", APP_DIR / "localhost.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _page_config():
    with open(APP_DIR / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["flwr"]["app"]["config"]


def _overrides(run_argv):
    """The --run-config values of the page's `flwr run`, as a dict."""
    values = {}
    for flag, text in zip(run_argv, run_argv[1:]):
        if flag == "--run-config":
            for item in text.split():
                key, value = item.split("=", 1)
                values[key] = tomllib.loads(f"v = {value}")["v"]
    return values


def test_the_pages_nodes_match_its_run_config():
    localhost = _localhost()
    page = localhost.commands()
    n_nodes = sum(kind == "supernode" for kind, _ in page)
    assert _page_config()["n-nodes"] == n_nodes
    ids = [
        argv[argv.index("--node-config") + 1].split()[0]
        for kind, argv in page
        if kind == "supernode"
    ]
    assert ids == [f"partition-id={p}" for p in range(n_nodes)]


def test_each_supernode_has_skfeds_superexec_on_its_runtime_port():
    # The page's SuperNodes leave their ClientApps to skfed's SuperExec,
    # one beside each, on the SuperNode's Runtime API address.
    page = _localhost().commands()
    nodes = [argv for kind, argv in page if kind == "supernode"]
    executors = [argv for kind, argv in page if kind == "superexec"]
    assert len(executors) == len(nodes)
    for node, executor in zip(nodes, executors):
        assert node[node.index("--isolation") + 1] == "process"
        host = node[node.index("--host") + 1]
        port = node[node.index("--port") + 1]
        address = executor[executor.index("--runtime-api-address") + 1]
        assert address == f"{host}:{port}"


@pytest.fixture
def federation(tmp_path):
    """The page's SuperLink and SuperNodes on 127.0.0.1, stopped after."""
    localhost = _localhost()
    n_nodes = _page_config()["n-nodes"]
    X, _ = make_blobs(n_nodes * NODE_ROWS, n_features=4, centers=3, random_state=2)
    sites = []
    for p in range(n_nodes):
        sites.append(tmp_path / f"site{p}.npy")
        np.save(sites[-1], X[p * NODE_ROWS : (p + 1) * NODE_ROWS])
    try:
        with localhost.LocalFederation(tmp_path, sites) as fed:
            yield X, fed, localhost
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


def test_localhost_deployment_gives_the_in_memory_model(federation, tmp_path):
    X, fed, localhost = federation
    n_nodes = _page_config()["n-nodes"]
    parts = np.repeat(np.arange(n_nodes), NODE_ROWS)

    # 1. The page's app and command, saving where this test can look (a
    # directory that does not exist yet: the app creates it).
    app = localhost.copy_app(tmp_path / "page-app")
    model_path = tmp_path / "models" / "kfed.joblib"
    # Long round and straggler timeouts: machines that run the suite can be
    # busy, and every message starts a ClientApp process.
    run = fed.run(
        app,
        f'model-path="{model_path}" round-timeout=300 straggler-timeout=120',
        timeout=900,
    )
    assert model_path.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    got = joblib.load(model_path)
    params = {**_page_config(), **_overrides(fed.run_argv)}
    expected = skfed.KFed(
        n_clusters=params["n-clusters"], random_state=params["random-state"]
    ).fit(X, partitions=parts)
    assert got.n_clusters == 3  # from the page's --run-config
    np.testing.assert_array_equal(got.labels_, expected.labels_)
    np.testing.assert_allclose(
        got.cluster_centers_, expected.cluster_centers_, rtol=1e-8, atol=1e-10
    )
    assert got.communication_.to_records() == expected.communication_.to_records()

    # 2. More estimators on the same SuperNodes, from an app of the test's.
    app = tmp_path / "test-app"
    app.mkdir()
    model_path = tmp_path / "models.joblib"
    (app / "pyproject.toml").write_text(PYPROJECT.format(model_path=model_path))
    (app / "skfed_deploy_app.py").write_text(
        textwrap.dedent(APP.format(fits=FITS, n_nodes=n_nodes))
    )
    # Without the page's --run-config: this app has none of its keys.
    run = fed.run(app, page_config=False, timeout=900)
    assert model_path.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    fitted = joblib.load(model_path)
    for key, name, extra in FITS:
        params = {**INTEGRATION_CASES[name][0], **extra}
        expected = getattr(skfed, name)(**params).fit(X, partitions=parts)
        got = fitted[key]
        np.testing.assert_array_equal(got.predict(X), expected.predict(X))
        np.testing.assert_array_equal(got.labels_, expected.labels_)
        np.testing.assert_allclose(
            got.cluster_centers_, expected.cluster_centers_, rtol=1e-8, atol=1e-10
        )
        log = got.communication_
        assert log.to_records() == expected.communication_.to_records()
        if extra.get("secure_aggregation"):
            # Its sum-only rounds crossed Flower masked, as in memory.
            kinds = {d["disclosure"] for d in log.disclosure()}
            assert "sum_only" in kinds
            assert any(d["name"] == "secure aggregation keys" for d in log.disclosure())
        # Flower's own bytes were recorded, and cover the protocol's.
        assert log.wire_upload_bytes >= log.upload_bytes > 0


KILL_APP = """
import json
import time

import numpy as np
from flwr.serverapp import ServerApp

from skfed import KFed
from skfed.flower import client_app, fit_on_grid
from skfed.preprocessing import FederatedStandardScaler
from skfed.privacy import DifferentialPrivacy


def load(context):
    return np.load(context.node_config["data"])


client = client_app(load)
server = ServerApp()


@server.main()
def main(grid, context):
    out = context.run_config["out"]
    try:
        FIT
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"}
    result["at"] = time.time()
    with open(out, "w") as f:
        json.dump(result, f)
"""

# The defaults, but for a round timeout no busy machine reaches: the lost
# node must be noticed by the straggler rule.
KFED_FIT = """fit_on_grid(KFed(n_clusters=3, random_state=0), grid, n_nodes=3,
                    round_timeout=600)
        result = {"error": None}"""
SCALER_FIT = """est = FederatedStandardScaler(
            privacy=DifferentialPrivacy(epsilon=1.0, bounds=(-20.0, 20.0)),
            secure_aggregation=True,
            on_client_error="drop",
        )
        fit_on_grid(est, grid, n_nodes=3, round_timeout=600)
        result = {
            "error": None,
            "failed": sorted(str(c) for c in est.failed_clients_),
            "spent": est.privacy_spent_[0],
            "mean": est.mean_.tolist(),
        }"""


def _kill_mid_fit(federation, tmp_path, fit, messages):
    """Run a Flower App whose fit is ``fit`` (a line of the app's main,
    setting ``result``), kill -9 SuperNode 1 once it has received
    ``messages`` messages, and return the app's result and the seconds it
    took after the kill."""
    _, fed, localhost = federation
    app = tmp_path / "kill-app"
    app.mkdir()
    out = tmp_path / "kill.json"
    (app / "pyproject.toml").write_text(
        PYPROJECT.format(model_path="")
        .replace("skfed_deploy_app", "skfed_kill_app")
        .replace('model-path = ""', f'out = "{out}"')
    )
    (app / "skfed_kill_app.py").write_text(KILL_APP.replace("FIT", fit))
    run = fed.start_run(app, page_config=False)
    orphans = []
    try:
        deadline = time.monotonic() + 600
        while fed.messages_received(1) < messages:
            assert run.poll() is None, (tmp_path / "flwr-run.log").read_text()
            assert time.monotonic() < deadline, "the fit did not start"
            time.sleep(0.2)
        node = fed.processes["supernode1"]
        # Flower's processes under it notice its end by themselves; the
        # test stops them at the end in any case.
        orphans = localhost._descendants([node])
        node.kill()
        killed_at = time.time()
        run.wait(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
        for child in orphans:
            try:
                child.kill()
            except Exception:  # already gone
                pass
    assert out.exists(), (tmp_path / "flwr-run.log").read_text()[-3000:]
    result = json.loads(out.read_text())
    return result, result["at"] - killed_at


def test_a_supernode_killed_mid_fit_ends_the_fit_naming_it(federation, tmp_path):
    # kill -9 of a SuperNode (its ClientApps go with it): Flower keeps it
    # among the connected nodes for about a minute (its missed
    # heartbeats); the fit must end with an error naming the node and its
    # client within 30 s. Mid-fit: the node has answered `describe` and
    # received `open`.
    result, seconds = _kill_mid_fit(federation, tmp_path, KFED_FIT, messages=2)
    print(f"\nkilled SuperNode noticed in {seconds:.1f} s: {result['error']}")
    # partition-id 1 is client 1; its node id is Flower's. Noticed by the
    # straggler rule, or by Flower if its missed heartbeats come first
    # (the node leaves the grid, or Flower answers for it).
    assert result["error"] is not None
    assert "Client 1 " in result["error"], result["error"]
    noticed = r"node \d+( is taken as lost| left the federation|: Flower error)"
    assert re.search(noticed, result["error"]), result["error"]
    # Within half a minute where a round trip takes a few seconds (the
    # straggler limit is 20 s, or 4 times what the other nodes took).
    assert seconds < 30, result


def test_a_masked_private_fit_survives_a_killed_supernode(federation, tmp_path):
    # Secure aggregation's dropout recovery and distributed noise over
    # Flower: a private scaler whose one noised round is masked, fitted
    # with on_client_error="drop", loses SuperNode 1 after the key exchange
    # (describe, open, keys, peers) and completes without it, within its
    # budget.
    X, _, _ = federation
    result, seconds = _kill_mid_fit(federation, tmp_path, SCALER_FIT, messages=4)
    print(f"\nfit completed {seconds:.1f} s after the kill: {result}")
    assert result["error"] is None, result["error"]
    assert result["failed"] == ["1"], result
    assert result["spent"] <= 1.0 + 1e-9
    # The two remaining sites' mean, within the noise (bounds +-20, two
    # sites of 120 rows).
    kept = np.vstack([X[:NODE_ROWS], X[2 * NODE_ROWS :]])
    assert np.max(np.abs(np.array(result["mean"]) - kept.mean(axis=0))) < 5.0
