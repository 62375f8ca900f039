"""Differential privacy in the estimators: KFed's DP Lloyd (noise scale,
clipping, accounting, the ledger, reproducibility, utility) and the
refusals of DistributedKMeans and FederatedRKHSClassifier."""

import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from sklearn.base import clone
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer

from skfed import DistributedKMeans, FederatedRKHSClassifier, KFed
from skfed._engine import _transports
from skfed._engine._codec import dumps, loads
from skfed._engine._protocol import StepCall
from skfed._engine._transports._common import StepFailure
from skfed._engine._transports._joblib import JoblibTransport
from skfed._testing import blobs
from skfed.cluster._protocols import _kfed_private
from skfed.privacy import (
    Accountant,
    DifferentialPrivacy,
    PrivacyBudgetError,
    PrivacyLeakWarning,
    box_radius,
    clip_to_box,
)

BOUNDS = (-15.0, 15.0)


def _blobs(n_samples=3000, n_features=2, centers=4, random_state=0):
    return blobs(n_samples, n_features, centers, seed=random_state)


def _dp(**kw):
    return DifferentialPrivacy(**{"epsilon": 2.0, "bounds": BOUNDS, **kw})


# -- the parameter -------------------------------------------------------------


@pytest.mark.parametrize("cls", [KFed, DistributedKMeans, FederatedRKHSClassifier])
def test_privacy_parameter_is_kept_by_clone_and_pickle(cls):
    est = cls(privacy=_dp(epsilon=3.0))
    for twin in (clone(est), pickle.loads(pickle.dumps(est))):
        assert twin.privacy is not est.privacy
        assert twin.privacy.get_params() == est.privacy.get_params()
    assert est.get_params()["privacy__epsilon"] == 3.0
    with pytest.raises(ValueError, match="privacy"):
        cls(privacy={"epsilon": 1.0}).fit(*_blobs(60), partitions=2)


@pytest.mark.parametrize("cls", [KFed, DistributedKMeans, FederatedRKHSClassifier])
def test_privacy_spent_is_none_without_privacy(cls):
    X, y = _blobs(120, centers=2)
    est = cls(random_state=0)
    est = est.fit(X, y, partitions=2) if cls is FederatedRKHSClassifier else est
    if cls is not FederatedRKHSClassifier:
        est.fit(X, partitions=2)
    assert est.privacy_spent_ is None


def test_grid_search_tunes_epsilon_through_a_pipeline():
    X, _ = _blobs(600)
    pipe = Pipeline(
        [
            ("scale", FunctionTransformer()),
            ("est", KFed(4, privacy=_dp(), random_state=0)),
        ]
    )
    search = GridSearchCV(pipe, {"est__privacy__epsilon": [0.5, 8.0]}, cv=2)
    search.fit(X)
    tried = [p["est__privacy__epsilon"] for p in search.cv_results_["params"]]
    assert tried == [0.5, 8.0]
    best = search.best_estimator_.named_steps["est"]
    # The refitted estimator spent the budget the search chose, no more.
    assert 0 < best.privacy_spent_[0] <= best.privacy.epsilon * (1 + 1e-6)
    # The search's clones never touched the original settings.
    assert pipe.named_steps["est"].privacy.epsilon == 2.0


# -- KFed's DP Lloyd -----------------------------------------------------------


def test_noise_std_is_the_accountants_multiplier_times_the_sensitivity(monkeypatch):
    X, _ = _blobs(900, n_features=3)
    X[::50] *= 1e6  # rows far outside the bounds
    lower, upper = np.array([-15.0, -12.0, -15.0]), np.array([15.0, 15.0, 9.0])
    dp = DifferentialPrivacy(epsilon=1.5, delta=1e-6, bounds=(lower, upper))
    stds, largest_row = [], []
    noise = _kfed_private.gaussian_noise
    statistics = _kfed_private.release_statistics

    def recording(value, std):
        stds.append(std)
        return noise(value, std)

    def released_rows(rows, centers, count_scale):
        largest_row.append(np.linalg.norm(rows, axis=1).max())
        return statistics(rows, centers, count_scale)

    monkeypatch.setattr(_kfed_private, "gaussian_noise", recording)
    monkeypatch.setattr(_kfed_private, "release_statistics", released_rows)
    km = KFed(4, privacy=dp, private_iter=3, random_state=0).fit(X, partitions=3)
    # The replace-one sensitivity from the box alone: rows of norm at most
    # R, counts scaled by c = R; one row replaced moves (sum, c·count) by at
    # most max(2R, sqrt(2(R² + c²))) = 2R.
    radius = np.linalg.norm((upper - lower) / 2)
    z = Accountant(dp, 3, estimator="KFed").noise_multiplier
    expected = z * 2 * radius
    assert z > 0
    # Sums and counts of 3 iterations on 3 clients, all at that scale.
    assert len(stds) == 2 * 3 * 3
    np.testing.assert_allclose(stds, expected, rtol=1e-12)
    # What is summed was clipped into the box: no row beyond its radius.
    assert len(largest_row) == 3 * 3
    assert max(largest_row) <= radius * (1 + 1e-12)
    assert km.communication_.disclosure()[0]["noised"] == 3


@settings(max_examples=40, deadline=None)
@given(
    arrays(np.float64, (8, 3), elements=st.floats(-1e6, 1e6)),
    arrays(np.float64, 3, elements=st.floats(-1e9, 1e9)),
    st.integers(0, 7),
)
def test_one_row_moves_a_release_by_at_most_its_sensitivity(X, row, which):
    lower, upper = np.array([-1.0, 0.0, 2.0]), np.array([1.0, 10.0, 2.5])
    count_scale, sensitivity, std = _kfed_private.release_scales(lower, upper, 2.0)
    assert std == pytest.approx(2.0 * sensitivity)
    # Centers anywhere: the releases' sensitivity must not depend on them.
    centers = np.array([[0.0, 0.0, 0.0], [0.5, -3.0, 0.1], [-0.9, 4.0, -0.2]])

    def release(rows):
        sums, counts, _ = _kfed_private.release_statistics(
            clip_to_box(rows, lower, upper), centers, count_scale
        )
        return np.concatenate([sums.ravel(), counts])

    before = release(X)
    changed = X.copy()
    changed[which] = row
    # Replace-one (the clients' sizes are public): one row replaced by any
    # other moves the release by at most the sensitivity, 2R at c = R.
    assert np.linalg.norm(before - release(changed)) <= sensitivity * (1 + 1e-9)
    radius = box_radius(lower, upper)
    assert count_scale == pytest.approx(radius)
    assert sensitivity == pytest.approx(2 * radius)


def test_ledger_and_accountant_record_the_noised_round():
    X, _ = _blobs(900)
    km = KFed(4, privacy=_dp(epsilon=1.0), private_iter=4, random_state=0)
    km.fit(X, partitions=3)
    rounds = km.communication_.disclosure()
    assert [r["name"] for r in rounds] == ["local centers", "cluster map"]
    assert rounds[0]["noised"] == 4 and rounds[0]["raw_rows"] == {}
    # The cluster map only downloads (post-processing of the noisy model).
    assert rounds[1]["floats"] == 0 and rounds[1]["noised"] == 0
    assert "per_client noised" in km.communication_.summary()
    epsilon, delta = km.privacy_spent_
    assert 0.9 < epsilon <= 1.0 * (1 + 1e-6)
    assert delta == 1e-5


def test_same_seed_reproduces_the_clipped_fit_but_never_the_noise():
    X, _ = _blobs(3000, n_features=3)
    # epsilon = inf runs the same clipped DP Lloyd without noise: the seed
    # and nothing else decides it, whatever n_jobs.
    free = [
        KFed(4, privacy=_dp(epsilon=math.inf), random_state=7, n_jobs=n_jobs).fit(
            X, partitions=6
        )
        for n_jobs in (1, 2)
    ]
    np.testing.assert_allclose(
        free[0].cluster_centers_, free[1].cluster_centers_, rtol=1e-10
    )
    np.testing.assert_array_equal(free[0].labels_, free[1].labels_)
    # With noise, the same seed gives another model at every fit: the noise
    # comes from fresh entropy on each client, not from random_state.
    noisy = [
        KFed(4, privacy=_dp(epsilon=0.5), random_state=7).fit(X, partitions=6)
        for _ in range(2)
    ]
    assert not np.allclose(noisy[0].cluster_centers_, noisy[1].cluster_centers_)


class _ThroughCodec(JoblibTransport):
    """The joblib transport with the step call, messages, uploads and kept
    state passed through the codec, as a deployment across sites carries
    them (no pickle)."""

    def run(self, call, client_ids, messages):
        call = StepCall(*_round_trip(tuple(call)))
        out = super().run(call, client_ids, [_round_trip(m) for m in messages])
        for c in client_ids:
            self._storage[c] = _round_trip(self._storage[c])
        return [u if isinstance(u, StepFailure) else _round_trip(u) for u in out]


def _round_trip(value):
    return loads(*dumps(value))


def test_private_fit_runs_through_the_codec(monkeypatch):
    X, _ = _blobs(600, n_features=3)
    # The private path without noise (epsilon = inf) is reproducible, so the
    # codec must give the same model; with noise, the same rounds and spend.
    free = _dp(epsilon=math.inf)
    expected = KFed(4, privacy=free, random_state=0).fit(X, partitions=3)
    noisy = KFed(4, privacy=_dp(), random_state=0).fit(X, partitions=3)
    monkeypatch.setattr(_transports, "JoblibTransport", _ThroughCodec)
    got = KFed(4, privacy=free, random_state=0).fit(X, partitions=3)
    np.testing.assert_array_equal(got.labels_, expected.labels_)
    np.testing.assert_allclose(
        got.cluster_centers_, expected.cluster_centers_, rtol=1e-12
    )
    got_noisy = KFed(4, privacy=_dp(), random_state=0).fit(X, partitions=3)
    assert got_noisy.privacy_spent_ == noisy.privacy_spent_
    assert got_noisy.communication_.disclosure() == noisy.communication_.disclosure()


def test_infinite_epsilon_is_the_clipped_non_private_fit():
    X, _ = _blobs(3000, n_features=3, centers=5)
    plain = KFed(5, random_state=0).fit(X, partitions=5)
    dp = DifferentialPrivacy(epsilon=math.inf, bounds=BOUNDS)
    free = KFed(5, privacy=dp, random_state=0).fit(X, partitions=5)
    assert adjusted_rand_score(plain.labels_, free.labels_) > 0.999
    # The same clusters, so the same centers up to Lloyd's convergence
    # (measured: at most 0.015 apart over three seeds; the blobs' standard
    # deviation is 0.5).
    pairs = np.argmin(
        ((free.cluster_centers_[:, None] - plain.cluster_centers_[None]) ** 2).sum(-1),
        axis=1,
    )
    assert sorted(pairs) == list(range(5))
    np.testing.assert_allclose(
        free.cluster_centers_, plain.cluster_centers_[pairs], atol=0.05
    )
    assert free.privacy_spent_[0] == math.inf


def test_unaffordable_noise_is_refused_before_any_round(rounds_run):
    X, _ = _blobs(300)
    dp = _dp(epsilon=1.0, noise_multiplier=1.0)
    with pytest.raises(PrivacyBudgetError, match="5 noised releases"):
        KFed(4, privacy=dp, private_iter=5).fit(X, partitions=3)
    assert rounds_run == []
    # Enough noise for the same fit is used as given.
    dp.set_params(noise_multiplier=50.0)
    km = KFed(4, privacy=dp, private_iter=5, random_state=0).fit(X, partitions=3)
    assert km.privacy_spent_[0] < 1.0


def test_bounds_read_from_the_data_warn():
    X, _ = _blobs(300)
    with pytest.warns(PrivacyLeakWarning, match="read from the training data"):
        KFed(4, privacy=DifferentialPrivacy(), random_state=0).fit(X, partitions=3)


def test_sample_weight_is_refused_under_privacy(rounds_run):
    X, _ = _blobs(300)
    with pytest.raises(ValueError, match="sample_weight under privacy"):
        KFed(4, privacy=_dp()).fit(X, partitions=3, sample_weight=np.ones(300))
    assert rounds_run == []


def test_partial_fit_spends_a_budget_on_its_own_rows():
    X, _ = _blobs(1200)
    km = KFed(4, privacy=_dp(epsilon=1.0), random_state=0)
    km.fit(X[:600], partitions=2)
    km.partial_fit(X[600:], partitions=["a"] * 300 + ["b"] * 300)
    assert 0.9 < km.privacy_spent_[0] <= 1.0 * (1 + 1e-6)
    assert km.communication_.disclosure()[-2]["noised"] == 5


# -- refusals ------------------------------------------------------------------


@pytest.mark.parametrize(
    "est, alternative",
    [
        (
            FederatedRKHSClassifier(method="critical_samples"),
            "method='random_features'",
        ),
    ],
)
def test_refusals_name_the_alternative_before_any_round(est, alternative, rounds_run):
    X, y = _blobs(120, centers=2)
    est.set_params(privacy=_dp())
    with pytest.raises(ValueError, match="cannot fit under differential privacy"):
        est.fit(X, y, partitions=2)
    with pytest.raises(ValueError, match=alternative):
        est.fit(X, y, partitions=2)
    assert rounds_run == []


# -- utility -------------------------------------------------------------------


def test_utility_at_epsilon_10_on_well_separated_blobs():
    # 10 blobs, 20,000 rows over 10 clients: measured NMI 1.0 with six
    # seeds (0.93 to 1.0 at epsilon = 1); the threshold leaves room.
    X, y = make_blobs(20_000, n_features=5, centers=10, random_state=0)
    km = KFed(10, privacy=_dp(epsilon=10.0), random_state=0).fit(X, partitions=10)
    assert normalized_mutual_info_score(y, km.labels_) > 0.8
