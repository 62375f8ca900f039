"""Fits through Flower's simulation engine against the in-memory fit.

Each estimator, with its defaults except the cluster count, is fitted on
the same data twice in one run: in memory (``partitions`` = node) and
through Flower's simulation engine (``skfed.flower``: one ServerApp driving
the fit round by round, one simulated node per client, each loading its
own ``.npy`` file). All estimators are fitted in one simulation so that
Ray starts once; its start-up, and that of the simulated nodes, is not in
the fit times.

Reported per estimator: in-memory and Flower fit times, the protocol's
rounds, the Flower messages per node (rounds plus the setup and the
collection of per-sample outputs), the mean latency of one message round
trip (Flower fit time / messages per node), the ledger's upload bytes
against the bytes Flower put on the wire (both directions), and whether
the two models give identical outputs (predictions or projections) on
2,000 rows.

``--deployment`` measures instead the round trips of a real deployment
on localhost: the deployment page's own commands
(``doc/flower_app/localhost.sh``: a SuperLink and three SuperNodes, one
ClientApp process per message), with a Flower App that fits KFed (k = 3
from the page's ``--run-config``, N = 360, d = 4) after the nodes have
connected, and reports the fit's seconds per message round trip. It then runs the
same with Flower's own SuperExec (each SuperNode starting it, one fresh
``flwr-clientapp`` process per message) instead of the page's
``python -m skfed.flower.superexec``, whose ClientApp processes are forked
with their imports done; ``--rounds`` alternates the two that many times.
``--flower-poll`` leaves out the page's ``FLWR_SUPEREXEC_TASK_POLL_INTERVAL``
(Flower's 1 s default).

``--breakdown`` measures where a deployed round trip's time goes, without
starting Flower: what each message's new ClientApp process pays before it
runs skfed's step (the interpreter, the modules ``flwr-clientapp`` imports,
the page's app module and so skfed with scikit-learn, each in a fresh
process, the median of ``--repeat`` alternated runs), what the same costs
a process forked by skfed's SuperExec (from its fork server, which has
imported Flower and skfed), the site's data
loaded and checked (in this process), and Flower 1.42's fixed waits, read
from its source. The load average is recorded beside each figure.

Usage::

    python benchmarks/bench_flower.py [--n N] [--nodes M]
    python benchmarks/bench_flower.py --deployment [--repeat R] [--rounds K]
    python benchmarks/bench_flower.py --deployment --flower-poll
    python benchmarks/bench_flower.py --breakdown [--repeat R]
"""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from _results import results_dir
from bench_dask import make_estimators, output, write_report

RESULTS = results_dir()
D_FEATURES = 20
LOCALHOST = Path(__file__).parent.parent / "doc" / "flower_app" / "localhost.py"

# The deployment's app: it times `repeat` KFed fits once the nodes are
# connected and writes the seconds and messages per node of each.
DEPLOYED_APP = """
import inspect
import json
import time

import numpy as np
from flwr.serverapp import ServerApp

from skfed import KFed
from skfed.flower import NodeData, client_app, fit_on_grid


def load(context):
    return np.load(context.node_config["data"])


client = client_app(load)
server = ServerApp()


@server.main()
def main(grid, context):
    # The nodes are up and have answered once (a busy machine can take
    # minutes to start their first ClientApps).
    NodeData(grid, n_nodes=3, timeout=900)
    fits = []
    for _ in range(int(context.run_config["repeat"])):
        start = time.perf_counter()
        config = context.run_config
        est = KFed(n_clusters=config["n-clusters"], random_state=0)
        # A round timeout of minutes where the code has one (a busy machine).
        wait = inspect.signature(fit_on_grid).parameters
        wait = {"round_timeout": 900} if "round_timeout" in wait else {}
        est = fit_on_grid(est, grid, n_nodes=3, timeout=900, **wait)
        seconds = time.perf_counter() - start
        fits.append([seconds, len(est.communication_.wire_records) // 2])
    with open(context.run_config["out"], "w") as f:
        json.dump(fits, f)
"""

DEPLOYED_PYPROJECT = """
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "skfedbench"
version = "1.0.0"
license = "BSD-3-Clause"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "skfed"

[tool.flwr.app.components]
serverapp = "bench_app:server"
clientapp = "bench_app:client"

[tool.flwr.app.config]
out = ""
repeat = 1
n-clusters = 8
"""


def run_deployment(folder, repeat, flower_poll, flower_superexec=False):
    """Per-message round trips of KFed fits on the page's localhost
    deployment (three SuperNodes); with ``flower_superexec``, each
    SuperNode starting Flower's own SuperExec instead of the page's."""
    from sklearn.datasets import make_blobs

    spec = importlib.util.spec_from_file_location("skfed_localhost", LOCALHOST)
    localhost = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(localhost)
    folder = Path(folder)
    X, _ = make_blobs(360, n_features=4, centers=3, random_state=2)
    sites = []
    for p in range(3):
        sites.append(folder / f"site{p}.npy")
        np.save(sites[-1], X[p * 120 : (p + 1) * 120])
    app = folder / "app"
    app.mkdir()
    (app / "bench_app.py").write_text(DEPLOYED_APP)
    (app / "pyproject.toml").write_text(DEPLOYED_PYPROJECT)
    out = folder / "fits.json"
    federation = localhost.LocalFederation(folder, sites)
    if flower_poll:
        federation.skip_exports = True
    federation.flower_superexec = flower_superexec
    with federation:
        run = federation.run(app, f'out="{out}"', f"repeat={repeat}")
    if not out.exists():
        raise RuntimeError(run.stdout[-3000:] + run.stderr[-3000:])
    rows = []
    for seconds, messages in json.loads(out.read_text()):
        rows.append(
            {
                "SuperExec": "Flower's" if flower_superexec else "the page's (skfed)",
                "load": round(os.getloadavg()[0], 1),
                "estimator": "KFed",
                "nodes": 3,
                "messages per node": messages,
                "fit s": round(seconds, 1),
                "s per round trip": round(seconds / messages, 2),
            }
        )
        print(rows[-1], flush=True)
    return rows


# What a ClientApp process does before skfed's step runs, each step in a
# fresh interpreter: (what, code); the app module is the page's.
PROCESS_STEPS = (
    ("Python interpreter", "pass"),
    ("+ Flower's ClientApp runtime", "import flwr.supernode.runtime.run_clientapp"),
    (
        "+ the page's app module (skfed, scikit-learn)",
        "import flwr.supernode.runtime.run_clientapp; import skfed_app",
    ),
)


def _seconds(code, cwd):
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=cwd, check=True)
    return time.perf_counter() - start


def _import_app(app_dir):
    """A forked ClientApp's first work: the page's app module imported."""
    sys.path.insert(0, str(app_dir))
    import flwr.supernode.runtime.run_clientapp  # noqa: F401
    import skfed_app  # noqa: F401


def _forked_seconds(app_dir, repeat):
    """Median seconds from asking skfed's SuperExec's fork server for a
    process to that process having imported the app module and exited,
    once the server has done its own imports (the first, untimed start
    waits for them, as a message would only in a SuperExec's first
    seconds)."""
    from skfed.flower._warm import fork_server

    context = fork_server()
    took = []
    for timed in [False] + [True] * repeat:
        start = time.perf_counter()
        process = context.Process(target=_import_app, args=(app_dir,))
        process.start()
        process.join()
        if timed:
            took.append(time.perf_counter() - start)
    return float(np.median(took))


def run_breakdown(repeat):
    """Seconds of each part of a deployed round trip (see the module
    docstring)."""
    from sklearn.datasets import make_blobs

    from skfed._engine._client import make_client

    app_dir = LOCALHOST.parent
    times = {what: [] for what, _ in PROCESS_STEPS}
    loads = []
    for _ in range(repeat):
        # Alternated, so that a change in the machine's load hits all.
        for what, code in PROCESS_STEPS:
            times[what].append(_seconds(code, app_dir))
        loads.append(os.getloadavg()[0])
    load = f"{min(loads):.1f}-{max(loads):.1f}"
    rows = []
    for what, _ in PROCESS_STEPS:
        rows.append(
            {
                "part": f"new process: {what}",
                "s": round(float(np.median(times[what])), 2),
                "load average": load,
            }
        )
    rows.append(
        {
            "part": "forked by skfed's SuperExec: the app module imported",
            "s": round(_forked_seconds(app_dir, repeat), 3),
            "load average": f"{os.getloadavg()[0]:.1f}",
        }
    )
    spec = {}
    for n in (120, 100_000):
        X, _ = make_blobs(n, n_features=4, centers=3, random_state=2)
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "site.npy"
            np.save(path, X)
            took = []
            for _ in range(repeat):
                start = time.perf_counter()
                make_client(0, np.load(path), None, np.arange(n), 0, spec)
                took.append(time.perf_counter() - start)
        rows.append(
            {
                "part": f"site data loaded and checked ({n:,} rows, d = 4)",
                "s": round(float(np.median(took)), 4),
                "load average": f"{os.getloadavg()[0]:.1f}",
            }
        )
    # Flower 1.42's own waits (flwr/supernode/start_client_internal.py,
    # flwr/supercore/superexec/run_superexec.py): fixed, not measured.
    rows += [
        {
            "part": "idle SuperNode: wait before asking the SuperLink again",
            "s": 3.0,
            "load average": "(Flower's source)",
        },
        {
            "part": "SuperNode: checks for its ClientApp's reply every",
            "s": 0.5,
            "load average": "(Flower's source)",
        },
        {
            "part": "SuperExec: looks for a task to start every (page's setting)",
            "s": 0.1,
            "load average": "(Flower's source)",
        },
    ]
    for row in rows:
        print(row, flush=True)
    return rows


def run(n, n_nodes, folder, only=None):
    from flwr.serverapp import ServerApp
    from flwr.simulation import run_simulation
    from sklearn.datasets import make_blobs
    from threadpoolctl import threadpool_limits

    from skfed.flower import NodeData, client_app, fit_on_grid

    X, y = make_blobs(n, n_features=D_FEATURES, centers=10, random_state=0)
    y = (y < 5).astype(int)
    parts = np.repeat(np.arange(n_nodes), -(-n // n_nodes))[:n]
    for p in range(n_nodes):
        np.save(f"{folder}/X{p}.npy", X[parts == p])
        np.save(f"{folder}/y{p}.npy", y[parts == p])

    def load(context):
        p = context.node_config["partition-id"]
        return np.load(f"{folder}/X{p}.npy"), np.load(f"{folder}/y{p}.npy")

    flower = {}
    app = ServerApp()

    @app.main()
    def main(grid, context):
        # Start the simulated nodes (Ray workers importing skfed) before
        # timing anything.
        NodeData(grid, n_nodes=n_nodes)
        for name, make in make_estimators().items():
            if only and name not in only:
                continue
            # BLAS on one thread on the server too, as in the in-memory fit
            # below and in the simulated nodes (Ray runs them so): a
            # multithreaded BLAS sums in another order, which a Lanczos
            # solver of thousands of steps can turn into a label permutation.
            with warnings.catch_warnings(), threadpool_limits(limits=1):
                warnings.simplefilter("ignore")
                start = time.perf_counter()
                est = fit_on_grid(make(), grid, n_nodes=n_nodes)
                flower[name] = (est, time.perf_counter() - start)
            print(name, round(flower[name][1], 2), "s", flush=True)

    run_simulation(
        server_app=app,
        client_app=client_app(load),
        num_supernodes=n_nodes,
        backend_config={"client_resources": {"num_cpus": 1}},
    )
    rows = []
    for name, make in make_estimators().items():
        if name not in flower:
            continue
        with warnings.catch_warnings(), threadpool_limits(limits=1):
            warnings.simplefilter("ignore")
            start = time.perf_counter()
            mem = make().fit(X, y, partitions=parts)
            t_mem = time.perf_counter() - start
        est, t_flower = flower[name]
        log = est.communication_
        messages = len(log.wire_records) // 2
        rows.append(
            {
                "estimator": name,
                "in-memory s": round(t_mem, 2),
                "Flower s": round(t_flower, 2),
                "rounds": log.n_rounds,
                "messages per node": messages,
                "ms per message": round(1000 * t_flower / messages, 1),
                "upload KB (ledger)": round(log.upload_bytes / 1e3, 1),
                "wire up KB": round(log.wire_upload_bytes / 1e3, 1),
                "wire down KB": round(log.wire_download_bytes / 1e3, 1),
                "same model": bool(
                    np.array_equal(output(est, X[:2000]), output(mem, X[:2000]))
                ),
            }
        )
        print(rows[-1], flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--only", nargs="*", help="estimator class names")
    parser.add_argument("--deployment", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--flower-poll", action="store_true")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="with --deployment: deployments of each kind, alternated",
    )
    parser.add_argument("--breakdown", action="store_true")
    args = parser.parse_args()
    if args.breakdown:
        write_report(
            "bench_flower_breakdown",
            "Where a deployed Flower round trip's time goes (localhost)",
            run_breakdown(args.repeat),
        )
        return
    if args.deployment:
        rows = []
        # The page's commands, then the same with Flower's own SuperExec
        # (started by each SuperNode), alternated --rounds times.
        for _ in range(args.rounds):
            for flower_superexec in (False, True):
                with tempfile.TemporaryDirectory() as folder:
                    rows += run_deployment(
                        folder, args.repeat, args.flower_poll, flower_superexec
                    )
        poll = "Flower's default poll" if args.flower_poll else "the page's commands"
        write_report(
            "bench_flower_deployment",
            f"Flower deployment on localhost, three SuperNodes ({poll}): "
            "KFed round trips",
            rows,
        )
        return
    with tempfile.TemporaryDirectory() as folder:
        rows = run(args.n, args.nodes, folder, args.only)
    write_report(
        f"bench_flower_{args.n}",
        f"Flower simulation vs in-memory fit (N = {args.n:,}, d = {D_FEATURES}, "
        f"{args.nodes} nodes)",
        rows,
    )


if __name__ == "__main__":
    main()
