"""FederatedStandardScaler against StandardScaler on the pooled rows, its
ledger by formula, secure aggregation, differential privacy, pipelines."""

import math

import numpy as np
import pytest
import scipy.sparse as sp
import sklearn
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.exceptions import NotFittedError
from sklearn.metrics import adjusted_rand_score
from sklearn.model_selection import GridSearchCV, GroupKFold, LeaveOneGroupOut
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skfed import KFed, partition
from skfed._testing import assert_runs_its_declared_rounds
from skfed.preprocessing import FederatedStandardScaler
from skfed.preprocessing._protocols import _scaler as scaler_protocol
from skfed.privacy import Accountant, DifferentialPrivacy, PrivacyLeakWarning
from skfed.privacy._secure_aggregation import FRACTION_BITS

pytest.importorskip("dp_accounting")


def _data(n=600, d=4, seed=0):
    """Features of very different locations and spreads, with labels."""
    X, y = make_blobs(n_samples=n, centers=5, n_features=d, random_state=seed)
    X = X * np.array([1.0, 100.0, 1e-3, 7.0])[:d] + np.array([0.0, -50.0, 3.0, 1e3])[:d]
    return X, y


def _assert_matches(fed, ref, rtol=1e-10):
    np.testing.assert_allclose(fed.var_, ref.var_, rtol=rtol)
    np.testing.assert_allclose(fed.scale_, ref.scale_, rtol=rtol)
    # A mean near zero is compared at the scale of its feature.
    error = np.abs(fed.mean_ - ref.mean_)
    assert np.all(error <= rtol * (np.abs(ref.mean_) + ref.scale_)), error
    assert fed.n_samples_seen_ == ref.n_samples_seen_


@pytest.mark.parametrize("scheme", ["iid", "dirichlet", "one client per label"])
def test_matches_standard_scaler_on_the_pooled_rows(scheme):
    X, y = _data()
    ids = {
        "iid": partition.iid(len(X), n_clients=7, random_state=0),
        "dirichlet": partition.label_dirichlet(
            y, n_clients=7, alpha=0.3, random_state=0
        ),
        "one client per label": y,
    }[scheme]
    fed = FederatedStandardScaler().fit(X, partitions=ids)
    ref = StandardScaler().fit(X)
    _assert_matches(fed, ref)
    np.testing.assert_allclose(fed.transform(X), ref.transform(X), atol=1e-9)
    assert fed.n_clients_ == len(np.unique(ids))
    assert fed.n_features_in_ == X.shape[1]


@pytest.mark.parametrize("secure_aggregation", [False, True])
def test_far_from_the_origin(secure_aggregation):
    # Σx²/N − x̄² at a mean of 1e6 and unit spread keeps about four digits
    # of the variance; around the mean it is exact.
    rng = np.random.RandomState(0)
    X = 1e6 + rng.standard_normal((2000, 3)) * np.array([1.0, 0.01, 3.0])
    ids = np.arange(2000) % 4
    fed = FederatedStandardScaler(secure_aggregation=secure_aggregation).fit(
        X, partitions=ids
    )
    ref = StandardScaler().fit(X)
    naive = (X**2).mean(axis=0) - X.mean(axis=0) ** 2
    assert np.max(np.abs(naive / ref.var_ - 1)) > 1e-6  # what one round would give
    if secure_aggregation:
        # Within the fixed point's M · 2^-33 of the unmasked fit, on the
        # mean and on the variance.
        plain = FederatedStandardScaler().fit(X, partitions=ids)
        masking = 4 * 2.0 ** -(FRACTION_BITS + 1)
        np.testing.assert_allclose(fed.mean_, plain.mean_, rtol=0, atol=masking)
        np.testing.assert_allclose(fed.var_, plain.var_, rtol=0, atol=2 * masking)
        np.testing.assert_allclose(fed.mean_, ref.mean_, rtol=1e-14)
    else:
        _assert_matches(fed, ref)


def test_a_dozen_orders_of_magnitude_above_the_spread():
    # At 1e9 a spread of 1e-3 is near the data's own rounding; x̄'s rounding
    # entered the variance squared (1e-8 relative) before the correction.
    X, y = make_blobs(3000, centers=5, n_features=6, random_state=0)
    X = X * np.logspace(-3, 3, 6) + 1e9
    ids = partition.label_dirichlet(y, n_clients=10, alpha=0.3, random_state=0)
    fed = FederatedStandardScaler().fit(X, partitions=ids)
    _assert_matches(fed, StandardScaler().fit(X), rtol=1e-12)


def test_constant_features_get_scale_one():
    rng = np.random.RandomState(1)
    X = np.column_stack(
        [rng.standard_normal(300), np.full(300, 5.0), np.full(300, 1e6 + 0.1)]
    )
    ids = np.arange(300) % 3
    ref = StandardScaler().fit(X)
    for secure in (False, True):
        fed = FederatedStandardScaler(secure_aggregation=secure).fit(X, partitions=ids)
        np.testing.assert_array_equal(fed.scale_[1:], [1.0, 1.0])
        np.testing.assert_array_equal(ref.scale_[1:], [1.0, 1.0])
        assert np.all(fed.var_[1:] <= 3 * 2.0**-FRACTION_BITS)
        # x − x̄ of a constant at 1e6 is the mean's rounding, 1e-9.
        np.testing.assert_allclose(fed.transform(X)[:, 1:], 0.0, atol=1e-8)
    np.testing.assert_allclose(fed.scale_[0], ref.scale_[0], rtol=1e-9)


def test_sparse_input_is_scaled_not_centered():
    X, _ = _data()
    X[np.abs(X) < 2] = 0.0
    Xs = sp.csr_matrix(X)
    ids = np.arange(len(X)) % 5
    fed = FederatedStandardScaler(with_mean=False).fit(Xs, partitions=ids)
    ref = StandardScaler(with_mean=False).fit(Xs)
    _assert_matches(fed, ref)
    out = fed.transform(Xs)
    assert sp.issparse(out) and out.nnz == Xs.nnz
    np.testing.assert_allclose(out.toarray(), ref.transform(Xs).toarray(), rtol=1e-10)
    np.testing.assert_allclose(fed.inverse_transform(out).toarray(), X, rtol=1e-12)
    # CSR and dense rows give the same statistics.
    dense = FederatedStandardScaler(with_mean=False).fit(X, partitions=ids)
    np.testing.assert_allclose(dense.var_, fed.var_, rtol=1e-12)
    with pytest.raises(ValueError, match="with_mean=False"):
        FederatedStandardScaler().fit(Xs, partitions=ids)
    with pytest.raises(ValueError, match="with_mean=False"):
        FederatedStandardScaler().fit(X, partitions=ids).transform(Xs)


@pytest.mark.parametrize(
    "with_mean, with_std", [(True, True), (True, False), (False, True), (False, False)]
)
def test_options_match_standard_scaler(with_mean, with_std):
    X, _ = _data()
    ids = np.arange(len(X)) % 3
    fed = FederatedStandardScaler(with_mean=with_mean, with_std=with_std).fit(
        X, partitions=ids
    )
    ref = StandardScaler(with_mean=with_mean, with_std=with_std).fit(X)
    for name in ("mean_", "var_", "scale_"):
        a, b = getattr(fed, name), getattr(ref, name)
        assert (a is None) == (b is None), name
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    assert fed.n_samples_seen_ == len(X)
    np.testing.assert_allclose(fed.transform(X), ref.transform(X), atol=1e-9)
    np.testing.assert_allclose(fed.inverse_transform(fed.transform(X)), X, atol=1e-9)


def test_float32_rows_stay_float32():
    X, _ = _data()
    X32 = X.astype(np.float32)
    ids = np.arange(len(X)) % 3
    fed = FederatedStandardScaler().fit(X32, partitions=ids)
    ref = StandardScaler().fit(X32)
    assert fed.transform(X32).dtype == np.float32
    assert fed.mean_.dtype == np.float64
    np.testing.assert_allclose(fed.var_, ref.var_, rtol=1e-6)


def test_copy_false_scales_in_place():
    X, _ = _data()
    fed = FederatedStandardScaler(copy=False).fit(X, partitions=4)
    Z = X.copy()
    out = fed.transform(Z)
    assert out is Z
    np.testing.assert_allclose(out.mean(axis=0), 0.0, atol=1e-9)


# -- the ledger ----------------------------------------------------------------


def _floats(log, name, direction):
    """Floats each client sent (upload) or received (download) in the
    rounds called ``name``."""
    (record,) = [r for r in log if r.name == name and r.direction == direction]
    return record.floats


@pytest.mark.parametrize("with_std", [True, False])
def test_ledger_by_formula(with_std):
    X, _ = _data()
    n, d = X.shape
    ids = np.arange(n) % 5
    log = (
        FederatedStandardScaler(with_std=with_std).fit(X, partitions=ids).communication_
    )
    table = {(r["name"], r["disclosure"]) for r in log.disclosure()}
    rounds = [("scaler mean", "sum_only")]
    if with_std:
        rounds.append(("scaler spread", "sum_only"))
    assert table == set(rounds)
    assert log.n_upload_rounds == len(rounds)
    # Mean: N down (1 float), n_m and Σ x / N up (1 + d).
    assert _floats(log, "scaler mean", "download") == (1,) * 5
    assert _floats(log, "scaler mean", "upload") == (1 + d,) * 5
    if with_std:
        # Spread: N and x̄ down (1 + d), Σ (x − x̄) / N and Σ (x − x̄)² / N
        # up (2d).
        assert _floats(log, "scaler spread", "download") == (1 + d,) * 5
        assert _floats(log, "scaler spread", "upload") == (2 * d,) * 5
    assert log.raw_rows == 0


def test_neither_option_runs_no_round():
    X, _ = _data()
    est = FederatedStandardScaler(with_mean=False, with_std=False)
    with pytest.warns(UserWarning, match="nothing to mask"):
        est.set_params(secure_aggregation=True).fit(X, partitions=3)
    assert est.communication_.n_rounds == 0
    assert est.n_samples_seen_ == len(X)
    np.testing.assert_array_equal(est.transform(X), X)


def test_refusing_raw_rows_changes_nothing():
    X, y = _data()
    ids = partition.label_dirichlet(y, n_clients=5, alpha=0.3, random_state=0)
    plain = FederatedStandardScaler().fit(X, partitions=ids)
    refused = FederatedStandardScaler(raw_rows="refuse").fit(X, partitions=ids)
    np.testing.assert_array_equal(refused.scale_, plain.scale_)
    assert refused.communication_.raw_rows == 0


# -- secure aggregation ----------------------------------------------------------


def test_masking_gives_the_same_statistics():
    X, y = _data()
    # A feature whose spread (1e-7) is far below the first word's 2^-32:
    # the remainder word carries it, so it is scaled as in the plain fit.
    X = X.copy()
    X[:, 0] = 1e-7 * np.random.RandomState(0).standard_normal(len(X))
    ids = partition.label_dirichlet(y, n_clients=6, alpha=0.3, random_state=0)
    plain = FederatedStandardScaler().fit(X, partitions=ids)
    masked = FederatedStandardScaler(secure_aggregation=True).fit(X, partitions=ids)
    assert 0.5e-7 < plain.scale_[0] < 2e-7
    # Numbers below 2^-11 keep their bits down to 2^-64 only: each mean
    # within 1e-12 of its feature's spread, each variance (a sum of 6
    # clients' shares) within 6 · 2^-64 besides rounding, where the first
    # word alone (2^-32) would have called the feature constant.
    np.testing.assert_array_less(
        np.abs(masked.mean_ - plain.mean_), 1e-12 * plain.scale_
    )
    np.testing.assert_allclose(masked.var_, plain.var_, rtol=1e-12, atol=6 * 2.0**-64)
    np.testing.assert_allclose(masked.scale_[0], plain.scale_[0], rtol=1e-4)
    np.testing.assert_allclose(masked.scale_[1:], plain.scale_[1:], rtol=1e-12)
    assert masked.n_samples_seen_ == plain.n_samples_seen_
    log = masked.communication_
    names = [r["name"] for r in log.disclosure()]
    assert names[0] == "secure aggregation keys"
    assert {"scaler mean", "scaler spread"} <= set(names)


# -- failing clients ----------------------------------------------------------------


def test_a_failing_client_is_left_out_with_drop(monkeypatch):
    from skfed._engine._transports import _common

    X, _ = _data()
    ids = np.arange(len(X)) % 4
    original = _common._run_sequential_step

    def failing(call, client, storage, message):
        if client.client_id == 2:
            return _common.StepFailure(RuntimeError("disk on fire"), "")
        return original(call, client, storage, message)

    monkeypatch.setattr(_common, "_run_sequential_step", failing)
    fed = FederatedStandardScaler(on_client_error="drop").fit(X, partitions=ids)
    assert set(fed.failed_clients_) == {2}
    _assert_matches(fed, StandardScaler().fit(X[ids != 2]))
    with pytest.raises(RuntimeError, match="disk on fire"):
        FederatedStandardScaler().fit(X, partitions=ids)


# -- pipelines and searches -------------------------------------------------------


def test_pipeline_in_front_of_kfed_routes_partitions():
    X, y = _data()
    ids = partition.label_dirichlet(y, n_clients=5, alpha=0.5, random_state=0)
    scaler = FederatedStandardScaler().fit(X, partitions=ids)
    alone = KFed(n_clusters=5, random_state=0).fit(scaler.transform(X), partitions=ids)
    with sklearn.config_context(enable_metadata_routing=True):
        pipe = make_pipeline(
            FederatedStandardScaler(), KFed(n_clusters=5, random_state=0)
        )
        pipe.fit(X, partitions=ids)
    assert pipe[0].n_clients_ == 5 and pipe[-1].n_clients_ == 5
    np.testing.assert_allclose(pipe[0].scale_, scaler.scale_, rtol=1e-14)
    np.testing.assert_array_equal(pipe[-1].labels_, alone.labels_)
    # Without routing, each step is named.
    pipe = make_pipeline(FederatedStandardScaler(), KFed(n_clusters=5, random_state=0))
    pipe.fit(X, federatedstandardscaler__partitions=ids, kfed__partitions=ids)
    np.testing.assert_array_equal(pipe[-1].labels_, alone.labels_)
    assert adjusted_rand_score(pipe.predict(X), y) > 0.9


def test_grid_search_with_leave_clients_out_splits():
    X, y = _data(n=400)
    ids = np.arange(len(X)) % 4
    with sklearn.config_context(enable_metadata_routing=True):
        pipe = make_pipeline(FederatedStandardScaler(), KFed(random_state=0))
        search = GridSearchCV(
            pipe,
            {"kfed__n_clusters": [3, 5]},
            cv=LeaveOneGroupOut().set_split_request(groups="partitions"),
        )
        search.fit(X, partitions=ids)
    assert len(search.cv_results_["split3_test_score"]) == 2
    # Every fold's scaler saw the three clients it trained on.
    assert search.best_estimator_[0].n_clients_ == 4
    with sklearn.config_context(enable_metadata_routing=True):
        cv = GroupKFold(n_splits=2).set_split_request(groups="partitions")
        search = GridSearchCV(pipe, {"kfed__n_clusters": [5]}, cv=cv)
        search.fit(X, partitions=ids)


def test_kmeans_on_federated_scaling_equals_pooled_scaling():
    # The pipeline's first step no longer needs the pooled rows: the same
    # scaled data, so the same k-means.
    X, _ = _data()
    fed = FederatedStandardScaler().fit(X, partitions=6).transform(X)
    ref = StandardScaler().fit_transform(X)
    a = KMeans(5, n_init=3, random_state=0).fit(fed)
    b = KMeans(5, n_init=3, random_state=0).fit(ref)
    np.testing.assert_array_equal(a.labels_, b.labels_)


# -- differential privacy ------------------------------------------------------------


def test_infinite_epsilon_gives_the_clipped_statistics():
    X, _ = _data(d=3)
    lower, upper = np.array([-10.0, -100.0, 2.99]), np.array([10.0, 100.0, 3.01])
    ids = np.arange(len(X)) % 4
    dp = DifferentialPrivacy(epsilon=float("inf"), bounds=(lower, upper))
    fed = FederatedStandardScaler(privacy=dp).fit(X, partitions=ids)
    clipped = np.clip(X, lower, upper)
    np.testing.assert_allclose(fed.mean_, clipped.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(fed.var_, clipped.var(axis=0), rtol=1e-10)
    assert fed.n_samples_seen_ == len(X)
    log = fed.communication_
    assert [(r["name"], r["noised"]) for r in log.disclosure()] == [
        ("scaler statistics", 1)
    ]
    # Down the bounds (2d), up Σ v, Σ v² and the count (2d + 1) per client.
    assert _floats(log, "scaler statistics", "download") == (2 * 3,) * 4
    assert _floats(log, "scaler statistics", "upload") == (2 * 3 + 1,) * 4


@pytest.mark.parametrize("with_std", [True, False])
def test_noise_scale_by_formula(monkeypatch, with_std):
    X, _ = _data(d=3)
    # One feature of zero width: known constant, so not in the sensitivity.
    lower, upper = np.array([-20.0, -200.0, 3.0]), np.array([20.0, 200.0, 3.0])
    stds = []
    original = scaler_protocol.gaussian_noise

    def recording(value, std):
        stds.append(std)
        return original(value, std)

    monkeypatch.setattr(scaler_protocol, "gaussian_noise", recording)
    dp = DifferentialPrivacy(epsilon=1.0, bounds=(lower, upper))
    fed = FederatedStandardScaler(privacy=dp, with_std=with_std, random_state=0)
    fed.fit(X, partitions=np.arange(len(X)) % 3)
    # The multiplier the accountant calibrates for the fit's one release.
    z = Accountant(dp, 1, estimator="test").noise_multiplier
    # Replace-one: 2√d' for Σ v, √d' for Σ v², the public count unnoised.
    n_free = 2
    expected = z * math.sqrt((5 if with_std else 4) * n_free)
    np.testing.assert_allclose(stds, [expected] * 3, rtol=1e-12)
    epsilon, delta = fed.privacy_spent_
    assert epsilon == pytest.approx(1.0, rel=1e-3) and delta == 1e-5
    np.testing.assert_array_equal(fed.mean_[2], 3.0)
    if with_std:
        assert fed.scale_[2] == 1.0


def test_the_noise_in_the_mean_has_the_spread_the_formula_gives():
    # Each of M clients adds N(0, (zΔ)²) to Σ v: the mean's error in box
    # units has standard deviation zΔ√M / N (data centred in the box).
    rng = np.random.RandomState(0)
    X = rng.uniform(-1, 1, size=(400, 2))
    X -= X.mean(axis=0)
    ids = np.arange(400) % 4
    z = 0.5
    dp = DifferentialPrivacy(epsilon=1e3, noise_multiplier=z, bounds=(-1.0, 1.0))
    errors = np.array(
        [
            FederatedStandardScaler(privacy=dp, with_std=False, random_state=seed)
            .fit(X, partitions=ids)
            .mean_
            for seed in range(150)
        ]
    )
    expected = z * math.sqrt(4 * 2) * math.sqrt(4) / 400
    measured = errors.std(axis=0)
    np.testing.assert_allclose(measured, expected, rtol=0.2)


def test_privacy_with_nothing_to_fit_spends_nothing():
    X, _ = _data(d=3)
    dp = DifferentialPrivacy(bounds=(-1e4, 1e4))
    est = FederatedStandardScaler(with_mean=False, with_std=False, privacy=dp)
    est.fit(X, partitions=3)
    assert est.privacy_spent_ == (0.0, 0.0)
    assert est.communication_.n_rounds == 0


def test_privacy_without_bounds_warns_and_masks():
    X, _ = _data(d=3)
    with pytest.warns(PrivacyLeakWarning):
        fed = FederatedStandardScaler(
            privacy=DifferentialPrivacy(epsilon=float("inf")), secure_aggregation=True
        ).fit(X, partitions=3)
    np.testing.assert_allclose(fed.mean_, X.mean(axis=0), rtol=1e-9)
    np.testing.assert_allclose(fed.var_, X.var(axis=0), rtol=1e-8)


# -- bad input -------------------------------------------------------------------


def test_bad_input_is_refused_clearly():
    X, _ = _data()
    with pytest.raises(ValueError, match="NaN"):
        Z = X.copy()
        Z[3, 1] = np.nan
        FederatedStandardScaler().fit(Z, partitions=3)
    fed = FederatedStandardScaler().fit(X, partitions=3)
    with pytest.raises(ValueError, match="features"):
        fed.transform(X[:, :2])
    with pytest.raises(NotFittedError):
        FederatedStandardScaler().transform(X)
    with pytest.raises(ValueError, match="privacy"):
        FederatedStandardScaler(privacy="on").fit(X, partitions=3)
    with pytest.raises(ValueError, match="bounds"):
        FederatedStandardScaler(
            privacy=DifferentialPrivacy(bounds=(0.0, 1.0, 2.0))
        ).fit(X, partitions=3)
    with pytest.raises(ValueError, match="lower <= upper"):
        FederatedStandardScaler(privacy=DifferentialPrivacy(bounds=(1.0, 0.0))).fit(
            X, partitions=3
        )
    with pytest.raises(ValueError, match="overflow or underflow"):
        FederatedStandardScaler().fit(X * 1e300, partitions=3)
    with pytest.raises(ValueError, match="partitions"):
        FederatedStandardScaler().fit(X, partitions=np.arange(5))


def test_what_cannot_be_squared_is_refused():
    X, _ = _data()
    with pytest.raises(ValueError, match="overflow or underflow.*float64 data"):
        FederatedStandardScaler().fit((X * 1e30).astype(np.float32), partitions=3)
    fed = FederatedStandardScaler().fit(X, partitions=3)
    # Checked on what comes out: a scaled row beyond range, not the input.
    with pytest.raises(ValueError, match="overflow or underflow"):
        fed.transform(X * 1e300)
    wide = FederatedStandardScaler().fit(X * 1e140, partitions=3)
    assert np.all(np.abs(wide.transform(X * 1e140)) < 10)


# --------------------------------------------------------------------------
# The rounds the estimator declares


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"with_std": False},
        {"with_mean": False},
        {"with_mean": False, "with_std": False},
        {"secure_aggregation": True},
        {"privacy": DifferentialPrivacy(epsilon=4.0, delta=1e-6, bounds=(-9, 9))},
        {
            "with_std": False,
            "privacy": DifferentialPrivacy(epsilon=4.0, delta=1e-6, bounds=(-9, 9)),
        },
    ],
)
def test_a_fit_runs_the_rounds_it_declares(params, rounds_run):
    X, _ = _data(d=3)
    est = FederatedStandardScaler(random_state=0, **params).fit(X, partitions=3)
    assert_runs_its_declared_rounds(est, rounds_run)
    noised = sum(r["noised"] for r in est.communication_.disclosure())
    assert sum(r.disclosure.noised for r in est._rounds()) == noised
