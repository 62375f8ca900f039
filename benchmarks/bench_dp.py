"""Differentially private utility: skfed against IBM's diffprivlib, in one run.

Two tasks, on the same data and seeds on both sides:

(k) clustering: skfed's federated ``KFed(privacy=DifferentialPrivacy(...))``
    (local noise) and ``DistributedKMeans(privacy=..., secure_aggregation=
    True)`` (distributed noise; and on digits ``FederatedKernelKMeans``
    likewise, scored by the means of its clusters in X) over 10 clients
    (``--clients``; IID and Dirichlet(0.3) label-skew partitions) against
    diffprivlib's
    centralized ``KMeans(epsilon=..., bounds=...)`` on the pooled rows.
    NMI of the nearest-centre labels against the true labels,
    and the k-means cost of the centres on the (unclipped) data relative to
    scikit-learn's non-private ``KMeans(n_init=10)``.
(p) kernel PCA: skfed's ``DistributedKernelPCA(privacy=...,
    secure_aggregation=True)`` (distributed noise) over 10 IID clients
    against diffprivlib's ``PCA(epsilon=..., data_norm=R)`` on the
    same random Fourier features of an RBF kernel (skfed's map, from the
    seed its fit drew; R the map's norm bound, see :func:`feature_map`):
    captured variance of held-out rows' features,
    ``||(Z - mean) V||^2 / ||Z - mean||^2`` for orthonormal components
    ``V``, with the same number of components.
(c) classification: skfed's row-free ``FederatedRKHSClassifier(privacy=...,
    secure_aggregation=True)`` against diffprivlib's
    ``LogisticRegression(epsilon=..., data_norm=R)`` on the pooled rows
    (R the box's norm bound): accuracy on the PCA task's held-out rows,
    labelled.

Data: (a) scikit-learn's digits divided by 16 (pixel values 0..16, so the
domain's own min-max scaling to [0, 1]), bounds (0, 1); (b) a mixture of 10
isotropic Gaussians (sigma = 1) in d = 10 whose means are uniform in
[-5, 5]^d, 100,000 rows clipped into the box [-10, 10]^d (bounds (-10, 10);
the clipping moves about one coordinate in 10^5), plus 20,000 held-out rows
of the same mixture for the PCA and classification tasks. Privacy budgets:
epsilon in {0.1, 0.5, 1, 2, 5, 10} and the non-private reference; skfed's
delta is ``--delta`` (diffprivlib's KMeans and PCA are pure epsilon-DP,
delta = 0). Medians over seeds.

The diffprivlib side runs in another interpreter (``--anchor-python``, a
venv with diffprivlib 0.6.6 and scikit-learn < 1.6, which diffprivlib needs):
this script hands it the data and the seeds in a ``.npz`` file and reads the
fitted centres and components back; every metric is computed here, by the
same code for both sides. Its answers are cached in the results folder (``_results.py``)
under a hash of their inputs, so re-running the skfed side does not refit
them. A fit that runs past ``--anchor-timeout`` seconds counts as missing.
diffprivlib 0.6.6's PCA samples its eigenvectors with an acceptance
probability that is not Kent et al.'s (see :func:`kent_bingham`) and, as
shipped, rarely accepts at large epsilon; ``--anchor-bingham kent`` runs it
with the corrected sampler. The skfed side imports skfed from
``--skfed-path`` when given (a checkout whose ``skfed`` package should win
over the installed one and over ``PYTHONPATH``).

BLAS and OpenMP are pinned to one thread on both sides.

Usage::

    python benchmarks/bench_dp.py [--quick] [--only kmeans pca]
        [--data digits mixture] [--anchor-python PATH]
        [--anchor-bingham {shipped,kent}] [--anchor-timeout S]
        [--skfed-path DIR] [--figure PATH] [--out dp.md]

Writes ``dp.md`` in the results folder (or ``--out``) and, with the k-means
task, the NMI-versus-epsilon figure (``dp_utility.png`` next to it, or
``--figure``).
"""

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from _results import results_dir

RESULTS = results_dir()
DEFAULT_ANCHOR = "/work/venv-dpl/bin/python"
EPSILONS = (0.1, 0.5, 1.0, 2.0, 5.0, 10.0)
# Clients of the federated side (``--clients``), and the label skew of the
# Dirichlet partitions.
N_CLIENTS = 10
DIRICHLET_ALPHA = 0.3
# The classifier's kernel widths per data set (public constants: 0.3, 0.6
# and 1 times the root mean squared distance between two rows, rounded).
WIDTHS = {"digits": (1.0, 2.0, 3.0), "mixture": (4.0, 8.0, 13.0)}
# The private k-means whose sums are masked (distributed noise), per data
# set: DistributedKMeans on X ("kmeans"), and on digits kernel k-means
# ("kernel") at the width KERNEL_GAMMA (a public constant for pixels in
# [0, 1]: 1 / (2 sigma^2) at sigma^2 = 10, about the mean squared distance
# between two digits, 9.4).
MASKED_METHODS = {"digits": ("kmeans", "kernel"), "mixture": ("kmeans",)}
MASKED_NAMES = {"kmeans": "DistributedKMeans", "kernel": "kernel k-means"}
KERNEL_GAMMA = 0.05
N_CLUSTERS = 10
# The kernel PCA task: D random Fourier features of exp(-gamma ||x - y||^2)
# (a public constant per data set: the average-distance heuristic
# N / (4 sum ||x - mean||^2) of the data, rounded, so that the privacy
# guarantee need not cover it), and k components. diffprivlib's private
# eigenvectors are sampled one at a time from a Bingham distribution; as
# shipped, its rejection sampler took 10-40 s per fit at D = 100 on the
# benchmark machine at small epsilon (45 s at D = 200) and minutes at
# larger ones: D = 100 keeps the shipped sampler's digits run to minutes.
N_RANDOM_FEATURES = 100
N_COMPONENTS = 5
GAMMA = {"digits": 0.05, "mixture": 0.003}


# -- data (both interpreters) -----------------------------------------------------


def digits():
    """(X, y, bounds): sklearn's digits / 16, in [0, 1]."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X / 16.0, y, (0.0, 1.0)


def mixture(n=100_000, *, d=10, k=10, seed=0, draw_seed=None):
    """(X, y, bounds): k Gaussians N(mu_r, I_d), mu_r uniform in [-5, 5]^d
    (from ``seed``), n rows (n / k per component, shuffled) clipped into
    [-10, 10]^d; ``draw_seed`` draws other rows of the same mixture."""
    rng = np.random.RandomState(seed)
    means = rng.uniform(-5, 5, size=(k, d))
    if draw_seed is not None:
        rng = np.random.RandomState(draw_seed)
    y = rng.permutation(np.repeat(np.arange(k), n // k))
    X = np.clip(means[y] + rng.standard_normal((len(y), d)), -10, 10)
    return X, y, (-10.0, 10.0)


def held_out(name, X, y):
    """(X_train, X_test) for the PCA task: digits split 2:1 at random
    (seed 0); the mixture's training rows are all 100,000 and its test rows
    20,000 fresh draws of the same mixture."""
    if name == "digits":
        order = np.random.RandomState(0).permutation(len(X))
        cut = 2 * len(X) // 3
        return X[order[:cut]], X[order[cut:]]
    X_test, _, _ = mixture(20_000, draw_seed=1)
    return X, X_test


def fourier_map(seed, n_features, gamma):
    """(omega, offset) of D plain random Fourier features, drawn as
    ``skfed.kernel.sample_fourier_weights`` draws them: omega ~ N(0, 2 gamma)
    of shape (d, D), then offset ~ U[0, 2 pi) of shape (D,), from
    ``RandomState(seed)``. The map of an skfed without private kernel PCA
    (see :func:`feature_map`)."""
    rng = np.random.RandomState(seed)
    omega = np.sqrt(2 * gamma) * rng.standard_normal((n_features, N_RANDOM_FEATURES))
    offset = rng.uniform(0, 2 * np.pi, size=N_RANDOM_FEATURES)
    return omega, offset


def features(X, omega, offset):
    """z(x) = sqrt(2 / D) cos(x omega + offset): every coordinate in
    [-sqrt(2 / D), sqrt(2 / D)], ||z(x)|| <= sqrt(2) (exactly 1 for the
    paired map of :func:`feature_map` with even D)."""
    return np.sqrt(2.0 / omega.shape[1]) * np.cos(X @ omega + offset)


# -- the diffprivlib side (runs in the anchor interpreter) -------------------------


def kent_bingham(self, value):
    """Draw the unit vector u with density proportional to exp(-u' A u), A
    the translated matrix diffprivlib's Bingham mechanism builds, by Kent,
    Ganeiber & Mardia's (2013) rejection from the angular central Gaussian
    ACG(Omega), Omega = I + 2 A / b: accept with probability
    exp(-u' A u) (u' Omega u)^(q/2) / M, M = exp(-(q - b) / 2) (q / b)^(q/2).

    diffprivlib 0.6.6 divides by (u' Omega u)^(q/2) instead: its draws then
    follow exp(-u' A u) (u' Omega u)^(-q), more concentrated than the
    mechanism's density, and are accepted with probability about 1e-7 on
    1,200 digits' 20 random features at epsilon = 10 (minutes per
    eigenvector). Installed only with ``--anchor-bingham kent``.
    """
    from scipy.optimize import brentq

    self._check_all(value)
    dims = value.shape[0]
    eigvals = np.linalg.eigvalsh(value)
    if dims == 1 or self.sensitivity / self.epsilon == 0:
        return _SHIPPED_BINGHAM(self, value)
    A = self.epsilon * (eigvals.max() * np.eye(dims) - value) / 4 / self.sensitivity
    # A is positive semi-definite with smallest eigenvalue 0 by construction;
    # rounding leaves some at -1e-14, which would move the root out of
    # [0, q].
    lam = np.maximum(np.linalg.eigvalsh(A), 0.0)
    # b solves sum 1 / (b + 2 lambda_i) = 1; the left side falls from
    # infinity at b = 0 (lambda_min = 0) to at most 1 at b = q (exactly 1
    # when A = 0, the uniform distribution).
    excess = lambda b: np.sum(1 / (b + 2 * lam)) - 1  # noqa: E731
    b = dims if excess(dims) >= 0 else brentq(excess, 1e-12, dims)
    omega = np.eye(dims) + 2 * A / b
    chol = np.linalg.cholesky(np.linalg.inv(omega))
    log_m = -(dims - b) / 2 + dims / 2 * np.log(dims / b)
    rng = np.random.default_rng(int(self._rng.random() * 2**63))
    while True:
        u = chol @ rng.standard_normal(dims)
        u /= np.linalg.norm(u)
        log_ratio = -u @ A @ u + dims / 2 * np.log(u @ omega @ u) - log_m
        if np.log(rng.random()) <= log_ratio:
            return u


_SHIPPED_BINGHAM = None


class _FitTimeout(Exception):
    pass


def anchor_job(path):
    """Fit diffprivlib's models on the job's arrays; write the answers."""
    import signal

    from diffprivlib import __version__ as dpl_version
    from diffprivlib.mechanisms import Bingham
    from diffprivlib.models import PCA, KMeans, LogisticRegression
    from sklearn import __version__ as skl_version
    from threadpoolctl import threadpool_limits

    global _SHIPPED_BINGHAM
    job = np.load(path)
    spec = json.loads(str(job["spec"]))
    if spec["bingham"] == "kent":
        _SHIPPED_BINGHAM = Bingham.randomise
        Bingham.randomise = kent_bingham

    def timeout(signum, frame):
        raise _FitTimeout

    signal.signal(signal.SIGALRM, timeout)
    out, seconds, timed_out = {}, {}, []
    with threadpool_limits(limits=1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for task in spec["tasks"]:
            key, kind = task["key"], task["kind"]
            X = job[task["X"]]
            start = time.perf_counter()
            signal.alarm(spec["timeout"])
            try:
                if kind == "classify":
                    model = LogisticRegression(
                        epsilon=task["epsilon"],
                        data_norm=task["norm"],
                        random_state=task["seed"],
                    ).fit(X, job[task["y"]])
                    out[key] = model.predict(job[task["X_test"]])
                elif kind == "kmeans":
                    model = KMeans(
                        n_clusters=task["k"],
                        epsilon=task["epsilon"],
                        bounds=tuple(task["bounds"]),
                        random_state=task["seed"],
                    ).fit(X)
                    out[key] = model.cluster_centers_
                else:
                    D = X.shape[1]
                    model = PCA(
                        n_components=task["k"],
                        epsilon=task["epsilon"],
                        data_norm=task["norm"],
                        bounds=(-np.sqrt(2.0 / D), np.sqrt(2.0 / D)),
                        centered=False,
                        random_state=task["seed"],
                    ).fit(X)
                    out[key] = model.components_.T
            except _FitTimeout:
                timed_out.append(key)
            finally:
                signal.alarm(0)
            seconds[key] = time.perf_counter() - start
            note = " (timed out)" if key in timed_out else ""
            print(f"anchor {key}: {seconds[key]:.1f} s{note}", flush=True)
    meta = {"diffprivlib": dpl_version, "scikit-learn": skl_version}
    meta["python"] = platform.python_version()
    meta.update(seconds=seconds, timed_out=timed_out, bingham=spec["bingham"])
    meta["timeout"] = spec["timeout"]
    np.savez(spec["answer"], meta=json.dumps(meta), **out)


def run_anchor(python, arrays, tasks, options):
    """Run ``tasks`` in the anchor interpreter, or read a cached answer.

    Returns (answers dict, meta dict), or (None, reason) when the anchor
    interpreter is absent or fails.
    """
    digest = hashlib.sha256(json.dumps([tasks, options], sort_keys=True).encode())
    for name in sorted(arrays):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(arrays[name]).tobytes())
    cache = RESULTS / f"dp_anchor_{digest.hexdigest()[:16]}.npz"
    if not cache.exists():
        if not Path(python).exists():
            return None, (
                f"the diffprivlib interpreter {python} does not exist: create "
                'it (python3 -m venv; pip install "scikit-learn<1.6" '
                "diffprivlib==0.6.6 numpy scipy) or pass --anchor-python"
            )
        RESULTS.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            job = Path(tmp) / "job.npz"
            spec = {"tasks": tasks, "answer": str(cache), **options}
            np.savez(job, spec=json.dumps(spec), **arrays)
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            proc = subprocess.run(
                [python, __file__, "--anchor-job", str(job)], env=env, text=True
            )
        if proc.returncode != 0 or not cache.exists():
            return None, f"the diffprivlib side failed (exit {proc.returncode})"
    else:
        print(f"diffprivlib answers read from {cache}", flush=True)
    with np.load(cache) as answer:
        meta = json.loads(str(answer["meta"]))
        return {k: answer[k] for k in answer.files if k != "meta"}, meta


# -- metrics (same code for both sides) ----------------------------------------------


def nearest(X, centers):
    """(labels, mean squared distance to the nearest centre)."""
    d2 = (
        np.einsum("ij,ij->i", X, X)[:, None]
        - 2 * X @ centers.T
        + np.einsum("ij,ij->i", centers, centers)[None]
    )
    labels = d2.argmin(axis=1)
    return labels, float(np.maximum(d2[np.arange(len(X)), labels], 0).mean())


def captured_variance(Z, V):
    """Share of the variance of the rows Z (around their mean) in span V."""
    Q, _ = np.linalg.qr(V)
    C = Z - Z.mean(axis=0)
    return float(np.sum((C @ Q) ** 2) / np.sum(C**2))


# -- the skfed side --------------------------------------------------------------------


def partitions(name, y, seed):
    from skfed.partition import iid, label_dirichlet

    if name == "IID":
        return iid(len(y), N_CLIENTS, random_state=seed)
    return label_dirichlet(y, N_CLIENTS, alpha=DIRICHLET_ALPHA, random_state=seed)


def supports_privacy(estimator):
    return "privacy" in estimator().get_params()


def masked_centers(name, X, ids, seed, privacy):
    """Centers of a federated private k-means whose sums are masked, so
    that the clients add shares of the noise (distributed noise):
    ``DistributedKMeans`` on X, or kernel k-means (its centers in X are the
    means of its clusters)."""
    from skfed import DistributedKMeans, FederatedKernelKMeans

    params = {"secure_aggregation": True, "random_state": seed}
    if privacy is not None:
        params["privacy"] = privacy
    if name == "kernel":
        est = FederatedKernelKMeans(N_CLUSTERS, gamma=KERNEL_GAMMA, **params)
    else:
        est = DistributedKMeans(N_CLUSTERS, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        labels = est.fit(X, partitions=ids).predict(X)
    if name != "kernel":
        return est.cluster_centers_
    return np.array(
        [
            X[labels == j].mean(axis=0) if np.any(labels == j) else X.mean(axis=0)
            for j in range(N_CLUSTERS)
        ]
    )


def kfed_centers(X, ids, seed, privacy):
    from skfed import KFed

    params = {} if privacy is None else {"privacy": privacy}
    est = KFed(n_clusters=N_CLUSTERS, random_state=seed, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, partitions=ids)
    return est.cluster_centers_, getattr(est, "privacy_spent_", None)


# -- the run ----------------------------------------------------------------------


def median(values):
    values = [v for v in values if v is not None]
    return float(np.median(values)) if values else float("nan")


def fmt(value, spec=".3f"):
    return "n/a" if value is None or not np.isfinite(value) else format(value, spec)


def run_kmeans(data, seeds, epsilons, delta, anchor, skfed_private):
    """Every k-means fit of both sides; returns {data: {method: {eps: [..]}}}
    of (nmi, cost ratio) per seed, and notes."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import normalized_mutual_info_score as nmi

    from skfed.privacy import DifferentialPrivacy

    loaded = {name: LOADERS[name]() for name in data}
    arrays, tasks = {}, []
    for name, (X, _, bounds) in loaded.items():
        arrays[f"X_{name}"] = X
        for eps in epsilons:
            for seed in seeds:
                tasks.append(
                    {
                        "key": f"kmeans/{name}/{eps}/{seed}",
                        "kind": "kmeans",
                        "X": f"X_{name}",
                        "k": N_CLUSTERS,
                        "epsilon": eps,
                        "bounds": list(bounds),
                        "seed": seed,
                    }
                )
    answers, meta = run_anchor(anchor[0], arrays, tasks, anchor[1])
    table, notes = {}, []
    if answers is None:
        notes.append(f"diffprivlib side skipped: {meta}.")
    elif meta["timed_out"]:
        notes.append(
            f"diffprivlib: {len(meta['timed_out'])} of {len(tasks)} fits did not "
            f"finish in {meta['timeout']} s and count as missing: "
            + ", ".join(f"`{k}`" for k in meta["timed_out"])
            + "."
        )
    for name, (X, y, bounds) in loaded.items():
        rows = table[name] = {}
        reference = {}
        for seed in seeds:
            start = time.perf_counter()
            km = KMeans(N_CLUSTERS, n_init=10, random_state=seed).fit(X)
            labels, cost = nearest(X, km.cluster_centers_)
            reference[seed] = cost
            rows.setdefault("KMeans (scikit-learn)", {}).setdefault("inf", []).append(
                (nmi(y, labels), 1.0, time.perf_counter() - start)
            )

        def score(centers, seed, seconds, X=X, y=y, reference=reference):
            labels, cost = nearest(X, centers)
            return nmi(y, labels), cost / reference[seed], seconds

        if answers is not None:
            for eps in epsilons:
                for seed in seeds:
                    key = f"kmeans/{name}/{eps}/{seed}"
                    if key in answers:
                        rows.setdefault("diffprivlib KMeans", {}).setdefault(
                            eps, []
                        ).append(score(answers[key], seed, meta["seconds"][key]))
        for part in ("IID", "Dirichlet"):
            method = f"skfed KFed, {part}"
            for seed in seeds:
                ids = partitions(part, y, seed)
                start = time.perf_counter()
                centers, _ = kfed_centers(X, ids, seed, None)
                rows.setdefault(method, {}).setdefault("inf", []).append(
                    score(centers, seed, time.perf_counter() - start)
                )
                if not skfed_private:
                    continue
                for eps in epsilons:
                    dp = DifferentialPrivacy(epsilon=eps, delta=delta, bounds=bounds)
                    start = time.perf_counter()
                    centers, _ = kfed_centers(X, ids, seed, dp)
                    rows[method].setdefault(eps, []).append(
                        score(centers, seed, time.perf_counter() - start)
                    )
            print(f"{name} {method} done", flush=True)
            for kind in MASKED_METHODS.get(name, ()):
                method = f"skfed {MASKED_NAMES[kind]}, masked, {part}"
                for seed in seeds:
                    ids = partitions(part, y, seed)
                    for eps in epsilons if skfed_private else ():
                        dp = DifferentialPrivacy(
                            epsilon=eps, delta=delta, bounds=bounds
                        )
                        start = time.perf_counter()
                        centers = masked_centers(kind, X, ids, seed, dp)
                        rows.setdefault(method, {}).setdefault(eps, []).append(
                            score(centers, seed, time.perf_counter() - start)
                        )
                print(f"{name} {method} done", flush=True)
    if not skfed_private:
        notes.append(
            "skfed side: this skfed's KFed has no `privacy` parameter, so only "
            "its non-private fits ran."
        )
    return table, notes, meta


def held_out_labels(name, X, y):
    """(X_train, y_train, X_test, y_test) for the classification task:
    digits split 2:1 as for PCA; the mixture's 100,000 rows and 20,000
    fresh draws, labelled by their component."""
    if name == "digits":
        order = np.random.RandomState(0).permutation(len(X))
        cut = 2 * len(X) // 3
        train, test = order[:cut], order[cut:]
        return X[train], y[train], X[test], y[test]
    X_test, y_test, _ = mixture(20_000, draw_seed=1)
    return X, y, X_test, y_test


def run_classify(data, seeds, epsilons, delta, anchor):
    """Every classification fit of both sides: {data: {method: {eps:
    [(accuracy, s)]}}}. skfed: the row-free classifier
    (``FederatedRKHSClassifier(privacy=..., secure_aggregation=True)``, its
    default under privacy, multi-width random features of the public
    ``WIDTHS``) over 10 IID clients; diffprivlib: ``LogisticRegression(
    epsilon, data_norm)`` on the pooled rows, data_norm the box's norm
    bound (the rows are in the box, so it clips nothing)."""
    from skfed import FederatedRKHSClassifier
    from skfed.privacy import DifferentialPrivacy

    arrays, tasks, loaded = {}, [], {}
    for name in data:
        X, y, bounds = LOADERS[name]()
        X_train, y_train, X_test, y_test = held_out_labels(name, X, y)
        loaded[name] = (X_train, y_train, X_test, y_test, bounds)
        arrays[f"Xc_{name}"], arrays[f"yc_{name}"] = X_train, y_train
        arrays[f"Xt_{name}"] = X_test
        norm = float(np.sqrt(X.shape[1]) * max(abs(bounds[0]), abs(bounds[1])))
        for eps in epsilons:
            for seed in seeds:
                tasks.append(
                    {
                        "key": f"classify/{name}/{eps}/{seed}",
                        "kind": "classify",
                        "X": f"Xc_{name}",
                        "y": f"yc_{name}",
                        "X_test": f"Xt_{name}",
                        "epsilon": eps,
                        "norm": norm,
                        "seed": seed,
                    }
                )
    answers, meta = run_anchor(anchor[0], arrays, tasks, anchor[1])
    table, notes = {}, []
    if answers is None:
        notes.append(f"diffprivlib side skipped: {meta}.")
    for name, (X_train, y_train, X_test, y_test, bounds) in loaded.items():
        rows = table[name] = {}
        if answers is not None:
            for eps in epsilons:
                for seed in seeds:
                    key = f"classify/{name}/{eps}/{seed}"
                    if key in answers:
                        accuracy = float(np.mean(answers[key] == y_test))
                        rows.setdefault("diffprivlib LogisticRegression", {})
                        rows["diffprivlib LogisticRegression"].setdefault(
                            eps, []
                        ).append((accuracy, meta["seconds"][key]))
        method = "skfed FederatedRKHSClassifier, masked, IID"
        for seed in seeds:
            ids = partitions("IID", y_train, seed)
            for eps in (np.inf, *epsilons):
                dp = DifferentialPrivacy(epsilon=eps, delta=delta, bounds=bounds)
                est = FederatedRKHSClassifier(
                    widths=WIDTHS[name],
                    privacy=dp,
                    secure_aggregation=True,
                    random_state=seed,
                )
                start = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    est.fit(X_train, y_train, partitions=ids)
                rows.setdefault(method, {}).setdefault(
                    "inf" if eps == np.inf else eps, []
                ).append((est.score(X_test, y_test), time.perf_counter() - start))
        print(f"{name} {method} done", flush=True)
    return table, notes, meta


def feature_map(map_seed, n_features, gamma):
    """(omega, offset, norm bound, description) of the shared feature map.

    skfed's private kernel PCA uses paired random Fourier features
    (``skfed.kernel._private_features.paired_fourier_map``: D / 2 orthogonal
    frequencies, each as a cosine and a sine, so ||z(x)|| = 1 for even D);
    an skfed without it gets the plain map of :func:`fourier_map`
    (||z(x)|| <= sqrt(2)).
    """
    try:
        from skfed.kernel._private_features import paired_fourier_map
    except ImportError:
        omega, offset = fourier_map(map_seed, n_features, gamma)
        return (
            omega,
            offset,
            np.sqrt(2.0),
            (
                "z(x) = sqrt(2/D) cos(x Omega + b), Omega ~ N(0, 2 gamma) (d x D), "
                "b ~ U[0, 2 pi), drawn from RandomState(seed); ||z(x)|| <= sqrt(2)"
            ),
        )
    omega, offset = paired_fourier_map(map_seed, n_features, N_RANDOM_FEATURES, gamma)
    return (
        np.array(omega),
        np.array(offset),
        1.0,
        (
            "skfed's paired map z(x) = sqrt(2/D) [cos(w_i' x), sin(w_i' x)] for "
            "i = 1..D/2, the w_i orthogonal random frequencies of N(0, 2 gamma I) "
            "(skfed.kernel._private_features.paired_fourier_map, with the seed "
            "the skfed fit drew); ||z(x)|| = 1"
        ),
    )


def run_pca(data, seeds, epsilons, delta, anchor, skfed_private):
    """Every PCA fit of both sides: {data: {method: {eps: [(captured, s)]}}}.

    skfed fits first: its map's seed (drawn from ``random_state``) defines
    the features handed to diffprivlib, so both sides see the same z(x).
    """
    from sklearn.decomposition import PCA

    from skfed import DistributedKernelPCA
    from skfed.privacy import DifferentialPrivacy

    arrays, tasks, prepared, skfed_rows = {}, [], {}, {}
    notes, described = [], None
    for name in data:
        X, y, _ = LOADERS[name]()
        X_train, X_test = held_out(name, X, y)
        d = X.shape[1]
        for seed in seeds:
            ids = partitions("IID", np.zeros(len(X_train)), seed)
            fits = {}
            for eps in (np.inf, *epsilons) if skfed_private else ():
                est = DistributedKernelPCA(
                    n_components=N_COMPONENTS,
                    kernel="rbf",
                    gamma=GAMMA[name],
                    n_random_features=N_RANDOM_FEATURES,
                    random_state=seed,
                    privacy=DifferentialPrivacy(epsilon=eps, delta=delta),
                    # Masked: the clients add shares of the noise.
                    secure_aggregation=True,
                )
                start = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    est.fit(X_train, partitions=ids)
                fits["inf" if eps == np.inf else eps] = (
                    est._feature_seed,
                    est.components_.T.astype(np.float64),
                    time.perf_counter() - start,
                )
            map_seed = fits["inf"][0] if fits else seed
            omega, offset, norm, described = feature_map(map_seed, d, GAMMA[name])
            Z_train = features(X_train, omega, offset)
            Z_test = features(X_test, omega, offset)
            for eps, (fit_seed, V, seconds) in fits.items():
                if fit_seed != map_seed:
                    notes.append(f"skfed's map seed changed with epsilon={eps}.")
                    o, b, _, _ = feature_map(fit_seed, d, GAMMA[name])
                    value = captured_variance(features(X_test, o, b), V)
                else:
                    value = captured_variance(Z_test, V)
                skfed_rows.setdefault((name, eps), []).append((value, seconds))
            prepared[name, seed] = (Z_train, Z_test)
            arrays[f"Z_{name}_{seed}"] = Z_train
            for eps in epsilons:
                tasks.append(
                    {
                        "key": f"pca/{name}/{eps}/{seed}",
                        "kind": "pca",
                        "X": f"Z_{name}_{seed}",
                        "k": N_COMPONENTS,
                        "epsilon": eps,
                        "norm": norm,
                        "seed": seed,
                    }
                )
        print(f"{name} skfed PCA done", flush=True)
    answers, meta = run_anchor(anchor[0], arrays, tasks, anchor[1])
    if answers is None:
        notes.append(f"diffprivlib side skipped: {meta}.")
    elif meta["timed_out"]:
        notes.append(
            f"diffprivlib: {len(meta['timed_out'])} of {len(tasks)} fits did not "
            f"finish in {meta['timeout']} s and count as missing: "
            + ", ".join(f"`{k}`" for k in meta["timed_out"])
            + "."
        )
    table = {}
    for name in data:
        rows = table[name] = {}
        for seed in seeds:
            Z_train, Z_test = prepared[name, seed]
            start = time.perf_counter()
            V = PCA(N_COMPONENTS).fit(Z_train).components_.T
            rows.setdefault("PCA (scikit-learn)", {}).setdefault("inf", []).append(
                (captured_variance(Z_test, V), time.perf_counter() - start)
            )
            if answers is not None:
                for eps in epsilons:
                    key = f"pca/{name}/{eps}/{seed}"
                    value = (
                        captured_variance(Z_test, answers[key])
                        if key in answers
                        else None
                    )
                    rows.setdefault(PCA_ANCHOR[meta["bingham"]], {}).setdefault(
                        eps, []
                    ).append((value, meta["seconds"][key]))
        for eps in ("inf", *epsilons):
            if (name, eps) in skfed_rows:
                rows.setdefault("skfed DistributedKernelPCA, masked, IID", {})[eps] = (
                    skfed_rows[name, eps]
                )
    if not skfed_private:
        notes.append(
            "skfed side: this skfed's DistributedKernelPCA has no `privacy` "
            "parameter, so it did not run."
        )
    return table, notes, meta, described


LOADERS = {"digits": digits, "mixture": mixture}
PCA_ANCHOR = {
    "shipped": "diffprivlib PCA",
    "kent": "diffprivlib PCA, Kent et al. acceptance",
}
DATA_TITLES = {
    "digits": "digits (1,797 x 64, [0, 1])",
    "mixture": "Gaussian mixture (100,000 x 10, [-10, 10])",
}


def markdown_table(rows, epsilons, column, spec):
    """One row per method, one column per epsilon, median over seeds."""
    head = (
        "| method | " + " | ".join(f"eps={e:g}" for e in epsilons) + " | non-private |"
    )
    lines = [head, "|---|" + "---:|" * (len(epsilons) + 1)]
    for method, by_eps in rows.items():
        cells = [
            fmt(median([r[column] for r in by_eps.get(e, [])]), spec)
            for e in (*epsilons, "inf")
        ]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return lines


def figure(table, epsilons, path):
    """NMI against epsilon, one panel per data set (7 x 4.4 in at 100 dpi)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(table), figsize=(7, 4.4), dpi=100, squeeze=False)
    styles = {
        "skfed KFed, IID": ("C0", "o", "-"),
        "skfed KFed, Dirichlet": ("C2", "s", "-"),
        "skfed DistributedKMeans, masked, IID": ("C1", "D", "-"),
        "skfed DistributedKMeans, masked, Dirichlet": ("C4", "v", "-"),
        "skfed kernel k-means, masked, IID": ("C5", "P", "-."),
        "diffprivlib KMeans": ("C3", "^", "--"),
    }
    for ax, (name, rows) in zip(axes[0], table.items()):
        for method, (color, marker, line) in styles.items():
            by_eps = rows.get(method, {})
            xs = [e for e in epsilons if by_eps.get(e)]
            if xs:
                ys = [median([r[0] for r in by_eps[e]]) for e in xs]
                ax.plot(xs, ys, line, color=color, marker=marker, label=method)
        for method, color in (
            ("skfed KFed, IID", "C0"),
            ("KMeans (scikit-learn)", "0.4"),
        ):
            ref = rows.get(method, {}).get("inf")
            if ref:
                ax.axhline(
                    median([r[0] for r in ref]),
                    color=color,
                    linestyle=":",
                    linewidth=1.2,
                    label=f"{method.split(',')[0]}, non-private",
                )
        ax.set_xscale("log")
        ax.set_xticks(epsilons, [f"{e:g}" for e in epsilons])
        ax.minorticks_off()
        ax.set_xlabel("epsilon")
        ax.set_title(DATA_TITLES[name], fontsize=9)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(True, which="major", alpha=0.3)
    axes[0][0].set_ylabel("NMI against the true labels")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.27, 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def main():
    global N_CLIENTS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="digits, 1 seed")
    parser.add_argument("--only", nargs="+", choices=("kmeans", "pca", "classify"))
    parser.add_argument("--data", nargs="+", choices=tuple(LOADERS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=N_CLIENTS)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--anchor-python", default=DEFAULT_ANCHOR)
    parser.add_argument(
        "--anchor-bingham",
        choices=("shipped", "kent"),
        default="shipped",
        help="diffprivlib's eigenvector sampler as shipped, or with Kent et "
        "al.'s acceptance probability (see kent_bingham)",
    )
    parser.add_argument(
        "--anchor-timeout",
        type=int,
        default=120,
        help="seconds after which a diffprivlib fit counts as missing",
    )
    parser.add_argument(
        "--skfed-path", help="import skfed from this checkout (put first on sys.path)"
    )
    parser.add_argument("--figure", help="where the NMI figure goes")
    parser.add_argument("--out", default="dp.md")
    parser.add_argument("--anchor-job", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.anchor_job:
        return anchor_job(args.anchor_job)
    N_CLIENTS = args.clients
    if args.skfed_path:
        sys.path.insert(0, str(Path(args.skfed_path).resolve()))
    from threadpoolctl import threadpool_limits

    import skfed

    tasks = args.only or ("kmeans", "pca", "classify")
    anchor = (
        args.anchor_python,
        {"bingham": args.anchor_bingham, "timeout": args.anchor_timeout},
    )
    data = args.data or (("digits",) if args.quick else tuple(LOADERS))
    seeds = list(range(1 if args.quick else args.seeds))
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
    out = [
        "# Differential privacy: skfed against diffprivlib",
        "",
        f"- date: {started}; machine: {platform.platform()}, {os.cpu_count()} "
        f"CPUs, Python {platform.python_version()}; BLAS on one thread",
        f"- skfed {skfed.__version__} from `{Path(skfed.__file__).parent.parent}`",
        f"- command: `python benchmarks/{command}`",
        f"- seeds {seeds}, {N_CLIENTS} clients, skfed delta = {args.delta:g}; "
        "medians over seeds",
        "",
    ]
    summary = {}
    with threadpool_limits(limits=1):
        if "kmeans" in tasks:
            from skfed import KFed

            table, notes, meta = run_kmeans(
                data,
                seeds,
                EPSILONS,
                args.delta,
                anchor,
                supports_privacy(KFed),
            )
            summary["kmeans"] = table
            if isinstance(meta, dict):
                out.append(
                    f"- diffprivlib {meta['diffprivlib']}, scikit-learn "
                    f"{meta['scikit-learn']}, Python {meta['python']} (anchor)"
                )
            out += ["", *notes, ""]
            for name, rows in table.items():
                out += [f"## k-means: {DATA_TITLES[name]}", "", "NMI:", ""]
                out += markdown_table(rows, EPSILONS, 0, ".3f")
                out += ["", "k-means cost / scikit-learn KMeans(n_init=10):", ""]
                out += markdown_table(rows, EPSILONS, 1, ".3f")
                out += ["", "Seconds per fit:", ""]
                out += markdown_table(rows, EPSILONS, 2, ".2f")
                out.append("")
            if not args.quick or args.figure:
                fig = figure(table, EPSILONS, args.figure or RESULTS / "dp_utility.png")
                link = os.path.relpath(fig, RESULTS)
                out += [f"![NMI against epsilon]({link})", ""]
                print(f"wrote {fig}")
        if "pca" in tasks:
            from skfed import DistributedKernelPCA

            table, notes, meta, described = run_pca(
                data,
                seeds,
                EPSILONS,
                args.delta,
                anchor,
                supports_privacy(DistributedKernelPCA),
            )
            summary["pca"] = table
            if isinstance(meta, dict):
                out.append(
                    f"- diffprivlib {meta['diffprivlib']}, scikit-learn "
                    f"{meta['scikit-learn']}, Python {meta['python']} (anchor)"
                )
            out += ["", *notes, ""]
            out += [
                f"Kernel PCA on D = {N_RANDOM_FEATURES} random Fourier features "
                f"of exp(-gamma ||x - y||^2), gamma = {GAMMA}: {described}. "
                f"{N_COMPONENTS} components; captured variance of the held-out "
                "rows' features (digits: a third of the rows; mixture: 20,000 "
                "fresh draws). diffprivlib: PCA(data_norm=the map's norm "
                "bound, bounds=(-sqrt(2/D), sqrt(2/D)), centered=False), "
                "half its epsilon on the mean.",
                "",
            ]
            for name, rows in table.items():
                out += [f"## kernel PCA: {DATA_TITLES[name]}", "", "Captured variance:"]
                out += [""] + markdown_table(rows, EPSILONS, 0, ".3f")
                out += ["", "Seconds per fit:", ""]
                out += markdown_table(rows, EPSILONS, 1, ".2f")
                out.append("")
        if "classify" in tasks:
            table, notes, meta = run_classify(data, seeds, EPSILONS, args.delta, anchor)
            summary["classify"] = table
            out += ["", *notes, ""]
            for name, rows in table.items():
                out += [f"## classification: {DATA_TITLES[name]}", "", "Accuracy:"]
                out += [""] + markdown_table(rows, EPSILONS, 0, ".3f")
                out += ["", "Seconds per fit:", ""]
                out += markdown_table(rows, EPSILONS, 1, ".2f")
                out.append("")
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / args.out
    path.write_text("\n".join(out))
    raw = path.with_suffix(".json")
    raw.write_text(json.dumps(summary, indent=1, default=str))
    print("\n".join(out))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
