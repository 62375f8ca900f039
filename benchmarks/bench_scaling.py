"""How every estimator's cost grows with N and with the number of clients.

For N in a grid and a number of clients M in a grid (uniform random split),
each estimator is fitted with its defaults on synthetic data (blobs, d = 20,
10 centers; the classifier gets the blobs' labels mod 2), next to its
centralized scikit-learn counterpart in the same run where that fits on the
machine. Every fit runs in a process of its own, so that its peak resident
memory is its own: the report gives the fit's wall time, the process's peak
RSS (the data included) and the RSS before the fit (interpreter, libraries
and the data), floats up and down and rounds from the ledger, and a quality
score beside the baseline's.

From these: the ratio of the fit time with the most clients to the fit with
the fewest at each N (target: at most 3 at N = 100,000), the growth
exponent of time in N at fixed M (slope of log time on log N) and of
uploads in M at fixed N (how communication scales with clients), and the
speed-up of ``n_jobs=2`` over ``n_jobs=1`` (target: at least 1.6) on a fit
with few large clients and on one with many small clients, beside the
bound that the share of the fit spent in the federation's rounds sets. BLAS is pinned
to one thread in every process, so that the clients' parallelism is the
only one; each ``n_jobs`` measurement follows a warm-up fit in the same
process (joblib's worker processes start once per session, about a
second).

Quick profile (a few minutes): N = 10,000 with 10 and 100 clients, and
n_jobs 1 vs 2 at N = 20,000. The full profile (N up to 1,000,000, up to
1,000 clients) takes about an hour on 2 cores.

``--jobs-only N:M ...`` runs only the n_jobs comparison on the given
cases, ``--repeats`` times each (the order of the two alternated), and
reports the runs and the median speed-up against the target that
``n_jobs=2`` is never more than 10% slower than ``n_jobs=1``.

Usage::

    python benchmarks/bench_scaling.py [--quick] [--only KFed ...]
    python benchmarks/bench_scaling.py --jobs-only 100000:10 100000:200 \
        20000:1000 --repeats 3
"""

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from _results import results_dir

RESULTS = results_dir()
D_FEATURES = 20
ESTIMATORS = (
    "KFed",
    "DistributedKMeans",
    "FederatedKernelKMeans",
    "DistributedKernelPCA",
    "FederatedRKHSClassifier",
)
# Largest N at which each centralized baseline runs: KernelPCA holds the
# N x N kernel (N = 20,000: 3.2 GB), SVC's SMO grows faster than N².
BASELINE_MAX = {
    "KFed": 1_000_000,
    "DistributedKMeans": 1_000_000,
    "FederatedKernelKMeans": 1_000_000,
    "DistributedKernelPCA": 10_000,
    "FederatedRKHSClassifier": 100_000,
}
# Seconds after which a fit's process is stopped and the cell says so.
TIMEOUT = 900


def make_estimator(name, n_jobs=None):
    import skfed

    cls = getattr(skfed, name)
    if name in ("KFed", "DistributedKMeans", "FederatedKernelKMeans"):
        return cls(10, random_state=0, n_jobs=n_jobs)
    return cls(random_state=0, n_jobs=n_jobs)


def make_baseline(name):
    """The centralized scikit-learn counterpart and its name."""
    from sklearn.cluster import KMeans
    from sklearn.decomposition import KernelPCA
    from sklearn.kernel_approximation import Nystroem
    from sklearn.pipeline import make_pipeline
    from sklearn.svm import SVC

    if name == "KFed":
        return KMeans(10, n_init=1, random_state=0), "KMeans(n_init=1)"
    if name == "DistributedKMeans":
        return KMeans(10, n_init=10, random_state=0), "KMeans(n_init=10)"
    if name == "FederatedKernelKMeans":
        # Kernel k-means in a 300-feature Nyström space, like the
        # estimator's 300 random features.
        pipe = make_pipeline(
            Nystroem(n_components=300, random_state=0),
            KMeans(10, n_init=10, random_state=0),
        )
        return pipe, "Nystroem(300)+KMeans"
    if name == "DistributedKernelPCA":
        return KernelPCA(10, kernel="rbf", eigen_solver="randomized"), "KernelPCA"
    return SVC(), "SVC"


def data(n):
    from sklearn.datasets import make_blobs

    X, y = make_blobs(n, n_features=D_FEATURES, centers=10, random_state=0)
    return X, y


def score(name, model, X, y):
    """NMI against the generating clusters (clustering), training accuracy
    (classifier); None for kernel PCA."""
    from sklearn.metrics import normalized_mutual_info_score

    if name == "DistributedKernelPCA":
        return None
    if name == "FederatedRKHSClassifier":
        return round(float(np.mean(model.predict(X) == y % 2)), 4)
    labels = model.labels_ if hasattr(model, "labels_") else model[-1].labels_
    return round(float(normalized_mutual_info_score(y, labels)), 4)


def _rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3


def _children_peak_rss_mb():
    """The peak RSS of this process's live child processes, summed: the
    worker processes that hold many small clients with n_jobs > 1, and
    joblib's (loky's workers and its resource tracker, when a fit started
    them). Each is a Python process with numpy, scipy and scikit-learn
    loaded (about 200 MB). Linux only (0 elsewhere)."""
    total = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(
                line.split(":", 1) for line in status.read_text().splitlines()
            )
        except (OSError, ValueError):
            continue
        if int(fields.get("PPid", "0").strip()) == os.getpid():
            total += int(fields.get("VmHWM", "0 kB").split()[0]) / 1e3
    return total


def _start_resident_workers(n_jobs, sizes, in_processes):
    """Start the worker processes that hold many small clients, and load
    skfed in them (a warm-up fit on fewer rows than they take does not),
    when the fit's clients (of ``sizes`` rows) go there: the estimator
    lets them (``in_processes``, its ``_clients_in_processes``) and the
    transport's rule sends them (as ``make_transport`` asks). Idle workers that
    the fit does not use are left unstarted: alive, they slowed its page
    faults (kernel k-means over 1,000 clients of 10 rows, whose feature
    statistics allocate about 400 MB: 1.7-2.2 s for that round beside two
    idle workers, 1.2-1.3 s without, with n_jobs=1 as well)."""
    from skfed._engine._transports._processes import (
        _close_workers,
        _forget,
        _open_workers,
        resident_processes_pay,
    )

    if in_processes and resident_processes_pay(n_jobs, sizes):
        for executor in _open_workers(n_jobs):
            executor.submit(_forget, None).result()
        _close_workers(n_jobs)


def _time_rounds():
    """Make ``Federation.run_round`` add its wall time, under the round's
    name, to the dict returned (the clients' steps, their dispatch and the
    ledger: all that the federation's workers could share; the rest of a fit
    is the server's)."""
    from skfed._engine._federation import Federation

    spent = {}
    run_round = Federation.run_round

    def timed(self, name, *args, **kwargs):
        start = time.perf_counter()
        try:
            return run_round(self, name, *args, **kwargs)
        finally:
            spent[name] = spent.get(name, 0.0) + time.perf_counter() - start

    Federation.run_round = timed
    return spent


def _heaviest_rounds(spent, top=3):
    """The ``top`` round names that took longest, with their seconds."""
    ranked = sorted(spent.items(), key=lambda item: -item[1])[:top]
    return "; ".join(f"{name} {seconds:.1f}" for name, seconds in ranked)


def cell(name, n, m, n_jobs, baseline, warm):
    """One fit in this process; its measurements as a dict."""
    from threadpoolctl import threadpool_limits

    rounds = _time_rounds()
    X, y = data(n)
    target = y % 2 if name == "FederatedRKHSClassifier" else None
    with warnings.catch_warnings(), threadpool_limits(1):
        warnings.simplefilter("ignore")
        parts = np.random.RandomState(0).randint(m, size=n)
        if warm:
            # Starts joblib's worker processes, and those that hold many
            # small clients (skfed._engine._transports._processes) when the
            # fit puts its clients there, as a process's first fit would;
            # measured apart.
            small = np.random.RandomState(1).randint(min(m, 20), size=2_000)
            t0 = time.perf_counter()
            warm_up = make_estimator(name, n_jobs)
            warm_up.fit(
                X[:2_000], None if target is None else target[:2_000], partitions=small
            )
            sizes = np.bincount(parts)
            _start_resident_workers(
                n_jobs, sizes[sizes > 0], warm_up._clients_in_processes
            )
            warm_s = time.perf_counter() - t0
        before = _rss_mb()
        if baseline:
            model, label = make_baseline(name)
            args = (X,) if target is None else (X, target)
            start = time.perf_counter()
            model.fit(*args)
            elapsed = time.perf_counter() - start
            out = {"clients": "centralized", "note": label}
        else:
            model = make_estimator(name, n_jobs)
            rounds.clear()
            start = time.perf_counter()
            model.fit(X, target, partitions=parts)
            elapsed = time.perf_counter() - start
            log = model.communication_
            out = {
                "clients": m,
                "rounds": log.n_rounds,
                "floats up": log.upload_floats,
                "floats down": log.download_floats,
                "up / raw": round(log.upload_floats / X.size, 4),
                "rounds s": round(sum(rounds.values()), 3),
                "heaviest rounds s": _heaviest_rounds(rounds),
            }
    out.update(
        {
            "estimator": name,
            "N": n,
            "n_jobs": n_jobs,
            "fit s": round(elapsed, 3),
            "peak RSS MB": round(_rss_mb()),
            "child processes' peak RSS MB": round(_children_peak_rss_mb()),
            "RSS before MB": round(before),
            "score": score(name, model, X, y),
        }
    )
    if warm:
        out["warm-up s"] = round(warm_s, 2)
    return out


def run_cell(name, n, m, *, n_jobs=1, baseline=False, warm=False):
    """Run :func:`cell` in a fresh process (its own peak RSS)."""
    args = [sys.executable, __file__, "--cell", name, str(n), str(m), str(n_jobs)]
    args += ["--baseline"] if baseline else []
    args += ["--warm"] if warm else []
    try:
        out = subprocess.run(
            args, capture_output=True, text=True, timeout=TIMEOUT, check=True
        )
        row = json.loads(out.stdout.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        row = {"estimator": name, "N": n, "clients": m, "note": f"> {TIMEOUT} s"}
    except subprocess.CalledProcessError as exc:
        tail = (exc.stderr or "").strip().splitlines()[-1:] or ["?"]
        row = {"estimator": name, "N": n, "clients": m, "note": f"failed: {tail[0]}"}
    print(row, flush=True)
    return row


def grid(names, sizes, clients):
    rows = []
    for name in names:
        for n in sizes:
            for m in clients:
                rows.append(run_cell(name, n, m))
            if n <= BASELINE_MAX[name]:
                rows.append(run_cell(name, n, 1, baseline=True))
    return rows


# Federated kernel k-means takes over ten minutes at N = 1,000,000: its
# n_jobs comparison runs at a tenth of the rows.
SMALLER_CASES = {"FederatedKernelKMeans": 10}


def parallel(names, cases):
    """n_jobs 1 vs 2 on each (N, M) case, warm pools."""
    out = []
    for name in names:
        for n, m in cases:
            n //= SMALLER_CASES.get(name, 1)
            t1 = run_cell(name, n, m, n_jobs=1, warm=True)
            t2 = run_cell(name, n, m, n_jobs=2, warm=True)
            if "fit s" in t1 and "fit s" in t2:
                # Amdahl: only the share f of the n_jobs=1 fit spent in the
                # federation's rounds can run on two workers.
                share = t1["rounds s"] / t1["fit s"]
                out.append(
                    {
                        "estimator": name,
                        "N": n,
                        "clients": m,
                        "n_jobs=1 s": t1["fit s"],
                        "n_jobs=2 s": t2["fit s"],
                        "speed-up": round(t1["fit s"] / t2["fit s"], 2),
                        "rounds share f": round(share, 2),
                        "bound 1/(1-f/2)": round(1 / (1 - share / 2), 2),
                        "first fit's pool start s": t2["warm-up s"],
                    }
                )
    return out


def jobs_only(names, cases, repeats):
    """n_jobs 2 against 1 alone, ``repeats`` times per case (the order of
    the two alternated, each a fresh process after a warm-up fit): the
    runs and the median ratio of n_jobs=1's time over n_jobs=2's."""
    out = []
    for name in names:
        for n, m in cases:
            n //= SMALLER_CASES.get(name, 1)
            runs = {1: [], 2: []}
            for repeat in range(repeats):
                for n_jobs in (1, 2) if repeat % 2 == 0 else (2, 1):
                    result = run_cell(name, n, m, n_jobs=n_jobs, warm=True)
                    runs[n_jobs].append(result.get("fit s", float("nan")))
            ratios = [a / b for a, b in zip(runs[1], runs[2])]
            median = float(np.median(ratios))
            row = {
                "estimator": name,
                "N": n,
                "clients": m,
                "n_jobs=1 s (runs)": ", ".join(f"{t:.3f}" for t in runs[1]),
                "n_jobs=2 s (runs)": ", ".join(f"{t:.3f}" for t in runs[2]),
                "speed-up (runs)": ", ".join(f"{r:.2f}" for r in ratios),
                "median speed-up": round(median, 2),
                # The target: n_jobs=2 never more than 10% slower.
                "within 10%": "yes" if median >= 1 / 1.1 else "no",
                "load": round(os.getloadavg()[0], 1),
            }
            out.append(row)
            print(row, flush=True)
    return out


def round_overhead(clients, n=100_000, n_rounds=20):
    """The federation's own cost per client and round: a step that does
    nothing (``skfed._testing.where``) over M clients, n_jobs=1."""
    import skfed._testing  # noqa: F401  (registers the step)
    from skfed._engine._federation import Federation
    from skfed._engine._validation import check_partitions

    X = np.random.RandomState(0).standard_normal((n, D_FEATURES))
    out = []
    for m in clients:
        ids = np.random.RandomState(0).randint(m, size=n)
        start = time.perf_counter()
        fed = Federation.from_arrays(
            X, None, check_partitions(ids, n), random_state=0, n_jobs=1
        )
        setup = time.perf_counter() - start
        with fed:
            start = time.perf_counter()
            for _ in range(n_rounds):
                fed.run_round("nothing", "testing.where")
            per_round = (time.perf_counter() - start) / n_rounds
        out.append(
            {
                "clients": m,
                "set-up ms": round(setup * 1e3, 1),
                "ms per round": round(per_round * 1e3, 2),
                "µs per client and round": round(per_round / m * 1e6, 1),
            }
        )
    return out


def _fits(rows, name):
    return [r for r in rows if r["estimator"] == name and "fit s" in r]


def client_ratios(rows, names, clients):
    """Fit time with the most clients over the fewest, per estimator and N."""
    lo, hi = min(clients), max(clients)
    out = []
    for name in names:
        fits = _fits(rows, name)
        for n in sorted({r["N"] for r in fits}):
            t = {r["clients"]: r["fit s"] for r in fits if r["N"] == n}
            if lo in t and hi in t:
                out.append(
                    {
                        "estimator": name,
                        "N": n,
                        f"time {hi} / {lo} clients": round(t[hi] / t[lo], 2),
                    }
                )
    return out


def _slope(x, y):
    return round(float(np.polyfit(np.log(x), np.log(y), 1)[0]), 2)


def exponents(rows, names, sizes, clients):
    """Growth exponents: time in N at fixed M, uploads and downloads in M at
    fixed N (1 means linear)."""
    out = []
    for name in names:
        fits = [r for r in _fits(rows, name) if r["clients"] != "centralized"]
        row = {"estimator": name}
        for m in clients:
            pts = [(r["N"], r["fit s"]) for r in fits if r["clients"] == m]
            if len(pts) >= 2:
                row[f"time in N ({m} clients)"] = _slope(*zip(*pts))
        for n in sizes:
            pts = [r for r in fits if r["N"] == n]
            if len(pts) >= 2:
                m_ = [r["clients"] for r in pts]
                row[f"up in M (N={n:,})"] = _slope(m_, [r["floats up"] for r in pts])
                row[f"down in M (N={n:,})"] = _slope(
                    m_, [r["floats down"] for r in pts]
                )
        out.append(row)
    return out


_FIRST = ("estimator", "N", "clients", "n_jobs", "fit s")


def table(rows):
    if not rows:
        return "(none)"
    keys = [k for k in _FIRST if any(k in r for r in rows)]
    keys += [k for k in dict.fromkeys(k for r in rows for k in r) if k not in keys]
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(r.get(k, "")) for k in keys) + " |" for r in rows]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="N = 10k, 10/100")
    parser.add_argument("--only", nargs="+", choices=ESTIMATORS, default=ESTIMATORS)
    parser.add_argument("--sizes", nargs="+", type=int, help="N values to run")
    parser.add_argument("--clients", nargs="+", type=int, help="M values to run")
    parser.add_argument(
        "--no-jobs", action="store_true", help="skip the n_jobs comparison"
    )
    parser.add_argument(
        "--jobs-only",
        nargs="+",
        metavar="N:M",
        help="only n_jobs 2 against 1 on these cases (rows:clients), "
        "--repeats times each",
    )
    parser.add_argument("--repeats", type=int, default=3)
    # One fit in a process of its own (what every row of the report runs).
    parser.add_argument("--cell", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--baseline", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--warm", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cell:
        name, n, m, n_jobs = args.cell
        print(
            json.dumps(
                cell(name, int(n), int(m), int(n_jobs), args.baseline, args.warm)
            )
        )
        return
    if args.jobs_only:
        cases = [tuple(int(v) for v in case.split(":")) for case in args.jobs_only]
        start = time.perf_counter()
        rows = jobs_only(args.only, cases, args.repeats)
        text = "\n\n".join(
            [
                "# bench_scaling: n_jobs=2 against n_jobs=1",
                f"{platform.machine()}, Python {platform.python_version()}, "
                "BLAS pinned to 1 thread, d = 20 blobs, defaults; each run "
                "one fit in a process of its own after a warm-up fit there; "
                f"{args.repeats} runs a case, the order alternated. Total "
                f"{time.perf_counter() - start:.0f} s. Target: n_jobs=2 "
                "never more than 10% slower (median speed-up at least "
                "1/1.1 = 0.91).",
                table(rows),
            ]
        )
        RESULTS.mkdir(parents=True, exist_ok=True)
        path = RESULTS / "bench_scaling_n_jobs.md"
        path.write_text(text + "\n")
        print(text)
        print(f"\nwrote {path}")
        return
    if args.quick:
        sizes, clients, cases = [10_000], [10, 100], [(20_000, 10), (20_000, 200)]
    else:
        sizes = [10_000, 100_000, 1_000_000]
        clients = [10, 100, 1000]
        cases = [(1_000_000, 10), (100_000, 1000)]
    sizes = args.sizes or sizes
    clients = args.clients or clients
    RESULTS.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    rows = grid(args.only, sizes, clients)
    speedups = [] if args.no_jobs else parallel(args.only, cases)
    overhead = round_overhead(clients)
    profile = "quick" if args.quick else "full"
    text = "\n\n".join(
        [
            "# bench_scaling: cost against N and the number of clients",
            f"Profile: {profile}; {platform.machine()}, "
            f"Python {platform.python_version()}, BLAS pinned to 1 thread, "
            f"d = {D_FEATURES}, defaults, one process per fit. "
            f"Total {time.perf_counter() - start:.0f} s.",
            "## Every fit (n_jobs=1)",
            "Peak RSS includes the interpreter, the libraries and the data "
            "(RSS before the fit). Score: NMI against the generating "
            "clusters, or training accuracy for the classifier.",
            table(rows),
            "## Time with the most clients over the fewest (target: at most 3)",
            table(client_ratios(rows, args.only, clients)),
            "## Growth exponents",
            "Slope of log time on log N at fixed M, and of log floats on "
            "log M at fixed N (1: linear in the number of clients).",
            table(exponents(rows, args.only, sizes, clients)),
            "## n_jobs=2 over n_jobs=1 (target: at least 1.6)",
            "Rounds share f: the part of the n_jobs=1 fit spent in the "
            "federation's rounds (client steps, their dispatch, the ledger); "
            "the rest is the server's, the input validation's and the "
            "set-up's. Were only the rounds parallel, two workers could "
            "speed the fit up by at most 1 / (1 - f/2) (Amdahl); the set-up "
            "(cutting the data into clients) also runs in n_jobs threads "
            "from 65,536 rows, so a fit may beat that bound a little.",
            table(speedups),
            "## The federation's own cost per round",
            "A step that does nothing, N = 100,000 rows, n_jobs=1, mean of "
            "20 rounds: dispatch, the clients' kept state, the ledger.",
            table(overhead),
        ]
    )
    path = RESULTS / f"bench_scaling_{profile}.md"
    path.write_text(text + "\n")
    print(text)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
