"""The main job: every skfed estimator beside its centralized counterpart.

``python -m skfed demo`` fits each estimator in the regime where a user
should pick it (synthetic data of 10^4 to 2*10^5 rows over 4 to 100
clients, each estimator's uploads below the raw data) and, with ``--small``, on
small data that ships with scikit-learn split over simulated clients. For
each, the federated model and the centralized scikit-learn model are
fitted on the same data; the table reports quality, wall time, the floats
the federated fit uploaded and downloaded and the floats of the raw data
(what sending it to one place would upload), all three from its ledger.
The notes add kernel PCA's peak memory beside exact ``KernelPCA``'s and the
classifier's prediction time beside SVC's.

README.md prints the default run's output between its ``demo-output``
markers; tests/test_main.py checks its quality, rounds and floats against
a fresh run.
"""

import csv
import io
import sys
import textwrap
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
    clients: int
    metric: str
    skfed: float
    sklearn: float
    skfed_seconds: float
    sklearn_seconds: float
    uploads: int
    downloads: int
    raw_floats: int
    rounds: int
    note: str = ""
    heaviest: tuple = ("", 0)  # (round name, upload floats) of the largest

    @property
    def upload_ratio(self):
        return self.uploads / self.raw_floats


def _row(est, *, name, counterpart, dataset, metric, quality, times, note=""):
    """A Row from a fitted estimator (communication, and the floats of the
    raw data it was fitted on, from its ledger)."""
    log = est.communication_
    return Row(
        name,
        counterpart,
        dataset,
        int(est.n_clients_),
        metric,
        float(quality[0]),
        float(quality[1]),
        times[0],
        times[1],
        log.upload_floats,
        log.download_floats,
        log.raw_data_floats,
        log.n_upload_rounds,
        note,
        max(log.floats_by_name().items(), key=lambda item: item[1]),
    )


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


def _scheme(args, own="dirichlet"):
    """The partition scheme a case uses: the one asked for, or the case's
    own (label skew, unless the case's regime says otherwise)."""
    return args.partition or own


def _traced(fit):
    """``fit()`` and the peak of the memory it allocated, in bytes (numpy's
    arrays included, from every thread), traced by tracemalloc."""
    import tracemalloc

    tracemalloc.start()
    try:
        return fit(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _megabytes(n_bytes):
    return f"{n_bytes / 1e6:,.0f} MB"


def _timed(fit):
    start = time.perf_counter()
    result = fit()
    return result, time.perf_counter() - start


# ---------------------------------------------------------------------------
# The data. The default regime is synthetic and large; --small uses data
# that ships with scikit-learn.


def _digits():
    from sklearn.datasets import load_digits

    return load_digits(return_X_y=True)


def _mixture(n_samples, n_features, n_clusters, seed):
    """Well separated Gaussian clusters of equal size, and their labels."""
    rng = np.random.RandomState(seed)
    centers = rng.uniform(-10, 10, (n_clusters, n_features))
    y = rng.randint(n_clusters, size=n_samples)
    return centers[y] + rng.standard_normal((n_samples, n_features)), y


def _embedded_rings(n_samples, n_features, seed):
    """Two concentric rings (radii 1 and 0.3) in a random plane of
    ``n_features`` dimensions, with Gaussian noise of scale 0.05 in every
    coordinate; and which ring each row is on."""
    from sklearn.datasets import make_circles

    rng = np.random.RandomState(seed)
    rings, y = make_circles(n_samples, factor=0.3, noise=0.05, random_state=seed)
    noise = 0.05 * rng.standard_normal((n_samples, n_features - 2))
    rotation, _ = np.linalg.qr(rng.standard_normal((n_features, n_features)))
    return np.hstack([rings, noise]) @ rotation.T, y


def _label(n_samples, n_features, name):
    return f"{name} {n_samples // 1000}k x {n_features}"


# ---------------------------------------------------------------------------
# One function per estimator: fit both models, return a Row.


def _clustering(args, federated, counterpart, centralized, X, y, ids, dataset):
    """Fit a federated clusterer and its centralized counterpart; NMI
    against the true clusters.

    ``centralized(fitted)`` builds the scikit-learn model from the fitted
    federated one (so that both can share, e.g., the kernel width).
    """
    from sklearn.metrics import normalized_mutual_info_score as nmi

    fed, t_fed = _timed(lambda: federated.fit(X, partitions=ids))
    labels, t_cen = _timed(lambda: centralized(fed).fit_predict(X))
    return _row(
        fed,
        name=type(federated).__name__,
        counterpart=counterpart,
        dataset=dataset,
        metric="NMI",
        quality=(nmi(y, fed.labels_), nmi(y, labels)),
        times=(t_fed, t_cen),
    )


def _kfed(args):
    from sklearn.cluster import KMeans

    from . import KFed, partition

    if args.small:
        X, y = _digits()
        ids = make_partition(_scheme(args), y, args.clients or 10, args.seed)
        est, dataset, k = KFed(n_clusters=10, random_state=args.seed), "digits", 10
    else:
        # The paper's regime: many clients, each holding k' = 4 of k = 16
        # clusters, each clustering locally into k' clusters.
        k, n = 16, 200_000
        X, y = _mixture(n, 20, k, args.seed)
        if args.partition is None:
            ids = partition.labels_per_client(
                y,
                4,
                clients_per_group=(args.clients or 100) // 4,
                random_state=args.seed,
            )
        else:
            ids = make_partition(args.partition, y, args.clients or 100, args.seed)
        est = KFed(n_clusters=k, n_local_clusters=4, random_state=args.seed)
        dataset = _label(n, 20, "blobs")
    return _clustering(
        args,
        est,
        "KMeans(n_init=1)",
        lambda fed: KMeans(k, n_init=1, random_state=args.seed),
        X,
        y,
        ids,
        dataset,
    )


def _distributed_kmeans(args):
    from sklearn.cluster import KMeans

    from . import DistributedKMeans

    if args.small:
        # The estimator's own coreset size: on a few hundred rows per client
        # it is most of the data, which is what matches KMeans' clustering.
        X, y = _digits()
        k, dataset, coreset = 10, "digits", "auto"
        ids = make_partition(_scheme(args), y, args.clients or 10, args.seed)
    else:
        k, n = 16, 200_000
        X, y = _mixture(n, 20, k, args.seed + 1)
        dataset, coreset = _label(n, 20, "blobs"), 1000
        ids = make_partition(_scheme(args), y, args.clients or 100, args.seed)
    return _clustering(
        args,
        DistributedKMeans(n_clusters=k, coreset_size=coreset, random_state=args.seed),
        "KMeans",
        lambda fed: KMeans(k, n_init=10 if args.small else 3, random_state=args.seed),
        X,
        y,
        ids,
        dataset,
    )


def _kernel_kmeans(args):
    from sklearn.cluster import KMeans
    from sklearn.decomposition import PCA, KernelPCA
    from sklearn.kernel_approximation import Nystroem
    from sklearn.pipeline import make_pipeline

    from . import FederatedKernelKMeans

    if args.small:
        X, y = _digits()
        ids = make_partition(_scheme(args), y, args.clients or 10, args.seed)
        est = FederatedKernelKMeans(
            n_clusters=10, n_random_features=200, n_components=12, random_state=0
        )
        # Exact kernel k-means in the spectral form the estimator
        # approximates: k-means on the top eigenvectors of the same kernel.
        return _clustering(
            args,
            est,
            "KernelPCA + KMeans",
            lambda fed: make_pipeline(
                KernelPCA(n_components=12, kernel="rbf", gamma=fed.gamma_),
                KMeans(10, n_init=10, random_state=args.seed),
            ),
            X,
            y,
            ids,
            "digits",
        )
    # Non-convex clusters, where a kernel method is needed: two concentric
    # rings (which k-means on the raw rows cuts in half, NMI near 0) in a
    # random plane of a 100-dimensional space, with noise in every
    # coordinate. A client's one upload, D(D+1)/2 + D floats, is below its
    # rows when n_m * d exceeds it: here 2,000 x 100 rows per client against
    # 45,450 floats (with the few features of the rings alone, 2,000 x 2,
    # the upload would be 11x the rows).
    from sklearn.metrics import normalized_mutual_info_score as nmi

    n, d = 20_000, 100
    X, y = _embedded_rings(n, d, args.seed)
    ids = make_partition(_scheme(args, "iid"), y, args.clients or 10, args.seed)
    est = FederatedKernelKMeans(n_clusters=2, gamma=2.0, random_state=args.seed)
    row = _clustering(
        args,
        est,
        "Nystroem + PCA + KMeans",
        lambda fed: make_pipeline(
            Nystroem(gamma=fed.gamma_, n_components=500, random_state=args.seed),
            PCA(n_components=fed.n_components_, random_state=args.seed),
            KMeans(2, n_init=10, random_state=args.seed),
        ),
        X,
        y,
        ids,
        _label(n, d, "rings"),
    )
    plain = KMeans(2, n_init=3, random_state=args.seed).fit_predict(X)
    row.note = f"KMeans(n_init=3) on the raw rows reaches NMI {nmi(y, plain):.2f}"
    return row


def _kernel_pca(args):
    from sklearn.base import clone
    from sklearn.decomposition import KernelPCA

    from . import DistributedKernelPCA

    if args.small:
        X, y = _digits()
        dataset = "digits"
        ids = make_partition(_scheme(args), y, args.clients or 10, args.seed)
    else:
        # As large as an exact reference still fits this machine: the
        # optimum needs the top eigenvalues of the N x N kernel matrix
        # (800 MB here). Clients of 2,500 rows on average: each client's
        # messages have a fixed size (about 25,000 floats), below the
        # 50,000 floats of an average client's rows.
        n = 10_000
        X, y = _mixture(n, 20, 16, args.seed + 2)
        dataset = _label(n, 20, "blobs")
        ids = make_partition(_scheme(args), y, args.clients or 4, args.seed)
    est = DistributedKernelPCA(n_components=10, random_state=args.seed)
    fed, t_fed = _timed(lambda: est.fit(X, partitions=ids))
    exact = KernelPCA(
        n_components=10,
        kernel="rbf",
        gamma=fed.gamma_,
        eigen_solver="randomized",
        random_state=args.seed,
    )
    cen, t_cen = _timed(lambda: exact.fit(X))
    # Peak memory from a second, traced fit (tracing slows a fit, so the
    # timed one is not traced). Exact KernelPCA's is at least its N x N
    # kernel matrix, given as a figure: tracing it would mean a second
    # exact fit.
    _, fed_peak = _traced(lambda: clone(est).fit(X, partitions=ids))
    n = X.shape[0]
    return _row(
        fed,
        name="DistributedKernelPCA",
        counterpart="KernelPCA",
        dataset=dataset,
        metric="energy/opt.",
        quality=(fed.eigenvalues_.sum() / cen.eigenvalues_.sum(), 1.0),
        times=(t_fed, t_cen),
        note=(
            f"|Y| = {fed.n_representatives_} representatives; peak memory "
            f"{_megabytes(fed_peak)} (tracemalloc, in a second fit), while "
            f"KernelPCA's {n:,} x {n:,} kernel matrix alone takes "
            f"{_megabytes(8 * n**2)} (N^2 x 8 bytes)"
        ),
    )


def _rkhs(args):
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC

    from . import FederatedRKHSClassifier

    if args.small:
        from sklearn.datasets import load_breast_cancer

        X, y = load_breast_cancer(return_X_y=True)
        dataset = "breast_cancer"
    else:
        from sklearn.datasets import make_classification

        n = 10_000
        # Classes with margins and clean labels, where few kernels suffice;
        # with noisy labels most rows become critical and the fit slows
        # down (see the user guide).
        X, y = make_classification(
            n,
            n_features=10,
            n_informative=5,
            class_sep=2.0,
            flip_y=0.0,
            random_state=args.seed,
        )
        dataset = _label(n, 10, "classif.")
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=0.3, stratify=y, random_state=args.seed
    )
    scaler = StandardScaler().fit(X_train)
    X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)
    ids = make_partition(_scheme(args), y_train, args.clients or 10, args.seed)
    est = FederatedRKHSClassifier(random_state=args.seed)
    fed, t_fed = _timed(lambda: est.fit(X_train, y_train, partitions=ids))
    cen, t_cen = _timed(lambda: SVC().fit(X_train, y_train))
    # Predicting costs one kernel evaluation per kept kernel (support
    # vector) and test row: the sparse model predicts faster.
    _, p_fed = _timed(lambda: fed.predict(X_test))
    _, p_cen = _timed(lambda: cen.predict(X_test))
    return _row(
        fed,
        name="FederatedRKHSClassifier",
        counterpart="SVC",
        dataset=dataset,
        metric="accuracy",
        quality=(fed.score(X_test, y_test), cen.score(X_test, y_test)),
        times=(t_fed, t_cen),
        note=(
            f"{fed.n_kernels_} kernels vs {cen.n_support_.sum()} SVs; predicting "
            f"the {X_test.shape[0]:,} test rows took {_seconds(p_fed)} s against "
            f"{_seconds(p_cen)} s for SVC"
        ),
    )


CASES = {
    "KFed": _kfed,
    "DistributedKMeans": _distributed_kmeans,
    "FederatedKernelKMeans": _kernel_kmeans,
    "DistributedKernelPCA": _kernel_pca,
    "FederatedRKHSClassifier": _rkhs,
}

# Why an estimator can upload more than the raw data, for the table's notes.
WHY_MORE = {
    "FederatedKernelKMeans": (
        "each client uploads its random-feature statistics, D(D+1)/2 + D "
        "floats whatever its size (with algorithm='dspgd', D + r floats per "
        "Lanczos step), so a client whose rows hold fewer floats, n_m x d, "
        "sends more than its rows"
    ),
    "DistributedKernelPCA": (
        "each client's messages have a fixed size (its sketch in the "
        "leverage-score round, |Y| x r factors in the low-rank solve), so on "
        "small clients they outweigh the rows"
    ),
    "FederatedRKHSClassifier": (
        "clients upload their critical samples as rows, with their "
        "coefficients, and refinement rounds add candidates; when most rows "
        "are critical this exceeds the data"
    ),
    "KFed": (
        "each client uploads its k' local centers; clients with fewer rows "
        "than that upload more than their rows"
    ),
    "DistributedKMeans": (
        "each client uploads its share of the coreset, which saves nothing "
        "when the coreset is near the size of the data"
    ),
}

# ---------------------------------------------------------------------------
# Output

# Two tables of at most 100 columns: quality and time, then communication.
QUALITY_COLUMNS = (
    ("estimator", "estimator"),
    ("dataset", "data"),
    ("clients", "clients"),
    ("metric", "metric"),
    ("skfed", "skfed"),
    ("sklearn", "sklearn"),
    ("skfed_seconds", "skfed s"),
    ("sklearn_seconds", "sklearn s"),
)
COMMUNICATION_COLUMNS = (
    ("estimator", "estimator"),
    ("counterpart", "sklearn counterpart"),
    ("rounds", "rounds"),
    ("uploads", "uploads"),
    ("downloads", "downloads"),
    ("raw_floats", "raw data"),
    ("upload_ratio", "up / raw"),
)
CSV_FIELDS = (
    *(key for key, _ in QUALITY_COLUMNS),
    "counterpart",
    *(key for key, _ in COMMUNICATION_COLUMNS[2:]),
    "note",
)


def _seconds(value):
    """Three significant digits, never in exponent form."""
    if value >= 100:
        return f"{value:.0f}"
    digits = max(0, 2 - int(np.floor(np.log10(max(value, 1e-4)))))
    return f"{value:.{digits}f}"


def _cell(row, key):
    value = getattr(row, key)
    if key == "upload_ratio":
        return f"{value:.3g}x"
    if key.endswith("seconds"):
        return _seconds(value)
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, (int, np.integer)):
        return f"{value:,}"
    return str(value)


def notes(rows):
    """One sentence per row worth a note: every row that uploads more than
    the raw data says so and why, and each row's own remark."""
    lines = []
    for r in rows:
        if r.upload_ratio > 1:
            share = r.heaviest[1] / max(r.uploads, 1)
            lines.append(
                f"{r.estimator} uploads {r.upload_ratio:.3g}x the raw data "
                f"({share:.0%} of it in its {r.heaviest[0]!r} rounds): "
                f"{WHY_MORE[r.estimator]}."
            )
        if r.note:
            lines.append(f"{r.estimator}: {r.note}.")
    return lines


def _text_table(columns, rows, fmt):
    header = [title for _, title in columns]
    body = [[_cell(r, key) for key, _ in columns] for r in rows]
    if fmt == "markdown":
        lines = ["| " + " | ".join(header) + " |"]
        lines.append("|" + "|".join("---" for _ in header) + "|")
        lines += ["| " + " | ".join(cells) + " |" for cells in body]
        return "\n".join(lines) + "\n"
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(header)]
    # Text left-aligned, numbers right-aligned.
    right = [
        i > 0 and all(b[i][:1].isdigit() for b in body) for i in range(len(header))
    ]
    line = lambda cells: "  ".join(  # noqa: E731
        c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)
    ).rstrip()
    lines = [line(header), "  ".join("-" * w for w in widths)]
    lines += [line(cells) for cells in body]
    return "\n".join(lines) + "\n"


def format_table(rows, fmt="text"):
    """The demo's tables (quality and time, then communication, then notes)
    as plain text or markdown, or one CSV table with every field."""
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(CSV_FIELDS)
        for r in rows:
            writer.writerow([getattr(r, key) for key in CSV_FIELDS])
        return buf.getvalue()
    parts = [
        _text_table(QUALITY_COLUMNS, rows, fmt),
        "\n",
        _text_table(COMMUNICATION_COLUMNS, rows, fmt),
    ]
    remarks = notes(rows)
    if remarks:
        parts.append("\n")
        for remark in remarks:
            bullet = "- " if fmt == "markdown" else "* "
            parts.append(
                textwrap.fill(
                    remark, 100, initial_indent=bullet, subsequent_indent="  "
                )
                + "\n"
            )
    return "".join(parts)


def plot(rows, path, title=None):
    """Three panels, one line per estimator, skfed beside its centralized
    counterpart: quality, wall time, and what the clients uploaded against
    the raw data (what the counterpart needs sent to one place)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise SystemExit(
            "--figure needs matplotlib: pip install 'skfed[benchmark]'"
        ) from exc
    y = np.arange(len(rows))
    height = 0.38
    labels = [f"{r.estimator}\n{r.metric}, {r.clients} clients" for r in rows]
    fig, axes = plt.subplots(
        1, 3, figsize=(13, 1.1 + 0.75 * len(rows)), sharey=True, squeeze=False
    )
    quality, times, uploads = axes[0]
    pairs = (
        (quality, "skfed", "sklearn", lambda v: f"{v:.3f}"),
        (times, "skfed_seconds", "sklearn_seconds", lambda v: f"{_seconds(v)} s"),
    )
    for ax, ours, theirs, text in pairs:
        for offset, key, color, name in (
            (-height / 2, ours, "C0", "skfed"),
            (height / 2, theirs, "C7", "scikit-learn counterpart"),
        ):
            values = [getattr(r, key) for r in rows]
            bars = ax.barh(y + offset, values, height, color=color, label=name)
            ax.bar_label(bars, [text(v) for v in values], padding=2, fontsize=8)
    quality.set_xlim(0, 1.25)
    quality.set_xticks([0, 0.25, 0.5, 0.75, 1.0])
    quality.set_title("quality (higher is better)", fontsize=10)
    times.set_xscale("log")
    lowest = min(min(r.skfed_seconds, r.sklearn_seconds) for r in rows)
    highest = max(max(r.skfed_seconds, r.sklearn_seconds) for r in rows)
    times.set_xlim(lowest / 2, highest * 8)
    times.set_title("wall time, seconds (log scale)", fontsize=10)
    ratios = [r.upload_ratio for r in rows]
    bars = uploads.barh(
        y, ratios, 2 * height, color=["C3" if q > 1 else "C2" for q in ratios]
    )
    uploads.bar_label(bars, [f"{q:.3g}x" for q in ratios], padding=2, fontsize=8)
    uploads.axvline(1.0, color="k", lw=1, ls="--")
    uploads.set_xscale("log")
    uploads.set_xlim(min(min(ratios), 1.0) / 3, max(max(ratios), 1.0) * 8)
    uploads.set_title("uploads / raw data (dashed: equal)", fontsize=10)
    quality.set_yticks(y, labels, fontsize=8)
    quality.invert_yaxis()
    if title:
        fig.suptitle(title, fontsize=10)
    handles, names = quality.get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run(args, out=None, progress=None):
    """Run the chosen estimators and print the tables; return the rows."""
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
    if args.small:
        regime = f"small data, {_scheme(args)} partition"
    else:
        regime = "large data, many clients"
        if args.partition:
            regime += f", {args.partition} partition"
    print(
        f"{regime}, seed {args.seed}; floats counted by each fit's ledger\n", file=out
    )
    print(table, file=out, end="")
    if args.figure:
        plot(rows, args.figure, title=f"skfed beside scikit-learn: {regime}")
        if not args.quiet:
            print(f"figure written to {args.figure}", file=progress)
    return rows
