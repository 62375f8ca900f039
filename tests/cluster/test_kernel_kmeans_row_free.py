"""FederatedKernelKMeans under raw_rows="refuse" without privacy: the
one-shot clusters its embedding with the row-free k-means (k-FED's local
centers of the embedded rows, then Lloyd rounds on summed per-cluster
statistics). Checked against the coreset path and exact kernel k-means, on
the ledger by formula, and as a curious server that keeps every upload."""

import warnings

import numpy as np
import pytest
from sklearn.datasets import make_blobs, make_circles
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import normalized_mutual_info_score as nmi
from sklearn.metrics import pairwise_distances
from sklearn.metrics.pairwise import rbf_kernel
from sklearn.utils.estimator_checks import parametrize_with_checks

from skfed import FederatedKernelKMeans
from skfed._engine._ledger import PER_CLIENT, SUM_ONLY
from skfed._testing import (
    assert_runs_its_declared_rounds,
    exact_kernel_kmeans,
    kernel_kmeans_cost,
    rows_found,
)
from skfed.cluster._protocols._coreset import embedded_min_rows

CASES = {
    # (data, k, gamma): four overlapping blobs with the default width, and
    # two rings that only a narrow kernel separates.
    "blobs": (
        lambda: make_blobs(1000, centers=4, cluster_std=1.5, random_state=1),
        4,
        None,
    ),
    "circles": (
        lambda: make_circles(1000, factor=0.3, noise=0.05, random_state=0),
        2,
        10.0,
    ),
}


def _fit(X, k, gamma=None, seed=0, partitions=5, **params):
    params.setdefault("raw_rows", "refuse")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return FederatedKernelKMeans(k, gamma=gamma, random_state=seed, **params).fit(
            X, partitions=partitions
        )


@pytest.fixture(scope="module")
def blobs_fit():
    make, k, gamma = CASES["blobs"]
    X, y = make()
    return X, y, _fit(X, k, gamma, partitions=np.arange(len(X)) % 5)


# -- quality against the coreset path and exact kernel k-means ------------------


@pytest.mark.parametrize("name", list(CASES))
def test_refuse_clusters_as_the_coreset_path_and_exact_kernel_kmeans(name):
    # 5 clients, three seeds. Measured: blobs NMI 0.743 refused, 0.744
    # allowed, 0.744 exact (cost 56.43 all three); rings 1.0 all three.
    make, k, gamma = CASES[name]
    X, y = make()
    refused, allowed, costs = [], [], []
    for seed in range(3):
        est = _fit(X, k, gamma, seed=seed)
        assert est.communication_.raw_rows == 0
        refused.append(nmi(y, est.labels_))
        K = rbf_kernel(X, gamma=est.gamma_)
        costs.append(kernel_kmeans_cost(K, est.labels_))
        allowed.append(nmi(y, _fit(X, k, gamma, seed=seed, raw_rows="allow").labels_))
    exact, exact_cost = exact_kernel_kmeans(K, k)
    assert abs(np.mean(refused) - np.mean(allowed)) <= 0.05
    assert abs(np.mean(refused) - nmi(y, exact)) <= 0.05
    assert max(costs) <= 1.01 * exact_cost
    if name == "circles":
        assert min(refused) == pytest.approx(1.0)


def test_fitted_attributes_are_those_of_the_model(blobs_fit):
    X, _, est = blobs_fit
    # The labels stayed on the clients; rows held here are labelled and
    # embedded here, with the model.
    np.testing.assert_array_equal(est.labels_, est.predict(X))
    np.testing.assert_allclose(est.embedding_, est.transform(X), atol=1e-9)
    # The clients' summed costs against the final centers.
    d2 = pairwise_distances(est.embedding_, est.cluster_centers_, squared=True)
    np.testing.assert_allclose(est.inertia_, d2.min(axis=1).sum(), rtol=1e-6)
    assert 1 <= est.n_refine_iter_ <= est._refine_iter()
    assert est.cluster_centers_.shape == (4, est.n_components_)


# -- what the server learns -----------------------------------------------------


def test_ledger_shows_no_raw_row_and_the_rounds_by_formula(blobs_fit, rounds_run):
    X, _, _ = blobs_fit
    k, n_clients = 4, 5
    est = _fit(X, k, partitions=np.arange(len(X)) % n_clients)
    assert_runs_its_declared_rounds(est, rounds_run, optional={"lloyd refinement"})
    log = est.communication_
    assert log.raw_rows == 0
    uploads = [r for r in log.records if r.direction == "upload"]
    assert {r.disclosure for r in uploads} <= {SUM_ONLY, PER_CLIENT}
    assert not [r for r in uploads if r.name.startswith("coreset")]
    s = est.n_components_
    by_name = {}
    for r in uploads:
        by_name.setdefault(r.name, []).append(r)
    # Each client: at most k local centers of H and their sizes.
    (local,) = by_name["local centers"]
    assert local.disclosure == PER_CLIENT
    assert all(0 < f <= k * (s + 1) for f in local.floats)
    # Each Lloyd round: k(s + 1) floats up per client, sum-only.
    assert len(by_name["lloyd refinement"]) == est.n_refine_iter_
    for r in by_name["lloyd refinement"]:
        assert r.disclosure == SUM_ONLY
        assert r.floats == (k * (s + 1),) * n_clients
    assert sum(by_name["cluster map"][0].floats) == 0


def test_a_curious_server_finds_no_row_nor_an_embedded_row(received):
    make, k, gamma = CASES["circles"]
    X, _ = make()
    est = _fit(X, k, gamma)
    minimum = embedded_min_rows(est.n_components_, X.shape[1])
    assert minimum == est.n_components_ // 2 + 1 > 2
    assert rows_found(received["uploads"], X) == set()
    # No local center and no cluster sum of a Lloyd round comes from fewer
    # rows than the minimum, so none is, or determines, an embedded row.
    locals_ = [u for name, _, u in received["uploads"] if name == "local centers"]
    assert len(locals_) == 5
    assert all(np.all(np.asarray(u["sizes"]) >= minimum) for u in locals_)
    messages = [m for name, m in received["messages"] if name == "lloyd refinement"]
    uploads = [u for name, _, u in received["uploads"] if name == "lloyd refinement"]
    assert uploads and len(messages) == len(uploads)
    means = [u["centers"] for u in locals_]
    for centers, (sums, totals) in zip(messages, uploads):
        assert np.all((totals == 0) | (totals >= minimum))
        held = totals > 0
        means.append(np.asarray(centers)[held] + sums[held] / totals[held, None])
    gaps = pairwise_distances(np.vstack(means), est.embedding_).min()
    assert gaps > 1e-6


def test_masked_fit_gives_the_plain_labels():
    make, k, gamma = CASES["blobs"]
    X, _ = make()
    plain = _fit(X, k, gamma)
    masked = _fit(X, k, gamma, secure_aggregation=True)
    np.testing.assert_array_equal(masked.labels_, plain.labels_)
    # The masked sums are rounded to 2^-32 (the statistics' and the Lloyd
    # rounds'): the centers agree to that precision, scaled.
    scale = np.abs(plain.cluster_centers_).max()
    np.testing.assert_allclose(
        masked.cluster_centers_, plain.cluster_centers_, rtol=0, atol=1e-6 * scale
    )
    masked_rounds = {
        r.name
        for r in masked.communication_.records
        if r.direction == "upload" and r.disclosure == SUM_ONLY and sum(r.floats)
    }
    assert "lloyd refinement" in masked_rounds


def test_shuffled_rows_and_renamed_clients_give_the_same_model():
    make, k, gamma = CASES["blobs"]
    X, _ = make()
    ids = np.arange(len(X)) % 5
    plain = _fit(X, k, gamma, partitions=ids)
    perm = np.random.RandomState(3).permutation(len(X))
    names = np.array(["e", "a", "c", "b", "d"])
    moved = _fit(X[perm], k, gamma, partitions=names[ids[perm]])
    np.testing.assert_allclose(
        moved.cluster_centers_, plain.cluster_centers_, rtol=0, atol=1e-12
    )
    np.testing.assert_array_equal(moved.labels_, plain.labels_[perm])


def test_random_features_fit_row_free_too():
    make, k, gamma = CASES["blobs"]
    X, y = make()
    est = _fit(X, k, gamma, features="random", n_random_features=100)
    assert est.features_ == "random" and est.communication_.raw_rows == 0
    allowed = _fit(
        X, k, gamma, features="random", n_random_features=100, raw_rows="allow"
    )
    assert nmi(y, est.labels_) >= nmi(y, allowed.labels_) - 0.05


def test_a_small_client_is_refused_naming_the_fix(received):
    make, k, gamma = CASES["circles"]
    X, _ = make()
    # Client 9 holds two rows: fewer than k + 1, and far fewer than the
    # landmark map's features, which its statistics would let the server
    # locate.
    ids = np.r_[np.arange(998) % 5, 9, 9]
    with pytest.raises(ValueError, match="raw_rows='refuse'.*n_landmarks"):
        _fit(X, k, gamma, partitions=ids)
    sent = [u for name, c, u in received["uploads"] if c == 9]
    assert rows_found([("", 9, u) for u in sent], X) == set()


def test_embedded_minimum_grows_with_the_columns_per_feature():
    # n rows of d features, summed in s columns: s equations in n d
    # unknowns, which fix the rows while n d <= s.
    assert embedded_min_rows(9, 2) == 5
    assert embedded_min_rows(22, 2) == 12
    assert embedded_min_rows(3, 64) == 2
    assert embedded_min_rows(64, 64) == 2
    assert embedded_min_rows(128, 64) == 3


def test_a_client_s_few_rows_of_a_cluster_are_merged_and_left_out(received):
    # Client 0 holds a quarter of the outer ring and five rows of the inner
    # one: fewer than the minimum (s // d + 1, 12 here) behind a sum of
    # embedded rows. Its local cluster of them is merged into the other,
    # and its Lloyd sums leave that cluster out.
    X, y = CASES["circles"][0]()
    inner, outer = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    ids = np.full(len(y), 4)
    ids[outer] = np.arange(len(outer)) % 4
    ids[inner[:5]] = 0
    est = _fit(X, 2, 10.0, partitions=ids, n_landmarks=100)
    minimum = embedded_min_rows(est.n_components_, X.shape[1])
    assert minimum > 5
    assert est.communication_.raw_rows == 0
    (local,) = [
        u for name, c, u in received["uploads"] if c == 0 and name == "local centers"
    ]
    assert np.all(local["sizes"] >= minimum) and local["sizes"].sum() == 130
    # The inner ring's cluster: nearest the inner rows.
    ring = np.bincount(est.labels_[inner]).argmax()
    assert np.all(est.labels_[inner] == ring)
    rounds = [
        (c, u) for name, c, u in received["uploads"] if name == "lloyd refinement"
    ]
    assert rounds
    for c, (_, totals) in rounds:
        if c == 0:
            assert totals[ring] == 0 and totals[1 - ring] == 125
        else:
            assert np.all((totals == 0) | (totals >= minimum))


# -- scikit-learn's checks on the row-free path ---------------------------------


@parametrize_with_checks([FederatedKernelKMeans(n_clusters=2, raw_rows="refuse")])
def test_sklearn_compatible_without_raw_rows(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)
