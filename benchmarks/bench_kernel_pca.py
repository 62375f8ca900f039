"""DistributedKernelPCA (disKPCA) against exact and centralized kernel PCA.

In one run, on the same data and the same power-law partitions (exponent 2,
as in the paper):

1. Error against communication (the paper's Figures 2-5): for |Y| in a grid,
   the error ratio ‖φ(A) − LLᵀφ(A)‖² / Σ_{i>k} λ_i against the exact
   uncentered kernel eigendecomposition, the captured fraction
   ‖CᵀK_{Y,A}‖² / Σ_{i≤k} λ_i, and the floats uploaded, for

   * disKPCA           leverage+adaptive sampling, local-SVD disLR upload
     (skfed's default),
   * disKPCA/sketch    leverage+adaptive sampling, the paper's sketched disLR
     (w = |Y|),
   * uniform+disLR     uniform sampling, the paper's sketched disLR,
   * uniform+disLR/svd uniform sampling, local-SVD disLR,
   * uniform+batch     uniform sampling, KPCA of Y alone (the paper's
     uniform + batch KPCA),

   on an RBF case (sklearn digits), a
   polynomial case on the same dense data, and a polynomial case on sparse
   data whose row norms vary over orders of magnitude (log-normal scales),
   the setting where the paper's gains came from.
2. The local-SVD rank q against the exact solve and the sketch.
3. The number of clients (5, 10, 50) at fixed |Y|.
4. Fit time and peak traced memory against
   ``sklearn.decomposition.KernelPCA`` (arpack and randomized) at N = 5k,
   20k, 50k; sklearn is skipped where its N × N kernel does not fit in
   memory (50k: 20 GB).

BLAS is pinned to one thread and the clients run one after the other
(``n_jobs=1``): wall times are the total compute of all clients. The machine
is shared, so times are noisy; read the ratios.

Usage::

    python benchmarks/bench_kernel_pca.py [--quick] [--seeds S]
"""

import argparse
import platform
import time
import tracemalloc
from functools import partial

import numpy as np
import scipy.sparse as sp
from _results import results_dir
from scipy.spatial.distance import pdist
from sklearn.datasets import load_digits, make_blobs
from sklearn.decomposition import KernelPCA
from sklearn.metrics.pairwise import pairwise_kernels
from threadpoolctl import threadpool_limits

from skfed import DistributedKernelPCA
from skfed.partition import power_law

RESULTS = results_dir()

METHODS = {
    "disKPCA": {"sampling": "leverage+adaptive", "lowrank_upload": "local_svd"},
    "disKPCA/sketch": {"sampling": "leverage+adaptive", "lowrank_upload": "sketch"},
    "uniform+disLR": {"sampling": "uniform", "lowrank_upload": "sketch"},
    "uniform+disLR/svd": {"sampling": "uniform", "lowrank_upload": "local_svd"},
    "uniform+batch": None,
}


def sparse_varying_norms(n_samples, n_features, density, sigma, seed):
    """Sparse rows with log-normal scales: a few rows dominate the
    polynomial kernel's energy."""
    rng = np.random.RandomState(seed)
    X = sp.random(n_samples, n_features, density=density, random_state=rng)
    scales = np.exp(rng.normal(0.0, sigma, n_samples))
    return (sp.diags(scales) @ X).tocsr()


def kernel_params(kernel, X, *, degree=4, median_factor=1.0):
    """Constructor arguments with γ fixed, so that every method and seed
    works with the same kernel (and the same optimum).

    "poly": γ = 1 / median squared row norm, so that γ xᵀy is of order one.
    "rbf": the median heuristic computed exactly, γ = 1 / (2 (f · median)²);
    the estimator's federated estimate (its "median sample" round) is within
    a few percent of it but varies with the seed.

    ``center=False``: these sections reproduce the paper, whose problem is
    the uncentered reconstruction error (the estimator centres by default).
    """
    if kernel == "poly":
        sq = X.multiply(X).sum(axis=1) if sp.issparse(X) else (X**2).sum(axis=1)
        gamma = 1.0 / np.median(np.asarray(sq).ravel())
        return {
            "kernel": "poly",
            "degree": degree,
            "coef0": 0.0,
            "gamma": gamma,
            "center": False,
        }
    med = np.median(pdist(X))
    gamma = 1.0 / (2.0 * (median_factor * med) ** 2)
    return {"kernel": kernel, "gamma": gamma, "center": False}


def kernel_of(est, X, Y=None):
    params = {"gamma": est.gamma_}
    if est.kernel == "poly":
        params.update(degree=est.degree, coef0=est.coef0)
    return pairwise_kernels(X, Y, metric=est.kernel, **params)


def batch_kpca_on(Y, est, X, k):
    """Uniform + batch KPCA: exact uncentered KPCA of Y alone, applied to X.
    Returns the captured energy ‖CᵀK_{Y,A}‖²."""
    lam, U = np.linalg.eigh(kernel_of(est, Y))
    lam, U = lam[::-1][:k], U[:, ::-1][:, :k]
    keep = lam > 1e-10 * lam[0]
    C = U[:, keep] / np.sqrt(lam[keep])
    return float(np.sum((kernel_of(est, X, Y) @ C) ** 2))


def run_error_vs_communication(name, X, params, k, reps, n_clients, seeds):
    partitions = power_law(X.shape[0], n_clients, exponent=2.0, random_state=0)
    rows = []
    lam = None
    for n_rep in reps:
        for seed in seeds:
            for method, options in METHODS.items():
                base = dict(params, n_representatives=n_rep, random_state=seed)
                if options is None:
                    est = DistributedKernelPCA(
                        k, sampling="uniform", n_jobs=1, **base
                    ).fit(X, partitions=partitions)
                else:
                    est = DistributedKernelPCA(k, n_jobs=1, **base, **options).fit(
                        X, partitions=partitions
                    )
                if lam is None:
                    K = kernel_of(est, X)
                    K = K.toarray() if sp.issparse(K) else K
                    lam = np.linalg.eigvalsh(K)[::-1]
                    trace = float(np.trace(K))
                    del K
                log = est.communication_
                if options is None:
                    # Only the uniform sample is sent; the server does the rest.
                    captured = batch_kpca_on(est.representatives_, est, X, k)
                    upload = log.floats_by_name()["uniform sample"]
                    download = log.floats_by_name("download")["uniform sample"]
                    if "median sample" in log.floats_by_name():
                        upload += log.floats_by_name()["median sample"]
                        download += log.floats_by_name("download")["median sample"]
                else:
                    captured = float(est.eigenvalues_.sum())
                    upload, download = log.upload_floats, log.download_floats
                err = trace - captured
                rows.append(
                    {
                        "dataset": name,
                        "method": method,
                        "n_representatives": n_rep,
                        "seed": seed,
                        "ratio": err / lam[k:].sum(),
                        "captured": captured / lam[:k].sum(),
                        "upload": upload,
                        "download": download,
                        "disLR_upload": 0
                        if options is None
                        else log.floats_by_name()["disLR"],
                    }
                )
    return rows, {"trivial_ratio": trace / lam[k:].sum()}


def mean_rows(rows, keys):
    groups = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    out = []
    for key, members in groups.items():
        row = dict(zip(keys, key))
        for field in ("ratio", "captured", "upload", "download", "disLR_upload"):
            values = [m[field] for m in members]
            row[field] = float(np.mean(values))
            row[field + "_std"] = float(np.std(values))
        out.append(row)
    return out


def upload_at_equal_error(means, dataset, ours, theirs, field="upload"):
    """For each |Y| of ``theirs``: the upload ``ours`` needs to reach the
    same error ratio (log-linear interpolation over our |Y| grid; None when
    our grid never gets there), and the ratio of the two."""
    mine = sorted(
        (r[field], r["ratio"])
        for r in means
        if r["dataset"] == dataset and r["method"] == ours
    )
    out = []
    for r in means:
        if r["dataset"] != dataset or r["method"] != theirs:
            continue
        target, needed = r["ratio"], None
        for (u0, e0), (u1, e1) in zip([(None, np.inf)] + mine[:-1], mine):
            if e1 <= target:
                if u0 is None or e0 == e1:
                    needed = u1
                else:
                    t = (e0 - target) / (e0 - e1)
                    needed = float(np.exp(np.log(u0) + t * (np.log(u1) - np.log(u0))))
                break
        out.append(
            (
                r["n_representatives"],
                target,
                r[field],
                needed,
                None if needed is None else r[field] / needed,
            )
        )
    return out


def run_local_rank(X, params, k, n_rep, n_clients):
    partitions = power_law(X.shape[0], n_clients, exponent=2.0, random_state=0)
    rows = []
    configs = [("exact (q = |Y|)", {"local_rank": n_rep})]
    configs += [(f"local_svd q = {q}", {"local_rank": q}) for q in (k, 2 * k, 4 * k)]
    configs += [("sketch w = |Y|", {"lowrank_upload": "sketch"})]
    configs += [
        (
            "sketch w = |Y|/4",
            {"lowrank_upload": "sketch", "lowrank_sketch_size": n_rep // 4},
        )
    ]
    for label, options in configs:
        est = DistributedKernelPCA(
            k, n_representatives=n_rep, random_state=0, n_jobs=1, **params, **options
        ).fit(X, partitions=partitions)
        rows.append(
            (
                label,
                est.approximation_error_,
                est.communication_.floats_by_name()["disLR"],
            )
        )
    exact = rows[0][1]
    return [(label, err / exact, up) for label, err, up in rows]


def run_clients_sweep(datasets, k, n_rep, client_counts, seeds):
    """Error ratio and upload against the number of clients at fixed |Y|."""
    rows = []
    for name, X, params in datasets:
        lam = None
        for n_clients in client_counts:
            partitions = power_law(X.shape[0], n_clients, exponent=2.0, random_state=0)
            for method in ("disKPCA", "disKPCA/sketch", "uniform+disLR/svd"):
                ratios, uploads = [], []
                for seed in seeds:
                    est = DistributedKernelPCA(
                        k,
                        n_representatives=n_rep,
                        random_state=seed,
                        n_jobs=1,
                        **params,
                        **METHODS[method],
                    ).fit(X, partitions=partitions)
                    if lam is None:
                        K = kernel_of(est, X)
                        lam = np.linalg.eigvalsh(K)[::-1]
                        del K
                    ratios.append(est.approximation_error_ / lam[k:].sum())
                    uploads.append(est.communication_.upload_floats)
                rows.append(
                    (name, n_clients, method, np.mean(ratios), np.mean(uploads))
                )
    return rows


def measure(fn):
    tracemalloc.start()
    start = time.perf_counter()
    out = fn()
    elapsed = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return elapsed, peak, out


def run_timing(sizes, args):
    rows = []
    for case in ("rbf", "poly-sparse"):
        for n in sizes:
            if case == "rbf":
                X, _ = make_blobs(n, 50, centers=20, cluster_std=4.0, random_state=0)
                params = {"kernel": "rbf", "median_factor": 1.0}
            else:
                X = sparse_varying_norms(n, 2000, 0.01, 1.0, seed=0)
                params = dict(kernel_params("poly", X), center=True)
            partitions = power_law(n, args.n_clients, exponent=2.0, random_state=0)
            est = DistributedKernelPCA(
                10, n_representatives=400, random_state=0, n_jobs=1, **params
            )
            t_fed, m_fed, est = measure(partial(est.fit, X, partitions=partitions))
            row = {
                "case": case,
                "n": n,
                "fed_time": t_fed,
                "fed_mem": m_fed,
                "upload": est.communication_.upload_floats,
            }
            sk_params = {"kernel": est.kernel, "gamma": est.gamma_}
            if est.kernel == "poly":
                sk_params.update(degree=est.degree, coef0=est.coef0)
            # KernelPCA holds K (8 N² bytes) and a centred copy of it.
            fits = 2 * 8 * n * n < args.max_sklearn_bytes
            for solver in ("arpack", "randomized"):
                if not fits:
                    row[solver + "_time"] = row[solver + "_mem"] = None
                    continue
                ref = KernelPCA(10, eigen_solver=solver, random_state=0, **sk_params)
                t, m, _ = measure(partial(ref.fit, X))
                row[solver + "_time"], row[solver + "_mem"] = t, m
                if solver == "arpack":
                    # Both centre and follow svd_flip's sign convention: the
                    # components should agree in sign, not only in span.
                    Z = est.transform(X)
                    Zref = ref.eigenvectors_ * np.sqrt(ref.eigenvalues_)
                    row["signs_agree"] = int(np.sum(np.sum(Z * Zref, axis=0) > 0))
                    row["energy_ratio"] = (
                        est.eigenvalues_.sum() / ref.eigenvalues_.sum()
                    )
            rows.append(row)
            print(f"  timing {case} N={n}: {row}", flush=True)
    return rows


def mb(n_bytes):
    return None if n_bytes is None else n_bytes / 1e6


def fmt(x, spec=".3f"):
    return "—" if x is None else format(x, spec)


def plot(means, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(r["dataset"] for r in means))
    fig, axes = plt.subplots(1, len(datasets), figsize=(5 * len(datasets), 4))
    for ax, dataset in zip(np.atleast_1d(axes), datasets):
        for method in METHODS:
            pts = sorted(
                (r["upload"], r["ratio"], r["ratio_std"])
                for r in means
                if r["dataset"] == dataset and r["method"] == method
            )
            if pts:
                u, e, s = map(np.array, zip(*pts))
                ax.errorbar(u, e, yerr=s, marker="o", label=method, capsize=2)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("floats uploaded (all clients)")
        ax.set_ylabel("error / optimal rank-k error")
        ax.set_title(dataset)
        ax.grid(True, which="both", alpha=0.3)
    np.atleast_1d(axes)[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_timing(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, case in zip(axes, ("rbf", "poly-sparse")):
        sub = [r for r in rows if r["case"] == case]
        n = [r["n"] for r in sub]
        ax.plot(n, [r["fed_time"] for r in sub], "o-", label="disKPCA |Y|=400")
        for solver in ("arpack", "randomized"):
            pts = [(r["n"], r[solver + "_time"]) for r in sub if r[solver + "_time"]]
            if pts:
                ax.plot(*zip(*pts), "s--", label=f"sklearn KernelPCA {solver}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("N")
        ax.set_ylabel("fit time (s, 1 BLAS thread)")
        ax.set_title(case)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def timing_lines(timing, args):
    """Section 4 of the report: fit time and memory against KernelPCA."""
    lines = [
        "",
        "## 4. Fit time and peak traced memory against sklearn KernelPCA",
        "",
        "disKPCA with |Y| = 400 (leverage+adaptive, local SVD, centred as "
        "KernelPCA). '—': sklearn "
        f"skipped, its N × N kernel and centred copy need {2 * 8:d} N² bytes "
        f"(> {args.max_sklearn_gb:g} GB).",
        "",
        "| case | N | disKPCA s | arpack s | randomized s | speed-up (arpack, "
        "randomized) | disKPCA MB | arpack MB | randomized MB | upload floats "
        "| signs as KernelPCA (of 10) | energy / KernelPCA's |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in timing:
        speed = [
            None if r[s + "_time"] is None else r[s + "_time"] / r["fed_time"]
            for s in ("arpack", "randomized")
        ]
        lines.append(
            f"| {r['case']} | {r['n']:,} | {r['fed_time']:.2f} | "
            f"{fmt(r['arpack_time'], '.2f')} | {fmt(r['randomized_time'], '.2f')} | "
            f"{fmt(speed[0], '.1f')}×, {fmt(speed[1], '.1f')}× | "
            f"{r['fed_mem'] / 1e6:,.0f} | "
            f"{fmt(mb(r['arpack_mem']), ',.0f')} | "
            f"{fmt(mb(r['randomized_mem']), ',.0f')} | "
            f"{r['upload']:,} | {fmt(r.get('signs_agree'), 'd')} | "
            f"{fmt(r.get('energy_ratio'), '.4f')} |"
        )
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, 1 seed")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--n-clients", type=int, default=10)
    parser.add_argument(
        "--max-sklearn-gb",
        type=float,
        default=8.0,
        help="skip sklearn KernelPCA when its kernel and centred copy exceed this",
    )
    parser.add_argument(
        "--timing-only",
        nargs="+",
        type=int,
        metavar="N",
        help="only section 4 (fit time and memory against KernelPCA) at these N",
    )
    args = parser.parse_args()
    args.max_sklearn_bytes = args.max_sklearn_gb * 1e9
    if args.timing_only:
        with threadpool_limits(1):
            timing = run_timing(args.timing_only, args)
        RESULTS.mkdir(parents=True, exist_ok=True)
        out = RESULTS / "bench_kernel_pca_timing.md"
        lines = [
            "# disKPCA against KernelPCA: fit time and memory",
            "",
            "`python benchmarks/bench_kernel_pca.py --timing-only "
            + " ".join(str(n) for n in args.timing_only)
            + f"` — {platform.processor() or platform.machine()}, BLAS pinned "
            f"to 1 thread, {args.n_clients} clients with power-law sizes.",
        ] + timing_lines(timing, args)
        out.write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
        print(f"\nwrote {out}")
        return
    profile = "quick" if args.quick else "full"
    seeds = range(1 if args.quick else args.seeds)
    reps = (50, 100) if args.quick else (50, 100, 200, 400)
    sizes = (2000, 5000) if args.quick else (5000, 20000, 50000)
    k = 10

    digits = load_digits().data / 16.0
    n_sparse = 1000 if args.quick else 3000
    datasets = [
        ("rbf digits (σ = median)", digits, kernel_params("rbf", digits)),
        (
            "rbf digits (σ = 0.2 median, paper)",
            digits,
            kernel_params("rbf", digits, median_factor=0.2),
        ),
        ("poly-4 digits", digits, kernel_params("poly", digits)),
        (
            "poly-4 sparse, log-normal norms",
            sparse_varying_norms(n_sparse, 2000, 0.01, 1.0, seed=0),
            None,
        ),
    ]
    if args.quick:
        datasets = [datasets[0], datasets[3]]
    all_rows, info = [], {}
    with threadpool_limits(1):
        for name, X, params in datasets:
            params = kernel_params("poly", X) if params is None else params
            print(f"error vs communication: {name}", flush=True)
            rows, extra = run_error_vs_communication(
                name, X, params, k, reps, args.n_clients, seeds
            )
            all_rows += rows
            info[name] = extra
        means = mean_rows(all_rows, ["dataset", "method", "n_representatives"])
        print("local-SVD rank sweep", flush=True)
        n_rep_q = 100 if args.quick else 400
        qrows = run_local_rank(
            digits, kernel_params("rbf", digits), k, n_rep_q, args.n_clients
        )
        print("clients sweep", flush=True)
        client_counts = (5, 50) if args.quick else (5, 10, 50)
        sweep_sets = [datasets[0], datasets[-1]]
        sweep_sets = [
            (name, X, kernel_params("poly", X) if params is None else params)
            for name, X, params in sweep_sets
        ]
        crows = run_clients_sweep(
            sweep_sets, k, 100 if args.quick else 200, client_counts, seeds
        )
        print("timing", flush=True)
        timing = run_timing(sizes, args)

    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = f"bench_kernel_pca_{profile}"
    plot(means, RESULTS / f"{stem}_error_vs_upload.png")
    plot_timing(timing, RESULTS / f"{stem}_timing.png")

    lines = [
        f"# disKPCA benchmark ({profile})",
        "",
        f"`python benchmarks/bench_kernel_pca.py{' --quick' if args.quick else ''}` — "
        f"{platform.processor() or platform.machine()}, BLAS pinned to 1 thread, "
        f"clients run sequentially; shared machine, so times are noisy. "
        f"k = {k}, {args.n_clients} clients with power-law sizes (exponent 2), "
        f"t = 50, p = 250, D = 2000, {len(seeds)} seed(s) per point (mean ± std). "
        "Sections 1-3 fix γ (exact median heuristic for RBF) so that all methods "
        "and seeds share one kernel: their uploads exclude the 'median sample' "
        "round (256 · min(d, 64) floats); section 4 uses the default federated "
        "median.",
        "",
        "## 1. Error ratio and captured energy against floats uploaded",
        "",
        "ratio = ‖φ(A) − LLᵀφ(A)‖² / Σ_{i>k} λ_i (exact uncentered eigendecomposition);"
        " captured = ‖CᵀK_{Y,A}‖² / Σ_{i≤k} λ_i. 'trivial' is the ratio of L = 0.",
        "",
    ]
    for name, _, _ in datasets:
        lines += [
            f"### {name} (trivial ratio {info[name]['trivial_ratio']:.3f})",
            "",
            "| method | |Y| | ratio | captured | upload floats | disLR upload "
            "| download floats |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in sorted(
            (r for r in means if r["dataset"] == name),
            key=lambda r: (list(METHODS).index(r["method"]), r["n_representatives"]),
        ):
            lines.append(
                f"| {r['method']} | {r['n_representatives']} | "
                f"{r['ratio']:.4f} ± {r['ratio_std']:.4f} | "
                f"{r['captured']:.4f} | {r['upload']:,.0f} | "
                f"{r['disLR_upload']:,.0f} | {r['download']:,.0f} |"
            )
        comparisons = [
            ("disKPCA", "disKPCA/sketch", "upload", "total upload"),
            ("disKPCA", "disKPCA/sketch", "disLR_upload", "disLR-round upload"),
            ("uniform+disLR/svd", "disKPCA", "upload", "total upload"),
        ]
        for ours, theirs, field, what in comparisons:
            lines += [
                "",
                f"{what}: {ours} at the error of {theirs} "
                "(saving > 1: the former needs fewer floats)",
                "",
                f"| |Y| ({theirs}) | ratio | {theirs} | {ours} at equal error "
                "| saving |",
                "|---:|---:|---:|---:|---:|",
            ]
            for n_rep, target, theirs_up, needed, saving in upload_at_equal_error(
                means, name, ours, theirs, field
            ):
                lines.append(
                    f"| {n_rep} | {target:.4f} | {theirs_up:,.0f} | "
                    f"{fmt(needed, ',.0f')} | {fmt(saving, '.2f')}× |"
                )
        lines.append("")
    lines += [
        f"## 2. disLR upload variants (rbf digits, |Y| = {n_rep_q}, same Y)",
        "",
        "| variant | error / exact-solve error | disLR upload floats |",
        "|---|---:|---:|",
    ]
    lines += [f"| {label} | {rel:.5f} | {up:,} |" for label, rel, up in qrows]
    lines += [
        "",
        f"## 3. Number of clients (power law, exponent 2; |Y| = "
        f"{100 if args.quick else 200})",
        "",
        "| dataset | clients | method | ratio | upload floats |",
        "|---|---:|---|---:|---:|",
    ]
    lines += [
        f"| {name} | {m} | {method} | {ratio:.4f} | {up:,.0f} |"
        for name, m, method, ratio, up in crows
    ]
    lines += timing_lines(timing, args)
    out = RESULTS / f"{stem}.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
