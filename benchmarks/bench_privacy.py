"""What each estimator discloses, and what secure aggregation costs.

For every estimator, one fit on Gaussian blobs over M clients: per round,
what the uploads reveal (``raw_rows``, ``per_client``, ``sum_only``), the
floats and the raw rows. For the estimators with sum-only rounds
(DistributedKMeans with Lloyd refinement, FederatedKernelKMeans,
DistributedKernelPCA), the same fit with ``secure_aggregation=True``: the
floats up and down, the wall time against the unmasked fit, and the largest
deviation of the masked model from the unmasked one.

Timings pin BLAS and OpenMP to one thread and run the clients sequentially
(n_jobs=1); the machine is shared, so read ratios, not absolute times.

Usage::

    python benchmarks/bench_privacy.py [--quick] [--out privacy.md]

Writes ``privacy.md`` in the results folder (``_results.py``) (or ``--out``).
"""

import argparse
import platform
import time
import warnings

import numpy as np
from _results import results_dir
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score
from threadpoolctl import threadpool_limits

import skfed

RESULTS = results_dir()

ESTIMATORS = {
    "KFed": (lambda **kw: skfed.KFed(n_clusters=5, random_state=0, **kw), ()),
    "DistributedKMeans": (
        lambda **kw: skfed.DistributedKMeans(
            n_clusters=5, refine_iter=5, random_state=0, **kw
        ),
        ("cluster_centers_", "inertia_"),
    ),
    "FederatedKernelKMeans": (
        lambda **kw: skfed.FederatedKernelKMeans(n_clusters=5, random_state=0, **kw),
        # Not the centers: they live in the spectral embedding, whose
        # columns of nearly equal eigenvalues any rounding may rotate.
        ("eigenvalues_", "inertia_"),
    ),
    "DistributedKernelPCA": (
        lambda **kw: skfed.DistributedKernelPCA(n_components=5, random_state=0, **kw),
        ("dual_coef_", "eigenvalues_"),
    ),
    "FederatedRKHSClassifier": (
        lambda **kw: skfed.FederatedRKHSClassifier(random_state=0, **kw),
        (),
    ),
}


def _fit(name, X, y, ids, **params):
    est = ESTIMATORS[name][0](**params)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "FederatedRKHSClassifier":
            est.fit(X, y, partitions=ids)
        else:
            est.fit(X, partitions=ids)
    return est, time.perf_counter() - start


def _disclosure_table(log):
    rows = {}
    for d in log.disclosure():
        name = d["name"]
        count, floats, raw, kinds = rows.get(name, (0, 0, 0, []))
        if d["disclosure"] not in kinds:
            kinds = kinds + [d["disclosure"]]
        rows[name] = (
            count + 1,
            floats + d["floats"],
            raw + sum(d["raw_rows"].values()),
            kinds,
        )
    lines = [
        "| round | times | floats up | raw rows up | disclosure |",
        "|---|---:|---:|---:|---|",
    ]
    for name, (count, floats, raw, kinds) in rows.items():
        lines.append(f"| {name} | {count} | {floats:,} | {raw:,} | {'/'.join(kinds)} |")
    return lines


def _relative(masked, plain, attr):
    a = np.asarray(getattr(plain, attr), dtype=np.float64)
    b = np.asarray(getattr(masked, attr), dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-300))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default="privacy.md")
    args = parser.parse_args()
    n, clients = (2_000, (4, 20)) if args.quick else (10_000, (10, 100))
    X, y = make_blobs(n, centers=5, n_features=10, random_state=0)
    y = (y < 2).astype(int)
    out = [
        "# Privacy: disclosure per round and the cost of secure aggregation",
        "",
        f"N={n:,} rows of 10 features (5 Gaussian blobs), clients of equal "
        f"size; BLAS on one thread, n_jobs=1; {platform.processor() or 'cpu'}, "
        "shared machine.",
        "",
    ]
    cost = [
        "| estimator | M | floats up plain | floats up masked | floats down plain "
        "| floats down masked | time plain (s) | time masked (s) "
        "| max relative deviation | labels ARI |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    with threadpool_limits(limits=1):
        for M in clients:
            ids = np.arange(n) % M
            for name, (_, attrs) in ESTIMATORS.items():
                plain, t_plain = _fit(name, X, y, ids)
                if M == clients[0]:
                    log = plain.communication_
                    out += [f"## {name} (M={M})", ""]
                    out += _disclosure_table(log)
                    out += [
                        "",
                        f"Raw rows up in all: {log.raw_rows:,} of {n:,}.",
                        "",
                    ]
                if not attrs:
                    continue
                masked, t_masked = _fit(name, X, y, ids, secure_aggregation=True)
                deviation = max(_relative(masked, plain, a) for a in attrs)
                same = (
                    f"{adjusted_rand_score(plain.labels_, masked.labels_):.4f}"
                    if hasattr(plain, "labels_")
                    else "-"
                )
                a, b = plain.communication_, masked.communication_
                cost.append(
                    f"| {name} | {M} | {a.upload_floats:,} | {b.upload_floats:,} "
                    f"| {a.download_floats:,} | {b.download_floats:,} "
                    f"| {t_plain:.2f} | {t_masked:.2f} | {deviation:.1e} | {same} |"
                )
                print(cost[-1], flush=True)
    out += ["## Secure aggregation: floats, time and deviation", ""] + cost + [""]
    out += [
        "The deviation is the largest difference between the masked and the "
        "unmasked fit over the fitted attributes compared (DistributedKMeans: "
        "centers and inertia; FederatedKernelKMeans: eigenvalues and "
        "inertia; DistributedKernelPCA: dual coefficients and eigenvalues), "
        "relative to the attribute's largest magnitude; 'labels ARI' is the "
        "adjusted Rand index between the two fits' training labels (1: the "
        "same clustering, cluster numbers aside).",
        "",
    ]
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / args.out
    path.write_text("\n".join(out))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
