"""DistributedKMeans under raw_rows="refuse": the row-free path.

k-FED's local centers merged by the server's weighted k-means, then
distributed Lloyd on the clients' summed per-cluster statistics. Checked
against KMeans' cost on the pooled data, on the ledger by formula, and as a
curious server that keeps every upload.
"""

import warnings

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits, make_blobs
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import pairwise_distances
from sklearn.utils.estimator_checks import parametrize_with_checks

import skfed
from skfed._engine._ledger import PER_CLIENT, SUM_ONLY
from skfed._testing import rows_found
from skfed.partition import iid, label_dirichlet


def _cost(X, centers):
    return float(pairwise_distances(X, centers, squared=True).min(axis=1).sum())


def _fit(X, partitions, **params):
    params.setdefault("random_state", 0)
    return skfed.DistributedKMeans(raw_rows="refuse", **params).fit(
        X, partitions=partitions
    )


# -- cost against KMeans --------------------------------------------------------


def test_cost_within_5_percent_of_kmeans_on_digits_over_10_skewed_clients():
    X, y = load_digits(return_X_y=True)
    parts = label_dirichlet(y, 10, alpha=0.3, random_state=0)
    km = _fit(X, parts, n_clusters=10)
    reference = _cost(X, KMeans(10, n_init=3, random_state=0).fit(X).cluster_centers_)
    assert _cost(X, km.cluster_centers_) <= 1.05 * reference
    assert km.communication_.raw_rows == 0


def test_cost_within_5_percent_of_kmeans_on_blobs_over_100_iid_clients():
    X, _ = make_blobs(4000, centers=16, n_features=20, random_state=0)
    km = _fit(X, iid(len(X), 100, random_state=0), n_clusters=16)
    reference = _cost(X, KMeans(16, n_init=3, random_state=0).fit(X).cluster_centers_)
    assert _cost(X, km.cluster_centers_) <= 1.05 * reference
    assert km.communication_.raw_rows == 0


# -- fitted attributes ----------------------------------------------------------


def test_fitted_attributes_are_those_of_the_centers():
    X, _ = make_blobs(600, centers=4, n_features=5, random_state=0)
    km = _fit(X, np.arange(600) % 3, n_clusters=4)
    # Labels stay on the clients; rows held here are labelled here.
    np.testing.assert_array_equal(km.labels_, km.predict(X))
    np.testing.assert_allclose(km.inertia_, _cost(X, km.cluster_centers_), rtol=1e-9)
    assert km.n_iter_ == km.n_refine_iter_ >= 1
    assert km.cluster_centers_.shape == (4, 5) and km.n_clients_ == 3
    assert not hasattr(km, "coreset_weights_")
    # A refit from the coreset path leaves none of its attributes behind.
    km.set_params(raw_rows="allow").fit(X, partitions=np.arange(600) % 3)
    assert hasattr(km, "coreset_weights_")
    km.set_params(raw_rows="refuse").fit(X, partitions=np.arange(600) % 3)
    assert not hasattr(km, "coreset_weights_") and not hasattr(km, "coreset_size_")


def test_compute_labels_false_sets_no_labels():
    X, _ = make_blobs(300, centers=3, n_features=4, random_state=0)
    km = _fit(X, 3, n_clusters=3, compute_labels=False)
    assert not hasattr(km, "labels_")
    np.testing.assert_allclose(km.inertia_, _cost(X, km.cluster_centers_), rtol=1e-9)


def test_lloyd_rounds_run_to_tol_and_warn_at_max_iter():
    X, y = load_digits(return_X_y=True)
    parts = label_dirichlet(y, 10, alpha=0.3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        settled = _fit(X, parts, n_clusters=10)
    # More than one round on digits, and fewer than the cap.
    assert 1 < settled.n_refine_iter_ < settled.max_iter
    with pytest.warns(ConvergenceWarning, match="max_iter=1"):
        capped = _fit(X, parts, n_clusters=10, max_iter=1)
    assert capped.n_refine_iter_ == 1
    # An explicit refine_iter caps the rounds without a warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        two = _fit(X, parts, n_clusters=10, refine_iter=2)
    assert two.n_refine_iter_ == 2
    # More rounds never raise the cost (Lloyd's monotonicity).
    assert settled.inertia_ <= two.inertia_ * (1 + 1e-12)


def test_a_client_of_at_most_k_rows_sends_fewer_centers_than_rows(received):
    X, _ = make_blobs(300, centers=3, n_features=4, random_state=0)
    parts = np.r_[np.zeros(297, dtype=int), [1, 1, 1]]
    km = _fit(X, parts, n_clusters=3)
    (small,) = [
        u for name, c, u in received["uploads"] if c == 1 and name == "local centers"
    ]
    # Three rows: two local centers asked, and none of them a row.
    assert small["centers"].shape[0] <= 2 and "rows" not in small
    assert rows_found(received["uploads"], X) == set()
    assert km.communication_.raw_rows == 0


def test_a_one_row_client_is_refused_naming_it():
    X, _ = make_blobs(300, centers=3, n_features=4, random_state=0)
    parts = np.r_[np.zeros(299, dtype=int), [7]]
    with pytest.raises(ValueError, match="7.*raw_rows='refuse'"):
        _fit(X, parts, n_clusters=3)


# -- what the server learns -----------------------------------------------------


def test_ledger_has_no_raw_row_and_only_sum_only_or_per_client_rounds():
    X, _ = make_blobs(600, centers=4, n_features=5, random_state=0)
    n_clusters, d = 4, 5
    log = _fit(X, np.arange(600) % 3, n_clusters=n_clusters).communication_
    assert log.raw_rows == 0
    uploads = [r for r in log.records if r.direction == "upload"]
    assert {r.disclosure for r in uploads} <= {SUM_ONLY, PER_CLIENT}
    assert {r.disclosure for r in log.collections} <= {PER_CLIENT}
    by_name = {}
    for r in uploads:
        by_name.setdefault(r.name, []).append(r)
    assert set(by_name) == {"local centers", "lloyd refinement", "cluster map"}
    # Each client: at most k local centers and their sizes, k(d + 1) floats.
    (local,) = by_name["local centers"]
    assert local.disclosure == PER_CLIENT
    assert all(f <= n_clusters * (d + 1) for f in local.floats)
    # Each Lloyd round: k(d + 1) floats up per client, sum-only; k·d down.
    for r in by_name["lloyd refinement"]:
        assert r.disclosure == SUM_ONLY
        assert r.floats == (n_clusters * (d + 1),) * 3
    downloads = [
        r for r in log.records if r.direction == "download" and "lloyd" in r.name
    ]
    assert all(r.floats == (n_clusters * d,) * 3 for r in downloads)
    assert sum(by_name["cluster map"][0].floats) == 0


def test_a_curious_server_finds_no_row_in_any_upload(received):
    # An outlier (a local cluster of one row on client 0) and a client that
    # holds one row of a blob it otherwise lacks: each would be a row in an
    # upload (a local center; a Lloyd round's cluster sum of weight one).
    X, y = make_blobs(300, centers=3, n_features=4, cluster_std=0.6, random_state=0)
    lone = np.flatnonzero(y == 0)[0]
    ids = np.where(y == 0, 0, 1 + np.arange(len(y)) % 2)
    ids[lone] = 2
    X = np.vstack([X, np.full((1, 4), 40.0)])
    ids = np.r_[ids, 0]
    # The attack works on the default (coreset) fit: sampled rows are sent.
    skfed.DistributedKMeans(n_clusters=3, random_state=0).fit(X, partitions=ids)
    assert rows_found(received["uploads"], X)
    received["uploads"].clear()
    received["messages"].clear()

    km = _fit(X, ids, n_clusters=3)
    assert rows_found(received["uploads"], X) == set()
    # No cluster sum of a Lloyd round covers fewer than two rows, so that
    # center + sum / weight is never one row.
    messages = [m for name, m in received["messages"] if name == "lloyd refinement"]
    uploads = [u for name, _, u in received["uploads"] if name == "lloyd refinement"]
    assert uploads and len(messages) == len(uploads)
    stolen = []
    for centers, (sums, totals) in zip(messages, uploads):
        assert np.all((totals == 0) | (totals >= 2))
        held = totals > 0
        stolen.extend(np.asarray(centers)[held] + sums[held] / totals[held, None])
    gaps = np.abs(np.asarray(stolen)[:, None] - X[None]).max(axis=2)
    assert gaps.min() > 1e-6
    # Every local center is the mean of at least two rows (sizes >= 2).
    for name, _, upload in received["uploads"]:
        if name == "local centers":
            assert np.all(np.asarray(upload["sizes"]) >= 2)
    assert km.communication_.raw_rows == 0


def test_masked_fit_is_the_plain_one_within_the_masking_precision():
    X, y = load_digits(return_X_y=True)
    parts = label_dirichlet(y, 10, alpha=0.3, random_state=0)
    plain = _fit(X, parts, n_clusters=10)
    masked = _fit(X, parts, n_clusters=10, secure_aggregation=True)
    # Each summed number is rounded to 2^-32 in the masked rounds.
    scale = np.abs(plain.cluster_centers_).max()
    np.testing.assert_allclose(
        masked.cluster_centers_, plain.cluster_centers_, rtol=0, atol=1e-7 * scale
    )
    np.testing.assert_allclose(masked.inertia_, plain.inertia_, rtol=1e-9)
    np.testing.assert_array_equal(masked.labels_, plain.labels_)
    masked_rounds = [
        r.name
        for r in masked.communication_.records
        if r.direction == "upload" and r.disclosure == SUM_ONLY and sum(r.floats)
    ]
    assert "lloyd refinement" in masked_rounds


def test_sample_weight_is_honoured():
    X, _ = make_blobs(400, centers=3, n_features=4, random_state=0)
    parts = np.arange(400) % 4
    w = np.random.RandomState(0).uniform(0.5, 2.0, size=400)
    km = skfed.DistributedKMeans(3, raw_rows="refuse", random_state=0).fit(
        X, partitions=parts, sample_weight=w
    )
    d2 = pairwise_distances(X, km.cluster_centers_, squared=True).min(axis=1)
    np.testing.assert_allclose(km.inertia_, float(w @ d2), rtol=1e-9)
    # The fitted centers are the weighted means of their clusters.
    labels = km.predict(X)
    for c in range(3):
        member = labels == c
        np.testing.assert_allclose(
            km.cluster_centers_[c],
            np.average(X[member], axis=0, weights=w[member]),
            atol=1e-6,
        )


# -- scikit-learn's checks on the row-free path ---------------------------------


@pytest.mark.filterwarnings(
    "ignore:Number of distinct clusters:sklearn.exceptions.ConvergenceWarning"
)
@parametrize_with_checks(
    [skfed.DistributedKMeans(n_clusters=2, raw_rows="refuse")],
    expected_failed_checks=lambda estimator: {
        # As KFed's (tests/test_common.py): the clients' local k-means draws
        # follow their rows, so weight 2 and a repeated row seed apart.
        "check_sample_weight_equivalence_on_dense_data": (
            "randomised: a repeated row changes the client's draws, as in KMeans"
        ),
    },
)
def test_sklearn_compatible_without_raw_rows(estimator, check):
    check(estimator)


def test_the_row_free_path_is_kfed_with_its_lloyd_rounds():
    X, y = load_digits(return_X_y=True)
    parts = label_dirichlet(y, 5, alpha=0.3, random_state=0)
    km = _fit(X, parts, n_clusters=10, refine_iter=4)
    # The row-free path asks each client for k(z) = k local centers.
    kfed = skfed.KFed(
        n_clusters=10,
        n_local_clusters=10,
        max_iter=20,
        raw_rows="refuse",
        refine_iter=4,
        random_state=0,
    ).fit(X, partitions=parts)
    np.testing.assert_allclose(
        km.cluster_centers_, kfed.cluster_centers_, rtol=1e-12, atol=1e-12
    )
    np.testing.assert_allclose(km.inertia_, kfed.inertia_, rtol=1e-12)
    assert km.n_refine_iter_ == kfed.n_refine_iter_ == 4


def test_secure_aggregation_without_lloyd_rounds_warns_nothing_is_masked():
    X, _ = make_blobs(300, centers=3, n_features=4, random_state=0)
    with pytest.warns(UserWarning, match="nothing to mask"):
        _fit(X, 3, n_clusters=3, refine_iter=0, secure_aggregation=True)
