"""KFed and DistributedKMeans against Lloyd (scikit-learn's KMeans(n_init=1)).

Every estimator with its defaults, in the same process, on the same data,
the sides alternated within each repeat; ratios are of medians. Two kinds of
case:

``scale``
    N rows of a mixture of k Gaussians N(μ_r, I_d) (means 10 σ apart on
    average, as ``bench_kfed.py``'s scale experiment), split IID over
    ``--clients`` clients (KFed with k(z) = k, as its documentation advises
    for IID splits).
``table1``
    The k-FED paper's Table 1 data (``bench_kfed.gaussian_mixture``: 200
    rows per component, means 12 σ apart, k' = √k, m0 = 5 clients per group
    of components).

Reported: wall time over KMeans', NMI against the mixture's labels, k-means
cost (``inertia_``) over KMeans', and floats uploaded over the N·d floats of
the data. ``--profile`` adds where KFed's time goes (cProfile, one fit),
grouped into the local step's seedings, Lloyd runs and projections, the
server merge, the cluster-map round and the rest (the federation).

BLAS and OpenMP keep their default thread counts (the defaults are what is
compared) unless ``--one-thread`` pins both sides to one; the machine is
shared, so read ratios, and the load average printed with each case.

``headline`` runs the four N = 1,000,000 scale cases (d = 20 and 50,
k = 16 and 64, 100 clients) and ``table1-cases`` the Table 1 cases of the
report (d = 100 and 300, k = 16 and 64, and d = 300, k = 100), each
against KMeans(n_init=1), KFed only unless ``--estimators`` says otherwise.

Usage::

    python benchmarks/bench_vs_lloyd.py headline
    python benchmarks/bench_vs_lloyd.py table1-cases --repeats 3
    python benchmarks/bench_vs_lloyd.py scale --n 1000000 --d 50 --k 64
    python benchmarks/bench_vs_lloyd.py table1 --d 100 --k 64 --repeats 3
    python benchmarks/bench_vs_lloyd.py scale --n 200000 --d 50 --k 64 \
        --clients 20 --profile
    python benchmarks/bench_vs_lloyd.py scale --n 200000 --d 50 --k 16 \
        --clients 10 --partition dirichlet --one-thread --repeats 3

``dkm-headline`` runs DistributedKMeans' headline cases in one command:
N = 1,000,000, d = 50, k = 16 and 64, over 20 and 100 clients, against
``KMeans()`` (its default ``n_init``, one k-means++ run) fitted once per k
on the same data (``--n`` and ``--d`` change the size; ``--ks`` and
``--client-counts`` the cases)::

    python benchmarks/bench_vs_lloyd.py dkm-headline

``--estimators KFed KFed-numpy-lloyd`` adds KFed with its large
clients' Lloyd on the NumPy pass that scikit-learn releases without the
compiled iteration take (the same iterations), alternated with the
default in each repeat.

``local-parts`` times the pieces of a client's local step on their own,
each the median of many calls on one BLAS thread: one Lloyd iteration on
a client of 10,000 rows in 20 features with 16 centers, through
scikit-learn's compiled iteration and through the NumPy pass kept for
releases without it; the projection's basis of a client of 160 rows in
300 features (k(z) = 4) from its n x n Gram matrix and from
``randomized_svd``; and the top eigenvectors of Gram matrices of a few
sizes, by LAPACK's subset solver and by a full ``eigh``::

    python benchmarks/bench_vs_lloyd.py local-parts

Each run appends one JSON line per case to
``bench_vs_lloyd.jsonl`` in the results folder (``_results.py``) and
prints a markdown row.
"""

import argparse
import contextlib
import cProfile
import json
import os
import pstats
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score
from threadpoolctl import threadpool_limits

import skfed
from skfed import DistributedKMeans, KFed
from skfed.partition import iid, label_dirichlet, labels_per_client

sys.path.insert(0, str(Path(__file__).parent))
from _results import results_dir  # noqa: E402
from bench_kfed import gaussian_mixture  # noqa: E402

RESULTS = results_dir()

# cProfile function names -> the part of a KFed fit they belong to (the
# first match wins; cumulative times, so an outer part excludes the inner
# ones listed before it).
PARTS = [
    ("local: k-means++ seedings", ("_greedy_kmeans_plusplus", "_kmeans_plusplus")),
    ("local: batched seedings (small clients)", ("_batched.py:_seed",)),
    ("local: Lloyd", ("_kmeans_single_lloyd", "_batched.py:_lloyd")),
    (
        "local: split-and-merge moves (their Lloyd runs above)",
        (
            "_kfed_moves.py:_moved_centers",
            "_kfed_moves.py:_cost",
            "_kfed_moves.py:_means",
        ),
    ),
    ("local: projection (SVD)", ("eigh", "randomized_svd")),
    ("server merge", ("_kmeans_merge", "_farthest_point_initialization")),
    ("cluster map round", ("_induce_labels_step",)),
]


def scale_data(n, d, k, n_clients, seed, partition="iid"):
    rng = np.random.RandomState(seed)
    means = rng.normal(scale=10.0 / np.sqrt(2 * d), size=(k, d))
    y = rng.randint(k, size=n)
    X = means[y] + rng.normal(size=(n, d))
    if partition == "dirichlet":
        # Label skew: each component's rows split over the clients in
        # Dirichlet(0.3) proportions.
        return X, y, label_dirichlet(y, n_clients, alpha=0.3, random_state=seed), {}
    return X, y, iid(X, n_clients, random_state=seed), {}


def table1_data(d, k, seed):
    k_local = int(round(np.sqrt(k)))
    X, y, _ = gaussian_mixture(k, d, 200, 12.0, np.random.RandomState(seed))
    partitions = labels_per_client(y, k_local, clients_per_group=5, random_state=seed)
    return X, y, partitions, {"n_local_clusters": k_local}


def timed(fit):
    start = time.perf_counter()
    model = fit()
    return model, time.perf_counter() - start


def profile_parts(fit):
    """Seconds of one fit per part of PARTS, the rest as 'federation'."""
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    fit()
    profiler.disable()
    total = time.perf_counter() - start
    stats = pstats.Stats(profiler).stats
    cumulative = {}
    for (path, _, name), (_, _, _, ct, _) in stats.items():
        key = f"{Path(path).name}:{name}"
        cumulative[key] = cumulative.get(key, 0.0) + ct
    parts = {}
    for part, names in PARTS:
        parts[part] = sum(
            t
            for key, t in cumulative.items()
            if any(key == n or key.endswith(":" + n) for n in names)
        )
    parts["federation and the rest"] = total - sum(parts.values())
    return total, parts


# (kind, d, k) of the preset lists; scale cases at --n rows (1,000,000).
PRESETS = {
    "headline": [
        ("scale", 20, 16),
        ("scale", 50, 64),
        ("scale", 20, 64),
        ("scale", 50, 16),
    ],
    "table1-cases": [
        ("table1", 100, 16),
        ("table1", 300, 16),
        ("table1", 100, 64),
        ("table1", 300, 64),
        ("table1", 300, 100),
    ],
}


@contextlib.contextmanager
def numpy_lloyd():
    """The large clients' Lloyd on its NumPy pass, as on a scikit-learn
    release without the compiled iteration, within the block."""
    import skfed.cluster._kmeans._sklearn_lloyd as lloyd_module

    compiled = lloyd_module._compiled_iteration
    lloyd_module._compiled_iteration = None
    try:
        yield
    finally:
        lloyd_module._compiled_iteration = compiled


def _with_numpy_lloyd(fit):
    with numpy_lloyd():
        return fit()


def run_case(args):
    if args.kind == "scale":
        X, y, partitions, kfed_params = scale_data(
            args.n, args.d, args.k, args.clients, args.seed, args.partition
        )
    else:
        X, y, partitions, kfed_params = table1_data(args.d, args.k, args.seed)
    n_clients = len(np.unique(partitions))
    fits = {
        "KMeans(n_init=1)": lambda: KMeans(
            args.k, n_init=1, random_state=args.seed
        ).fit(X),
        "KFed": lambda: KFed(args.k, random_state=args.seed, **kfed_params).fit(
            X, partitions=partitions
        ),
        "DistributedKMeans": lambda: DistributedKMeans(
            args.k, random_state=args.seed
        ).fit(X, partitions=partitions),
        "KFed-numpy-lloyd": lambda: _with_numpy_lloyd(fits["KFed"]),
    }
    names = [n for n in fits if n == "KMeans(n_init=1)" or n in args.estimators]
    times = {n: [] for n in names}
    models = {}
    for repeat in range(args.repeats):
        # Alternate which side goes first.
        for name in names if repeat % 2 == 0 else names[::-1]:
            models[name], seconds = timed(fits[name])
            times[name].append(seconds)
            print(f"  {name}: {seconds:.2f} s", flush=True)
    reference = models["KMeans(n_init=1)"]
    t_ref = float(np.median(times["KMeans(n_init=1)"]))
    rows = []
    for name in names:
        model = models[name]
        up = getattr(model, "communication_", None)
        rows.append(
            {
                "case": args.kind
                + ("-dirichlet" if getattr(args, "partition", "iid") != "iid" else ""),
                "N": X.shape[0],
                "d": X.shape[1],
                "k": args.k,
                "clients": n_clients,
                "estimator": name,
                "repeats": args.repeats,
                "times": [round(t, 3) for t in times[name]],
                "time ratio": float(np.median(times[name])) / t_ref,
                "NMI": normalized_mutual_info_score(y, model.labels_),
                "cost ratio": model.inertia_ / reference.inertia_,
                "upload / (N d)": (
                    up.upload_floats / X.size if up is not None else None
                ),
                "rounds": up.n_rounds if up is not None else None,
                "load average": os.getloadavg()[0],
                "skfed": skfed.__file__,
                "commit": _commit(),
            }
        )
    if args.profile:
        total, parts = profile_parts(fits["KFed"])
        rows[0]["KFed profile"] = {"total": total, **parts}
    return rows


def dkm_headline(args):
    """DistributedKMeans with its defaults against KMeans() at each k, the
    reference fitted once per k; one row per (k, clients)."""
    rows = []
    for k in args.ks:
        X, y, _, _ = scale_data(args.n, args.d, k, 1, args.seed)
        reference, t_ref = timed(partial(KMeans(k, random_state=args.seed).fit, X))
        print(f"  k={k} KMeans: {t_ref:.2f} s", flush=True)
        rows.append(_dkm_row(X, y, k, 1, "KMeans()", reference, t_ref, t_ref))
        for n_clients in args.client_counts:
            partitions = iid(X, n_clients, random_state=args.seed)
            model, seconds = timed(
                partial(
                    DistributedKMeans(k, random_state=args.seed).fit,
                    X,
                    partitions=partitions,
                )
            )
            print(f"  k={k} DistributedKMeans over {n_clients}: {seconds:.2f} s")
            rows.append(
                _dkm_row(X, y, k, n_clients, "DistributedKMeans", model, seconds, t_ref)
            )
            rows[-1]["reference inertia"] = reference.inertia_
    return rows


def _dkm_row(X, y, k, n_clients, name, model, seconds, t_ref):
    log = getattr(model, "communication_", None)
    return {
        "case": "dkm-headline",
        "N": X.shape[0],
        "d": X.shape[1],
        "k": k,
        "clients": n_clients,
        "estimator": name,
        "repeats": 1,
        "times": [round(seconds, 3)],
        "time ratio": seconds / t_ref,
        "NMI": normalized_mutual_info_score(y, model.labels_),
        "inertia": model.inertia_,
        "upload / (N d)": log.upload_floats / X.size if log is not None else None,
        "rounds": log.n_rounds if log is not None else None,
        "load average": os.getloadavg()[0],
        "skfed": skfed.__file__,
        "commit": _commit(),
    }


def _median_ms(call, repeats=300):
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def local_parts():
    """Print the ``local-parts`` timings (see the module docstring)."""
    import scipy.linalg
    from sklearn.utils.extmath import randomized_svd

    import skfed.cluster._kmeans._sklearn_lloyd as lloyd_module
    from skfed.cluster._protocols._kfed_local import _top_right_singular_vectors

    class _Streams:
        def random_state(self, name, *keys):
            return np.random.RandomState(0)

    rng = np.random.RandomState(0)
    rows = []
    with threadpool_limits(limits=1):
        X, _, _, _ = scale_data(10_000, 20, 16, 1, 0)
        X = X - X.mean(axis=0)
        prepared = lloyd_module.lloyd_rows(X, np.ones(len(X)), 0.0)
        start = X[rng.choice(len(X), 16, replace=False)]

        def iteration():
            # One update and the assignments around it: max_iter=1.
            lloyd_module.lloyd(prepared, start, max_iter=1)

        for name, passes in [
            ("compiled", contextlib.nullcontext),
            ("NumPy", numpy_lloyd),
        ]:
            with passes():
                ms = _median_ms(iteration)
            rows.append((f"Lloyd iteration, 10,000 x 20, k = 16 ({name})", ms))

        small = rng.normal(size=(160, 300))
        small -= small.mean(axis=0)
        rows.append(
            (
                "basis, 160 x 300, k(z) = 4, n x n Gram",
                _median_ms(lambda: _top_right_singular_vectors(small, 4, _Streams())),
            )
        )
        rows.append(
            (
                "basis, 160 x 300, k(z) = 4, randomized_svd",
                _median_ms(
                    lambda: randomized_svd(
                        small, 4, random_state=np.random.RandomState(0)
                    )
                ),
            )
        )
        for size, rank in [(50, 16), (100, 16), (100, 4), (160, 4)]:
            A = rng.normal(size=(2 * size, size))
            gram = A.T @ A
            subset = [size - rank, size - 1]
            rows.append(
                (
                    f"top {rank} of {size} x {size}, subset solver",
                    _median_ms(
                        partial(scipy.linalg.eigh, gram, subset_by_index=subset)
                    ),
                )
            )
            rows.append(
                (
                    f"top {rank} of {size} x {size}, full eigh",
                    _median_ms(partial(np.linalg.eigh, gram)),
                )
            )
    print(f"load {os.getloadavg()[0]:.1f}, one BLAS thread, medians")
    print("| part | ms |")
    print("|---|---|")
    for name, ms in rows:
        print(f"| {name} | {ms:.3f} |")


def _commit():
    try:
        return subprocess.run(
            [
                "git",
                "-C",
                str(Path(skfed.__file__).parent),
                "rev-parse",
                "--short",
                "HEAD",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def markdown(rows):
    lines = [
        "| case | N | d | k | clients | estimator | time ratio | NMI | cost ratio "
        "| upload / (N d) | rounds | times (s) | load | threads |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        up = r["upload / (N d)"]
        lines.append(
            f"| {r['case']} | {r['N']:,} | {r['d']} | {r['k']} | {r['clients']} "
            f"| {r['estimator']} | {r['time ratio']:.2f} | {r['NMI']:.4f} "
            f"| {r['cost ratio']:.4f} | {'' if up is None else f'{up:.2%}'} "
            f"| {r.get('rounds') or ''} "
            f"| {', '.join(f'{t:.2f}' for t in r['times'])} "
            f"| {r['load average']:.1f} | {r.get('threads', 'default')} |"
        )
    for r in rows:
        if "KFed profile" in r:
            prof = r["KFed profile"]
            lines += ["", "| KFed part | s | share |", "|---|---|---|"]
            for part, seconds in prof.items():
                if part != "total":
                    lines.append(
                        f"| {part} | {seconds:.2f} | {seconds / prof['total']:.0%} |"
                    )
            lines.append(f"| total (profiled) | {prof['total']:.2f} | 100% |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "kind", choices=["scale", "table1", "dkm-headline", "local-parts", *PRESETS]
    )
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--d", type=int, default=50)
    parser.add_argument("--k", type=int, default=64)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument(
        "--partition",
        choices=["iid", "dirichlet"],
        default="iid",
        help="scale cases: IID clients, or Dirichlet(0.3) label skew",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--estimators",
        nargs="+",
        default=None,
        choices=["KFed", "DistributedKMeans", "KFed-numpy-lloyd"],
        help="default: both for scale and table1, KFed for a preset list",
    )
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--ks", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--client-counts", type=int, nargs="+", default=[20, 100])
    parser.add_argument(
        "--one-thread",
        action="store_true",
        help="pin BLAS and OpenMP to one thread on both sides (a loaded "
        "machine slows KMeans' OpenMP team more than one thread)",
    )
    args = parser.parse_args()
    if args.kind == "local-parts":
        local_parts()
        return
    if args.kind == "dkm-headline":
        if args.one_thread:
            with threadpool_limits(limits=1):
                rows = dkm_headline(args)
        else:
            rows = dkm_headline(args)
        for row in rows:
            reference = [
                r["inertia"] for r in rows if r["k"] == row["k"] and r["clients"] == 1
            ][0]
            row["cost ratio"] = row["inertia"] / reference
    else:
        if args.kind in PRESETS:
            cases = [
                argparse.Namespace(**{**vars(args), "kind": kind, "d": d, "k": k})
                for kind, d, k in PRESETS[args.kind]
            ]
            default_estimators = ["KFed"]
        else:
            cases = [args]
            default_estimators = ["KFed", "DistributedKMeans"]
        rows = []
        for case in cases:
            if case.estimators is None:
                case.estimators = default_estimators
            print(f"{case.kind} d={case.d} k={case.k} (load {os.getloadavg()[0]:.1f})")
            if args.one_thread:
                with threadpool_limits(limits=1):
                    rows += run_case(case)
            else:
                rows += run_case(case)
    for row in rows:
        row["threads"] = 1 if args.one_thread else "default"
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(RESULTS / "bench_vs_lloyd.jsonl", "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    print(markdown(rows))


if __name__ == "__main__":
    main()
