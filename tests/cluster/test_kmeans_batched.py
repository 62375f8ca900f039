"""The batched k-means restarts of small clients against the one-at-a-time
functions they replace."""

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.datasets import make_blobs

import skfed.cluster._kmeans._batched as batched_module
from skfed.cluster._kmeans import (
    KMeansProblem,
    centered,
    kmeans_restarts,
    solve_kmeans_problems,
    tolerance,
    weighted_kmeans_plusplus,
    weighted_lloyd,
)


def _data(n=300, seed=0):
    X, _ = make_blobs(n, centers=5, n_features=4, cluster_std=2.0, random_state=seed)
    w = np.random.RandomState(seed).uniform(0.5, 2.0, n)
    Xc, _ = centered(X, w)
    return Xc, w


def _rng(seed):
    return np.random.RandomState(seed)


def _cost(X, w, centers):
    d2 = ((X[:, None, :] - centers[None]) ** 2).sum(axis=2).min(axis=1)
    return float(w @ d2)


@pytest.mark.parametrize("max_iter", [1, 3, 300])
@pytest.mark.parametrize("tol", [0.0, 1e-4])
def test_lloyd_from_an_init_is_the_one_at_a_time_lloyd(max_iter, tol):
    X, w = _data()
    x_sq = (X**2).sum(axis=1)
    init = X[[0, 50, 100, 150, 200]]
    tol_abs = tolerance(X, w, tol)
    centers, labels, d2, n_iter = kmeans_restarts(
        X,
        w,
        5,
        n_init=1,
        max_iter=max_iter,
        tol_abs=tol_abs,
        random_state=np.random.RandomState(0),
        init=init,
    )
    ref = weighted_lloyd(X, w, init.copy(), x_sq, max_iter, tol_abs)
    assert_allclose(centers, ref[0], rtol=1e-10, atol=1e-10)
    assert_array_equal(labels, ref[1])
    assert_allclose(d2, ref[2], rtol=1e-10, atol=1e-10)
    assert n_iter == ref[3]


def test_best_restart_is_as_good_as_sequential_restarts():
    # Every seeding is greedy k-means++; the best of ten batched restarts
    # costs no more than 1% above the best of ten sequential ones.
    for seed in range(5):
        X, w = _data(seed=seed)
        x_sq = (X**2).sum(axis=1)
        rng = np.random.RandomState(seed)
        batched = kmeans_restarts(
            X, w, 5, n_init=10, max_iter=300, tol_abs=0.0, random_state=rng
        )
        sequential = min(
            float(w @ weighted_lloyd(X, w, init, x_sq, 300, 0.0)[2])
            for init in (
                X[weighted_kmeans_plusplus(X, w, 5, rng, x_sq=x_sq)] for _ in range(10)
            )
        )
        assert float(w @ batched[2]) <= sequential * 1.01
        # The returned cost is the one of the returned centers and labels.
        assert float(w @ batched[2]) == pytest.approx(_cost(X, w, batched[0]))


def test_labels_are_nearest_centers_and_d2_exact():
    X, w = _data()
    centers, labels, d2, _ = kmeans_restarts(
        X,
        w,
        5,
        n_init=4,
        max_iter=300,
        tol_abs=0.0,
        random_state=np.random.RandomState(1),
    )
    dist = ((X[:, None, :] - centers[None]) ** 2).sum(axis=2)
    assert_array_equal(labels, dist.argmin(axis=1))
    assert_allclose(d2, dist.min(axis=1), rtol=1e-12, atol=1e-12)


def test_fewer_distinct_rows_than_clusters_repeat_centers():
    # Three distinct rows, five clusters: the spent seeding repeats
    # centers, every point costs 0 and nothing is NaN.
    X = np.repeat(np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]]), 4, axis=0)
    w = np.ones(len(X))
    centers, labels, d2, _ = kmeans_restarts(
        X,
        w,
        5,
        n_init=3,
        max_iter=10,
        tol_abs=0.0,
        random_state=np.random.RandomState(0),
    )
    assert np.isfinite(centers).all()
    assert {tuple(c) for c in centers} == {tuple(x) for x in X}
    assert_array_equal(d2, 0.0)


def test_zero_weight_rows_are_never_drawn():
    X, w = _data()
    w[::2] = 0.0
    rng = np.random.RandomState(0)
    centers, _, _, _ = kmeans_restarts(
        X, w, 5, n_init=3, max_iter=0, tol_abs=0.0, random_state=rng
    )
    drawn = {tuple(c) for c in centers}
    assert drawn <= {tuple(x) for x in X[w > 0]}


def test_negative_weights_never_raise_the_cost():
    # Coreset weights may be negative; an update that raises the weighted
    # cost is rejected and the run stops, as in the one-at-a-time Lloyd.
    X, w = _data(200)
    w = w - 0.9
    for seed in range(5):
        init = X[np.random.RandomState(seed).choice(200, 5, replace=False)]
        start = _cost(X, w, init)
        centers, _, d2, _ = kmeans_restarts(
            X,
            w,
            5,
            n_init=1,
            max_iter=50,
            tol_abs=0.0,
            random_state=np.random.RandomState(seed),
            init=init,
        )
        assert float(w @ d2) <= start + 1e-9 * abs(start)


def _problems():
    """Problems of several shapes: sizes that share a padded length and
    sizes that do not, k-means++ and given starts, zero weights."""
    problems = []
    for i, n in enumerate([90, 100, 101, 128, 129, 300, 7, 100]):
        X, w = _data(n, seed=i)
        if i == 7:
            w[::3] = 0.0
        init = X[:5].copy() if i % 3 == 2 else None
        problems.append(
            KMeansProblem(
                X,
                w,
                5,
                n_init=3,
                max_iter=100,
                tol_abs=tolerance(X, w, 1e-4),
                random_state=np.random.RandomState(i),
                tie=1e-20,
                same_cost=1e-9,
                init=init,
            )
        )
    return problems


def test_a_problem_solved_in_a_batch_is_solved_as_alone():
    # A client's answer must not depend on which clients share its batch
    # (its worker, its transport): each problem is padded by its own size.
    together = solve_kmeans_problems(_problems())
    for i, problem in enumerate(_problems()):
        alone = solve_kmeans_problems([problem])[0]
        assert_allclose(together[i][0], alone[0], rtol=1e-12, atol=1e-12)
        assert_array_equal(together[i][1], alone[1])
        assert_allclose(together[i][2], alone[2], rtol=1e-12, atol=1e-12)
        assert together[i][3] == alone[3]
        assert together[i][1].shape == (problem.X.shape[0],)


def test_small_batches_give_the_same_answers(monkeypatch):
    # Splitting a group into batches of one (the memory bound) changes
    # nothing either.
    together = solve_kmeans_problems(_problems())
    monkeypatch.setattr(batched_module, "_BATCH_ELEMENTS", 1)
    split = solve_kmeans_problems(_problems())
    for a, b in zip(together, split):
        assert_allclose(a[0], b[0], rtol=1e-12, atol=1e-12)
        assert_array_equal(a[1], b[1])
