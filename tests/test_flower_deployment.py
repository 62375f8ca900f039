"""A real Flower deployment on localhost: a SuperLink, three SuperNodes
each loading its own client's file, and ``flwr run`` of a Flower App that
fits KFed, DistributedKMeans and, with secure aggregation of its sum-only
rounds, FederatedKernelKMeans with skfed.flower.

Every message starts a ClientApp process on its node (Flower's default
isolation), about 10-15 s per round trip here, so the test takes minutes:
it is marked ``deployment`` and left out of the default run; CI runs it as
a step of its own (``pytest -m deployment``).
"""

import os
import shutil
import socket
import subprocess
import sys
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

pytestmark = pytest.mark.deployment

N_NODES = 3
NODE_ROWS = 120
# (key, estimator, parameters beyond the integration case's)
FITS = (
    ("KFed", "KFed", {}),
    ("DistributedKMeans", "DistributedKMeans", {}),
    # γ given: the masked kernel-width rounds are tested in simulation.
    (
        "masked kernel k-means",
        "FederatedKernelKMeans",
        {"secure_aggregation": True, "gamma": 0.05},
    ),
)
HOST = "127.0.0.1"

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
        fitted[key] = fit_on_grid(est, grid, n_nodes={n_nodes}, timeout=300)
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


def _free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _wait_for_port(port, proc, log, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited early:\n{Path(log).read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on {HOST}:{port}")


@pytest.fixture
def federation(tmp_path):
    """SuperLink and SuperNodes on 127.0.0.1 only, stopped afterwards."""
    bin_dir = Path(sys.executable).parent
    if shutil.which("flower-superlink", path=str(bin_dir)) is None:
        pytest.skip("Flower's command-line tools are not installed")
    env = {
        **os.environ,
        "FLWR_HOME": str(tmp_path / "flwr-home"),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    link_port = _free_port()
    processes = []

    def start(args, log):
        with open(log, "w") as out:
            proc = subprocess.Popen(
                args, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path
            )
        processes.append(proc)
        return proc

    try:
        log = tmp_path / "superlink.log"
        link = start(
            [
                "flower-superlink",
                "--insecure",
                "--host",
                HOST,
                "--port",
                str(link_port),
            ],
            log,
        )
        _wait_for_port(link_port, link, log)
        X, _ = make_blobs(N_NODES * NODE_ROWS, n_features=4, centers=3, random_state=2)
        for p in range(N_NODES):
            data = tmp_path / f"X{p}.npy"
            np.save(data, X[p * NODE_ROWS : (p + 1) * NODE_ROWS])
            port = _free_port()
            log = tmp_path / f"supernode{p}.log"
            node = start(
                [
                    "flower-supernode",
                    "--insecure",
                    "--superlink",
                    f"{HOST}:{link_port}",
                    "--host",
                    HOST,
                    "--port",
                    str(port),
                    "--node-config",
                    f'partition-id={p} data="{data}"',
                ],
                log,
            )
            _wait_for_port(port, node, log)
        home = tmp_path / "flwr-home"
        home.mkdir(exist_ok=True)
        (home / "config.toml").write_text(
            f'[superlink]\ndefault = "local"\n\n[superlink.local]\n'
            f'address = "{HOST}:{link_port}"\ninsecure = true\n'
        )
        yield X, env
    finally:
        for proc in reversed(processes):
            proc.terminate()
        for proc in processes:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_localhost_deployment_gives_the_in_memory_model(federation, tmp_path):
    X, env = federation
    app = tmp_path / "app"
    app.mkdir()
    model_path = tmp_path / "models.joblib"
    (app / "pyproject.toml").write_text(PYPROJECT.format(model_path=model_path))
    (app / "skfed_deploy_app.py").write_text(
        textwrap.dedent(APP.format(fits=FITS, n_nodes=N_NODES))
    )
    run = subprocess.run(
        ["flwr", "run", str(app), "local", "--stream"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert model_path.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    fitted = joblib.load(model_path)
    parts = np.repeat(np.arange(N_NODES), NODE_ROWS)
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
