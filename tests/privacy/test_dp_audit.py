"""Empirical differential privacy audit of every private release.

Each release runs on one client, many times, on D and on D' (one row
replaced by a canary at the clipping bound); a threshold test on the
release's projection on the canary's direction and Clopper-Pearson bounds
on its error rates give a lower bound on epsilon, which must stay below
the epsilon the accountant claims. With the noise scaled down ten times
the same audit must exceed the claim: it has the power to catch a release
noised less than claimed. Every trial's client draws fresh entropy from
the operating system; nothing is seeded.
"""

import math

import numpy as np
import pytest
from scipy.stats import norm

from skfed import KFed
from skfed._dp_audit import (
    RELEASES,
    audit,
    clopper_pearson_upper,
    epsilon_lower_bound,
)
from skfed.privacy import DifferentialPrivacy

TRIALS = 2000


@pytest.mark.parametrize("name", sorted(RELEASES))
def test_measured_epsilon_stays_below_the_claim(name):
    release = RELEASES[name]()
    result = audit(release, TRIALS)
    assert 0 < result.claimed <= 1.0 + 1e-9
    assert result.lower_bound < result.claimed


@pytest.mark.parametrize("name", sorted(RELEASES))
def test_the_audit_catches_a_tenth_of_the_noise(name):
    release = RELEASES[name]()
    result = audit(release, TRIALS, noise_scale=0.1)
    assert result.lower_bound > result.claimed


def test_a_whole_kfed_fit_on_one_client():
    # End to end: the released model of KFed with one client, one local
    # cluster and one DP Lloyd iteration, the fit's only release.
    rng = np.random.default_rng(0)
    lower, upper = -np.ones(2), np.ones(2)
    rows = rng.uniform(-0.5, 0.5, size=(99, 2))
    D, D_prime = np.vstack([rows, lower]), np.vstack([rows, 3 * upper])
    partitions = np.zeros(len(D), dtype=int)

    def centre(X, epsilon):
        dp = DifferentialPrivacy(epsilon=epsilon, delta=1e-5, bounds=(lower, upper))
        km = KFed(1, n_local_clusters=1, private_iter=1, privacy=dp)
        return km.fit(X, partitions=partitions).cluster_centers_[0]

    base = centre(D, math.inf)
    direction = centre(D_prime, math.inf) - base
    direction /= np.linalg.norm(direction)
    trials = 100
    out_scores = [(centre(D, 1.0) - base) @ direction for _ in range(trials)]
    in_scores = [(centre(D_prime, 1.0) - base) @ direction for _ in range(trials)]
    assert epsilon_lower_bound(out_scores, in_scores, 1e-5) < 1.0
    # The statistic is the model's, not noise alone: on average the noisy
    # models differ by the canary's own shift (within five standard errors,
    # at epsilon = 1), and at epsilon = 10, where the noise is a tenth, the
    # canary moves them clearly (the shift is then about 15 standard errors).
    shift = (centre(D_prime, math.inf) - base) @ direction
    difference = np.mean(in_scores) - np.mean(out_scores)
    error = np.sqrt((np.var(in_scores) + np.var(out_scores)) / trials)
    assert abs(difference - shift) < 5 * error
    out_scores = [(centre(D, 10.0) - base) @ direction for _ in range(trials)]
    in_scores = [(centre(D_prime, 10.0) - base) @ direction for _ in range(trials)]
    error = np.sqrt((np.var(in_scores) + np.var(out_scores)) / trials)
    assert np.mean(in_scores) - np.mean(out_scores) > shift - 5 * error > 0


def test_the_bound_of_a_known_gaussian_mechanism():
    # A Gaussian mechanism of shift mu / sigma = 2 is (eps, delta)-DP at
    # eps = 2.9 for delta = 1e-5 (Balle and Wang's analytic bound); the
    # audit, drawing from it directly, lands between a positive figure and
    # that, as its confidence says.
    rng = np.random.default_rng()
    out_scores = rng.normal(0.0, 1.0, 20_000)
    in_scores = rng.normal(2.0, 1.0, 20_000)
    bound = epsilon_lower_bound(out_scores, in_scores, 1e-5)
    exact = _gaussian_epsilon(2.0, 1e-5)
    assert 1.0 < bound < exact


def test_clopper_pearson():
    # No failure in n trials: 1 - alpha^(1/n), the textbook case.
    assert clopper_pearson_upper(0, 100, 0.05) == pytest.approx(1 - 0.05 ** (1 / 100))
    assert clopper_pearson_upper(5, 5, 0.05) == 1.0
    assert 0.5 < clopper_pearson_upper(50, 100, 0.05) < 0.6


def _gaussian_epsilon(mu, delta):
    """epsilon of the Gaussian mechanism with sensitivity over noise mu at
    delta (the exact trade-off of Balle and Wang, 2018), by bisection."""

    def delta_at(eps):
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(
            -eps / mu - mu / 2
        )

    lo, hi = 0.0, 50.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if delta_at(mid) > delta else (lo, mid)
    return hi
