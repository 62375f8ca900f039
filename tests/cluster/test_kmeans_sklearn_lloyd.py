"""The large clients' Lloyd (skfed.cluster._kmeans._sklearn_lloyd) against
scikit-learn's KMeans from the same start, and KFed's use of it. Every run is checked on
both of its passes: scikit-learn's compiled iteration and the NumPy pass
that releases without it take."""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score

import skfed.cluster._kmeans._sklearn_lloyd as lloyd_module
import skfed.cluster._protocols._kfed_local as kfed_module
from skfed import KFed
from skfed.cluster._kmeans import lloyd, lloyd_rows, weighted_cost


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def lloyd_pass(request, monkeypatch):
    """Each test once with scikit-learn's compiled iteration and once with
    the NumPy pass (as on a release without it)."""
    if request.param == "numpy":
        monkeypatch.setattr(lloyd_module, "_compiled_iteration", None)
    else:
        assert lloyd_module._compiled_iteration is not None
    return request.param


def mixture(n, d, k, separation, seed):
    rng = np.random.RandomState(seed)
    means = rng.normal(scale=separation / np.sqrt(2 * d), size=(k, d))
    y = rng.randint(k, size=n)
    return means[y] + rng.normal(size=(n, d)), y


def lloyd_and_kmeans(X, w, start, *, rtol, cost_rel=None):
    """Lloyd and ``KMeans(init=start, n_init=1)`` (tol 1e-4) on the same
    weighted rows: the same centers to ``rtol`` and the same cost to
    ``cost_rel`` (pytest.approx's default when None). Returns Lloyd's run
    and the fitted KMeans."""
    km = KMeans(len(start), init=start, n_init=1, tol=1e-4).fit(X, sample_weight=w)
    centers, labels, n_iter = lloyd(lloyd_rows(X, w, 1e-4), start, max_iter=300)
    assert_allclose(centers, km.cluster_centers_, rtol=rtol, atol=rtol)
    cost = weighted_cost(X, w, centers, labels)
    assert cost == pytest.approx(km.inertia_, rel=cost_rel)
    return (centers, labels, n_iter), km


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_lloyd_matches_kmeans_from_the_same_start(seed, weighted, dtype):
    # The same iterations as KMeans(init=start, n_init=1): the same fixed
    # point, centers and cost within rounding.
    X, _ = mixture(3000, 7, 9, 4.0, seed)
    X = X.astype(dtype)
    rng = np.random.RandomState(seed)
    w = rng.uniform(0.2, 3.0, len(X)) if weighted else np.ones(len(X))
    start = X[rng.choice(len(X), 9, replace=False)]
    rtol = 1e-9 if dtype == np.float64 else 1e-4
    (centers, labels, n_iter), km = lloyd_and_kmeans(
        X, w, start, rtol=rtol, cost_rel=rtol
    )
    assert centers.dtype == dtype
    assert np.mean(labels == km.labels_) > 0.999
    # KMeans counts the pass that finds the labels unchanged; we do not.
    assert km.n_iter_ - 1 <= n_iter <= km.n_iter_


def test_lloyd_stops_at_max_iter_and_labels_match_its_centers():
    X, _ = mixture(2500, 5, 12, 2.0, 0)
    w = np.ones(len(X))
    start = X[:12]
    centers, labels, n_iter = lloyd(lloyd_rows(X, w, 0.0), start, max_iter=2)
    km = KMeans(12, init=start, n_init=1, max_iter=2, tol=0.0).fit(X)
    assert n_iter == 2
    assert_allclose(centers, km.cluster_centers_, rtol=1e-10, atol=1e-10)
    nearest = np.argmin(((X[:, None, :] - centers[None]) ** 2).sum(axis=2), axis=1)
    assert_array_equal(labels, nearest)


def test_empty_cluster_takes_the_farthest_row_as_kmeans_does():
    # Two far blobs; three of the four starts sit far away from every
    # row but one, so their clusters are empty after the first assignment
    # and must be relocated to the rows farthest from their centers.
    rng = np.random.RandomState(0)
    X = np.vstack([rng.normal(size=(300, 2)), rng.normal(size=(300, 2)) + 20])
    X[0] = [-9.0, -9.0]  # one far row of the first blob
    start = np.array([[0.0, 0.0], [100.0, 100.0], [20.0, 20.0], [-100.0, 100.0]])
    (_, labels, _), _ = lloyd_and_kmeans(X, np.ones(len(X)), start, rtol=1e-9)
    # No center is lost to an empty cluster.
    assert len(np.unique(labels)) == 4


def test_duplicate_rows_match_kmeans():
    # Many copies of a few rows (weighted): the same run as KMeans.
    rng = np.random.RandomState(1)
    base = rng.normal(size=(40, 3)) * 3
    X = base[rng.randint(40, size=2200)]
    start = base[:6] + 0.5
    w = rng.uniform(0.5, 1.5, len(X))
    lloyd_and_kmeans(X, w, start, rtol=1e-9)


def test_repeated_starts_end_at_a_lloyd_fixed_point():
    # Repeated start centers: the repeats' clusters are empty after the
    # first assignment and take far rows (here copies of a few rows, so
    # ties between equally far rows). The run ends finite, every center
    # the mean of its cluster or kept, every row at its nearest center.
    rng = np.random.RandomState(1)
    base = rng.normal(size=(6, 3)) * 10
    X = base[rng.randint(6, size=2200)]
    start = np.vstack([base[:3], base[:3]])
    w = rng.uniform(0.5, 1.5, len(X))
    centers, labels, n_iter = lloyd(lloyd_rows(X, w, 0.0), start, max_iter=300)
    assert np.isfinite(centers).all() and n_iter < 300
    sq = ((X[:, None, :] - centers[None]) ** 2).sum(axis=2)
    assert_allclose(sq[np.arange(len(X)), labels], sq.min(axis=1), atol=1e-9)
    for r in np.unique(labels):
        members = labels == r
        assert_allclose(
            centers[r], np.average(X[members], axis=0, weights=w[members]), atol=1e-9
        )
    # More than the three distinct starts survive.
    assert len(np.unique(labels)) > 3


def test_weights_act_as_multiplicities():
    # Integer weights give the run on the rows repeated that many times.
    X, _ = mixture(2100, 4, 5, 5.0, 2)
    counts = np.random.RandomState(2).randint(1, 4, size=len(X))
    start = X[:5]
    weighted = lloyd(lloyd_rows(X, counts.astype(float), 1e-4), start, max_iter=300)
    repeated = np.repeat(X, counts, axis=0)
    plain = lloyd(
        lloyd_rows(repeated, np.ones(len(repeated)), 1e-4), start, max_iter=300
    )
    assert_allclose(weighted[0], plain[0], rtol=1e-9, atol=1e-9)
    assert_array_equal(np.repeat(weighted[1], counts), plain[1])
    assert weighted[2] == plain[2]


def test_large_clients_make_no_kmeans_fit(monkeypatch):
    # Large dense clients under the defaults cluster with the Lloyd above,
    # rows prepared once: no scikit-learn KMeans fit (whose set-up on every
    # call was half of such a client's step).
    def refuse(*args, **kwargs):
        raise AssertionError("KMeans.fit called")

    monkeypatch.setattr(kfed_module.KMeans, "fit", refuse)
    X, y = mixture(3 * 2500, 6, 8, 10.0, 0)
    model = KFed(8, random_state=0).fit(X, partitions=np.repeat([0, 1, 2], 2500))
    assert model.cluster_centers_.shape == (8, 6)
    # The clustering is that of the mixture.
    assert normalized_mutual_info_score(y, model.labels_) > 0.95


def test_lloyd_on_kfed_clients_reaches_kmeans_cost():
    # Each large client's uploaded centers cost no more (within 1%) than
    # KMeans(n_init=1) on that client's rows alone.
    X, _ = mixture(2 * 3000, 10, 12, 8.0, 3)
    partitions = np.repeat([0, 1], 3000)
    model = KFed(12, random_state=0).fit(X, partitions=partitions)
    for z, centers in model.local_centers_.items():
        rows = X[partitions == z]
        d2 = ((rows[:, None, :] - centers[None]) ** 2).sum(axis=2).min(axis=1)
        km = KMeans(12, n_init=1, random_state=0).fit(rows)
        assert d2.sum() <= 1.01 * km.inertia_


def test_max_iter_zero_only_assigns(lloyd_pass):
    X, _ = mixture(2100, 3, 4, 5.0, 6)
    start = X[:4]
    centers, labels, n_iter = lloyd(
        lloyd_rows(X, np.ones(len(X)), 1e-4), start, max_iter=0
    )
    assert n_iter == 0
    assert_array_equal(centers, start)
    nearest = np.argmin(((X[:, None, :] - start[None]) ** 2).sum(axis=2), axis=1)
    assert_array_equal(labels, nearest)
