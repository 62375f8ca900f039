"""DistributedKMeans(raw_rows="refuse") against KMeans(n_init=3).

In one run, on the same data and partitions: the k-means cost on the pooled
data of the row-free fit's centers over KMeans', the distributed Lloyd
rounds it ran, its upload (floats, from ``communication_``) and its raw
rows (zero), on well-separated blobs (N = 20,000, k = 16, d = 20),
overlapping blobs (cluster_std 3 in a box of ±10, as ``bench_coreset.py``)
and digits (k = 10), over 10 and 100 clients, IID and label-skewed
(Dirichlet 0.3 over the blobs or the digits' classes), for three seeds
(partition, fit and KMeans).

Usage::

    python benchmarks/bench_row_free_kmeans.py [--quick]
"""

import argparse
import warnings

import numpy as np
from _results import results_dir
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits, make_blobs
from sklearn.metrics import pairwise_distances_argmin_min
from threadpoolctl import threadpool_limits

from skfed import DistributedKMeans
from skfed.partition import iid, label_dirichlet

RESULTS = results_dir()
TARGET = 1.05


def cost(X, centers):
    _, d = pairwise_distances_argmin_min(X, centers)
    return float(d @ d)


def datasets(quick):
    n = 5_000 if quick else 20_000
    X, y = make_blobs(n, centers=16, n_features=20, random_state=0)
    yield "blobs", X, y, 16
    X, y = make_blobs(
        n,
        centers=16,
        n_features=20,
        cluster_std=3.0,
        center_box=(-10, 10),
        random_state=0,
    )
    yield "overlapping blobs", X, y, 16
    X, y = load_digits(return_X_y=True)
    yield "digits", X, y, 10


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed, N = 5,000")
    args = parser.parse_args()
    seeds = range(1 if args.quick else 3)
    rows = []
    for name, X, y, k in datasets(args.quick):
        for n_clients in (10, 100):
            for split in ("IID", "Dirichlet 0.3"):
                ratios, rounds, floats, raw = [], [], [], 0
                for seed in seeds:
                    if split == "IID":
                        parts = iid(len(X), n_clients, random_state=seed)
                    else:
                        parts = label_dirichlet(
                            y, n_clients, alpha=0.3, min_size=2, random_state=seed
                        )
                    ref = KMeans(k, n_init=3, random_state=seed).fit(X)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        km = DistributedKMeans(
                            k, raw_rows="refuse", random_state=seed
                        ).fit(X, partitions=parts)
                    ratios.append(
                        cost(X, km.cluster_centers_) / cost(X, ref.cluster_centers_)
                    )
                    rounds.append(km.n_refine_iter_)
                    floats.append(km.communication_.upload_floats)
                    raw += km.communication_.raw_rows
                rows.append(
                    f"| {name} | {n_clients} | {split} | {min(ratios):.4f} | "
                    f"{max(ratios):.4f} | {min(rounds)}-{max(rounds)} | "
                    f"{np.mean(floats) / X.size:.2%} | {raw} |"
                )
                print(rows[-1], flush=True)
    lines = [
        "# Row-free DistributedKMeans against KMeans(n_init=3)",
        "",
        f"Cost on the pooled data over KMeans' (min and max over {len(seeds)} "
        f"seed(s); target at most {TARGET}), distributed Lloyd rounds, "
        "upload over the data's N d floats, raw rows sent (all seeds).",
        "",
        "| data | clients | split | cost ratio min | cost ratio max | rounds "
        "| upload / N d | raw rows |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "row_free_kmeans.md").write_text("\n".join(lines))


if __name__ == "__main__":
    with threadpool_limits(1):
        main()
