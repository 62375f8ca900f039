"""Dask-resident data against in-memory data, estimator by estimator.

The data set (blobs, d = 20, chunks of equal size, one client per chunk)
is generated on the workers of a 2-worker ``LocalCluster`` (processes, one
thread each). Each estimator is fitted, with its defaults, twice in the
same run: once on the dask array where it lives (``est.fit(X)``), and once
on the same rows computed into this process with ``partitions`` = chunk
index (``est.fit(X_mem, partitions=...)``, the in-process joblib
transport). Reported: wall time of both fits, their ratio, whether the two
models agree (predictions or projections on a sample of rows), the bytes
this process fetched from the workers during the dask fit (every
``Client.gather``, measured with ``dask.sizeof``), the ledger's upload
bytes, and the bytes of X.

The in-memory fit's time does not include computing X into memory; the
dask fit's does include building the clients on the workers (and their
input checks).

Usage::

    python benchmarks/bench_dask.py [--quick] [--n N] [--chunks M]
"""

import argparse
import platform
import time
import warnings

import numpy as np
from _results import results_dir

RESULTS = results_dir()
D_FEATURES = 20

# N above which an estimator's in-memory fit is known to exceed this
# machine: its rows are left out with the reason, {name: (N, reason)}.
# Empty: every estimator fits a million rows in memory on two cores (the
# RKHS classifier's chunked local duals take about 65 s there).
LIMITS = {}


def _block(block, block_info=None):
    """Rows of ten blobs in d = 20, generated on the worker from the
    chunk's index."""
    rng = np.random.RandomState(block_info[None]["chunk-location"][0])
    centers = np.random.RandomState(12345).uniform(-10, 10, (10, block.shape[1]))
    labels = rng.randint(0, 10, block.shape[0])
    return centers[labels] + rng.standard_normal(block.shape)


def make_estimators():
    from skfed import (
        DistributedKernelPCA,
        DistributedKMeans,
        FederatedKernelKMeans,
        FederatedRKHSClassifier,
        KFed,
    )

    return {
        "KFed": lambda: KFed(10, random_state=0),
        "DistributedKMeans": lambda: DistributedKMeans(10, random_state=0),
        "FederatedKernelKMeans": lambda: FederatedKernelKMeans(10, random_state=0),
        "DistributedKernelPCA": lambda: DistributedKernelPCA(random_state=0),
        "FederatedRKHSClassifier": lambda: FederatedRKHSClassifier(random_state=0),
    }


def output(est, X):
    for method in ("predict", "transform"):
        if hasattr(est, method):
            return np.asarray(getattr(est, method)(X), dtype=float)
    raise AssertionError(type(est).__name__)


def run(n, n_chunks, only=None):
    import dask
    import dask.array as da
    import distributed
    from dask.sizeof import sizeof
    from threadpoolctl import threadpool_limits

    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    client = distributed.Client(cluster)
    fetched = []
    gather = client.gather

    def counting(futures, *args, **kwargs):
        out = gather(futures, *args, **kwargs)
        fetched.append(sizeof(out))
        return out

    client.gather = counting
    rows = []
    try:
        chunk = -(-n // n_chunks)
        X = da.zeros((n, D_FEATURES), chunks=(chunk, D_FEATURES)).map_blocks(
            _block, dtype=float
        )
        y = (X[:, 0] > 0).astype(int)
        X = X.persist()
        y = y.persist()
        with threadpool_limits(limits=1):
            X_mem, y_mem = dask.compute(X, y)
        chunk_ids = np.repeat(np.arange(len(X.chunks[0])), X.chunks[0])
        sample = np.random.RandomState(0).choice(n, min(n, 2000), replace=False)
        for name, make in make_estimators().items():
            if only and name not in only:
                continue
            limit = LIMITS.get(name)
            if limit is not None and n > limit[0]:
                rows.append({"estimator": name, "N": n, "note": limit[1]})
                print(rows[-1], flush=True)
                continue
            with warnings.catch_warnings(), threadpool_limits(limits=1):
                warnings.simplefilter("ignore")
                start = time.perf_counter()
                mem = make().fit(X_mem, y_mem, partitions=chunk_ids)
                t_mem = time.perf_counter() - start
                fetched.clear()
                start = time.perf_counter()
                res = make().fit(X, y)
                t_dask = time.perf_counter() - start
            moved = sum(fetched)
            same = np.array_equal(
                output(res, X_mem[sample]), output(mem, X_mem[sample])
            )
            rows.append(
                {
                    "estimator": name,
                    "N": n,
                    "clients": len(X.chunks[0]),
                    "in-memory s": round(t_mem, 2),
                    "dask s": round(t_dask, 2),
                    "dask / in-memory": round(t_dask / t_mem, 2),
                    "same model": same,
                    "fetched MB": round(moved / 1e6, 3),
                    "upload MB": round(res.communication_.upload_bytes / 1e6, 3),
                    "X MB": round(X.nbytes / 1e6, 1),
                }
            )
            print(rows[-1], flush=True)
    finally:
        client.close()
        cluster.close()
    return rows


def table(rows):
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        lines.append("| " + " | ".join(str(r.get(k, "")) for k in keys) + " |")
    return "\n".join(lines)


def write_report(name, title, rows):
    """Write ``<name>.md`` in the results folder: the title, the machine and
    the table."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.md"
    text = (
        f"# {title}\n\n"
        f"Machine: {platform.machine()}, {platform.python_version()}\n\n"
        + table(rows)
        + "\n"
    )
    path.write_text(text)
    print(text)
    print(f"wrote {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 20,000")
    parser.add_argument("--n", type=int, default=None)
    parser.add_argument("--chunks", type=int, default=10)
    parser.add_argument("--only", nargs="*", help="estimator class names")
    args = parser.parse_args()
    n = args.n or (20_000 if args.quick else 1_000_000)
    rows = run(n, args.chunks, args.only)
    write_report(
        f"bench_dask_{n}",
        f"Dask-resident vs in-memory data (N = {n:,}, d = {D_FEATURES}, "
        f"{args.chunks} chunks = clients, 2-worker LocalCluster)",
        rows,
    )


if __name__ == "__main__":
    main()
