"""Tests of the distributed coreset k-means (Balcan, Ehrlich & Liang)."""

import warnings
from functools import partial

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from joblib import parallel_config
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.exceptions import ConvergenceWarning
from sklearn.kernel_approximation import RBFSampler
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from sklearn.pipeline import make_pipeline
from sklearn.utils import check_random_state

from skfed import ClientValueError, DistributedKMeans
from skfed._engine._federation import Federation
from skfed._engine._protocol import PUBLIC, client_step, collectable
from skfed._engine._validation import check_partitions
from skfed._testing import gathered_outputs
from skfed.cluster._kmeans import (
    swap_centers,
    weighted_kmeans,
    weighted_kmeans_plusplus,
    weighted_lloyd,
)
from skfed.cluster._protocols._coreset import allocate_samples, federated_coreset_kmeans
from skfed.partition import power_law

K = 4


@pytest.fixture(scope="module")
def blobs():
    """Well-separated blobs: every sensible k-means finds the same partition."""
    X, y = make_blobs(
        n_samples=600, centers=K, n_features=3, cluster_std=0.5, random_state=0
    )
    return X, y


@pytest.fixture(scope="module")
def hard():
    """Overlapping blobs: the optimum is not obvious, so inertia is compared."""
    X, _ = make_blobs(
        n_samples=1200, centers=8, n_features=5, cluster_std=2.5, random_state=1
    )
    return X


def _upload_floats(log, name):
    return {
        c: f
        for r in log.records
        if r.name == name and r.direction == "upload"
        for c, f in zip(r.clients, r.floats)
    }


def _download_floats(log, name):
    return {
        c: f
        for r in log.records
        if r.name == name and r.direction == "download"
        for c, f in zip(r.clients, r.floats)
    }


# --------------------------------------------------------------------------
# Agreement with centralized scikit-learn


@pytest.mark.parametrize("partitions", [None, 6])
def test_matches_kmeans_on_separated_blobs(blobs, partitions):
    X, y = blobs
    km = DistributedKMeans(K, coreset_size=300, random_state=0)
    km.fit(X, partitions=partitions)
    ref = KMeans(K, n_init=10, random_state=0).fit(X)
    assert adjusted_rand_score(ref.labels_, km.labels_) == pytest.approx(1.0)
    assert adjusted_rand_score(y, km.labels_) == pytest.approx(1.0)
    # Same partition, centers estimated from a coreset: close to the means.
    assert km.inertia_ == pytest.approx(ref.inertia_, rel=0.05)
    assert km.inertia_ >= ref.inertia_ * (1 - 1e-9)


@pytest.mark.parametrize("partitions", [None, 8])
def test_inertia_close_to_kmeans_on_overlapping_data(hard, partitions):
    km = DistributedKMeans(8, coreset_size=600, random_state=0)
    km.fit(hard, partitions=partitions)
    ref = KMeans(8, n_init=10, random_state=0).fit(hard)
    assert km.inertia_ == pytest.approx(ref.inertia_, rel=0.04)
    # The server's coreset estimate of the cost is close to the exact one.
    assert km.coreset_inertia_ == pytest.approx(km.inertia_, rel=0.1)


def test_refinement_is_centralized_lloyd_from_the_coreset_solution(hard):
    partitions = np.arange(hard.shape[0]) % 5
    params = {"n_clusters": 8, "coreset_size": 100, "random_state": 0}
    start = DistributedKMeans(**params, refine_iter=0).fit(hard, partitions=partitions)
    refined = DistributedKMeans(**params, refine_iter=100, tol=0.0)
    refined.fit(hard, partitions=partitions)
    ref = KMeans(8, init=start.cluster_centers_, n_init=1, tol=0.0).fit(hard)
    np.testing.assert_allclose(refined.cluster_centers_, ref.cluster_centers_)
    np.testing.assert_array_equal(refined.labels_, ref.labels_)
    assert refined.inertia_ == pytest.approx(ref.inertia_, rel=1e-10)
    assert refined.coreset_inertia_ == start.coreset_inertia_
    assert 1 <= refined.n_refine_iter_ < 100
    assert refined.inertia_ < start.inertia_


def test_coreset_size_improves_the_cost(hard):
    """Averaged over seeds, a larger coreset gives a lower exact cost."""
    partitions = np.arange(hard.shape[0]) % 4

    def mean_cost(t):
        return np.mean(
            [
                DistributedKMeans(
                    8,
                    coreset_size=t,
                    n_init=3,
                    refine_iter=0,
                    n_swaps=0,
                    random_state=s,
                )
                .fit(hard, partitions=partitions)
                .inertia_
                for s in range(4)
            ]
        )

    assert mean_cost(600) < mean_cost(30)


def test_pipeline_after_rbf_sampler():
    X, y = make_blobs(300, centers=3, n_features=2, cluster_std=0.4, random_state=3)
    features = RBFSampler(gamma=0.2, n_components=40, random_state=0)
    pipe = make_pipeline(
        features, DistributedKMeans(3, coreset_size=200, random_state=0)
    )
    partitions = np.arange(300) % 5
    labels = pipe.fit_predict(X, distributedkmeans__partitions=partitions)
    Z = RBFSampler(gamma=0.2, n_components=40, random_state=0).fit_transform(X)
    ref = KMeans(3, n_init=10, random_state=0).fit(Z)
    assert adjusted_rand_score(ref.labels_, labels) > 0.95
    assert np.array_equal(pipe.predict(X), labels)
    assert pipe[-1].communication_.n_rounds == 3 + pipe[-1].n_refine_iter_


# --------------------------------------------------------------------------
# The coreset: weights, allocation, communication


def test_weights_sum_to_client_sizes_with_negative_center_weights(hard):
    partitions = power_law(hard.shape[0], 5, random_state=0)
    km = DistributedKMeans(8, coreset_size=400, random_state=0)
    km.fit(hard, partitions=partitions)
    sizes = np.bincount(partitions)[km.client_ids_]
    np.testing.assert_allclose(km.coreset_client_weight_sums_, sizes, rtol=1e-12)
    assert km.coreset_weights_.sum() == pytest.approx(hard.shape[0], rel=1e-12)
    assert (km.coreset_weights_ < 0).any(), "no negative center weight exercised"
    assert km.coreset_sample_counts_.sum() == 400
    assert km.coreset_size_ == 400 + 8 * 5 == km.coreset_weights_.shape[0]


@pytest.mark.parametrize("k", [2, 8, 9, 40])
def test_auto_coreset_size_is_max_of_1000_and_125_k(k):
    # t = max(1000, 125 k) points drawn, plus k local centers per client.
    X, _ = make_blobs(n_samples=6000, centers=k, n_features=2, random_state=0)
    partitions = np.arange(X.shape[0]) % 3
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        km = DistributedKMeans(k, n_init=1, random_state=0)
        km.fit(X, partitions=partitions)
    assert km.coreset_sample_counts_.sum() == max(1000, 125 * k)
    assert km.coreset_size_ == max(1000, 125 * k) + 3 * k


def test_auto_coreset_size_is_clipped_to_the_samples_without_warning():
    X, _ = make_blobs(n_samples=1500, centers=16, n_features=2, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        km = DistributedKMeans(16, n_init=1, random_state=0).fit(X)
    assert km.coreset_sample_counts_.sum() == 1500  # 125 * 16 = 2000 asked


def test_k64_cost_within_2_percent_of_kmeans():
    # A fixed t = 1000 left the cost 6% above KMeans' here (1000 draws for
    # 64 clusters): t must grow with k.
    rng = np.random.RandomState(0)
    k, d = 64, 10
    means = rng.normal(scale=10.0 / np.sqrt(2 * d), size=(k, d))
    X = means[rng.randint(k, size=30_000)] + rng.normal(size=(30_000, d))
    partitions = np.arange(X.shape[0]) % 5
    km = DistributedKMeans(k, random_state=0).fit(X, partitions=partitions)
    reference = KMeans(k, n_init=1, random_state=0).fit(X)
    assert km.inertia_ <= 1.02 * reference.inertia_


def _mixture(n, d, k, seed):
    """k unit Gaussians in d dimensions, means 10 apart on average (as
    benchmarks/bench_vs_lloyd.py)."""
    rng = np.random.RandomState(seed)
    means = rng.normal(scale=10.0 / np.sqrt(2 * d), size=(k, d))
    return means[rng.randint(k, size=n)] + rng.normal(size=(n, d))


def test_many_clients_large_k_cost_within_2_percent_of_kmeans():
    # Fifty clients of 400 rows, 32 clusters: 125 k = 4,000 draws are 80
    # per client, and the restarts' best solution on the coreset was 3.2%
    # above KMeans' cost (Lloyd on a coreset whose local centers weigh
    # hundreds settles with two centers in one cluster). The swaps and the
    # Lloyd rounds on the clients' rows bring it to KMeans' cost.
    X = _mixture(20_000, 20, 32, 0)
    partitions = np.arange(X.shape[0]) % 50
    km = DistributedKMeans(32, random_state=0).fit(X, partitions=partitions)
    reference = KMeans(32, random_state=0).fit(X)
    assert km.inertia_ <= 1.02 * reference.inertia_
    assert km.n_refine_iter_ == 3
    # Across n_jobs (the clients then run in worker processes), the model.
    other = DistributedKMeans(32, random_state=0, n_jobs=2)
    other.fit(X, partitions=partitions)
    np.testing.assert_allclose(other.cluster_centers_, km.cluster_centers_)
    np.testing.assert_array_equal(other.labels_, km.labels_)


def test_default_communication_matches_formula():
    # Defaults: 3 rounds of the coreset, then refine_iter="auto" = 3 rounds
    # of distributed Lloyd, each k(s + 1) floats up and k s down per client.
    X = _mixture(6_000, 5, 8, 1)
    n_clients, k, s = 6, 8, X.shape[1]
    km = DistributedKMeans(k, random_state=0, tol=0.0)
    km.fit(X, partitions=np.arange(X.shape[0]) % n_clients)
    log = km.communication_
    assert km.n_refine_iter_ == 3
    assert log.n_rounds == 3 + 3
    t = max(1000, 125 * k)
    coreset = (t + n_clients * k) * (s + 1)
    assert log.upload_floats == 2 * n_clients + coreset + 3 * n_clients * k * (s + 1)
    assert log.download_floats == n_clients * (1 + 3 * k * s + k * s)
    up = log.floats_by_name("upload")
    assert up["lloyd refinement"] == 3 * n_clients * k * (s + 1)


def test_auto_refinement_is_skipped_when_the_coreset_is_the_data(blobs):
    # The budget covers the client's rows: the server's Lloyd already ran
    # on the data, and a distributed round would repeat it.
    X, _ = blobs
    km = DistributedKMeans(K, random_state=0).fit(X)
    assert km.coreset_size_ == X.shape[0]
    assert km.n_refine_iter_ == 0
    assert km.communication_.n_rounds == 3
    ref = KMeans(K, n_init=10, random_state=0).fit(X)
    assert km.inertia_ == pytest.approx(ref.inertia_, rel=1e-9)


def test_swaps_move_a_center_out_of_a_cluster_it_shares():
    # Four blobs; the start has two centers in one blob and one center
    # between two others, a fixed point of Lloyd.
    X, y = make_blobs(
        400,
        centers=[[0, 0], [10, 0], [0, 10], [10, 10]],
        cluster_std=0.5,
        random_state=0,
    )
    w = np.ones(X.shape[0])
    start = np.array([[-0.5, 0.0], [0.5, 0.0], [10, 0], [5, 10]])
    x_sq = (X**2).sum(axis=1)
    stuck, _, _, _ = weighted_lloyd(X, w, start, x_sq, 100, 0.0)
    stuck_cost = w @ ((X[:, None] - stuck[None]) ** 2).sum(-1).min(1)
    centers, cost = swap_centers(
        X, w, stuck, stuck_cost, n_swaps=8, random_state=np.random.RandomState(0)
    )
    ref = KMeans(4, n_init=10, random_state=0).fit(X)
    assert cost == pytest.approx(ref.inertia_, rel=1e-9)
    assert cost < 0.5 * stuck_cost
    # Never uphill, and n_swaps=0 changes nothing.
    same, same_cost = swap_centers(
        X, w, stuck, stuck_cost, n_swaps=0, random_state=np.random.RandomState(0)
    )
    assert same is stuck and same_cost == stuck_cost
    # The result is a Lloyd fixed point at the exact cost it reports.
    d2 = ((X[:, None] - centers[None]) ** 2).sum(-1)
    assert cost == pytest.approx(float(w @ d2.min(1)), rel=1e-12)


def test_weights_sum_to_client_sample_weight(blobs):
    X, _ = blobs
    rng = np.random.RandomState(0)
    sample_weight = rng.uniform(0.1, 3.0, size=X.shape[0])
    partitions = np.arange(X.shape[0]) % 3
    km = DistributedKMeans(K, coreset_size=100, random_state=0)
    km.fit(X, partitions=partitions, sample_weight=sample_weight)
    expected = [sample_weight[partitions == c].sum() for c in km.client_ids_]
    np.testing.assert_allclose(km.coreset_client_weight_sums_, expected, rtol=1e-12)
    assert km.inertia_ == pytest.approx(-km.score(X, sample_weight=sample_weight))


def test_sample_weight_moves_the_centers():
    """A heavy sample pulls its center like in weighted KMeans."""
    X = np.array([[0.0], [1.0], [10.0], [11.0]])
    sample_weight = np.array([1.0, 3.0, 1.0, 1.0])
    km = DistributedKMeans(2, random_state=0)
    km.fit(X, partitions=[0, 1, 0, 1], sample_weight=sample_weight)
    ref = KMeans(2, n_init=10, random_state=0).fit(X, sample_weight=sample_weight)
    np.testing.assert_allclose(
        np.sort(km.cluster_centers_.ravel()), np.sort(ref.cluster_centers_.ravel())
    )


def test_zero_sample_weight_client(blobs):
    X, _ = blobs
    partitions = np.arange(X.shape[0]) % 3
    sample_weight = np.where(partitions == 2, 0.0, 1.0)
    km = DistributedKMeans(K, coreset_size=100, random_state=0)
    km.fit(X, partitions=partitions, sample_weight=sample_weight)
    assert km.coreset_sample_counts_[2] == 0
    assert km.coreset_client_weight_sums_[2] == 0
    assert np.isfinite(km.cluster_centers_).all()


@pytest.mark.parametrize("compute_labels", [True, False])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_communication_matches_formula(hard, dtype, compute_labels):
    X = hard.astype(dtype)
    n_samples, s = X.shape
    k, t = 8, 300
    # One client smaller than k: it sends its points, so k_m = min(k, n_m).
    partitions = np.arange(n_samples) % 6
    partitions[:3] = 6
    sizes = np.bincount(partitions)
    km = DistributedKMeans(
        k,
        coreset_size=t,
        refine_iter=0,
        random_state=0,
        compute_labels=compute_labels,
    )
    km.fit(X, partitions=partitions)
    # The labelling round also brings inertia_: it runs either way.
    assert hasattr(km, "labels_") == compute_labels
    log = km.communication_
    ids = list(km.client_ids_)
    t_m = dict(zip(ids, km.coreset_sample_counts_))
    k_m = {c: min(k, sizes[c]) for c in ids}
    assert sum(t_m.values()) == t
    assert t_m[6] == 0 and sizes[6] < k

    assert _upload_floats(log, "coreset local cost") == dict.fromkeys(ids, 1)
    assert _download_floats(log, "coreset local cost") == {}
    assert _download_floats(log, "coreset sampling") == dict.fromkeys(ids, 1)
    assert _upload_floats(log, "coreset sampling") == {
        c: (t_m[c] + k_m[c]) * (s + 1) for c in ids
    }
    assert _download_floats(log, "coreset labels") == dict.fromkeys(ids, k * s)
    assert _upload_floats(log, "coreset labels") == dict.fromkeys(ids, 1)
    n_clients = len(ids)
    assert log.upload_floats == 2 * n_clients + (t + sum(k_m.values())) * (s + 1)
    assert log.download_floats == n_clients * (1 + k * s)
    assert log.n_rounds == 3
    # Upload does not grow with the number of samples once every n_m >= k.
    big = partitions != 6
    km1 = DistributedKMeans(k, coreset_size=t, refine_iter=0, random_state=0)
    km1.fit(X[big], partitions=partitions[big])
    km2 = DistributedKMeans(k, coreset_size=t, refine_iter=0, random_state=0)
    km2.fit(np.vstack([X[big]] * 2), partitions=np.concatenate([partitions[big]] * 2))
    assert km2.communication_.upload_floats == km1.communication_.upload_floats


def test_refinement_communication_matches_formula(hard):
    n_samples, s = hard.shape
    k, t, n_clients = 8, 200, 4
    km = DistributedKMeans(k, coreset_size=t, refine_iter=3, tol=0.0, random_state=0)
    km.fit(hard, partitions=n_clients)
    log = km.communication_
    rounds = km.n_refine_iter_
    assert rounds == 3
    ids = list(km.client_ids_)
    up = log.floats_by_name("upload")
    down = log.floats_by_name("download")
    assert up["lloyd refinement"] == rounds * n_clients * k * (s + 1)
    assert down["lloyd refinement"] == rounds * n_clients * k * s
    assert _upload_floats(log, "coreset labels") == dict.fromkeys(ids, 1)
    assert log.n_rounds == 3 + rounds
    assert log.upload_floats == 2 * n_clients + (t + n_clients * k) * (s + 1) + (
        rounds * n_clients * k * (s + 1)
    )


def test_allocation_is_proportional_to_cost():
    rng = np.random.RandomState(0)
    for _ in range(20):
        costs = rng.exponential(size=7)
        costs[rng.rand(7) < 0.3] = 0.0
        t = int(rng.randint(1, 500))
        counts = allocate_samples(costs, t)
        if costs.sum() == 0:
            assert not counts.any()
            continue
        assert counts.sum() == t
        assert np.all(np.abs(counts - t * costs / costs.sum()) < 1)
        assert not counts[costs == 0].any()
    assert not allocate_samples(np.zeros(3), 10).any()
    # The split follows the clients when they are listed in another order.
    costs = rng.exponential(size=9)
    perm = rng.permutation(9)
    np.testing.assert_array_equal(
        allocate_samples(costs[perm], 101), allocate_samples(costs, 101)[perm]
    )


def test_allocation_treats_equal_costs_alike():
    # The server cannot tell clients of equal cost apart: they get the same
    # number of samples whatever their order, even if that leaves budget.
    np.testing.assert_array_equal(allocate_samples([1.0, 1.0, 1.0], 10), [3, 3, 3])
    np.testing.assert_array_equal(allocate_samples([1.0, 2.0, 1.0], 9), [2, 5, 2])
    np.testing.assert_array_equal(allocate_samples([1.0, 1.0, 2.0], 10), [2, 2, 6])
    costs = np.array([0.0, 2.0, 1.0, 2.0, 3.0, 1.0, 2.0])
    for seed in range(5):
        perm = np.random.RandomState(seed).permutation(len(costs))
        np.testing.assert_array_equal(
            allocate_samples(costs[perm], 12), allocate_samples(costs, 12)[perm]
        )


def test_invariant_to_client_names_when_local_costs_tie():
    # Clients 0 and 1 hold translated copies of the same square: equal local
    # costs (8), and half a sample each left over (t = 6, client 2 costs 16).
    # It used to go to the first by name, so renaming changed the coreset;
    # now neither gets it, and client 2 takes the budget left.
    square = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 2.0], [2.0, 2.0]])
    X = np.vstack([square, square + [100, 0], np.vstack([square] * 2) + [0, 100]])
    partitions = np.repeat([0, 1, 2], [4, 4, 8])
    params = {"n_clusters": 1, "coreset_size": 6, "n_init": 1, "random_state": 0}
    a = DistributedKMeans(**params).fit(X, partitions=partitions)
    b = DistributedKMeans(**params).fit(X, partitions=np.array([1, 0, 2])[partitions])
    np.testing.assert_array_equal(a.coreset_sample_counts_, [1, 1, 4])
    np.testing.assert_array_equal(b.coreset_sample_counts_, [1, 1, 4])
    np.testing.assert_array_equal(b.cluster_centers_, a.cluster_centers_)


def test_client_with_zero_local_cost_sends_only_its_centers(blobs):
    X, y = blobs
    partitions = np.arange(X.shape[0]) % 3
    # Client 3 holds 20 copies of one point: cost 0, so it draws nothing.
    X = np.vstack([X, np.tile(X[:1], (20, 1))])
    y = np.concatenate([y, np.repeat(y[:1], 20)])
    partitions = np.concatenate([partitions, np.full(20, 3)])
    km = DistributedKMeans(K, coreset_size=100, random_state=0)
    km.fit(X, partitions=partitions)
    lone = list(km.client_ids_).index(3)
    assert km.coreset_sample_counts_[lone] == 0
    assert km.coreset_client_weight_sums_[lone] == 20
    assert km.coreset_sample_counts_.sum() == 100
    sent = _upload_floats(km.communication_, "coreset sampling")[3]
    assert sent == K * (X.shape[1] + 1)
    assert adjusted_rand_score(y, km.labels_) == pytest.approx(1.0)


# --------------------------------------------------------------------------
# The server's weighted k-means with weights of any sign


def test_weighted_kmeans_matches_kmeans_with_positive_weights():
    X, _ = make_blobs(200, centers=3, n_features=2, random_state=0)
    w = np.random.RandomState(0).uniform(0.5, 2.0, size=200)
    centers, inertia, n_iter = weighted_kmeans(
        X, w, 3, random_state=np.random.RandomState(0), n_init=5
    )
    ref = KMeans(3, n_init=5, random_state=0).fit(X, sample_weight=w)
    assert inertia == pytest.approx(ref.inertia_, rel=1e-6)
    assert 1 <= n_iter <= 300


def test_kmeans_plusplus_draws_only_positive_weights():
    X = np.arange(20, dtype=float).reshape(10, 2)
    w = np.array([-1.0, 0.0, 2.0, -3.0, 1.0, 0.0, 1.0, -0.5, 4.0, 1.0])
    from sklearn.utils.extmath import row_norms

    x_sq = row_norms(X, squared=True)
    for seed in range(10):
        rng = np.random.RandomState(seed)
        centers = X[weighted_kmeans_plusplus(X, w, 4, rng, x_sq=x_sq)]
        chosen = [np.flatnonzero((X == c).all(axis=1))[0] for c in centers]
        assert all(w[i] > 0 for i in chosen)


def test_lloyd_keeps_center_of_non_positive_cluster():
    from sklearn.utils.extmath import row_norms

    # Cluster around 10 carries total weight 1 - 2 = -1: its mean is
    # meaningless, so its center must stay where it was.
    X = np.array([[0.0], [1.0], [10.0], [11.0]])
    w = np.array([1.0, 1.0, 1.0, -2.0])
    init = np.array([[0.2], [10.4]])
    centers, labels, d2, _ = weighted_lloyd(
        X, w, init, row_norms(X, squared=True), 10, 0.0
    )
    assert centers[0, 0] == pytest.approx(0.5)
    assert centers[1, 0] == 10.4
    np.testing.assert_array_equal(labels, [0, 0, 1, 1])
    np.testing.assert_allclose(d2, (X[:, 0] - centers[labels, 0]) ** 2)


def test_lloyd_with_negative_weights_never_goes_uphill_or_cycles():
    """Plain Lloyd can cycle on a coreset with negative weights (it used to
    run all max_iter iterations on this data); updates that raise the
    weighted cost are rejected, so it stops, below its starting cost."""
    from sklearn.utils.extmath import row_norms

    X, _ = make_blobs(
        20000,
        n_features=20,
        centers=10,
        cluster_std=3.0,
        center_box=(-10, 10),
        random_state=0,
    )
    km = DistributedKMeans(10, n_init=3, random_state=0)
    km.fit(X, partitions=power_law(20000, 10, exponent=1.0, random_state=0))
    assert (km.coreset_weights_ < 0).any()
    assert km.n_iter_ < 50

    rng = np.random.RandomState(0)
    points = rng.normal(size=(300, 2))
    w = rng.uniform(0.2, 2.0, size=300)
    w[:30] = -rng.uniform(0.5, 3.0, size=30)
    x_sq = row_norms(points, squared=True)
    for seed in range(10):
        init = points[np.random.RandomState(seed).choice(300, 5, replace=False)]
        _, init_d2 = weighted_lloyd(points, w, init, x_sq, 0, 0.0)[1:3]
        centers, labels, d2, n_iter = weighted_lloyd(points, w, init, x_sq, 300, 0.0)
        assert w @ d2 <= w @ init_d2 + 1e-9
        assert n_iter < 300


@pytest.mark.parametrize("negative", [False, True])
def test_weighted_kmeans_restarts_side_by_side_or_in_turn_are_alike(
    negative, monkeypatch, capsys
):
    # Up to a size the server's restarts run side by side (batched), above
    # it one after another: the same algorithm, draws in another order.
    import skfed.cluster._kmeans._restarts as restarts_module

    rng = np.random.RandomState(0)
    X, _ = make_blobs(3000, n_features=5, centers=6, random_state=0)
    w = rng.uniform(0.5, 2.0, size=len(X))
    if negative:
        w[:200] = -rng.uniform(0.1, 1.0, size=200)
    batched = weighted_kmeans(X, w, 6, random_state=0, n_init=4, verbose=1)
    # CSR points of few features are densified: the same model.
    from_csr = weighted_kmeans(sp.csr_matrix(X), w, 6, random_state=0, n_init=4)
    np.testing.assert_allclose(from_csr[0], batched[0])
    monkeypatch.setattr(restarts_module, "_BATCHED_RESTARTS_FLOATS", 0)
    in_turn = weighted_kmeans(X, w, 6, random_state=0, n_init=4, verbose=1)
    assert batched[1] == pytest.approx(in_turn[1], rel=0.02)
    # The reported inertia is the weighted cost of the returned centers.
    d2 = ((X[:, None] - batched[0][None]) ** 2).sum(axis=2).min(axis=1)
    assert batched[1] == pytest.approx(w @ d2, rel=1e-9)
    # Both report their restarts, in one line each.
    assert capsys.readouterr().err.count("coreset k-means: 4 restarts") == 2


@pytest.mark.parametrize("sparse", [False, True])
def test_server_sees_each_distinct_point_once_in_value_order(sparse):
    # A point sent several times (a repeated sample) is one point carrying
    # the total weight; the order does not depend on the uploads' order.
    from skfed.cluster._protocols._coreset import _distinct_points

    rng = np.random.RandomState(0)
    base = rng.standard_normal((6, 3))
    counts = np.array([1, 3, 1, 2, 1, 4])
    repeated = np.repeat(base, counts, axis=0)
    weights = rng.uniform(0.5, 2.0, len(repeated))
    weights[0] = -0.25
    as_input = sp.csr_matrix if sparse else np.asarray
    points, totals = _distinct_points(as_input(repeated), weights)
    dense = points.toarray() if sparse else points
    assert dense.shape == base.shape
    for row, total in zip(dense, totals):
        same = (repeated == row).all(axis=1)
        assert total == pytest.approx(weights[same].sum(), rel=1e-12)
    perm = rng.permutation(len(repeated))
    again, again_totals = _distinct_points(as_input(repeated[perm]), weights[perm])
    again = again.toarray() if sparse else again
    np.testing.assert_array_equal(again, dense)
    np.testing.assert_allclose(again_totals, totals, rtol=1e-12)
    # Points that differ by rounding only keep their places.
    nudged, _ = _distinct_points(as_input(repeated * (1 + 1e-15)), weights)
    nudged = nudged.toarray() if sparse else nudged
    np.testing.assert_allclose(nudged, dense, rtol=1e-14)


def test_weighted_samples_give_the_repeated_samples_model(blobs):
    # A coreset that is the whole data (one client, a budget above its
    # rows): integer weights and repeated rows reach the server as the same
    # points, hence the same model.
    X, _ = blobs
    X = X[:60]
    counts = np.random.RandomState(1).randint(1, 4, len(X))
    params = {"n_clusters": K, "coreset_size": 1000, "random_state": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # budget above the rows
        weighted = DistributedKMeans(**params).fit(
            X, sample_weight=counts, partitions=np.zeros(len(X))
        )
        repeated = DistributedKMeans(**params).fit(
            np.repeat(X, counts, axis=0), partitions=np.zeros(counts.sum())
        )
    np.testing.assert_allclose(
        weighted.cluster_centers_, repeated.cluster_centers_, rtol=1e-12, atol=1e-12
    )
    np.testing.assert_array_equal(weighted.predict(X), repeated.predict(X))


def test_draw_is_randomstate_choice():
    # The coreset's D² sampling draws what RandomState.choice would.
    from skfed.cluster._kmeans import draw

    for seed in range(20):
        rng = np.random.RandomState(seed)
        p = rng.uniform(size=rng.randint(1, 300)) ** 3
        p[rng.uniform(size=len(p)) < 0.3] = 0.0
        p[rng.randint(len(p))] = 1.0
        expected = np.random.RandomState(seed).choice(len(p), 17, p=p / p.sum())
        np.testing.assert_array_equal(
            draw(np.random.RandomState(seed), p, 17), expected
        )


def test_weighted_kmeans_rejects_no_positive_weight():
    with pytest.raises(ValueError, match="positive"):
        weighted_kmeans(
            np.ones((3, 2)), -np.ones(3), 2, random_state=np.random.RandomState(0)
        )


# --------------------------------------------------------------------------
# Invariances


@settings(max_examples=8, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    n_clients=st.integers(1, 5),
    refine_iter=st.integers(0, 2),
)
def test_invariant_to_client_names_and_sample_order(
    blobs, seed, n_clients, refine_iter
):
    X, _ = blobs
    X = X[:240]
    rng = np.random.RandomState(seed)
    partitions = rng.randint(n_clients, size=X.shape[0])
    params = {
        "n_clusters": K,
        "coreset_size": 60,
        "n_init": 2,
        "refine_iter": refine_iter,
        "random_state": seed,
    }
    km = DistributedKMeans(**params).fit(X, partitions=partitions)

    # Renamed clients, samples shuffled (rows and their client ids together).
    names = np.array([f"site-{c}" for c in rng.permutation(n_clients)])
    perm = rng.permutation(X.shape[0])
    km2 = DistributedKMeans(**params)
    km2.fit(X[perm], partitions=names[partitions[perm]])

    np.testing.assert_allclose(km2.cluster_centers_, km.cluster_centers_, rtol=1e-9)
    np.testing.assert_array_equal(km2.labels_, km.labels_[perm])
    assert km2.inertia_ == pytest.approx(km.inertia_, rel=1e-9)
    assert km2.communication_.upload_floats == km.communication_.upload_floats


def test_invariant_to_client_names_when_uploads_look_alike():
    """Clients of at most k rows upload their rows with unit weights, so
    their weights alone cannot order them on the server; the order of the
    union (hence the server's k-means++ draws) must still not follow the
    clients' names."""
    X = np.random.RandomState(0).uniform(size=(24, 2))
    partitions = np.arange(24) // 3  # 8 clients of 3 rows, k = 3
    for seed in range(5):
        params = {"n_clusters": 3, "coreset_size": 10, "n_init": 1}
        a = DistributedKMeans(**params, random_state=seed)
        a.fit(X, partitions=partitions)
        b = DistributedKMeans(**params, random_state=seed)
        b.fit(X, partitions=7 - partitions)
        np.testing.assert_array_equal(b.cluster_centers_, a.cluster_centers_)
        np.testing.assert_array_equal(b.labels_, a.labels_)


@pytest.mark.slow  # starts a loky pool
def test_backend_and_n_jobs_do_not_change_the_model(blobs):
    X, _ = blobs
    partitions = np.arange(X.shape[0]) % 4
    fits = []
    for backend, n_jobs in [("sequential", 1), ("threading", 2), ("loky", 2)]:
        with parallel_config(backend=backend):
            km = DistributedKMeans(K, coreset_size=80, n_init=2, random_state=7)
            fits.append(km.set_params(n_jobs=n_jobs).fit(X, partitions=partitions))
    for km in fits[1:]:
        np.testing.assert_array_equal(km.cluster_centers_, fits[0].cluster_centers_)
        np.testing.assert_array_equal(km.labels_, fits[0].labels_)


def test_same_seed_same_model_different_seed_different_draws(hard):
    a = DistributedKMeans(8, coreset_size=100, random_state=3).fit(hard, partitions=3)
    b = DistributedKMeans(8, coreset_size=100, random_state=3).fit(hard, partitions=3)
    c = DistributedKMeans(8, coreset_size=100, random_state=4).fit(hard, partitions=3)
    np.testing.assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    assert not np.array_equal(a.coreset_weights_, c.coreset_weights_)


# --------------------------------------------------------------------------
# Input types


def test_sparse_input_gives_the_dense_result(blobs):
    X, _ = blobs
    X = np.where(np.abs(X) < 1.0, 0.0, X)  # some structural zeros
    partitions = np.arange(X.shape[0]) % 3
    params = {"n_clusters": K, "coreset_size": 100, "n_init": 3, "random_state": 0}
    dense = DistributedKMeans(**params).fit(X, partitions=partitions)
    sparse = DistributedKMeans(**params).fit(sp.csr_matrix(X), partitions=partitions)
    np.testing.assert_allclose(sparse.cluster_centers_, dense.cluster_centers_)
    np.testing.assert_array_equal(sparse.labels_, dense.labels_)
    np.testing.assert_allclose(sparse.transform(sp.csr_matrix(X)), dense.transform(X))
    assert sparse.inertia_ == pytest.approx(dense.inertia_)


def test_sparse_rows_travel_as_csr():
    """On sparse data, drawn rows cost data + indices + indptr, not t_m · d."""
    X = sp.random(400, 60, density=0.05, format="csr", random_state=0)
    k, t, n_clients = 3, 100, 2
    km = DistributedKMeans(k, coreset_size=t, random_state=0)
    km.fit(X, partitions=n_clients)
    dense_formula = (t + n_clients * k) * (60 + 1)
    sent = km.communication_.floats_by_name("upload")["coreset sampling"]
    # Centers and weights are dense; a CSR row costs 2 nnz + 1 (+1 per client).
    nnz_bound = 2 * X.getnnz(axis=1).max() * t + t + n_clients
    assert sent <= n_clients * k * 60 + (t + n_clients * k) + nnz_bound
    assert sent < dense_formula
    np.testing.assert_array_equal(km.predict(X), km.labels_)


def test_sparse_input_is_never_densified():
    """Clients and predict keep CSR rows sparse: memory stays far below that
    of the dense (n, s) array (it was spent on each row's center, gathered
    densely, to compute its exact distance)."""
    import tracemalloc

    X = sp.random(4000, 4000, density=0.001, format="csr", random_state=0)
    dense_bytes = X.shape[0] * X.shape[1] * 8
    km = DistributedKMeans(3, coreset_size=100, n_init=1, random_state=0)
    tracemalloc.start()
    try:
        km.fit(X, partitions=2)
        km.score(X)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < dense_bytes / 20
    # The distances still match a dense computation.
    part = X[:300].toarray()
    d2 = np.stack([((part - c) ** 2).sum(axis=1) for c in km.cluster_centers_])
    assert km.score(X[:300]) == pytest.approx(-d2.min(axis=0).sum(), rel=1e-10)


def test_float32_is_kept(blobs):
    X = blobs[0].astype(np.float32)
    km = DistributedKMeans(K, coreset_size=400, random_state=0).fit(X, partitions=3)
    assert km.cluster_centers_.dtype == np.float32
    assert km.transform(X).dtype == np.float32
    np.testing.assert_array_equal(km.predict(X), km.labels_)
    # float64 rows seed other client streams; same clusters, close centers
    # (a coreset large enough that sampling noise stays below the tolerance).
    ref = DistributedKMeans(K, coreset_size=400, random_state=0)
    ref.fit(blobs[0], partitions=3)
    assert adjusted_rand_score(ref.labels_, km.labels_) == pytest.approx(1.0)
    match = [np.bincount(km.labels_[ref.labels_ == j]).argmax() for j in range(K)]
    np.testing.assert_allclose(
        km.cluster_centers_[match], ref.cluster_centers_, atol=0.2
    )


def test_methods_agree_with_fitted_attributes(blobs):
    X, _ = blobs
    km = DistributedKMeans(K, coreset_size=100, random_state=0)
    labels = km.fit_predict(X, partitions=4)
    np.testing.assert_array_equal(labels, km.labels_)
    np.testing.assert_array_equal(km.predict(X), km.labels_)
    distances = km.transform(X)
    assert distances.shape == (X.shape[0], K)
    np.testing.assert_array_equal(distances.argmin(axis=1), km.labels_)
    assert km.score(X) == pytest.approx(-km.inertia_, rel=1e-10)
    assert km.score(X) == pytest.approx(-(distances.min(axis=1) ** 2).sum())
    np.testing.assert_allclose(
        DistributedKMeans(K, coreset_size=100, random_state=0).fit_transform(
            X, partitions=4
        ),
        distances,
    )
    assert list(km.get_feature_names_out()) == [
        f"distributedkmeans{i}" for i in range(K)
    ]
    assert km.n_clients_ == 4
    assert km.n_iter_ >= 1


def test_verbose_reports_rounds_then_restarts(blobs, capsys):
    est = DistributedKMeans(K, coreset_size=50, n_init=2, verbose=1, random_state=0)
    est.fit(blobs[0], partitions=2)
    err = capsys.readouterr().err
    assert "coreset sampling" in err
    assert "restarts" not in err
    # Verbose 2 adds the server's restarts, in one line.
    est.set_params(verbose=2).fit(blobs[0], partitions=2)
    err = capsys.readouterr().err
    assert err.count("[skfed] coreset k-means: 2 restarts") == 1


# --------------------------------------------------------------------------
# Bad and degenerate input


def test_more_clusters_than_samples():
    with pytest.raises(ValueError, match="n_samples=3 should be >= n_clusters=4"):
        DistributedKMeans(4).fit(np.eye(3))


def test_nan_is_rejected():
    X = np.ones((10, 2))
    X[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        DistributedKMeans(2).fit(X)


def test_negative_or_all_zero_sample_weight_is_rejected(blobs):
    X = blobs[0]
    with pytest.raises(ValueError, match="[Nn]egative"):
        DistributedKMeans(2).fit(X, sample_weight=-np.ones(X.shape[0]))
    with pytest.raises(ValueError, match="zero"):
        DistributedKMeans(2).fit(X, sample_weight=np.zeros(X.shape[0]))


def test_client_with_one_sample_sends_it_with_weight_one(blobs):
    X, y = blobs
    partitions = np.arange(X.shape[0]) % 3
    partitions[0] = 99
    km = DistributedKMeans(K, coreset_size=100, random_state=0)
    km.fit(X, partitions=partitions)
    ids = list(km.client_ids_)
    lone = ids.index(99)
    assert km.coreset_sample_counts_[lone] == 0
    assert km.coreset_client_weight_sums_[lone] == 1.0
    assert _upload_floats(km.communication_, "coreset sampling")[99] == X.shape[1] + 1
    assert adjusted_rand_score(y, km.labels_) == pytest.approx(1.0)


def test_every_client_smaller_than_k_is_exact():
    """With n_m <= k everywhere the coreset is the data itself."""
    X, _ = make_blobs(24, centers=3, n_features=2, random_state=0)
    km = DistributedKMeans(3, random_state=0)
    km.fit(X, partitions=np.arange(24) // 3)  # 8 clients of 3 samples
    assert not km.coreset_sample_counts_.any()
    np.testing.assert_array_equal(km.coreset_weights_, np.ones(24))
    ref = KMeans(3, n_init=10, random_state=0).fit(X)
    assert km.inertia_ == pytest.approx(ref.inertia_, rel=1e-9)


def test_constant_data_gives_one_cluster():
    X = np.full((30, 3), 2.5)
    km = DistributedKMeans(3, coreset_size=20, random_state=0)
    with pytest.warns(ConvergenceWarning, match="distinct clusters"):
        km.fit(X, partitions=3)
    assert len(np.unique(km.labels_)) == 1
    np.testing.assert_allclose(km.cluster_centers_, 2.5)
    assert km.inertia_ == 0.0
    # Local costs are all 0: nobody samples, the centers' counts are exact.
    assert not km.coreset_sample_counts_.any()
    np.testing.assert_array_equal(km.coreset_client_weight_sums_, [10, 10, 10])


def test_fewer_distinct_points_than_k_warns_but_fits():
    X = np.repeat(np.array([[0.0, 0.0], [5.0, 5.0]]), 10, axis=0)
    km = DistributedKMeans(3, coreset_size=20, random_state=0)
    with pytest.warns(ConvergenceWarning):
        km.fit(X, partitions=2)
    assert len(np.unique(km.labels_)) == 2
    assert km.inertia_ == 0.0


# --------------------------------------------------------------------------
# The protocol on its own, as FederatedKernelKMeans uses it


collectable("test_coreset", None, PUBLIC)


@client_step("test_coreset.derive")
def _store_rows(client, state, message):
    """A previous algorithm's round: keeps derived rows under its namespace."""
    return {"H": 2.0 * client.X, "other": "kept"}, None


def test_protocol_on_rows_kept_in_client_state(blobs):
    X, y = blobs
    rng = check_random_state(0)
    partitioning = check_partitions(np.arange(X.shape[0]) % 3, X.shape[0])
    with Federation.from_arrays(X, None, partitioning, random_state=rng) as fed:
        fed.run_round("derive", _store_rows)
        result = federated_coreset_kmeans(
            fed,
            n_clusters=K,
            # Large enough that D² sampling noise (mean center error 0.51 at
            # t = 90, 0.20 and at most 0.27 at 450 over 30 seeds) stays well
            # under the bound, below the 200 rows of each client (so that
            # the clients sample rather than send their rows).
            coreset_size=450,
            random_state=rng,
            rows=("test_coreset", "H"),
            exact_inertia=False,
        )
        labels = fed.assemble("coreset", "labels", X.shape[0])
        kept = fed.local_results("test_coreset")
    assert result.cluster_centers.shape == (K, X.shape[1])
    assert result.inertia == result.coreset_inertia
    assert result.coreset_size == 450 + 3 * K
    assert adjusted_rand_score(y, labels) == pytest.approx(1.0)
    # The coreset's rounds read the other protocol's state, never write it.
    assert all(v["other"] == "kept" for v in kept.values())
    assert all(v["H"].shape[1] == X.shape[1] for v in kept.values())
    # Rows were 2 X: centers live in that space.
    ref = KMeans(K, n_init=10, random_state=0).fit(2.0 * X)
    assert (
        np.min(
            np.linalg.norm(
                result.cluster_centers[:, None] - ref.cluster_centers_[None], axis=2
            ),
            axis=1,
        ).max()
        < 0.5
    )
    # No "labels" round upload without exact_inertia.
    assert _upload_floats(fed.log, "coreset labels") == dict.fromkeys(range(3), 0)


@client_step("test_coreset.failing_rows")
def _failing_rows(client, state, message):
    if client.client_id == 1:
        raise ValueError("bad rows on this client")
    return {"X": client.X}, None


def test_client_error_names_the_client(blobs):
    X, _ = blobs
    rng = check_random_state(0)
    partitioning = check_partitions(np.arange(X.shape[0]) % 2, X.shape[0])
    with Federation.from_arrays(X, None, partitioning, random_state=rng) as fed:
        with pytest.raises(ClientValueError, match="Client 1"):
            fed.run_round("derive", _failing_rows)
            federated_coreset_kmeans(
                fed,
                n_clusters=2,
                coreset_size=10,
                random_state=rng,
                rows=("test_coreset", "X"),
            )


def test_steps_travel_by_name_with_data_options():
    import pickle

    from skfed._engine._protocol import as_step_call
    from skfed.cluster._protocols._coreset import _coreset_step

    call = as_step_call(partial(_coreset_step, rows=("other", "H"), weighted=False))
    assert call.name == "coreset.sample" and call.namespace == "coreset"
    assert call.module == "skfed.cluster._protocols._coreset"
    assert pickle.loads(pickle.dumps(call)) == call
    # Code never travels: an option that is a function is refused.
    with pytest.raises(TypeError, match="options are data"):
        as_step_call(partial(_coreset_step, rows=_store_rows, weighted=False))


def test_no_warning_on_ordinary_fit(blobs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DistributedKMeans(K, coreset_size=50, random_state=0).fit(
            blobs[0], partitions=3
        )


# -- hostile input --------------------------------------------------------


def test_far_from_the_origin_the_clustering_and_its_quality_hold():
    # A probe: at an offset of 1e9 the ARI was 0.0 (KMeans 0.77);
    # distances expanded on raw coordinates cancelled.
    X, y = make_blobs(300, centers=3, n_features=2, random_state=0)
    ids = np.arange(300) % 3
    km = KMeans(3, n_init=10, random_state=0).fit(X)
    for offset in (0.0, 1e8, 1e9):
        est = DistributedKMeans(3, random_state=0).fit(X + offset, partitions=ids)
        # These blobs overlap: KMeans itself scores 0.77 against the truth.
        assert adjusted_rand_score(y, est.labels_) > 0.74
        # inertia_ is the exact cost of the labels, at any offset.
        centered = X - est.cluster_centers_[est.labels_] + offset
        np.testing.assert_allclose(est.inertia_, (centered**2).sum(), rtol=1e-5)
        assert est.inertia_ <= 1.05 * km.inertia_
        np.testing.assert_array_equal(est.predict(X + offset), est.labels_)
        np.testing.assert_allclose(
            est.transform(X + offset).min(axis=1) ** 2,
            ((centered) ** 2).sum(axis=1),
            atol=1e-6,
        )


def test_a_budget_that_covers_the_rows_sends_the_rows():
    # t_m >= n_m: the client's rows, weight 1 each, are exact and no larger.
    # Three translated copies of one client's data have equal local costs,
    # hence equal shares t_m = 40 = n_m of the clipped budget.
    A, _ = make_blobs(40, centers=3, n_features=4, random_state=0)
    X = np.vstack([A, A + 30.0, A + 60.0])
    ids = np.repeat(np.arange(3), 40)
    with pytest.warns(UserWarning, match="coreset_size=5000 exceeds the 120"):
        est = DistributedKMeans(3, coreset_size=5000, random_state=0).fit(
            X, partitions=ids
        )
    np.testing.assert_array_equal(est.coreset_sample_counts_, [40, 40, 40])
    assert est.coreset_size_ == 120
    np.testing.assert_allclose(est.coreset_weights_, 1.0)
    assert _upload_floats(est.communication_, "coreset sampling") == dict.fromkeys(
        range(3), 40 * (4 + 1)
    )
    ref = KMeans(3, n_init=10, random_state=0).fit(X)
    np.testing.assert_allclose(est.inertia_, ref.inertia_, rtol=1e-9)


def test_zero_weights_are_as_if_removed():
    # Documented as "as if removed": a probe measured cost 55.0 vs 53.9.
    X, _ = make_blobs(400, centers=4, n_features=3, random_state=0)
    rng = np.random.RandomState(0)
    w = np.where(rng.rand(400) < 0.2, 0.0, 1.0)
    ids = np.arange(400) % 4
    for seed in range(5):
        a = DistributedKMeans(4, coreset_size=200, random_state=seed)
        a.fit(X, partitions=ids, sample_weight=w)
        b = DistributedKMeans(4, coreset_size=200, random_state=seed)
        b.fit(X[w > 0], partitions=ids[w > 0])
        np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, atol=1e-10)
        np.testing.assert_allclose(a.inertia_, b.inertia_, rtol=1e-10)


def test_oversized_n_init_is_clipped_not_run():
    X, _ = make_blobs(60, centers=3, n_features=2, random_state=0)
    with pytest.warns(UserWarning, match="n_init=10000000 exceeds"):
        DistributedKMeans(3, coreset_size=20, n_init=10**7, random_state=0).fit(
            X, partitions=3
        )


def test_client_ids_of_mixed_types_are_kept_as_given():
    X, _ = make_blobs(60, centers=3, n_features=2, random_state=0)
    ids = np.array([1, "1"] * 30, dtype=object)
    est = DistributedKMeans(2, coreset_size=20, random_state=0).fit(X, partitions=ids)
    assert est.client_ids_.tolist() == [1, "1"]


def test_server_lloyd_stopped_by_max_iter_warns():
    X, _ = make_blobs(600, centers=6, n_features=2, cluster_std=2.0, random_state=0)
    with pytest.warns(ConvergenceWarning, match="stopped at max_iter=1"):
        DistributedKMeans(6, coreset_size=300, max_iter=1, random_state=0).fit(
            X, partitions=3
        )


def test_points_equal_up_to_rounding_get_one_label():
    # Rows that differ only in their last bit (as a kernel embedding of
    # constant data computed on two clients can): one cluster, not labels
    # split by rounding. FederatedKernelKMeans' constant-data test depended
    # on the BLAS thread count through this.
    X = np.ones((40, 3))
    X[::2] = np.nextafter(1.0, 2.0)
    with pytest.warns(ConvergenceWarning, match="distinct clusters"):
        est = DistributedKMeans(2, random_state=0).fit(X, partitions=2)
    assert np.unique(est.labels_).tolist() == [0]
    assert np.unique(est.predict(X)).tolist() == [0]


def test_secure_aggregation_of_the_refinement_far_from_the_origin(blobs):
    # The refinement's sums are of displacements from the centers: far from
    # the origin they stay within the masks' fixed-point range (2^31 / M),
    # where sums of the rows themselves (25 rows per cluster at 1e8) would not.
    X, _ = blobs
    X = X[:300] + 1e8
    params = {"n_clusters": K, "coreset_size": 60, "refine_iter": 2}
    plain = DistributedKMeans(**params, random_state=0).fit(X, partitions=3)
    masked = DistributedKMeans(**params, secure_aggregation=True, random_state=0)
    masked.fit(X, partitions=3)
    assert masked.n_refine_iter_ == plain.n_refine_iter_ >= 1
    np.testing.assert_allclose(
        masked.cluster_centers_, plain.cluster_centers_, rtol=0, atol=1e-6
    )
    assert adjusted_rand_score(plain.labels_, masked.labels_) == 1.0


def test_a_private_fit_finds_the_clusters_within_its_budget():
    # Noised cells and Lloyd rounds on summed statistics of the rows
    # clipped into the bounds: on separated blobs as good as KMeans.
    from skfed.privacy import DifferentialPrivacy

    X, y = make_blobs(
        n_samples=6000, centers=K, n_features=3, cluster_std=0.5, random_state=0
    )
    lower, upper = X.min(axis=0) - 1, X.max(axis=0) + 1
    dp = DifferentialPrivacy(epsilon=2.0, delta=1e-6, bounds=(lower, upper))
    km = DistributedKMeans(K, privacy=dp, random_state=0).fit(X, partitions=3)
    reference = KMeans(K, n_init=3, random_state=0).fit(X)
    assert normalized_mutual_info_score(y, km.labels_) >= (
        normalized_mutual_info_score(y, reference.labels_) - 0.05
    )
    assert km.privacy_spent_[0] <= 2.0 * (1 + 1e-9)
    assert km.inertia_ == pytest.approx(-km.score(X))
    assert not hasattr(km, "coreset_")
    rounds = [r["name"] for r in km.communication_.disclosure() if r["noised"]]
    assert rounds == ["private cells"] * 2 + ["private lloyd"] * km.n_iter_
    # Weights would scale what one row can change: refused.
    with pytest.raises(ValueError, match="sample_weight"):
        DistributedKMeans(K, privacy=dp).fit(
            X, partitions=3, sample_weight=np.ones(len(X))
        )


# -- compute_labels -------------------------------------------------------------


def test_compute_labels_false_keeps_the_model_and_gathers_no_label(hard, monkeypatch):
    partitions = np.arange(hard.shape[0]) % 5
    reference = DistributedKMeans(8, random_state=0).fit(hard, partitions=partitions)
    gathered = gathered_outputs(monkeypatch)
    km = DistributedKMeans(8, random_state=0, compute_labels=False)
    km.fit(hard, partitions=partitions)
    assert gathered == []
    assert not hasattr(km, "labels_")
    # The same rounds and server steps: the same model, bit for bit.
    np.testing.assert_array_equal(km.cluster_centers_, reference.cluster_centers_)
    assert km.inertia_ == reference.inertia_
    assert km.communication_.to_records() == reference.communication_.to_records()
    # fit_predict labels the training rows as the clients did.
    labels = DistributedKMeans(8, random_state=0, compute_labels=False).fit_predict(
        hard, partitions=partitions
    )
    np.testing.assert_array_equal(labels, reference.labels_)
    # A refit leaves no labels_ from an earlier fit that gathered them.
    km.set_params(compute_labels=True).fit(hard, partitions=partitions)
    km.set_params(compute_labels=False).fit(hard, partitions=partitions)
    assert not hasattr(km, "labels_")


def test_duplicated_centers_warn_without_labels():
    X = np.full((30, 3), 2.5)
    km = DistributedKMeans(3, coreset_size=20, random_state=0, compute_labels=False)
    with pytest.warns(ConvergenceWarning, match=r"distinct clusters \(1\)"):
        km.fit(X, partitions=3)
    assert not hasattr(km, "labels_")


def test_fit_predict_without_labels_refuses_rows_it_cannot_predict(monkeypatch):
    # Rows held by Flower nodes cannot be predicted here: refused before
    # any round, rather than after a fit whose labels stayed on the nodes.
    from skfed._engine._remote import RemoteArray

    class Nodes(RemoteArray):
        shape, dtype = (100, 3), np.dtype(np.float64)

    def no_fit(*args, **kwargs):
        raise AssertionError("fitted")

    monkeypatch.setattr(DistributedKMeans, "fit", no_fit)
    with pytest.raises(ValueError, match="compute_labels=True"):
        DistributedKMeans(2, compute_labels=False).fit_predict(Nodes())
