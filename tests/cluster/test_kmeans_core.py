"""The k-means core of skfed.cluster (skfed.cluster._kmeans): the one
weighted k-means++, weighted Lloyd and assignment every k-means of the
package is built from, against scikit-learn's KMeans and brute force."""

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.cluster import KMeans, kmeans_plusplus
from sklearn.datasets import make_blobs

from skfed.cluster._kmeans import (
    assign,
    assign_around_centers,
    cluster_means,
    cluster_sums,
    nearest,
    sq_norms,
    tolerance,
    weighted_cost,
    weighted_kmeans,
    weighted_kmeans_plusplus,
    weighted_lloyd,
)


def blobs(n=600, k=5, d=3, seed=0, std=1.0):
    X, y = make_blobs(n, centers=k, n_features=d, cluster_std=std, random_state=seed)
    return X - X.mean(axis=0), y


def brute_sq_dist(X, centers):
    return ((X[:, None, :] - centers[None, :, :]) ** 2).sum(axis=2)


@pytest.mark.parametrize("seed", range(3))
def test_lloyd_from_a_start_matches_kmeans(seed):
    # The same iterations as KMeans(init=start, n_init=1, algorithm="lloyd")
    # with unit weights: the same fixed point and labels. KMeans counts the
    # pass that finds the labels unchanged as an iteration, Lloyd here the
    # updates: at most one apart.
    X, _ = blobs(seed=seed, std=2.5)
    rng = np.random.RandomState(seed)
    start = X[rng.choice(len(X), 5, replace=False)]
    w = np.ones(len(X))
    km = KMeans(5, init=start, n_init=1, tol=1e-4, algorithm="lloyd").fit(X)
    centers, labels, d2, n_iter = weighted_lloyd(
        X, w, start.copy(), sq_norms(X), 300, tolerance(X, w, 1e-4)
    )
    assert_allclose(centers, km.cluster_centers_, rtol=1e-9, atol=1e-9)
    assert_array_equal(labels, km.labels_)
    assert km.n_iter_ - 1 <= n_iter <= km.n_iter_
    assert float(w @ d2) == pytest.approx(km.inertia_, rel=1e-9)


def test_lloyd_with_weights_matches_kmeans_with_sample_weight():
    X, _ = blobs(seed=3, std=2.0)
    w = np.random.RandomState(3).uniform(0.2, 3.0, len(X))
    start = X[:5]
    km = KMeans(5, init=start, n_init=1, tol=1e-4).fit(X, sample_weight=w)
    # KMeans' tolerance is the unweighted variance's; ours the weighted
    # one's: both stop at the fixed point here (tol small against moves).
    centers, labels, d2, _ = weighted_lloyd(X, w, start.copy(), sq_norms(X), 300, 0.0)
    assert_allclose(centers, km.cluster_centers_, rtol=1e-9, atol=1e-9)
    assert_array_equal(labels, km.labels_)
    assert float(w @ d2) == pytest.approx(km.inertia_, rel=1e-9)


def test_kmeans_plusplus_and_lloyd_reach_kmeans_cost():
    # Seeding then Lloyd, best of 10, against KMeans' own best of 10: the
    # same cost within 1% on overlapping blobs.
    X, _ = blobs(n=1500, k=8, d=4, seed=1, std=2.0)
    w = np.ones(len(X))
    ours = weighted_kmeans(X, w, 8, random_state=0, n_init=10)[1]
    theirs = KMeans(8, n_init=10, random_state=0).fit(X).inertia_
    assert ours == pytest.approx(theirs, rel=0.01)


def test_kmeans_plusplus_seeds_like_scikit_learns():
    # Greedy D² sampling with 2 + log k trials, as kmeans_plusplus: on
    # well-separated blobs every seeding puts one seed in each blob, and
    # the seedings' mean potential is scikit-learn's within 10%.
    X, y = blobs(n=2000, k=10, d=4, seed=2, std=0.3)
    w = np.ones(len(X))
    ours, theirs = [], []
    for seed in range(20):
        idx = weighted_kmeans_plusplus(X, w, 10, np.random.RandomState(seed))
        assert sorted(y[idx]) == list(range(10))
        ours.append(brute_sq_dist(X, X[idx]).min(axis=1).sum())
        centers, _ = kmeans_plusplus(X, 10, random_state=seed)
        theirs.append(brute_sq_dist(X, centers).min(axis=1).sum())
    assert np.mean(ours) == pytest.approx(np.mean(theirs), rel=0.1)


def test_kmeans_plusplus_in_float32_draws_from_the_same_rows():
    # A large client's seeding takes float32 distances: on separated blobs
    # it still covers every blob, and draws only rows of positive weight.
    X, y = blobs(n=3000, k=12, d=5, seed=4, std=0.2)
    w = np.ones(len(X))
    w[::5] = 0.0
    X32 = X.astype(np.float32)
    for seed in range(5):
        idx = weighted_kmeans_plusplus(X32, w, 12, np.random.RandomState(seed))
        assert sorted(y[idx]) == list(range(12))
        assert np.all(w[idx] > 0)


def test_kmeans_plusplus_repeats_a_seed_when_the_rows_run_out():
    # Two distinct rows, three clusters: the third seed repeats one of the
    # two (a copy within rounding would split identical rows).
    X = np.array([[0.0, 0.0]] * 5 + [[4.0, 1.0]] * 5)
    idx = weighted_kmeans_plusplus(X, np.ones(10), 3, np.random.RandomState(0))
    seeds = X[idx]
    assert len(np.unique(seeds, axis=0)) == 2


@pytest.mark.parametrize("sparse", [False, True])
def test_assignment_is_the_nearest_center_first_on_ties(sparse):
    rng = np.random.RandomState(0)
    X = rng.normal(size=(500, 6))
    centers = rng.normal(size=(7, 6))
    centers[3] = centers[1]  # a tie: the lower index wins
    rows = sp.csr_matrix(X) if sparse else X
    labels, d2 = assign(rows, sq_norms(rows), centers)
    expected = brute_sq_dist(X, centers)
    assert_array_equal(labels, expected.argmin(axis=1))
    assert not np.any(labels == 3)
    assert_allclose(d2, expected.min(axis=1), rtol=1e-10, atol=1e-10)
    assert_array_equal(nearest(X, centers), labels)


def test_assignment_far_from_the_origin_keeps_the_distances():
    # Around the centers' mean the expanded distances do not cancel: at an
    # offset of 1e9, rows 1 apart still go to their nearest center.
    X, _ = blobs(n=200, k=3, d=2, seed=5, std=0.1)
    centers = np.array([X[_ == j].mean(axis=0) for j in range(3)])
    offset = 1e9
    labels, _ = assign_around_centers(X + offset, centers + offset)
    assert_array_equal(labels, brute_sq_dist(X, centers).argmin(axis=1))


def test_cluster_sums_means_and_cost_against_brute_force():
    rng = np.random.RandomState(1)
    X = rng.normal(size=(300, 4))
    w = rng.uniform(0.1, 2.0, 300)
    centers = rng.normal(size=(5, 4))
    labels = brute_sq_dist(X, centers).argmin(axis=1)
    labels[labels == 4] = 0  # cluster 4 left empty
    sums, totals = cluster_sums(X, w, labels, 5)
    for j in range(5):
        assert_allclose(sums[j], (w[labels == j, None] * X[labels == j]).sum(axis=0))
        assert totals[j] == pytest.approx(w[labels == j].sum())
    means = cluster_means(X, w, labels, centers)
    assert_array_equal(means[4], centers[4])  # an empty cluster keeps its center
    assert_allclose(means[:4], sums[:4] / totals[:4, None])
    d2 = ((X - centers[labels]) ** 2).sum(axis=1)
    assert weighted_cost(X, w, centers, labels) == pytest.approx(w @ d2, rel=1e-12)


def test_lloyd_keeps_a_center_whose_weight_is_not_positive():
    # Weights of any sign (a coreset's): a cluster of total weight -1 has
    # no meaningful mean, so its center stays.
    X = np.array([[0.0], [1.0], [10.0], [11.0]])
    w = np.array([1.0, 1.0, 1.0, -2.0])
    init = np.array([[0.2], [10.4]])
    centers, labels, _, _ = weighted_lloyd(X, w, init, sq_norms(X), 10, 0.0)
    assert centers[0, 0] == pytest.approx(0.5)
    assert centers[1, 0] == 10.4
    assert_array_equal(labels, [0, 0, 1, 1])
