"""The driver's memory during a fit on dask-resident data, as N grows.

A scheduler and two workers (processes, one thread each) are started as
separate processes (``dask scheduler`` and ``dask worker``), so that the
driver measured here holds only what the fit itself keeps: a
``LocalCluster`` runs its scheduler inside the driver, whose task graphs
and bookkeeping would be counted too. The rows (blobs in d = 20, as in
``bench_dask.py``) are generated on the workers, one chunk per client, and
the number of clients is fixed, so that only N changes between rows of
the table.

Reported per estimator and N: the driver's peak of traced allocations
during ``fit`` (``tracemalloc``, which sees NumPy's buffers), the bytes of
the fitted ``labels_`` (N int32, fetched at the end of the fit so that the
model outlives the cluster; none with ``compute_labels=False``, which
leaves them on the clients), the peak without them, and what the driver
still holds after the fit.

Usage::

    python benchmarks/bench_dask_memory.py [--n 1600000 16000000] [--clients 16]
        [--compute-labels {both,true,false}]

The default runs each estimator with ``compute_labels=True`` and ``False``
at each N (the deploy page's table).
"""

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
import warnings
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_dask import D_FEATURES, _block, write_report  # noqa: E402

MiB = 2**20


def _start_cluster(folder):
    """A scheduler and a two-process worker pool, outside this process."""
    dask = str(Path(sys.executable).with_name("dask"))
    scheduler_file = str(Path(folder) / "scheduler.json")
    # The scheduler and the workers unpickle the row generator from this
    # folder's bench_dask.
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(Path(__file__).parent), env.get("PYTHONPATH")])
    )
    scheduler = subprocess.Popen(
        [
            dask,
            "scheduler",
            "--scheduler-file",
            scheduler_file,
            "--port",
            "0",
            "--no-dashboard",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    workers = subprocess.Popen(
        [
            dask,
            "worker",
            "--scheduler-file",
            scheduler_file,
            "--nworkers",
            "2",
            "--nthreads",
            "1",
            "--no-dashboard",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    return scheduler_file, [workers, scheduler]


def _estimators(compute_labels):
    from skfed import DistributedKMeans, KFed

    estimators = {}
    for labels in compute_labels:
        suffix = "" if labels else ", compute_labels=False"
        estimators[f"KFed{suffix}"] = partial(
            KFed, 10, random_state=0, compute_labels=labels
        )
        estimators[f"DistributedKMeans{suffix}"] = partial(
            DistributedKMeans, 10, random_state=0, compute_labels=labels
        )
    return estimators


def run(sizes, n_clients, compute_labels=(True, False)):
    import dask.array as da
    import distributed

    rows = []
    with tempfile.TemporaryDirectory() as folder:
        scheduler_file, processes = _start_cluster(folder)
        try:
            for _ in range(60):
                if Path(scheduler_file).exists():
                    break
                time.sleep(0.5)
            client = distributed.Client(scheduler_file=scheduler_file)
            client.wait_for_workers(2, timeout=60)
            for n in sizes:
                chunk = -(-n // n_clients)
                X = da.zeros((n, D_FEATURES), chunks=(chunk, D_FEATURES))
                X = X.map_blocks(_block, dtype=float).persist()
                distributed.wait(X)
                for name, make in _estimators(compute_labels).items():
                    estimator = make()
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        # What the previous fit left for the collector would
                        # otherwise be freed, and its space reused, in this one.
                        gc.collect()
                        tracemalloc.start()
                        start = time.perf_counter()
                        estimator.fit(X)
                        seconds = time.perf_counter() - start
                        current, peak = tracemalloc.get_traced_memory()
                        tracemalloc.stop()
                    labels = getattr(estimator, "labels_", np.empty(0)).nbytes
                    rows.append(
                        {
                            "estimator": name,
                            "N": n,
                            "clients": len(X.chunks[0]),
                            "X on workers MiB": round(X.nbytes / MiB, 1),
                            "driver peak MiB": round(peak / MiB, 2),
                            "labels_ MiB": round(labels / MiB, 2),
                            "peak without labels_ MiB": round((peak - labels) / MiB, 2),
                            "held after fit MiB": round(current / MiB, 2),
                            "fit s": round(seconds, 1),
                            "load": round(os.getloadavg()[0], 1),
                        }
                    )
                    print(rows[-1], flush=True)
                    del estimator
                    # A finished fit's transport tells the workers to drop its
                    # clients when it is collected: collected here, so that
                    # the next fit starts from the same state.
                    gc.collect()
                del X
                gc.collect()
            client.close()
        finally:
            for process in processes:
                process.terminate()
                process.wait(timeout=30)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1_600_000, 16_000_000])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument(
        "--compute-labels",
        choices=["both", "true", "false"],
        default="both",
        help="the estimators' compute_labels: each value, or one",
    )
    args = parser.parse_args()
    compute_labels = {"both": (True, False), "true": (True,), "false": (False,)}
    rows = run(args.n, args.clients, compute_labels[args.compute_labels])
    write_report(
        "dask_memory",
        f"The driver's memory during a fit on dask-resident data ({args.clients} "
        "clients, scheduler and workers in their own processes)",
        rows,
    )


if __name__ == "__main__":
    main()
