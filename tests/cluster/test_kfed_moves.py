"""KFed's large-client local step: split-and-merge moves and the
``local_step="auto"`` rule that takes them."""

import joblib
import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

import skfed.cluster._protocols._kfed_local as kfed_module
from skfed import KFed
from skfed.cluster._kmeans import lloyd_rows
from skfed.cluster._protocols._kfed_moves import improve_by_moves

SMALL_ROWS = kfed_module.SMALL_ROWS


def mixture(n, d, k, separation, seed):
    """k Gaussians N(μ_r, I_d), means ``separation`` apart on average."""
    rng = np.random.RandomState(seed)
    means = rng.normal(scale=separation / np.sqrt(2 * d), size=(k, d))
    y = rng.randint(k, size=n)
    return means[y] + rng.normal(size=(n, d)), y


def cost(X, centers, labels, weights=None):
    sq = ((X - centers[labels]) ** 2).sum(axis=1)
    return float(sq.sum() if weights is None else weights @ sq)


def test_moves_leave_a_lloyd_local_optimum_for_the_best_clustering():
    # Four blobs; Lloyd started with two centers in one blob and one
    # between two others stays there. One move (merge the pair, split the
    # shared center) reaches the clustering of the blobs.
    X, y = make_blobs(
        800,
        centers=[[0, 0], [10, 0], [0, 10], [10, 10]],
        cluster_std=0.5,
        random_state=0,
    )
    init = np.array([[-0.5, 0.0], [0.5, 0.0], [5.0, 0.0], [5.0, 10.0]])
    km = KMeans(4, init=init, n_init=1).fit(X)
    stuck = cost(X, km.cluster_centers_, km.labels_)
    assert adjusted_rand_score(y, km.labels_) < 0.9  # the trap works
    moves = improve_by_moves(
        lloyd_rows(X, np.ones(len(X)), 1e-4),
        km.cluster_centers_,
        km.labels_,
        max_iter=300,
    )
    assert moves.n_moves >= 1
    assert adjusted_rand_score(y, moves.labels) == 1.0
    best = KMeans(4, n_init=10, random_state=0).fit(X).inertia_
    assert cost(X, moves.centers, moves.labels) == pytest.approx(best, rel=1e-9)
    assert cost(X, moves.centers, moves.labels) < stuck


@pytest.mark.parametrize("seed", range(4))
def test_moves_never_raise_the_weighted_cost(seed):
    # Whatever the data (here overlapping clusters, where most moves fail),
    # a kept round lowers the cost and a failed one is undone; the centers
    # are the weighted means of their clusters.
    rng = np.random.RandomState(seed)
    X, _ = mixture(600, 4, 6, 3.0, seed)
    w = rng.uniform(0.5, 2.0, size=len(X))
    km = KMeans(10, n_init=1, random_state=seed).fit(X, sample_weight=w)
    sums = np.zeros((10, 4))
    np.add.at(sums, km.labels_, w[:, None] * X)
    sizes = np.bincount(km.labels_, weights=w, minlength=10)
    start = sums / sizes[:, None]
    moves = improve_by_moves(lloyd_rows(X, w, 1e-4), start, km.labels_, max_iter=300)
    assert cost(X, moves.centers, moves.labels, w) <= cost(X, start, km.labels_, w)
    for r in range(10):
        members = moves.labels == r
        if members.any():
            assert_allclose(
                moves.centers[r], np.average(X[members], axis=0, weights=w[members])
            )


def test_auto_rule_takes_the_moves_on_large_dense_clients_only():
    dense_large = np.zeros((SMALL_ROWS + 1, 3))
    dense_small = np.zeros((SMALL_ROWS, 3))
    sparse_large = sp.csr_matrix(dense_large)
    assert kfed_module._moves_client(dense_large, "auto")
    assert not kfed_module._moves_client(dense_small, "auto")
    assert not kfed_module._moves_client(sparse_large, "auto")
    for step in ("best", "awasthi-sheffet"):
        assert not kfed_module._moves_client(dense_large, step)
    assert KFed().local_step == "auto"


def test_auto_runs_the_moves_where_the_rule_says(monkeypatch):
    # One client above SMALL_ROWS rows, two below: the moves run once, on
    # the large client's rows, with one seeding (n_init=1) there.
    X, _ = mixture(SMALL_ROWS + 1 + 2 * 500, 5, 8, 10.0, 0)
    partitions = np.repeat([0, 1, 2], [SMALL_ROWS + 1, 500, 500])
    calls = []
    real_moves, real_as = kfed_module.improve_by_moves, kfed_module._awasthi_sheffet

    def moves(rows, *args, **kwargs):
        calls.append(rows.X.shape[0])
        return real_moves(rows, *args, **kwargs)

    seedings = []

    def awasthi_sheffet(X, *args, n_init, **kwargs):
        seedings.append((X.shape[0], n_init))
        return (yield from real_as(X, *args, n_init=n_init, **kwargs))

    monkeypatch.setattr(kfed_module, "improve_by_moves", moves)
    monkeypatch.setattr(kfed_module, "_awasthi_sheffet", awasthi_sheffet)
    KFed(8, random_state=0).fit(X, partitions=partitions)
    assert calls == [SMALL_ROWS + 1]
    assert sorted(seedings) == [(500, 3), (500, 3), (SMALL_ROWS + 1, 1)]


def test_auto_is_best_on_small_clients():
    # Clients of at most SMALL_ROWS rows keep "best": the same model.
    X, _ = mixture(1200, 6, 8, 8.0, 1)
    auto = KFed(8, random_state=0).fit(X, partitions=4)
    best = KFed(8, local_step="best", random_state=0).fit(X, partitions=4)
    assert_array_equal(auto.labels_, best.labels_)
    assert_allclose(auto.cluster_centers_, best.cluster_centers_)


@pytest.mark.parametrize("seed", range(3))
def test_auto_matches_best_on_large_mixture_clients(seed):
    # IID clients above SMALL_ROWS rows, k(z) = k = 32: the moves' local
    # clusterings cost no more than "best"'s (three restarts of Algorithm 1
    # and of plain k-means), so the fitted model is at least as close to
    # KMeans' cost and to the mixture's labels (on these seeds it is
    # closer: cost 0.95-0.97 of KMeans(n_init=3)'s against 0.98-1.01).
    k = 32
    X, y = mixture(3 * (SMALL_ROWS + 500), 10, k, 10.0, seed)
    auto = KFed(k, random_state=seed).fit(X, partitions=3)
    best = KFed(k, local_step="best", random_state=seed).fit(X, partitions=3)
    km = KMeans(k, n_init=3, random_state=seed).fit(X)
    assert auto.inertia_ <= 1.005 * best.inertia_
    assert auto.inertia_ <= 1.0 * km.inertia_
    assert adjusted_rand_score(y, auto.labels_) >= 0.95
    assert (
        adjusted_rand_score(y, auto.labels_)
        >= adjusted_rand_score(y, best.labels_) - 0.01
    )


@pytest.mark.parametrize("backend", ["threading", "loky"])
def test_moves_invariant_to_n_jobs(backend):
    # Large clients where one seeding leaves local errors, so that moves are
    # made: the model does not depend on where the clients run.
    X, _ = mixture(2 * (SMALL_ROWS + 300), 8, 24, 8.0, 3)
    reference = KFed(24, random_state=0).fit(X, partitions=2)
    with joblib.parallel_config(backend=backend):
        model = KFed(24, n_jobs=2, random_state=0).fit(X, partitions=2)
    assert_array_equal(model.labels_, reference.labels_)
    assert_allclose(model.cluster_centers_, reference.cluster_centers_, rtol=1e-12)


@pytest.mark.parametrize(("scale", "shift"), [(1e-3, 0.0), (1e3, -5.0), (1.0, 1e6)])
def test_moves_path_invariant_to_translation_and_scale(scale, shift):
    # Well-separated blobs on large clients: the model on s X + t is the
    # model on X scaled and shifted.
    X, _ = make_blobs(
        2 * (SMALL_ROWS + 100),
        centers=12,
        n_features=4,
        cluster_std=0.4,
        center_box=(-30, 30),
        random_state=2,
    )
    ref = KFed(12, random_state=0).fit(X, partitions=2)
    model = KFed(12, random_state=0).fit(scale * X + shift, partitions=2)
    assert adjusted_rand_score(model.labels_, ref.labels_) == 1.0
    atol = 1e-9 * (abs(shift) + scale * np.abs(X).max())
    assert_allclose(
        np.sort((model.cluster_centers_ - shift) / scale, axis=0),
        np.sort(ref.cluster_centers_, axis=0),
        atol=atol / scale,
    )


def test_single_seeding_on_large_clients_is_greedy_float32(monkeypatch):
    # Below GREEDY_MIN_CLUSTERS a single seeding (as "auto" runs on large
    # clients) still takes the float32 greedy seeding: once per large
    # client, never on the small one (batched there).
    X, _ = mixture(SMALL_ROWS + 1 + 500, 5, 8, 10.0, 0)
    partitions = np.repeat([0, 1], [SMALL_ROWS + 1, 500])
    calls = []
    real = kfed_module.weighted_kmeans_plusplus

    def greedy(X_f32, *args, **kwargs):
        calls.append(X_f32.shape[0])
        return real(X_f32, *args, **kwargs)

    monkeypatch.setattr(kfed_module, "weighted_kmeans_plusplus", greedy)
    assert 8 < kfed_module.GREEDY_MIN_CLUSTERS
    KFed(8, random_state=0).fit(X, partitions=partitions)
    assert calls == [SMALL_ROWS + 1]


def test_large_clients_seed_on_a_sample_of_their_rows(monkeypatch):
    # Algorithm 1's seeding ν on a client above SEEDING_ROWS rows runs on
    # SEEDING_ROWS draws of them (fewer distinct rows, weighted by their
    # draws, of the client's total weight); Lloyd from θ and the moves still
    # run on every row; a client of SEEDING_ROWS rows, and a small one,
    # seed on all their rows.
    size = kfed_module.SEEDING_ROWS
    X, y = mixture(2 * size + 700 + 300, 5, 8, 10.0, 0)
    partitions = np.repeat([0, 1, 2], [size + 700, size, 300])
    seeded, lloyd_rows_seen = [], []
    real_kmeans = kfed_module._kmeans

    def kmeans(X, weights, n_clusters, **kwargs):
        if kwargs.get("init") is not None:
            lloyd_rows_seen.append(X.shape[0])
        else:
            seeded.append((X.shape[0], weights.sum()))
        return (yield from real_kmeans(X, weights, n_clusters, **kwargs))

    monkeypatch.setattr(kfed_module, "_kmeans", kmeans)
    model = KFed(8, random_state=0).fit(X, partitions=partitions)
    assert sorted(lloyd_rows_seen) == [300, size, size + 700]
    rows, total = zip(*sorted(seeded))
    assert rows[:2] == (300, 300)  # the small client seeds twice
    assert size // 2 < rows[2] < size and rows[3] == size
    assert_allclose(total, [300, 300, size + 700, size])
    km = KMeans(8, n_init=10, random_state=0).fit(X)
    assert model.inertia_ <= 1.001 * km.inertia_
    assert (
        adjusted_rand_score(y, model.labels_)
        >= adjusted_rand_score(y, km.labels_) - 0.01
    )


class _Client:
    """A client's random streams, as the seeding sample draws them."""

    def random_state(self, name):
        return np.random.RandomState(0)


def test_seeding_sample_grows_with_local_clusters_and_follows_weights():
    # At least 32 draws per local cluster: SEEDING_ROWS draws would leave
    # fewer here, so all the rows of this client are kept.
    size = kfed_module.SEEDING_ROWS
    rng = np.random.RandomState(0)
    projected = rng.normal(size=(size + 10, 3))
    weights = np.ones(len(projected))
    rows, w = kfed_module._seeding_sample(projected, weights, 200, size, _Client())
    assert rows is projected and w is weights
    # A row holding half of the weight is in the sample and keeps about
    # half of it; the rows drawn keep their order.
    weights[7] = weights.sum() - 1.0
    rows, w = kfed_module._seeding_sample(projected, weights, 8, size, _Client())
    index = [int(np.flatnonzero((projected == r).all(axis=1))[0]) for r in rows]
    assert np.all(np.diff(index) > 0)
    assert w.sum() == pytest.approx(weights.sum())
    assert w[index.index(7)] / w.sum() == pytest.approx(0.5, abs=0.03)


def test_large_weighted_clients_invariant_to_sample_order():
    # The seeding sample is drawn on the rows in an order of their own
    # contents, so permuting the samples (with their weights) of clients
    # above SEEDING_ROWS rows does not change the model.
    size = kfed_module.SEEDING_ROWS
    X, _ = mixture(2 * (size + 400), 6, 12, 8.0, 4)
    partitions = np.repeat([0, 1], size + 400)
    weights = np.random.RandomState(1).uniform(0.5, 2.0, size=len(X))
    perm = np.random.RandomState(2).permutation(len(X))
    a = KFed(12, random_state=3).fit(X, partitions=partitions, sample_weight=weights)
    b = KFed(12, random_state=3).fit(
        X[perm], partitions=partitions[perm], sample_weight=weights[perm]
    )
    assert_allclose(b.cluster_centers_, a.cluster_centers_, rtol=1e-12)
    assert_array_equal(b.labels_, a.labels_[perm])


def _split_savings_one_by_one(X, w, centers, labels, power_steps, split_steps):
    """The split of each cluster computed on its own rows (a reference)."""
    savings = np.zeros(len(centers))
    halves = np.zeros((len(centers), 2, X.shape[1]))
    for j in range(len(centers)):
        rows = labels == j
        if rows.sum() < 2:
            continue
        Y, wj = X[rows] - centers[j], w[rows]
        axis = Y[np.argmax((Y**2).sum(axis=1))]
        for _ in range(power_steps):
            axis = (wj * (Y @ axis)) @ Y
            if np.linalg.norm(axis) == 0:
                break
            axis = axis / np.linalg.norm(axis)
        side = Y @ axis > 0
        for step in range(split_steps + 1):
            if not 0 < wj[side].sum() < wj.sum():
                break
            a = wj[side] @ Y[side] / wj[side].sum()
            b = wj[~side] @ Y[~side] / wj[~side].sum()
            if step < split_steps:
                side = ((Y - a) ** 2).sum(axis=1) < ((Y - b) ** 2).sum(axis=1)
        else:
            m = wj @ Y / wj.sum()
            savings[j] = cost(Y, m[None], np.zeros(len(Y), int), wj) - cost(
                Y, np.array([a, b]), (~side).astype(int), wj
            )
            halves[j] = a + centers[j], b + centers[j]
    return savings, halves


def test_split_savings_are_each_clusters_own_split():
    # All clusters split at once give what each cluster's own rows give,
    # and the saving is the fall in weighted cost of the split found;
    # clusters of no row, of one row and of rows all at their center save
    # nothing.
    from skfed.cluster._protocols import _kfed_moves

    X, _ = mixture(3000, 7, 10, 6.0, 5)
    w = np.random.RandomState(0).uniform(0.5, 2.0, size=len(X))
    labels = KMeans(10, n_init=1, random_state=0).fit(X).labels_
    labels[labels == 9] = 8  # cluster 9 has no row
    labels[0] = 9  # ... now one row
    X[labels == 7] = X[labels == 7][0]  # cluster 7: its rows at one point
    centers = np.array(
        [X[labels == j].mean(axis=0) for j in range(10)], dtype=np.float64
    )
    savings, halves = _kfed_moves._split_savings(X, w, centers, labels)
    expected_savings, expected_halves = _split_savings_one_by_one(
        X, w, centers, labels, _kfed_moves._POWER_STEPS, _kfed_moves._SPLIT_STEPS
    )
    assert_allclose(savings, expected_savings, rtol=1e-9, atol=1e-9)
    assert_allclose(halves, expected_halves, rtol=1e-9, atol=1e-9)
    assert savings[7] == savings[9] == 0.0
    assert np.all(savings[:7] > 0)
