"""The row-free path of FederatedRKHSClassifier on random Fourier features
(method="random_features", features="random"): accuracy against SVC, what
crosses the network, masking, the penalty's generalized cross-validation
against a centralized computation, invariances, differential privacy and
bad input."""

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_digits, make_blobs
from sklearn.linear_model import RidgeCV
from sklearn.model_selection import StratifiedKFold
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC
from sklearn.utils.estimator_checks import parametrize_with_checks

from skfed import FederatedRKHSClassifier
from skfed._engine._ledger import SUM_ONLY
from skfed.classification._solvers._feature_ridge import (
    gcv_score,
)
from skfed.kernel._multiwidth import multiwidth_map
from skfed.kernel._private_features import feature_blocks
from skfed.partition import iid, label_dirichlet
from skfed.privacy import DifferentialPrivacy


def _pooled_features(clf, X):
    omega, offset = multiwidth_map(
        clf._feature_seed,
        X.shape[1],
        clf.n_random_features_,
        tuple(float(w) for w in clf.widths_),
    )
    return np.vstack([rows.copy() for _, rows in feature_blocks(X, omega, offset)])


def _targets(clf, y):
    T = np.where(y[:, None] == clf.classes_[None, :], 1.0, -1.0)
    return T[:, 1:] if len(clf.classes_) == 2 else T


def _scaled(load):
    X, y = load(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def _blobs(n=300, centers=3, seed=0):
    X, y = make_blobs(n, centers=centers, n_features=5, random_state=seed)
    return StandardScaler().fit_transform(X), y


# -- accuracy ------------------------------------------------------------------


@pytest.mark.parametrize("partition", ["iid", "dirichlet"])
@pytest.mark.parametrize(
    "load", [load_breast_cancer, load_digits], ids=["bc", "digits"]
)
def test_accuracy_close_to_svc_on_ten_clients(load, partition):
    # SVC at its defaults (gamma="scale", C=1) against the row-free path at
    # its defaults (raw_rows="refuse" would cap its features at the
    # smallest client's rows, 45 here; see the test below), each 5-fold on scaled
    # data. Measured: breast_cancer 0.974 vs 0.977, digits 0.975 vs 0.981
    # (both partitions: the model is made of sums, so the split of rows
    # over clients moves it by rounding only). The target is one point; the
    # test allows 1.5 so that fold noise (one test sample of breast_cancer
    # is 0.9 point of a fold) does not fail it, while halving the features
    # (about 2 points on digits) or a default penalty would.
    X, y = load(return_X_y=True)
    ours, svc = [], []
    for train, test in StratifiedKFold(5, shuffle=True, random_state=0).split(X, y):
        scaler = StandardScaler().fit(X[train])
        X_train, X_test = scaler.transform(X[train]), scaler.transform(X[test])
        if partition == "iid":
            parts = iid(len(train), 10, random_state=0)
        else:
            parts = label_dirichlet(y[train], 10, alpha=0.3, random_state=0)
        clf = FederatedRKHSClassifier(
            features="random", method="random_features", random_state=0
        )
        clf.fit(X_train, y[train], partitions=parts)
        assert clf.method_ == "random_features"
        ours.append(clf.score(X_test, y[test]))
        svc.append(SVC().fit(X_train, y[train]).score(X_test, y[test]))
    assert np.mean(ours) >= np.mean(svc) - 0.015, (np.mean(ours), np.mean(svc))


# -- what crosses the network ----------------------------------------------------


@pytest.mark.parametrize("n_classes", [2, 3])
def test_ledger_uploads_by_formula_and_no_raw_rows(n_classes):
    X, y = _blobs(300, centers=n_classes)
    d, n_clients, n_widths = X.shape[1], 4, 5
    clf = FederatedRKHSClassifier(
        features="random", raw_rows="refuse", n_random_features=60, random_state=0
    ).fit(X, y, partitions=np.arange(300) % n_clients)
    D = clf.n_random_features_
    assert D == 60  # a multiple of 2 · 5 widths already, under 75 rows
    log = clf.communication_
    assert log.raw_rows == 0
    kinds = {r["name"]: r["disclosure"] for r in log.disclosure()}
    assert kinds["random feature statistics"] == SUM_ONLY
    assert "critical samples" not in kinds
    ups = {r.name: r for r in log.records if r.direction == "upload"}
    stats = ups["random feature statistics"]
    assert stats.floats == (D * (D + 1) // 2 + D * n_classes + n_classes,) * n_clients
    assert ups["data scale"].floats == (d + 2,) * n_clients
    downs = {r.name: r for r in log.records if r.direction == "download"}
    # The seed and the widths, to every client.
    assert downs["random feature statistics"].floats == (1 + n_widths,) * n_clients
    assert log.upload_floats == n_clients * (D * (D + 1) // 2 + (D + 1) * n_classes) + (
        n_clients * (d + 2)
    )


def test_refusing_clients_need_as_many_distinct_rows_as_features():
    # 4 clients of 75 rows: the default features are capped at 60 (a
    # multiple of 2 · 5 widths, one below the rows), and the model is the
    # one allowing rows.
    X, y = _blobs(300, centers=3)
    parts = np.arange(300) % 4
    refused = FederatedRKHSClassifier(
        features="random", raw_rows="refuse", random_state=0
    )
    refused.fit(X, y, partitions=parts)
    assert refused.n_random_features_ == 60
    assert refused.communication_.raw_rows == 0
    allowed = FederatedRKHSClassifier(
        features="random",
        method="random_features",
        n_random_features=60,
        random_state=0,
    ).fit(X, y, partitions=parts)
    np.testing.assert_allclose(
        refused.decision_function(X), allowed.decision_function(X), atol=1e-10
    )
    # More features than a client's rows: its Gram would determine them.
    with pytest.raises(ValueError, match="distinct row"):
        FederatedRKHSClassifier(
            features="random", raw_rows="refuse", n_random_features=100, random_state=0
        ).fit(X, y, partitions=parts)


def test_a_refusing_client_leaves_out_a_class_it_holds_one_row_of():
    X, y = _blobs(300, centers=3)
    parts = np.arange(300) % 2
    # Client 0 holds a single row of class 2: its class sum would be that
    # row's features.
    lone = np.flatnonzero((parts == 0) & (y == 2))
    parts[lone[1:]] = 1
    kw = {"n_random_features": 60, "random_state": 0}
    refused = FederatedRKHSClassifier(features="random", raw_rows="refuse", **kw).fit(
        X, y, partitions=parts
    )
    allowed = FederatedRKHSClassifier(features="random", method="random_features", **kw)
    allowed.fit(X, y, partitions=parts)
    assert allowed.communication_.raw_rows == 1  # counted by the ledger
    assert refused.communication_.raw_rows == 0
    keep = np.ones(300, dtype=bool)
    keep[lone[0]] = False
    # The refusing fit is the allowing fit without that row (same widths).
    without = FederatedRKHSClassifier(
        features="random", method="random_features", widths=refused.widths_, **kw
    ).fit(X[keep], y[keep], partitions=parts[keep])
    without._feature_seed = refused._feature_seed
    np.testing.assert_allclose(refused.alpha_, without.alpha_, rtol=1e-6)


def test_features_are_rounded_up_to_even_shares_of_the_widths():
    X, y = _blobs(120)
    clf = FederatedRKHSClassifier(
        features="random",
        method="random_features",
        widths=3,
        n_random_features=50,
        random_state=0,
    ).fit(X, y, partitions=2)
    assert clf.n_random_features_ == 54
    assert clf.feature_coef_.shape == (3, 54)


def test_auto_features_grow_with_the_data_within_bounds():
    X, y = _blobs(300)
    clf = FederatedRKHSClassifier(
        features="random", method="random_features", random_state=0
    ).fit(X, y, partitions=3)
    assert clf.n_random_features_ == 1000


def test_secure_aggregation_gives_the_same_model():
    # Overlapping blobs, so that GCV's penalty is well defined (on separable
    # blobs it sits near the grid's floor, where the GCV curve is flat and
    # the masking's rounding moves λ by 1%, the scores by 5e-5).
    X, y = make_blobs(400, centers=3, n_features=5, cluster_std=3.0, random_state=0)
    X = StandardScaler().fit_transform(X)
    parts = np.arange(400) % 5
    kw = {"method": "random_features", "n_random_features": 200, "random_state": 0}
    plain = FederatedRKHSClassifier(features="random", **kw).fit(X, y, partitions=parts)
    masked = FederatedRKHSClassifier(
        features="random", secure_aggregation=True, **kw
    ).fit(X, y, partitions=parts)
    kinds = {d["name"]: d["disclosure"] for d in masked.communication_.disclosure()}
    assert kinds["random feature statistics"] == SUM_ONLY
    assert "secure aggregation keys" in kinds
    # Masked sums are exact to 2^-32 per number; the solve amplifies it by
    # the conditioning of C + λI, far below these tolerances.
    np.testing.assert_allclose(masked.widths_, plain.widths_, rtol=1e-8)
    assert masked.alpha_ == pytest.approx(plain.alpha_, rel=1e-6)
    np.testing.assert_allclose(
        masked.decision_function(X), plain.decision_function(X), atol=1e-7
    )
    np.testing.assert_array_equal(masked.predict(X), plain.predict(X))


# -- the penalty ---------------------------------------------------------------


def test_gcv_formula_matches_the_explicit_hat_matrix():
    X, y = _blobs(150, centers=3)
    clf = FederatedRKHSClassifier(
        features="random",
        method="random_features",
        n_random_features=60,
        random_state=0,
    ).fit(X, y, partitions=3)
    Z, T = _pooled_features(clf, X), _targets(clf, y)
    n = len(X)
    Zc, Tc = Z - Z.mean(0), T - T.mean(0)
    s, V = np.linalg.eigh(Zc.T @ Zc)
    s = np.clip(s, 0, None)
    projected = np.sum((V.T @ (Zc.T @ Tc)) ** 2, axis=1)
    for alpha in [1e-3, 1e-1, clf.alpha_, 10.0]:
        H = Zc @ np.linalg.solve(Zc.T @ Zc + alpha * np.eye(Z.shape[1]), Zc.T)
        H += 1.0 / n  # the intercept
        rss = np.sum(((np.eye(n) - H) @ T) ** 2)
        explicit = n * rss / (n - np.trace(H)) ** 2
        ours = gcv_score(alpha, s, projected, float(np.sum(Tc**2)), n)
        assert ours == pytest.approx(explicit, rel=1e-6)


@pytest.mark.parametrize(
    "load", [load_breast_cancer, load_digits], ids=["bc", "digits"]
)
def test_penalty_against_centralized_leave_one_out(load):
    # sklearn's RidgeCV (gcv_mode="eigen") computes the exact leave-one-out
    # error on the pooled features: GCV replaces each leverage by their
    # mean, so the penalties differ a little, but the one chosen from the
    # sums must be near-optimal for leave-one-out too.
    X, y = _scaled(load)
    clf = FederatedRKHSClassifier(
        features="random",
        method="random_features",
        n_random_features=400,
        random_state=0,
    ).fit(X, y, partitions=10)
    Z, T = _pooled_features(clf, X), _targets(clf, y)
    alphas = clf.alpha_ * np.geomspace(1e-2, 1e2, 41)
    ridge = RidgeCV(alphas=alphas, gcv_mode="eigen", store_cv_results=True)
    ridge.fit(Z, T)
    loo = ridge.cv_results_.reshape(len(Z), -1, len(alphas)).sum(axis=1).mean(0)
    assert loo[20] <= 1.02 * loo.min()
    assert clf.alpha_ / 10 <= ridge.alpha_ <= 10 * clf.alpha_
    # And the model is that ridge's at the chosen penalty.
    ridge_at = RidgeCV(alphas=[clf.alpha_]).fit(Z, T)
    np.testing.assert_allclose(
        clf.feature_coef_, np.atleast_2d(ridge_at.coef_), rtol=1e-5, atol=1e-8
    )
    np.testing.assert_allclose(clf.intercept_, ridge_at.intercept_, atol=1e-8)


# -- invariances ---------------------------------------------------------------


def test_permuting_or_renaming_clients_and_splitting_differently():
    X, y = _blobs(300, centers=3)
    kw = {"method": "random_features", "n_random_features": 200, "random_state": 0}
    parts = np.arange(300) % 5
    base = FederatedRKHSClassifier(features="random", **kw).fit(X, y, partitions=parts)
    order = np.random.RandomState(1).permutation(300)
    names = np.array(["e", "a", "d", "b", "c"])
    moved = FederatedRKHSClassifier(features="random", **kw).fit(
        X[order], y[order], partitions=names[parts[order]]
    )
    np.testing.assert_allclose(
        moved.decision_function(X), base.decision_function(X), atol=1e-9
    )
    # Label skew or one client: the same sums, so the same model.
    skewed = label_dirichlet(y, 5, alpha=0.3, random_state=0)
    for other in (skewed, None):
        fit = FederatedRKHSClassifier(features="random", **kw).fit(
            X, y, partitions=other
        )
        np.testing.assert_allclose(
            fit.decision_function(X), base.decision_function(X), atol=1e-8
        )


def test_binary_decision_function_is_one_column_for_classes_1():
    X, y = _blobs(200, centers=2)
    labels = np.array(["no", "yes"])[y]
    clf = FederatedRKHSClassifier(
        features="random", method="random_features", random_state=0
    ).fit(X, labels, partitions=4)
    scores = clf.decision_function(X)
    assert scores.shape == (200,)
    np.testing.assert_array_equal(
        clf.predict(X), clf.classes_[(scores > 0).astype(int)]
    )
    np.testing.assert_array_equal(clf.classes_, ["no", "yes"])
    assert clf.score(X, labels) > 0.95
    assert not hasattr(clf, "predict_proba")


def test_float32_input_gives_float32_scores():
    X, y = _blobs(200)
    clf = FederatedRKHSClassifier(
        features="random", method="random_features", random_state=0
    ).fit(X.astype(np.float32), y, partitions=2)
    assert clf.decision_function(X.astype(np.float32)).dtype == np.float32


# -- differential privacy ------------------------------------------------------


def test_private_fit_spends_its_budget_and_noises_the_one_round():
    X, y = _scaled(load_breast_cancer)
    widths = np.sqrt(2 * X.shape[1]) * np.geomspace(0.2, 1, 5)
    dp = DifferentialPrivacy(epsilon=8.0, delta=1e-5)
    # The noise is fresh on every fit: at these settings 10 fits scored 0.93
    # to 0.95 on the training rows (0.90 to 0.95 with 200 features).
    clf = FederatedRKHSClassifier(
        features="random",
        privacy=dp,
        widths=widths,
        n_random_features=50,
        random_state=0,
    ).fit(X, y, partitions=5)
    assert clf.method_ == "random_features"
    eps, delta = clf.privacy_spent_
    assert 0 < eps <= 8.0 * (1 + 1e-6) and delta == 1e-5
    (record,) = clf.communication_.disclosure()  # explicit widths: one round
    assert record["name"] == "random feature statistics"
    assert record["noised"] == 2
    assert clf.communication_.raw_rows == 0
    # 569 rows at epsilon 8: noisy, but far better than chance (0.63).
    assert clf.score(X, y) > 0.85
    plain = FederatedRKHSClassifier(
        features="random",
        method="random_features",
        widths=widths,
        n_random_features=50,
        random_state=0,
    ).fit(X, y, partitions=5)
    assert clf.alpha_ > plain.alpha_  # floored at the noise's scale


def test_private_auto_features_follow_the_noise():
    # Few features where the noise is large (300 rows: the least, 50), more
    # where it is small (a 100 times larger epsilon), never above 300.
    X, y = _blobs(300)
    dp = DifferentialPrivacy(epsilon=8.0, delta=1e-5)
    clf = FederatedRKHSClassifier(
        features="random", privacy=dp, widths=[1.0, 2.0], random_state=0
    )
    clf.fit(X, y, partitions=3)
    assert clf.n_random_features_ == 52  # 50, rounded up to a multiple of 4
    assert clf.score(X, y) > 0.9
    X, y = _blobs(3000)
    dp = DifferentialPrivacy(epsilon=800.0, delta=1e-5)
    clf = FederatedRKHSClassifier(
        features="random", privacy=dp, widths=[1.0, 2.0], random_state=0
    )
    clf.set_params(secure_aggregation=True)
    assert clf.fit(X, y, partitions=3).n_random_features_ == 300


def test_private_fit_needs_explicit_widths():
    X, y = _blobs(100)
    clf = FederatedRKHSClassifier(
        features="random", privacy=DifferentialPrivacy(epsilon=1.0)
    )
    with pytest.raises(ValueError, match="explicit widths"):
        clf.fit(X, y, partitions=2)


# -- refusals and bad input ----------------------------------------------------


def test_refusals_name_the_row_free_alternative():
    X, y = _blobs(100)
    with pytest.raises(ValueError, match="method='random_features'"):
        FederatedRKHSClassifier(
            features="random", method="critical_samples", raw_rows="refuse"
        ).fit(X, y, partitions=2)
    with pytest.raises(ValueError, match="method='random_features'"):
        FederatedRKHSClassifier(
            features="random",
            method="critical_samples",
            privacy=DifferentialPrivacy(epsilon=1.0),
        ).fit(X, y, partitions=2)


@pytest.mark.parametrize(
    "params, message",
    [
        ({"n_random_features": 1}, "n_random_features"),
        ({"n_random_features": "many"}, "n_random_features"),
        ({"n_random_features": 100_000}, "at most 16384"),
        ({"method": "rows"}, "method"),
        ({"widths": [0.0, 1.0]}, "widths"),
    ],
)
def test_bad_parameters_are_refused_with_a_reason(params, message):
    X, y = _blobs(100)
    clf = FederatedRKHSClassifier(
        features="random", method="random_features"
    ).set_params(**params)
    with pytest.raises(ValueError, match=message):
        clf.fit(X, y, partitions=2)


def test_one_class_and_bad_labels_are_refused():
    X, _ = _blobs(100)
    clf = FederatedRKHSClassifier(features="random", method="random_features")
    with pytest.raises(ValueError, match="only one class"):
        clf.fit(X, np.zeros(100), partitions=2)
    with pytest.raises(ValueError, match="Unknown label type"):
        clf.fit(X, np.linspace(0, 1, 100), partitions=2)


def test_predicting_on_other_feature_count_is_refused():
    X, y = _blobs(100)
    clf = FederatedRKHSClassifier(features="random", method="random_features").fit(
        X, y, partitions=2
    )
    with pytest.raises(ValueError, match="features"):
        clf.predict(X[:, :3])


# -- scikit-learn's checks with the row-free path's defaults -------------------


@parametrize_with_checks(
    [FederatedRKHSClassifier(features="random", raw_rows="refuse")]
)
def test_sklearn_compatible_row_free(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        check(estimator)
