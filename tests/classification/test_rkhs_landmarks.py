"""The row-free path of FederatedRKHSClassifier on Nyström features of the
clients' local centers (the default map of method="random_features"):
accuracy against SVC and against the centralized ridge on the same
features, what crosses the network, masking, invariances and refusals."""

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_digits, make_classification
from sklearn.linear_model import RidgeClassifier
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from skfed import FederatedRKHSClassifier
from skfed.classification._protocols._landmark_features import _gammas
from skfed.cluster._protocols._kernel_kmeans_landmarks import (
    landmark_features,
    landmark_kernel,
    local_landmarks,
)
from skfed.partition import iid, label_dirichlet
from skfed.privacy import DifferentialPrivacy


def _noisy(n=2400, seed=0):
    X, y = make_classification(n + 1000, flip_y=0.1, random_state=seed)
    X = StandardScaler().fit_transform(X)
    return X[:n], y[:n], X[n:], y[n:]


def _features(clf, X):
    landmarks, center, whitening = clf._landmark_map
    gammas = _gammas(clf.widths_)
    return np.vstack(
        [z for _, z in landmark_features(X, landmarks, center, whitening, gammas)]
    )


@pytest.mark.parametrize("partition", ["iid", "dirichlet"])
def test_noisy_data_within_a_point_and_a_half_of_svc_without_a_row(partition):
    # Random Fourier features were 2.5 points below SVC on the noisy set at
    # D = 2,000; the landmarks follow the data.
    X, y, X_test, y_test = _noisy()
    if partition == "iid":
        parts = iid(len(X), 6, random_state=0)
    else:
        # Label skew with every client of 100 rows or more (a client of a
        # few rows refuses under raw_rows="refuse", whatever the map).
        parts = label_dirichlet(y, 6, alpha=0.3, random_state=1)
        assert np.bincount(parts).min() >= 100
    clf = FederatedRKHSClassifier(raw_rows="refuse", random_state=0)
    clf.fit(X, y, partitions=parts)
    svc = SVC().fit(X, y).score(X_test, y_test)
    assert clf.method_ == "random_features" and clf.features_ == "landmarks"
    assert clf.score(X_test, y_test) >= svc - 0.015
    assert clf.communication_.raw_rows == 0
    names = [(r["name"], r["disclosure"]) for r in clf.communication_.disclosure()]
    assert names == [
        ("data scale", "per_client"),
        ("landmark centers", "per_client"),
        ("landmark class statistics", "sum_only"),
    ]


def test_the_server_solves_the_centralized_ridge_on_the_same_features():
    # The summed statistics are the pooled ones: ridge on the pooled
    # features at the penalty GCV chose gives the same scores.
    X, y, X_test, _ = _noisy(900)
    clf = FederatedRKHSClassifier(method="random_features", random_state=0)
    clf.fit(X, y, partitions=iid(len(X), 3, random_state=0))
    ridge = RidgeClassifier(alpha=clf.alpha_).fit(_features(clf, X), y)
    np.testing.assert_allclose(
        clf.decision_function(X_test),
        ridge.decision_function(_features(clf, X_test)),
        rtol=1e-6,
        atol=1e-8,
    )


def test_the_map_is_the_nystroem_map_of_the_mean_kernel():
    # z(x)ᵀz(y) = k(x, L) K_LL⁺ k(L, y), exact on the landmarks themselves.
    X, y, _, _ = _noisy(600)
    clf = FederatedRKHSClassifier(method="random_features", random_state=0)
    clf.fit(X, y, partitions=3)
    L = clf.landmarks_
    Z = _features(clf, L)
    K = landmark_kernel(L, L, _gammas(clf.widths_))
    np.testing.assert_allclose(Z @ Z.T, K, atol=1e-6)


def test_landmarks_do_not_depend_on_the_labels():
    # The local centers are computed without labels: relabelling the rows
    # leaves them, and the upload of the centers, as they are.
    X, y, _, _ = _noisy(600)
    parts = iid(len(X), 3, random_state=0)
    a = FederatedRKHSClassifier(method="random_features", random_state=0)
    a.fit(X, y, partitions=parts)
    b = FederatedRKHSClassifier(method="random_features", random_state=0)
    b.fit(X, np.random.RandomState(1).permutation(y), partitions=parts)
    np.testing.assert_array_equal(a.landmarks_, b.landmarks_)


def test_uploads_by_formula():
    X, y = load_digits(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    parts = iid(len(X), 4, random_state=0)
    clf = FederatedRKHSClassifier(method="random_features", random_state=0)
    clf.fit(X, y, partitions=parts)
    D, d, K = clf.n_random_features_, X.shape[1], 10
    sizes = np.bincount(parts)
    # n_L = min(1000, N / 2, max(500, budget)) = 500 here, an equal share a
    # client, at most half its rows; a local cluster of fewer than two
    # distinct rows is merged before the upload.
    k_local = local_landmarks(500, sizes)
    n_landmarks = clf.landmarks_.shape[0]
    assert 0.7 * sum(k_local) <= n_landmarks <= sum(k_local) and D <= n_landmarks
    up = clf.communication_.floats_by_name("upload")
    assert up["landmark centers"] == n_landmarks * d
    assert up["landmark class statistics"] == 4 * (D * (D + 1) // 2 + D * K + K)
    assert clf.score(X, y) > 0.97


def test_clients_of_thousands_of_rows_upload_less_than_their_rows():
    # The budget keeps D(D+1)/2 + D K + K within the smallest client's
    # n_m (d + 1) floats once that leaves 500 landmarks or more.
    X, y = make_classification(24_000, n_features=40, flip_y=0.1, random_state=0)
    clf = FederatedRKHSClassifier(method="random_features", random_state=0)
    clf.fit(X, y, partitions=iid(len(X), 4, random_state=0))
    up = clf.communication_.floats_by_name("upload")
    per_client = up["landmark class statistics"] / 4
    assert 500 <= clf.n_random_features_ and per_client <= 6000 * 41


def test_masked_fit_is_the_plain_model():
    X, y, X_test, _ = _noisy(600)
    parts = iid(len(X), 3, random_state=0)
    plain = FederatedRKHSClassifier(method="random_features", random_state=0)
    masked = FederatedRKHSClassifier(
        method="random_features", secure_aggregation=True, random_state=0
    )
    plain.fit(X, y, partitions=parts)
    masked.fit(X, y, partitions=parts)
    np.testing.assert_allclose(
        masked.decision_function(X_test),
        plain.decision_function(X_test),
        rtol=0,
        atol=1e-9,
    )


def test_renaming_clients_gives_the_same_model():
    X, y, X_test, _ = _noisy(600)
    parts = iid(len(X), 3, random_state=0)
    a = FederatedRKHSClassifier(method="random_features", random_state=0)
    b = FederatedRKHSClassifier(method="random_features", random_state=0)
    a.fit(X, y, partitions=parts)
    b.fit(X, y, partitions=np.array([7, 2, 5])[parts])
    np.testing.assert_allclose(
        a.decision_function(X_test), b.decision_function(X_test), atol=1e-12
    )


def test_under_refuse_the_features_stay_below_the_smallest_client():
    X, y = load_digits(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    parts = iid(len(X), 10, random_state=0)
    clf = FederatedRKHSClassifier(raw_rows="refuse", random_state=0)
    clf.fit(X, y, partitions=parts)
    assert clf.n_random_features_ < np.bincount(parts).min()
    assert clf.communication_.raw_rows == 0


def test_privacy_takes_the_random_features_and_refuses_landmarks():
    X, y, _, _ = _noisy(600)
    privacy = DifferentialPrivacy(epsilon=5.0, delta=1e-5, bounds=(-4.0, 4.0))
    widths = list(np.sqrt(2 * X.shape[1]) * np.geomspace(0.2, 1, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = FederatedRKHSClassifier(widths=widths, privacy=privacy, random_state=0)
        clf.fit(X, y, partitions=3)
    assert clf.features_ == "random"
    with pytest.raises(ValueError, match="features='landmarks' cannot run under"):
        FederatedRKHSClassifier(
            widths=widths, features="landmarks", privacy=privacy
        ).fit(X, y, partitions=3)


def test_widths_narrower_than_the_landmarks_spacing_are_refused():
    # Every kernel between two landmarks underflows: the map is the
    # identity on the landmarks and useless elsewhere.
    X, y, _, _ = _noisy(600)
    clf = FederatedRKHSClassifier(method="random_features", widths=[1e-3, 2e-3])
    with pytest.raises(ValueError, match=r"widths \(0.001, 0.002\) are too narrow"):
        clf.fit(X, y, partitions=3)
