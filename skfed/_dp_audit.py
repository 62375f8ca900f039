"""An empirical audit of the private releases: a lower bound on epsilon.

A private release M is (epsilon, delta)-differentially private when, for
neighbouring data sets D and D' and every test an attacker can run on the
release, FPR + e^epsilon FNR >= 1 - delta and FNR + e^epsilon FPR >=
1 - delta. The audit runs the release many times on D and on D' (one
client; D' replaces one row of D by a canary at the clipping bound, the
adjacency under which the sizes stay public), scores each output by a
scalar statistic (its projection on the direction in which the canary
moves the noiseless release, which an attacker who knows every other row
can compute), picks a threshold on half of the trials and counts the
other half's false positives and false negatives. Clopper-Pearson upper
bounds on both rates turn the inequalities into a lower bound on epsilon
that holds with the stated confidence: a release whose lower bound
exceeds its claimed epsilon is not private as claimed.

Every trial draws a fresh client (its entropy from the operating system),
so the audit needs no seed and holds whatever the noise's source is.

The audit sits above the estimators, beside the test helpers: it runs
their client steps on a client of the engine, and nothing in skfed imports
it.

The releases audited (:data:`RELEASES`): KFed's DP Lloyd upload, the
random-feature statistics of DistributedKernelPCA and of
FederatedKernelKMeans (a Gram triangle and [feature sums, count]),
FederatedKernelKMeans' private cells and Lloyd sums, FederatedStandardScaler's
sums and the row-free FederatedRKHSClassifier's statistics.
"""

import math
import secrets
from functools import partial
from typing import NamedTuple

import numpy as np
from scipy.stats import beta

from .privacy._accountant import Accountant
from .privacy._mechanisms import DifferentialPrivacy

__all__ = ["AuditResult", "RELEASES", "audit", "epsilon_lower_bound"]

# Thresholds tried: quantiles of the pooled first halves.
_CANDIDATES = 201


class AuditResult(NamedTuple):
    """What :func:`audit` measured.

    Attributes
    ----------
    release : str
    claimed : float
        The epsilon the accountant claims for the release, at ``delta``.
    lower_bound : float
        The measured lower bound on epsilon (0 when the test tells nothing).
    delta : float
    trials : int
        Runs of the release on each of D and D'.
    noise_scale : float
        The factor applied to the calibrated noise (1: as fitted).
    """

    release: str
    claimed: float
    lower_bound: float
    delta: float
    trials: int
    noise_scale: float


def clopper_pearson_upper(failures, trials, alpha):
    """The one-sided Clopper-Pearson upper bound, at level 1 - alpha, on a
    rate of which ``failures`` of ``trials`` were seen."""
    if failures >= trials:
        return 1.0
    return float(beta.ppf(1 - alpha, failures + 1, trials - failures))


def _upper_bounds(failures, trials, alpha):
    """:func:`clopper_pearson_upper` of many counts at once."""
    failures = np.asarray(failures)
    bounds = beta.ppf(1 - alpha, failures + 1, np.maximum(trials - failures, 1))
    return np.where(failures >= trials, 1.0, bounds)


def _epsilon_at(fpr, fnr, delta):
    """The largest epsilon that rates (fpr, fnr) prove: 0 if none."""
    best = 0.0
    for a, b in ((fpr, fnr), (fnr, fpr)):
        if b > 0 and 1 - delta - a > b:
            best = max(best, math.log((1 - delta - a) / b))
    return best


def epsilon_lower_bound(out_scores, in_scores, delta, *, alpha=0.025):
    """A lower bound on epsilon from the statistic's values without and
    with the canary (larger with it).

    The first half of each sample chooses the threshold (the one whose
    rates prove the most); the second half's rates, through their
    Clopper-Pearson upper bounds at level 1 - alpha each, give the bound,
    which holds with probability at least 1 - 2 alpha.
    """
    out_scores = np.asarray(out_scores, dtype=np.float64)
    in_scores = np.asarray(in_scores, dtype=np.float64)
    h_out, h_in = len(out_scores) // 2, len(in_scores) // 2
    choose_out, test_out = out_scores[:h_out], out_scores[h_out:]
    choose_in, test_in = in_scores[:h_in], in_scores[h_in:]
    pooled = np.concatenate([choose_out, choose_in])
    candidates = np.unique(np.quantile(pooled, np.linspace(0, 1, _CANDIDATES)))
    # Rates at every candidate, through their upper bounds, so that a
    # threshold that caught few trials is not preferred for its luck.
    false_pos = h_out - np.searchsorted(np.sort(choose_out), candidates, "left")
    false_neg = np.searchsorted(np.sort(choose_in), candidates, "left")
    fpr = _upper_bounds(false_pos, h_out, alpha)
    fnr = _upper_bounds(false_neg, h_in, alpha)
    scores = [_epsilon_at(a, b, delta) for a, b in zip(fpr, fnr)]
    threshold = candidates[int(np.argmax(scores))]
    false_pos = int(np.sum(test_out >= threshold))
    false_neg = int(np.sum(test_in < threshold))
    fpr = clopper_pearson_upper(false_pos, len(test_out), alpha)
    fnr = clopper_pearson_upper(false_neg, len(test_in), alpha)
    return _epsilon_at(fpr, fnr, delta)


def _step(name):
    """The client step registered as ``name`` (the estimators' modules,
    imported with the estimators, register their steps)."""
    from ._engine._protocol import resolve_step

    return resolve_step(name)


def _client(X, y=None):
    """A one-client federation's client with fresh entropy from the OS."""
    from ._engine._client import ClientData

    return ClientData(0, X, y, np.arange(X.shape[0]), (secrets.randbits(63),))


# --------------------------------------------------------------------------
# The releases: each builds D, D', the release (a function of a data set
# and a noise scale) and its claimed epsilon from the estimator's own
# calibration.


class Release(NamedTuple):
    """One audited release: ``run(data, noise_scale)`` gives its output as
    a vector; ``data`` and ``canary`` are the neighbours D and D'."""

    name: str
    data: object
    canary: object
    run: object
    claimed: float
    delta: float


def _claimed(estimator, count):
    """The epsilon the estimator's accountant gives ``count`` of its fit's
    releases, and the noise multiplier they get."""
    privacy = estimator.privacy
    accountant = Accountant(
        privacy, estimator._privacy_releases(), estimator=type(estimator).__name__
    )
    z = accountant.noise_multiplier
    return accountant, accountant.epsilon_of([(z, count)])


def _box_neighbours(n_samples, n_features):
    """The box [-1, 1]^d and neighbours in it: D holds a row at the box's
    lower corner, D' in its place the canary beyond the upper corner (the
    client clips it to the corner), the other rows inside the box."""
    lower, upper = -np.ones(n_features), np.ones(n_features)
    rows = np.random.default_rng(0).uniform(-0.5, 0.5, size=(n_samples - 1, n_features))
    return lower, upper, np.vstack([rows, lower]), np.vstack([rows, 3 * upper])


def _feature_neighbours():
    """Neighbours for the random-feature releases: D' replaces a row at the
    origin by a canary far from every row, whose features are nearly
    orthogonal to the replaced row's (which moves the statistics the most).
    Returns the shared rows, the replaced row and the canary."""
    rows = np.random.default_rng(0).normal(scale=0.3, size=(40, 2))
    return rows, np.zeros(2), np.array([40.0, -40.0])


def kfed_release(epsilon=1.0, delta=1e-5, n_samples=200, n_features=2):
    """KFed's upload (one DP Lloyd iteration, one cluster): D holds a row
    at the box's lower corner, D' the canary at its upper corner, beyond
    the bound (clipped to the corner)."""
    from .cluster import KFed

    dp_lloyd_step = _step("kfed.dp_lloyd")

    lower, upper, D, D_prime = _box_neighbours(n_samples, n_features)
    dp = DifferentialPrivacy(epsilon=epsilon, delta=delta, bounds=(lower, upper))
    est = KFed(1, privacy=dp, private_iter=1, n_local_clusters=1)
    accountant, claimed = _claimed(est, 1)

    def run(X, noise_scale):
        _, upload = dp_lloyd_step(
            _client(X),
            None,
            None,
            n_local_clusters=1,
            lower=lower,
            upper=upper,
            n_iter=1,
            noise_multiplier=accountant.noise_multiplier * noise_scale,
            dropout=0.0,
        )
        # The noisy sum, as the center times its noisy count.
        return (upload["centers"] * upload["sizes"][:, None]).ravel()

    return Release("KFed: local centers (DP Lloyd)", D, D_prime, run, claimed, delta)


def _feature_statistics_release(name, estimator, step, message, n_random, delta):
    from .kernel._private_features import (
        count_sum_sensitivity,
        feature_norm_bound,
        gram_sensitivity,
    )

    accountant, claimed = _claimed(estimator, 2)
    radius = feature_norm_bound(n_random)
    gram_std = accountant.noise_std(gram_sensitivity(radius, n_random))
    sum_std = accountant.noise_std(count_sum_sensitivity(radius))
    rows, replaced, canary = _feature_neighbours()
    D, D_prime = np.vstack([rows, replaced]), np.vstack([rows, canary])

    def run(X, noise_scale):
        noise = (radius, gram_std * noise_scale, sum_std * noise_scale)
        _, upload = step(_client(X), None, message, n_features=n_random, noise=noise)
        return upload

    return Release(name, D, D_prime, run, claimed, delta)


def kernel_pca_release(epsilon=1.0, delta=1e-5, n_random=20):
    """DistributedKernelPCA's one upload: the noised Gram triangle of the
    random features and [feature sums, count] (two releases)."""
    from .decomposition import DistributedKernelPCA

    dp = DifferentialPrivacy(epsilon=epsilon, delta=delta)
    est = DistributedKernelPCA(2, gamma=0.5, n_random_features=n_random, privacy=dp)
    return _feature_statistics_release(
        "DistributedKernelPCA: random feature statistics",
        est,
        _step("kernel_pca.feature_statistics"),
        (12345, 0.5, "rbf"),
        n_random,
        delta,
    )


def _kernel_kmeans(epsilon, delta, n_random, refine_iter=1):
    from .cluster import FederatedKernelKMeans

    dp = DifferentialPrivacy(epsilon=epsilon, delta=delta)
    return FederatedKernelKMeans(
        2,
        gamma=0.5,
        n_random_features=n_random,
        refine_iter=refine_iter,
        privacy=dp,
    )


def kernel_kmeans_statistics_release(epsilon=1.0, delta=1e-5, n_random=20):
    """FederatedKernelKMeans' first upload: as kernel PCA's (two releases
    of the fit's 3 + ``refine_iter``)."""
    return _feature_statistics_release(
        "FederatedKernelKMeans: random feature statistics",
        _kernel_kmeans(epsilon, delta, n_random),
        _step("kernel_kmeans.one_shot_statistics"),
        (12345, 0.5),
        n_random,
        delta,
    )


def kernel_kmeans_sums_release(epsilon=1.0, delta=1e-5, n_random=20, n_components=3):
    """FederatedKernelKMeans' private cells and Lloyd rounds: noised
    per-center sums of the embedding's rows G and counts (one release
    each). D holds a row of G at the bound R on one side, D' the canary
    beyond it on the other (clipped to R)."""
    from .kernel._private_features import count_sum_sensitivity, feature_norm_bound

    est = _kernel_kmeans(epsilon, delta, n_random)
    private_sums_step = _step("kernel_kmeans.private_sums")
    accountant, claimed = _claimed(est, 1)
    radius = feature_norm_bound(n_random)
    std = accountant.noise_std(count_sum_sensitivity(radius))
    rng = np.random.default_rng(0)
    rows = rng.normal(scale=0.1, size=(40, n_components))
    axis = np.eye(n_components)[0]
    D = np.vstack([rows, -radius * axis])
    D_prime = np.vstack([rows, 5 * radius * axis])
    shift = np.zeros(n_components)
    centers = np.vstack([-0.5 * axis, 0.5 * axis])

    def run(H, noise_scale):
        step = partial(private_sums_step, radius=radius)
        _, upload = step(
            _client(np.zeros((H.shape[0], 1))),
            {"H": H},
            (centers, shift),
            std=std * noise_scale,
        )
        return upload

    return Release(
        "FederatedKernelKMeans: private cells / Lloyd sums",
        D,
        D_prime,
        run,
        claimed,
        delta,
    )


def scaler_release(epsilon=1.0, delta=1e-5, n_samples=200, n_features=2):
    """FederatedStandardScaler's one upload: the noised Σ v and Σ v² of the
    rows in box coordinates (and the public count). D holds a row at the
    box's lower corner, D' the canary beyond its upper corner (clipped)."""
    from .preprocessing import FederatedStandardScaler
    from .preprocessing._protocols._scaler import private_sensitivity

    private_step = _step("scaler.dp_statistics")

    lower, upper, D, D_prime = _box_neighbours(n_samples, n_features)
    dp = DifferentialPrivacy(epsilon=epsilon, delta=delta, bounds=(lower, upper))
    accountant, claimed = _claimed(FederatedStandardScaler(privacy=dp), 1)
    std = accountant.noise_std(private_sensitivity(n_features, True))

    def run(X, noise_scale):
        _, upload = private_step(
            _client(X), None, (lower, upper), with_std=True, noise_std=std * noise_scale
        )
        return upload

    return Release("FederatedStandardScaler: sums", D, D_prime, run, claimed, delta)


def classifier_release(epsilon=1.0, delta=1e-5, n_random=20):
    """FederatedRKHSClassifier's row-free upload: the noised Gram triangle
    of the random features and [class sums, class counts] (two releases).
    D' replaces a row of class 0 by a canary of class 1 far from every row."""
    from .classification import FederatedRKHSClassifier
    from .kernel._private_features import (
        count_sum_sensitivity,
        feature_norm_bound,
        gram_sensitivity,
    )

    dp = DifferentialPrivacy(epsilon=epsilon, delta=delta)
    est = FederatedRKHSClassifier(
        method="random_features", widths=[1.0], n_random_features=n_random, privacy=dp
    )
    accountant, claimed = _claimed(est, 2)
    radius = feature_norm_bound(n_random)
    gram_std = accountant.noise_std(gram_sensitivity(radius, n_random))
    sum_std = accountant.noise_std(count_sum_sensitivity(radius))
    statistics_step = _step("rkhs.feature_statistics")
    rows, replaced, canary = _feature_neighbours()
    labels = np.arange(len(rows)) % 2
    # The canary comes with the other class: it moves both classes' cells.
    D = (np.vstack([rows, replaced]), np.r_[labels, 0])
    D_prime = (np.vstack([rows, canary]), np.r_[labels, 1])

    def run(data, noise_scale):
        X, y = data
        noise = (radius, gram_std * noise_scale, sum_std * noise_scale)
        _, upload = statistics_step(
            _client(X, y),
            None,
            (12345, (1.0,)),
            n_random_features=n_random,
            n_classes=2,
            noise=noise,
        )
        return upload

    return Release(
        "FederatedRKHSClassifier: random feature statistics",
        D,
        D_prime,
        run,
        claimed,
        delta,
    )


RELEASES = {
    "kfed": kfed_release,
    "kernel_pca": kernel_pca_release,
    "kernel_kmeans_statistics": kernel_kmeans_statistics_release,
    "kernel_kmeans_sums": kernel_kmeans_sums_release,
    "scaler": scaler_release,
    "classifier": classifier_release,
}


def audit(release, trials, *, noise_scale=1.0, alpha=0.025):
    """Run ``release`` ``trials`` times on each of D and D' and bound its
    epsilon from below.

    Parameters
    ----------
    release : Release
    trials : int
        Runs on each data set (half choose the threshold).
    noise_scale : float, default=1.0
        Scales the calibrated noise: below 1, a release noised less than
        claimed, which the audit must catch.
    alpha : float, default=0.025
        Each rate's Clopper-Pearson bound holds at level 1 - alpha.

    Returns
    -------
    result : AuditResult
    """
    # The attacker knows every row but the one in question: the noiseless
    # releases, and the direction in which the canary moves them.
    base = release.run(release.data, 0.0)
    direction = release.run(release.canary, 0.0) - base
    norm = np.linalg.norm(direction)
    if norm == 0:
        raise ValueError(f"{release.name}: the canary does not move the release.")
    direction /= norm
    out_scores = [
        (release.run(release.data, noise_scale) - base) @ direction
        for _ in range(trials)
    ]
    in_scores = [
        (release.run(release.canary, noise_scale) - base) @ direction
        for _ in range(trials)
    ]
    bound = epsilon_lower_bound(out_scores, in_scores, release.delta, alpha=alpha)
    return AuditResult(
        release.name, release.claimed, bound, release.delta, trials, noise_scale
    )
