"""DistributedKMeans (distributed coreset k-means) against centralized KMeans.

In one run, on the same data and the same partitions:

1. Scaling in N (10k .. 80k samples, 10 clients with power-law sizes): the
   k-means cost of ``DistributedKMeans`` relative to ``KMeans``, the agreement
   of the two clusterings (ARI), wall time and peak traced memory as ratios
   to ``KMeans``, and the floats uploaded (which must not grow with N).
2. Coreset size sweep at fixed N, with 0, 1 and 3 rounds of distributed
   Lloyd refinement: cost ratio against total floats sent, also relative to
   the N d floats it would take to upload the data itself.

BLAS and OpenMP are pinned to one thread; the machine is shared, so wall times are noisy
and only their ratios are reported as meaningful.

Usage::

    python benchmarks/bench_coreset.py [--quick] [--repeats R]
"""

import argparse
import platform
import time
import tracemalloc

import numpy as np
from _results import results_dir
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score
from threadpoolctl import threadpool_limits

from skfed import DistributedKMeans
from skfed.partition import power_law

RESULTS = results_dir()


def make_data(n_samples, n_features, n_clusters, seed):
    # Overlapping blobs: the optimum is not trivial, so the cost ratio means
    # something (on well separated blobs every method finds the same answer).
    X, _ = make_blobs(
        n_samples=n_samples,
        n_features=n_features,
        centers=n_clusters,
        cluster_std=3.0,
        center_box=(-10, 10),
        random_state=seed,
    )
    return X


def timed(fn, repeats):
    best = np.inf
    out = None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def peak_memory(fn):
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def run_scaling(sizes, args):
    rows = []
    for n in sizes:
        X = make_data(n, args.n_features, args.n_clusters, seed=0)
        partitions = power_law(n, args.n_clients, exponent=1.0, random_state=0)

        def fit_ref(X=X):
            return KMeans(args.n_clusters, n_init=args.n_init, random_state=0).fit(X)

        def fit_fed(X=X, partitions=partitions):
            est = DistributedKMeans(
                args.n_clusters,
                coreset_size=args.coreset_size,
                n_init=args.n_init,
                # The paper's protocol: the coreset alone, three rounds.
                n_swaps=0,
                refine_iter=0,
                random_state=0,
            )
            return est.fit(X, partitions=partitions)

        t_ref, ref = timed(fit_ref, args.repeats)
        t_fed, fed = timed(fit_fed, args.repeats)
        m_ref = peak_memory(fit_ref)
        m_fed = peak_memory(fit_fed)
        log = fed.communication_
        rows.append(
            {
                "N": n,
                "cost ratio": fed.inertia_ / ref.inertia_,
                "ARI vs KMeans": adjusted_rand_score(ref.labels_, fed.labels_),
                "KMeans s": t_ref,
                "DistributedKMeans s": t_fed,
                "time ratio": t_fed / t_ref,
                "KMeans MiB": m_ref / 2**20,
                "memory ratio": m_fed / m_ref,
                "upload floats": log.upload_floats,
                "download floats": log.download_floats,
                "upload / (N d)": log.upload_floats / X.size,
                "rounds": log.n_rounds,
            }
        )
        print(rows[-1], flush=True)
    return rows


def run_sweep(n, coreset_sizes, args):
    X = make_data(n, args.n_features, args.n_clusters, seed=1)
    partitions = power_law(n, args.n_clients, exponent=1.0, random_state=1)
    ref = KMeans(args.n_clusters, n_init=args.n_init, random_state=0).fit(X)
    rows = []
    for t in coreset_sizes:
        for refine_iter in (0, 1, 3):
            ratios, floats, rounds = [], [], []
            for seed in range(args.seeds):
                est = DistributedKMeans(
                    args.n_clusters,
                    coreset_size=t,
                    n_init=args.n_init,
                    refine_iter=refine_iter,
                    n_swaps=0,
                    random_state=seed,
                ).fit(X, partitions=partitions)
                ratios.append(est.inertia_ / ref.inertia_)
                floats.append(est.communication_.total_floats)
                rounds.append(est.communication_.n_rounds)
            rows.append(
                {
                    "coreset size": t,
                    "refine_iter": refine_iter,
                    "rounds (mean)": float(np.mean(rounds)),
                    "cost ratio (mean)": float(np.mean(ratios)),
                    "cost ratio (max)": float(np.max(ratios)),
                    "total floats": int(np.mean(floats)),
                    "floats / (N d)": float(np.mean(floats)) / X.size,
                }
            )
            print(rows[-1], flush=True)
    return rows


def markdown(rows):
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        cells = []
        for k in keys:
            v = r[k]
            if isinstance(v, float):
                cells.append(f"{v:.6g}")
            elif isinstance(v, (int, np.integer)):
                cells.append(f"{v:,}")
            else:
                cells.append(str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(scaling, sweep, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    n = [r["N"] for r in scaling]
    axes[0].plot(n, [r["time ratio"] for r in scaling], "o-", label="time ratio")
    axes[0].plot(n, [r["memory ratio"] for r in scaling], "s-", label="memory ratio")
    axes[0].plot(n, [r["cost ratio"] for r in scaling], "^-", label="cost ratio")
    axes[0].set_xscale("log")
    axes[0].set_xlabel("N")
    axes[0].set_ylabel("DistributedKMeans / KMeans")
    axes[0].legend()
    for refine_iter in sorted({r["refine_iter"] for r in sweep}):
        part = [r for r in sweep if r["refine_iter"] == refine_iter]
        axes[1].plot(
            [r["total floats"] for r in part],
            [r["cost ratio (mean)"] for r in part],
            "o-",
            label=f"refine_iter={refine_iter}",
        )
        for r in part:
            axes[1].annotate(
                str(r["coreset size"]), (r["total floats"], r["cost ratio (mean)"])
            )
    axes[1].legend()
    axes[1].set_xscale("log")
    axes[1].set_xlabel("total floats communicated")
    axes[1].set_ylabel("cost / KMeans cost")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--n-clients", type=int, default=10)
    parser.add_argument("--n-clusters", type=int, default=10)
    parser.add_argument("--n-features", type=int, default=20)
    parser.add_argument("--coreset-size", type=int, default=1000)
    parser.add_argument("--n-init", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=None)
    args = parser.parse_args()
    if args.quick:
        sizes, sweep_n, coreset_sizes = [5_000, 10_000], 5_000, [100, 300, 1000]
        args.repeats = args.repeats or 1
        args.seeds = args.seeds or 2
    else:
        sizes = [10_000, 20_000, 40_000, 80_000]
        sweep_n, coreset_sizes = 20_000, [100, 300, 1000, 3000, 10000]
        args.repeats = args.repeats or 3
        args.seeds = args.seeds or 5

    # One thread for BLAS and OpenMP alike (KMeans' Lloyd runs on OpenMP).
    with threadpool_limits(limits=1):
        warm = make_data(2_000, args.n_features, args.n_clusters, seed=2)
        KMeans(args.n_clusters, n_init=1, random_state=0).fit(warm)
        DistributedKMeans(args.n_clusters, random_state=0).fit(warm, partitions=2)
        scaling = run_scaling(sizes, args)
        sweep = run_sweep(sweep_n, coreset_sizes, args)

    RESULTS.mkdir(parents=True, exist_ok=True)
    profile = "quick" if args.quick else "full"
    report = RESULTS / f"bench_coreset_{profile}.md"
    png = RESULTS / f"bench_coreset_{profile}.png"
    plot(scaling, sweep, png)
    text = "\n\n".join(
        [
            "# DistributedKMeans vs KMeans",
            f"Machine: {platform.machine()}, {platform.python_version()}, "
            "BLAS/OpenMP pinned to 1 thread; shared machine, timings are noisy.",
            f"k = {args.n_clusters}, d = {args.n_features}, "
            f"{args.n_clients} clients (power-law sizes, exponent 1), "
            f"coreset_size = {args.coreset_size}, n_init = {args.n_init} for both, "
            f"best of {args.repeats} fits for time.",
            "## Scaling in N",
            markdown(scaling),
            f"## Coreset size sweep (N = {sweep_n:,}, mean over {args.seeds} seeds)",
            markdown(sweep),
            f"![plots]({png.name})",
        ]
    )
    report.write_text(text + "\n")
    print(text)
    print(f"\nwrote {report}")


if __name__ == "__main__":
    main()
