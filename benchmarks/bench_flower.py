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

Usage::

    python benchmarks/bench_flower.py [--n N] [--nodes M]
"""

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from bench_dask import make_estimators, output, write_report

RESULTS = Path(__file__).parent / "results"
D_FEATURES = 20


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
    args = parser.parse_args()
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
