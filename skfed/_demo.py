"""The main job: every skfed estimator beside its centralized counterpart.

``python -m skfed demo`` splits data that ships with scikit-learn over
simulated clients and, for each estimator, fits the federated model and the
centralized scikit-learn model on the same data, then reports quality, wall
time, and the floats the federated fit communicated (from its ledger) against
the floats of sending the raw data to one place.
"""

import csv
import io
import sys
import time
from dataclasses import dataclass

import numpy as np

PARTITIONS = ("dirichlet", "iid", "power-law", "labels-per-client", "shards")
ESTIMATORS = (
    "KFed",
    "DistributedKMeans",
    "FederatedKernelKMeans",
    "DistributedKernelPCA",
    "FederatedRKHSClassifier",
)


@dataclass
class Row:
    """One line of the demo table."""

    estimator: str
    counterpart: str
    dataset: str
    metric: str
    skfed: float
    sklearn: float
    skfed_seconds: float
    sklearn_seconds: float
    floats_sent: int
    raw_floats: int
    note: str = ""

    @property
    def floats_ratio(self):
        return self.floats_sent / self.raw_floats


def make_partition(scheme, y, n_clients, seed):
    """Client ids for one of the demo's partition schemes."""
    from . import partition

    if scheme == "iid":
        return partition.iid(len(y), n_clients, random_state=seed)
    if scheme == "dirichlet":
        return partition.label_dirichlet(
            y, n_clients, alpha=0.3, min_size=5, random_state=seed
        )
    if scheme == "power-law":
        return partition.power_law(len(y), n_clients, min_size=5, random_state=seed)
    if scheme == "labels-per-client":
        n_labels = len(np.unique(y))
        per_label = max(1, min(2, n_labels - 1))
        groups = -(-n_labels // per_label)
        return partition.labels_per_client(
            y,
            per_label,
            clients_per_group=max(1, n_clients // groups),
            random_state=seed,
        )
    return partition.shards(y, n_clients, random_state=seed)


def _timed(fit):
    start = time.perf_counter()
    result = fit()
    return result, time.perf_counter() - start


# ---------------------------------------------------------------------------
# One function per estimator: fit both models, return a Row.


def _digits():
    from sklearn.datasets import load_digits

    return load_digits(return_X_y=True)


def _clustering_row(args, federated, counterpart, centralized):
    """Fit a federated clusterer and its centralized counterpart on digits.

    ``centralized(fitted)`` builds the scikit-learn model from the fitted
    federated one (so that both can share, e.g., the kernel width).
    """
    from sklearn.metrics import normalized_mutual_info_score as nmi

    X, y = _digits()
    ids = make_partition(args.partition, y, args.clients, args.seed)
    fed, t_fed = _timed(lambda: federated.fit(X, partitions=ids))
    labels, t_cen = _timed(lambda: centralized(fed).fit_predict(X))
    return Row(
        type(federated).__name__,
        counterpart,
        "digits",
        "NMI",
        nmi(y, fed.labels_),
        nmi(y, labels),
        t_fed,
        t_cen,
        fed.communication_.total_floats,
        X.size,
    )


def _kfed(args):
    from sklearn.cluster import KMeans

    from . import KFed

    return _clustering_row(
        args,
        KFed(n_clusters=10, random_state=args.seed),
        "KMeans(n_init=1)",
        lambda fed: KMeans(10, n_init=1, random_state=args.seed),
    )


def _distributed_kmeans(args):
    from sklearn.cluster import KMeans

    from . import DistributedKMeans

    return _clustering_row(
        args,
        DistributedKMeans(n_clusters=10, coreset_size=500, random_state=args.seed),
        "KMeans",
        lambda fed: KMeans(10, n_init=10, random_state=args.seed),
    )


def _kernel_kmeans(args):
    from sklearn.cluster import KMeans
    from sklearn.decomposition import KernelPCA
    from sklearn.pipeline import make_pipeline

    from . import FederatedKernelKMeans

    # Exact kernel k-means in the spectral form the estimator approximates:
    # k-means on the top eigenvectors of the same RBF kernel.
    return _clustering_row(
        args,
        FederatedKernelKMeans(
            n_clusters=10,
            n_random_features=200,
            n_components=12,
            random_state=args.seed,
        ),
        "KernelPCA + KMeans",
        lambda fed: make_pipeline(
            KernelPCA(n_components=12, kernel="rbf", gamma=fed.gamma_),
            KMeans(10, n_init=10, random_state=args.seed),
        ),
    )


def _kernel_pca(args):
    from sklearn.decomposition import KernelPCA
    from sklearn.metrics.pairwise import rbf_kernel

    from . import DistributedKernelPCA

    X, y = _digits()
    ids = make_partition(args.partition, y, args.clients, args.seed)
    est = DistributedKernelPCA(n_components=10, random_state=args.seed)
    fed, t_fed = _timed(lambda: est.fit(X, partitions=ids))
    cen, t_cen = _timed(
        lambda: KernelPCA(n_components=10, kernel="rbf", gamma=fed.gamma_).fit(X)
    )
    # The optimum: the top-10 eigenvalues of the same centered kernel.
    K = rbf_kernel(X, gamma=fed.gamma_)
    optimum_error = np.trace(K) - K.sum() / len(K) - cen.eigenvalues_.sum()
    return Row(
        "DistributedKernelPCA",
        "KernelPCA",
        "digits",
        "energy / optimum",
        fed.eigenvalues_.sum() / cen.eigenvalues_.sum(),
        1.0,
        t_fed,
        t_cen,
        fed.communication_.total_floats,
        X.size,
        note=(
            f"|Y| = {fed.n_representatives_}, error / optimum = "
            f"{fed.approximation_error_ / optimum_error:.3f}"
        ),
    )


def _rkhs(args):
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    from . import FederatedRKHSClassifier

    X, y = load_breast_cancer(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=0.3, stratify=y, random_state=args.seed
    )
    scaler = StandardScaler().fit(X_train)
    X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)
    ids = make_partition(args.partition, y_train, args.clients, args.seed)
    est = FederatedRKHSClassifier(random_state=args.seed)
    fed, t_fed = _timed(lambda: est.fit(X_train, y_train, partitions=ids))
    cen, t_cen = _timed(lambda: SVC().fit(X_train, y_train))
    return Row(
        "FederatedRKHSClassifier",
        "SVC",
        "breast_cancer",
        "test accuracy",
        fed.score(X_test, y_test),
        cen.score(X_test, y_test),
        t_fed,
        t_cen,
        fed.communication_.total_floats,
        X_train.size + y_train.size,
        note=f"{fed.n_kernels_} kernels vs {cen.n_support_.sum()} SVs",
    )


CASES = {
    "KFed": _kfed,
    "DistributedKMeans": _distributed_kmeans,
    "FederatedKernelKMeans": _kernel_kmeans,
    "DistributedKernelPCA": _kernel_pca,
    "FederatedRKHSClassifier": _rkhs,
}

# ---------------------------------------------------------------------------
# Output

COLUMNS = (
    ("estimator", "estimator"),
    ("counterpart", "sklearn counterpart"),
    ("dataset", "data"),
    ("metric", "metric"),
    ("skfed", "skfed"),
    ("sklearn", "sklearn"),
    ("skfed_seconds", "skfed s"),
    ("sklearn_seconds", "sklearn s"),
    ("floats_sent", "floats sent"),
    ("raw_floats", "raw data floats"),
    ("floats_ratio", "sent / raw"),
    ("note", "note"),
)


def _cell(row, key):
    value = getattr(row, key)
    if key == "floats_ratio":
        return f"{value:.2f}x"
    if isinstance(value, float):
        return f"{value:.3f}" if "seconds" not in key else f"{value:.2f}"
    if isinstance(value, (int, np.integer)):
        return f"{value:,}"
    return str(value)


def format_table(rows, fmt="text"):
    """The demo table as plain text, markdown or CSV."""
    header = [title for _, title in COLUMNS]
    body = [[_cell(r, key) for key, _ in COLUMNS] for r in rows]
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow([key for key, _ in COLUMNS])
        for r in rows:
            writer.writerow([getattr(r, key) for key, _ in COLUMNS])
        return buf.getvalue()
    if fmt == "markdown":
        lines = ["| " + " | ".join(header) + " |"]
        lines.append("|" + "|".join("---" for _ in header) + "|")
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
        return "\n".join(lines) + "\n"
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(cells, widths)) for cells in body]
    return "\n".join(lines) + "\n"


def plot(rows, path):
    """Quality against floats communicated, one arrow per estimator from its
    centralized counterpart (sending the raw data) to the federated fit."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise SystemExit(
            "--figure needs matplotlib: pip install 'skfed[benchmark]'"
        ) from exc
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, r in enumerate(rows):
        color = f"C{i}"
        ax.scatter(r.raw_floats, r.sklearn, marker="s", color=color)
        ax.scatter(r.floats_sent, r.skfed, marker="o", color=color, label=r.estimator)
        ax.annotate(
            "",
            xy=(r.floats_sent, r.skfed),
            xytext=(r.raw_floats, r.sklearn),
            arrowprops={"arrowstyle": "->", "color": color, "alpha": 0.6},
        )
    ax.set_xscale("log")
    ax.set_xlabel("floats communicated (squares: raw data sent to one place)")
    ax.set_ylabel("quality (NMI, accuracy, or kernel energy / optimum)")
    ax.set_title("skfed (circles) vs centralized scikit-learn (squares)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args, out=None, progress=None):
    """Run the chosen estimators and print the table; return the rows."""
    # Looked up at call time so that redirected streams are honoured.
    out = sys.stdout if out is None else out
    progress = sys.stderr if progress is None else progress
    names = args.estimators or list(ESTIMATORS)
    rows = []
    for i, name in enumerate(names, start=1):
        if not args.quiet:
            print(f"[{i}/{len(names)}] {name} ...", end="", flush=True, file=progress)
        row, seconds = _timed(lambda name=name: CASES[name](args))
        rows.append(row)
        if not args.quiet:
            print(f" done in {seconds:.1f} s", file=progress)
    table = format_table(rows, args.format)
    if args.output:
        with open(args.output, "w") as fh:
            fh.write(table)
        if not args.quiet:
            print(f"table written to {args.output}", file=progress)
    print(
        f"{args.clients} clients, {args.partition} partition, seed {args.seed}\n",
        file=out,
    )
    print(table, file=out, end="")
    if args.figure:
        plot(rows, args.figure)
        if not args.quiet:
            print(f"figure written to {args.figure}", file=progress)
    return rows
