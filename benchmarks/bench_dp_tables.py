"""The privacy page's utility tables of KFed, kernel k-means and kernel PCA.

Regenerates, with the page's data, settings and seeds, the tables of
``doc/privacy.rst``: "Measured NMI" of ``KFed(privacy=...)`` (with the
``private_iter`` figures quoted beside it) and "Measured utility" of
``FederatedKernelKMeans(privacy=...)`` and ``DistributedKernelPCA(privacy=...)``.
Every fit runs over 10 clients (``partitions=10``), delta = 1e-5 (1e-6 on
the 100,000-row mixture: a fit refuses delta of 1/N or more), for
``random_state`` 0, 1 and 2. The private fits draw their noise from fresh
entropy, not from ``random_state``: each seed's fit at a finite epsilon runs
``--repeats`` times (default 5, so 15 fits a figure), and two runs of the
script still give somewhat different figures.

(a) KFed, NMI against the true labels, mean over the fits, defaults
    (``private_iter=5``, ``n_local_clusters`` 2k): a mixture
    ``make_blobs(100_000, n_features=5, centers=10, random_state=0)`` with
    bounds (-15, 15), and digits divided by 16 (its pixels' own range, so
    [0, 1]) with bounds (0, 1); epsilon inf, 10, 1, 0.1 and the
    non-private fit. Then ``private_iter`` 2 and 3 on digits at
    epsilon 10 and inf and on the mixture at epsilon 0.1, beside the
    default's figures from the first table.
(b) FederatedKernelKMeans, NMI, mean (worst) over the fits, D = 300, the
    default ``n_components``, ``refine_iter`` 5 and 20, epsilon 1, 10 and
    inf, and the non-private one-shot fit (coreset k-means, same D): digits (raw
    pixels, gamma 2.1e-4), rings ``make_circles(20_000, factor=0.4,
    noise=0.05, random_state=0)`` (gamma 5), blobs ``make_blobs(20_000,
    centers=10, n_features=10, random_state=1)`` (gamma 7e-4).
(c) DistributedKernelPCA, 10 components: the summed variance of the
    training rows' projections under the private fit's own map, as a
    fraction of the non-private ``solver="random_features"`` fit's with the
    same seed (hence the same D random features); mean (worst) over the
    fits, for digits with D = 300 and 2,000 and blobs with D = 300.

BLAS and OpenMP are pinned to one thread. The full run takes a few
minutes on two cores. ``--quick`` runs one seed on a tenth of the
mixture, rings and blobs (a smoke run, not the page's
figures).

Usage::

    python benchmarks/bench_dp_tables.py [--quick] [--repeats R] [--out PATH]

Prints the tables in the page's ``list-table`` form and writes them to
``--out`` (default ``dp_tables.rst`` in the system's temporary directory).
"""

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits, make_blobs, make_circles
from sklearn.metrics import normalized_mutual_info_score
from threadpoolctl import threadpool_limits

from skfed import DistributedKernelPCA, FederatedKernelKMeans, KFed
from skfed.privacy import DifferentialPrivacy

N_CLIENTS = 10
DELTA = 1e-5
INF = float("inf")


def _nmi(y, labels):
    return normalized_mutual_info_score(y, labels)


def kfed_data(quick):
    n = 10_000 if quick else 100_000
    X, y = make_blobs(n, n_features=5, centers=10, random_state=0)
    digits, labels = load_digits(return_X_y=True)
    return {
        # name: (X, y, bounds, delta)
        "mixture": (X, y, (-15.0, 15.0), 1e-6),
        "digits": (digits / 16.0, labels, (0.0, 1.0), DELTA),
    }


def kfed_nmi(X, y, bounds, delta, epsilon, seed, private_iter=5):
    if epsilon is None:
        est = KFed(10, random_state=seed)
    else:
        dp = DifferentialPrivacy(epsilon=epsilon, delta=delta, bounds=bounds)
        est = KFed(10, privacy=dp, private_iter=private_iter, random_state=seed)
    return _nmi(y, est.fit(X, partitions=N_CLIENTS).labels_)


def kernel_data(quick):
    n = 2_000 if quick else 20_000
    digits, labels = load_digits(return_X_y=True)
    rings = make_circles(n, factor=0.4, noise=0.05, random_state=0)
    blobs = make_blobs(n, centers=10, n_features=10, random_state=1)
    # name: (X, y, n_clusters, gamma)
    return {
        "digits": (digits, labels, 10, 2.1e-4),
        "rings": (*rings, 2, 5.0),
        "blobs": (*blobs, 10, 7e-4),
    }


def kkm_nmi(X, y, k, gamma, epsilon, seed, refine_iter=20):
    privacy = None if epsilon is None else DifferentialPrivacy(epsilon, delta=DELTA)
    est = FederatedKernelKMeans(
        k,
        gamma=gamma,
        n_random_features=300,
        refine_iter=refine_iter,
        random_state=seed,
        privacy=privacy,
    )
    return _nmi(y, est.fit(X, partitions=N_CLIENTS).labels_)


def kpca_captured(X, gamma, D, epsilon, seed):
    """The variance the fit's 10 components capture of the training rows."""
    est = DistributedKernelPCA(
        10,
        gamma=gamma,
        n_random_features=D,
        random_state=seed,
        solver="random_features",
        privacy=None if epsilon is None else DifferentialPrivacy(epsilon, delta=DELTA),
    )
    return np.sum(est.fit(X, partitions=N_CLIENTS).transform(X).var(axis=0))


def list_table(title, header, rows):
    lines = [f".. list-table:: {title}" if title else ".. list-table::"]
    lines += ["   :header-rows: 1", ""]
    for row in [header, *rows]:
        lines.append(f"   * - {row[0]}")
        lines += [f"     - {cell}" for cell in row[1:]]
    return "\n".join(lines)


def mean_worst(values):
    return f"{np.mean(values):.2f} ({np.min(values):.2f})"


def eps_name(epsilon):
    return "inf" if epsilon == INF else f"{epsilon:g}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed, less data")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(tempfile.gettempdir()) / "dp_tables.rst",
        help="where to write the tables (default: %(default)s)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="fits per seed at a finite epsilon, each with fresh noise "
        "(default: %(default)s)",
    )
    args = parser.parse_args(argv)
    seeds = (0,) if args.quick else (0, 1, 2)

    def runs(epsilon):
        # The noise comes from fresh entropy, not from the seed: a finite
        # epsilon's fits are repeated to average over it as well.
        finite = epsilon is not None and epsilon != INF
        return [s for s in seeds for _ in range(args.repeats if finite else 1)]

    tables = []
    start = time.perf_counter()

    # (a) KFed.
    epsilons = (INF, 10.0, 1.0, 0.1)
    rows = []
    data = kfed_data(args.quick)
    names = {
        "mixture": "10-blob mixture, {:,} rows, d = 5, bounds (-15, 15), delta = 1e-6",
        "digits": "digits, 1,797 rows, d = 64, scaled to [0, 1], bounds (0, 1), "
        "delta = 1e-5",
    }
    # The defaults' figures, kept for the private_iter table's last column.
    default = {}
    for name, (X, y, bounds, delta) in data.items():
        row = [names[name].format(len(X))]
        for epsilon in (None, *epsilons):
            nmi = [kfed_nmi(X, y, bounds, delta, epsilon, s) for s in runs(epsilon)]
            default[name, epsilon] = nmi
            row.append(f"{np.mean(nmi):.3f}")
        rows.append(row)
        print(f"KFed {name}: {row[1:]} ({time.perf_counter() - start:.0f} s)")
    header = ["data", "non-private", *(f"epsilon = {eps_name(e)}" for e in epsilons)]
    tables.append(list_table("", header, rows))

    rows = []
    for name, epsilon in (("digits", 10.0), ("digits", INF), ("mixture", 0.1)):
        X, y, bounds, delta = data[name]
        row = [f"{name}, epsilon = {eps_name(epsilon)}"]
        for private_iter in (2, 3):
            nmi = [
                kfed_nmi(X, y, bounds, delta, epsilon, s, private_iter)
                for s in runs(epsilon)
            ]
            row.append(f"{np.mean(nmi):.3f}")
        row.append(f"{np.mean(default[name, epsilon]):.3f}")
        rows.append(row)
        print(f"KFed private_iter {name}: {row[1:]}")
    header = ["data", "private_iter = 2", "3", "5 (the default)"]
    tables.append(list_table("KFed, NMI against private_iter", header, rows))

    # (b) FederatedKernelKMeans.
    epsilons = (1.0, 10.0, INF)
    data = kernel_data(args.quick)
    rows = []
    for name, (X, y, k, gamma) in data.items():
        plain = [kkm_nmi(X, y, k, gamma, None, s) for s in seeds]
        for refine_iter in (5, 20):
            row = [f"{name}, {refine_iter}"]
            for epsilon in epsilons:
                nmi = [
                    kkm_nmi(X, y, k, gamma, epsilon, s, refine_iter)
                    for s in runs(epsilon)
                ]
                row.append(mean_worst(nmi))
            row.append(mean_worst(plain))
            rows.append(row)
            print(f"kernel k-means {row} ({time.perf_counter() - start:.0f} s)")
    header = [
        "data, ``refine_iter``",
        *(f"epsilon {eps_name(e)}" for e in epsilons),
        "non-private",
    ]
    tables.append(list_table("FederatedKernelKMeans, NMI", header, rows))

    # (c) DistributedKernelPCA.
    rows = []
    for name, D in (("digits", 300), ("digits", 2000), ("blobs", 300)):
        X, _, _, gamma = data[name]
        row = [f"{name}, {D:,}"]
        plain = {s: kpca_captured(X, gamma, D, None, s) for s in seeds}
        for epsilon in epsilons:
            ratios = [
                kpca_captured(X, gamma, D, epsilon, s) / plain[s] for s in runs(epsilon)
            ]
            row.append(mean_worst(ratios))
        rows.append(row)
        print(f"kernel PCA {row} ({time.perf_counter() - start:.0f} s)")
    header = ["data, D", *(f"epsilon {eps_name(e)}" for e in epsilons)]
    tables.append(list_table("DistributedKernelPCA, variance captured", header, rows))

    text = "\n\n".join(tables) + "\n"
    print()
    print(text)
    args.out.write_text(text)
    print(f"total {time.perf_counter() - start:.0f} s; wrote {args.out}")


if __name__ == "__main__":
    warnings.simplefilter("ignore", FutureWarning)
    with threadpool_limits(limits=1):
        main()
