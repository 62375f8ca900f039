"""Federated kernel k-means' eigen-solvers: rounds against floats.

DSPGD solves one eigen-problem per iteration on G = Σ_m W[m]ᵀW[m], through
the clients' products. This script fits ``FederatedKernelKMeans`` with its
defaults on the scaling benchmark's blobs (d = 20, k = 10) and varies only
the eigen-solver: single-vector Lanczos (``lanczos_block_size=1``, the
paper's), block Lanczos with b = 4 and b = 8 (the default block), and the
Gram solver (one upload of each client's W[m]ᵀW[m] per iteration, which
``eigen_solver="auto"``, the default, takes for these k = 10 clusters). For each, on
few large and on many small clients: rounds, Lanczos products (from the
ledger: floats up in the Lanczos rounds over M (D + r_t)), floats up and
down, fit time, peak RSS (each fit in its own process), NMI and whether the
labels equal those of b = 1 up to their names.

BLAS is pinned to one thread; time ratios within one run are what counts.

Usage::

    python benchmarks/bench_lanczos_blocks.py [--quick]
"""

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
import warnings

import numpy as np
from _results import results_dir
from bench_scaling import table

RESULTS = results_dir()
SOLVERS = {
    "lanczos, b = 1": {"eigen_solver": "lanczos", "lanczos_block_size": 1},
    "lanczos, b = 4": {"eigen_solver": "lanczos", "lanczos_block_size": 4},
    "lanczos, b = 8": {"eigen_solver": "lanczos", "lanczos_block_size": 8},
    "gram": {"eigen_solver": "gram"},
}


def fit(n, m, solver):
    """One fit in this process: its measurements, and its labels."""
    from sklearn.datasets import make_blobs
    from sklearn.metrics import normalized_mutual_info_score
    from threadpoolctl import threadpool_limits

    from skfed import FederatedKernelKMeans
    from skfed._testing import iteration_uploads

    X, y = make_blobs(n, n_features=20, centers=10, random_state=0)
    parts = np.random.RandomState(0).randint(m, size=n)
    model = FederatedKernelKMeans(10, random_state=0, **SOLVERS[solver])
    with warnings.catch_warnings(), threadpool_limits(1):
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        model.fit(X, partitions=parts)
        elapsed = time.perf_counter() - start
    log = model.communication_
    dims = model.n_random_features + model.ranks_
    lanczos_up = iteration_uploads(log, {"lanczos"})
    products = int(sum(up / (m * dim) for up, dim in zip(lanczos_up, dims)))
    return {
        "N": n,
        "clients": m,
        "solver": solver,
        "rounds": log.n_rounds,
        "lanczos products": products,
        "floats up": log.upload_floats,
        "floats down": log.download_floats,
        "fit s": round(elapsed, 2),
        "peak RSS MB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3),
        "NMI": round(float(normalized_mutual_info_score(y, model.labels_)), 4),
        "labels": model.labels_.tolist(),
    }


def run_fit(n, m, solver):
    """:func:`fit` in a fresh process (its own peak RSS)."""
    out = subprocess.run(
        [sys.executable, __file__, "--fit", str(n), str(m), solver],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def same_partition(a, b):
    """Whether two labelings are the same partition (names aside)."""
    a, b = np.asarray(a), np.asarray(b)
    pairs = np.unique(np.column_stack([a, b]), axis=0)
    return len(pairs) == len(np.unique(a)) == len(np.unique(b))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 5,000")
    parser.add_argument("--fit", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fit:
        n, m, solver = args.fit
        print(json.dumps(fit(int(n), int(m), solver)))
        return
    cases = (
        [(5_000, 10), (5_000, 500)] if args.quick else [(20_000, 10), (20_000, 1000)]
    )
    start = time.perf_counter()
    rows = []
    for n, m in cases:
        first = None
        for solver in SOLVERS:
            row = run_fit(n, m, solver)
            labels = row.pop("labels")
            first = labels if first is None else first
            row["same labels as b = 1"] = same_partition(labels, first)
            print(row, flush=True)
            rows.append(row)
    for row in rows:
        base = next(
            r
            for r in rows
            if (r["N"], r["clients"], r["solver"])
            == (row["N"], row["clients"], "lanczos, b = 1")
        )
        row["rounds / b = 1"] = round(row["rounds"] / base["rounds"], 3)
        row["up / b = 1"] = round(row["floats up"] / base["floats up"], 3)
        row["time / b = 1"] = round(row["fit s"] / base["fit s"], 3)
    text = "\n\n".join(
        [
            "# bench_lanczos_blocks: FederatedKernelKMeans' eigen-solvers",
            f"{platform.machine()}, Python {platform.python_version()}, BLAS "
            "pinned to 1 thread, blobs d = 20, k = 10, defaults but the "
            f"solver, one process per fit. Total {time.perf_counter() - start:.0f} s.",
            table(rows),
        ]
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"bench_lanczos_blocks{'_quick' if args.quick else ''}.md"
    path.write_text(text + "\n")
    print(text)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
