"""The row-free FederatedRKHSClassifier (method="random_features") against
SVC: accuracy and fit time, as ratios taken in one run.

Accuracy: 5-fold cross-validation on scaled data (the scaler fitted on each
training fold), 10 clients, IID and Dirichlet(0.3) label skew, the
estimator with ``method="random_features"`` and its default features
(``raw_rows="refuse"`` would cap them at the smallest client's rows)
against SVC at its
defaults (gamma="scale", C=1). Data sets: breast_cancer, digits, a noisy
``make_classification(10_000, flip_y=0.1)`` and, when OpenML's MNIST is
in scikit-learn's cache (no download is attempted), its 3-vs-8 task
(skipped otherwise).

Time: one fit of each on ``make_classification(n, flip_y=0.1)`` at each
size of ``--sizes`` (10 clients, n_jobs=1, BLAS and OpenMP on one thread),
alternating the two estimators so that load on a shared machine hits both
alike; read the ratios, not the times. Also the upload per client against
its raw data.

Usage::

    python benchmarks/bench_rkhs_random_features.py [--quick] [--sizes 2000 5000]
"""

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.datasets import (
    fetch_openml,
    get_data_home,
    load_breast_cancer,
    load_digits,
    make_classification,
)
from sklearn.model_selection import StratifiedKFold
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC
from threadpoolctl import threadpool_limits

from skfed import FederatedRKHSClassifier
from skfed.partition import iid, label_dirichlet


def _mnist_3_vs_8():
    # Only from scikit-learn's cache: this fetch_openml has no offline
    # switch, so look for the cached data set's files first.
    cache = Path(get_data_home()) / "openml"
    if not cache.exists() or not any("mnist" in str(p) for p in cache.rglob("*")):
        return None
    X, y = fetch_openml("mnist_784", version=1, return_X_y=True, as_frame=False)
    keep = (y == "3") | (y == "8")
    return X[keep][:6000] / 255.0, y[keep][:6000]


def _data_sets(quick):
    sets = {
        "breast_cancer": load_breast_cancer(return_X_y=True),
        "digits": load_digits(return_X_y=True),
    }
    if not quick:
        sets["noisy 10k"] = make_classification(10_000, flip_y=0.1, random_state=0)
        mnist = _mnist_3_vs_8()
        if mnist is None:
            print("MNIST 3-vs-8: not in scikit-learn's cache, skipped")
        else:
            sets["MNIST 3-vs-8"] = mnist
    return sets


def accuracy(quick):
    print("data set       | partition | ours   | SVC    | ours - SVC (points)")
    for name, (X, y) in _data_sets(quick).items():
        for partition in ("iid", "dirichlet(0.3)"):
            ours, svc = [], []
            folds = StratifiedKFold(3 if quick else 5, shuffle=True, random_state=0)
            for train, test in folds.split(X, y):
                scaler = StandardScaler().fit(X[train])
                X_train, X_test = scaler.transform(X[train]), scaler.transform(X[test])
                if partition == "iid":
                    parts = iid(len(train), 10, random_state=0)
                else:
                    parts = label_dirichlet(y[train], 10, alpha=0.3, random_state=0)
                clf = FederatedRKHSClassifier(method="random_features", random_state=0)
                clf.fit(X_train, y[train], partitions=parts)
                ours.append(clf.score(X_test, y[test]))
                svc.append(SVC().fit(X_train, y[train]).score(X_test, y[test]))
            a, b = np.mean(ours), np.mean(svc)
            print(
                f"{name:<14} | {partition:<9} | {a:.4f} | {b:.4f} | "
                f"{100 * (a - b):+.2f}"
            )


def timing(sizes):
    print(
        "\nN       | SVC fit (s) | ours fit (s) | ours / SVC | D    | "
        "up per client / raw"
    )
    for n in sizes:
        X, y = make_classification(n, flip_y=0.1, random_state=0)
        X = StandardScaler().fit_transform(X)
        parts = iid(n, 10, random_state=0)
        times = {"svc": [], "ours": []}
        with threadpool_limits(1):
            for _ in range(2):
                start = time.perf_counter()
                SVC().fit(X, y)
                times["svc"].append(time.perf_counter() - start)
                start = time.perf_counter()
                clf = FederatedRKHSClassifier(method="random_features", random_state=0)
                clf.fit(X, y, partitions=parts)
                times["ours"].append(time.perf_counter() - start)
        svc_t, ours_t = min(times["svc"]), min(times["ours"])
        up = clf.communication_.upload_floats / 10
        raw = n / 10 * (X.shape[1] + 1)
        print(
            f"{n:<7} | {svc_t:11.2f} | {ours_t:12.2f} | {ours_t / svc_t:10.2f} | "
            f"{clf.n_random_features_:<4} | {up / raw:.1f}"
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sizes", type=int, nargs="*", default=[2000, 5000, 10_000])
    args = parser.parse_args()
    warnings.simplefilter("ignore", UserWarning)
    accuracy(args.quick)
    timing([2000] if args.quick else args.sizes)


if __name__ == "__main__":
    main()
