"""Tests for the sketches (CountSketch, TensorSketch, column embeddings),
the quota split and the federated median heuristic in skfed.kernel."""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal
from scipy.spatial.distance import pdist
from sklearn.metrics.pairwise import polynomial_kernel

from skfed._engine._protocol import stream_key
from skfed.kernel import (
    allocate_quota,
    canonical_row_order,
    count_sketch_matrix,
    median_distance,
    median_sample_step,
    sample_count_sketch,
    sample_tensor_sketch,
    sketch_columns,
    tensor_sketch,
)


class FakeClient:
    """The two ClientData methods a client step uses."""

    def __init__(self, X, seed=0):
        self.X = X
        self.n_samples = X.shape[0]
        self._seed = seed

    def random_state(self, name, *keys):
        return np.random.RandomState([self._seed, stream_key(name), *keys])


def test_count_sketch_is_a_signed_bucket_sum_and_follows_sparsity():
    rng = np.random.RandomState(0)
    X = sp.random(30, 50, density=0.1, random_state=rng, format="csr")
    buckets, signs = sample_count_sketch(1, 50, 7)
    C = count_sketch_matrix(buckets, signs, 7)
    expected = np.zeros((30, 7))
    dense = X.toarray()
    for j in range(50):
        expected[:, buckets[j]] += signs[j] * dense[:, j]
    assert_allclose((X @ C).toarray(), expected)
    assert_allclose(dense @ C, expected)
    # One nonzero per input coordinate: the cost of X @ C is nnz(X).
    assert C.nnz == 50


def test_count_sketch_preserves_inner_products_on_average():
    rng = np.random.RandomState(0)
    x, y = rng.normal(size=(2, 40))
    estimates = []
    for seed in range(400):
        C = count_sketch_matrix(*sample_count_sketch(seed, 40, 16), 16)
        estimates.append((x @ C) @ (y @ C))
    se = np.std(estimates) / np.sqrt(len(estimates))
    assert abs(np.mean(estimates) - x @ y) < 4 * se


@pytest.mark.parametrize("degree, coef0", [(2, 1.0), (3, 0.0), (4, 0.5)])
def test_tensor_sketch_estimates_the_polynomial_kernel(degree, coef0):
    rng = np.random.RandomState(degree)
    X = rng.normal(size=(6, 8)) / np.sqrt(8)
    gamma = 0.7
    K = polynomial_kernel(X, gamma=gamma, degree=degree, coef0=coef0)
    mean = np.zeros_like(K)
    n_draws = 300
    for seed in range(n_draws):
        Z = tensor_sketch(
            X, sample_tensor_sketch(seed, 8, 64, degree), 64, gamma=gamma, coef0=coef0
        )
        mean += Z @ Z.T / n_draws
    # Unbiased: the average over draws approaches K.
    assert np.linalg.norm(mean - K) < 0.1 * np.linalg.norm(K)


def test_tensor_sketch_sparse_equals_dense_and_large_sketch_is_accurate():
    rng = np.random.RandomState(0)
    X = sp.random(20, 30, density=0.2, random_state=rng, format="csr")
    hashes = sample_tensor_sketch(3, 30, 2048, 2)
    Zs = tensor_sketch(X, hashes, 2048, gamma=1.0, coef0=1.0)
    Zd = tensor_sketch(X.toarray(), hashes, 2048, gamma=1.0, coef0=1.0)
    assert_allclose(Zs, Zd, atol=1e-12)
    K = polynomial_kernel(X, gamma=1.0, degree=2, coef0=1.0)
    assert np.linalg.norm(Zs @ Zs.T - K) < 0.15 * np.linalg.norm(K)


def test_sketch_columns_passes_small_matrices_and_embeds_large_ones():
    rng = np.random.RandomState(0)
    M = rng.normal(size=(5, 40))
    assert sketch_columns(M, 40, 0) is M
    M = rng.normal(size=(5, 3000)) * np.array([[10], [5], [1], [0.5], [0.1]])
    MT = sketch_columns(M, 100, 0)
    assert MT.shape == (5, 100)
    # A subspace embedding: singular values kept within a constant factor.
    s, sT = np.linalg.svd(M, compute_uv=False), np.linalg.svd(MT, compute_uv=False)
    assert np.all(sT / s > 0.6) and np.all(sT / s < 1.4)


@settings(max_examples=25, deadline=None)
@given(
    total=st.integers(0, 200),
    weights=st.lists(st.floats(0, 100), min_size=1, max_size=8),
    data=st.data(),
)
def test_allocate_quota_is_proportional_within_caps(total, weights, data):
    caps = data.draw(
        st.lists(st.integers(0, 60), min_size=len(weights), max_size=len(weights))
    )
    weights, caps = np.array(weights), np.array(caps)
    quota = allocate_quota(total, weights, caps)
    usable = caps * (weights > 0)
    # Clients tying exactly for the last draws all get one (so that their
    # names or order never decide): at most one short of a draw each.
    excess = quota.sum() - min(total, usable.sum())
    assert 0 <= excess < max(1, np.count_nonzero(weights > 0))
    assert np.all(quota <= usable) and np.all(quota >= 0)
    # Clients below their cap get their proportional share of what the
    # capped ones left, up to rounding.
    free = quota < usable
    if free.sum() > 1 and weights[free].sum() > 0:
        rest = quota[free].sum()
        share = rest * weights[free] / weights[free].sum()
        assert np.all(np.abs(quota[free] - share) < 1 + 1e-9)


def test_allocate_quota_does_not_depend_on_client_order():
    weights = np.array([5.0, 1.3, 3.0, 2.5, 0.0])
    caps = np.array([3, 50, 50, 7, 9])
    quota = allocate_quota(40, weights, caps)
    perm = np.array([3, 0, 4, 2, 1])
    assert_array_equal(allocate_quota(40, weights[perm], caps[perm]), quota[perm])
    assert quota[4] == 0 and quota[0] == 3


def test_allocate_quota_ties_share_alike():
    # 256 draws over three clients of one size: 85.33 each. The one extra
    # draw would go to whichever came first; all three tie, so all draw it.
    assert_array_equal(allocate_quota(256, [100] * 3, [100] * 3), [86, 86, 86])
    # Without a tie the total is exact, the largest remainders first.
    assert_array_equal(allocate_quota(10, [3.0, 3.0, 4.0], [9] * 3), [3, 3, 4])
    assert_array_equal(allocate_quota(4, [1.0, 1.0, 2.0], [9] * 3), [1, 1, 2])
    assert_array_equal(allocate_quota(5, [1.0, 1.0, 2.0], [9] * 3), [1, 1, 3])
    assert_array_equal(allocate_quota(5, [1.0] * 4, [9] * 4), [2, 2, 2, 2])
    # A capped client takes no extra draw.
    assert_array_equal(allocate_quota(7, [1.0] * 3, [1, 9, 9]), [1, 3, 3])


@pytest.mark.parametrize("metric", ["euclidean", "manhattan"])
@pytest.mark.parametrize("n_features", [10, 300])
def test_median_of_projected_sample_matches_exact_median(metric, n_features):
    rng = np.random.RandomState(0)
    X = rng.normal(size=(1200, n_features)) * rng.uniform(0.5, 2, n_features)
    exact = np.median(pdist(X, "cityblock" if metric == "manhattan" else metric))
    clients = [FakeClient(X[:800], 1), FakeClient(X[800:], 2)]
    quota = allocate_quota(256, [800, 400], [800, 400])
    uploads = [
        median_sample_step(c, None, (7, q), metric=metric)[1]
        for c, q in zip(clients, quota)
    ]
    assert sum(u.shape[0] for u in uploads) == 256
    expected_width = 64 if metric == "euclidean" and n_features > 64 else n_features
    assert all(u.shape[1] == expected_width for u in uploads)
    est = median_distance(uploads, metric=metric)
    assert est == pytest.approx(exact, rel=0.08)


def test_median_distance_with_duplicates_and_identical_points():
    many_dups = [np.vstack([np.zeros((20, 3)), np.eye(3)])]
    assert median_distance(many_dups) > 0
    with pytest.raises(ValueError, match="identical"):
        median_distance([np.ones((10, 3))])


@pytest.mark.parametrize("n_features", [30, 300])
def test_median_distance_of_mostly_duplicated_rows_is_exact(n_features):
    # A majority of pairs are exact duplicates of one (non-trivial) row: their
    # distance is 0 and must be excluded, not kept as rounding noise (~1e-7
    # with the Gram shortcut, which made γ ~ 1e12).
    rng = np.random.RandomState(0)
    row = 3 * rng.normal(size=(1, n_features))
    X = np.vstack([np.repeat(row, 200, axis=0), rng.normal(size=(56, n_features))])
    dist = pdist(X)
    assert np.mean(dist == 0) > 0.5
    expected = np.median(dist[dist > 0])
    if n_features <= 64:  # sent unprojected: the exact median
        assert median_distance([X[:100], X[100:]]) == pytest.approx(expected, 1e-12)
    clients = [FakeClient(X[:128], 1), FakeClient(X[128:], 2)]
    uploads = [median_sample_step(c, None, (7, 128))[1] for c in clients]
    # Projected to 64 dimensions when d = 300: most positive distances are
    # from the one repeated row, so their projection errors do not average
    # out as in the test above.
    assert median_distance(uploads) == pytest.approx(expected, rel=0.15)


def test_canonical_row_order_depends_on_values_only():
    rng = np.random.RandomState(0)
    X = sp.random(40, 12, density=0.3, random_state=rng, format="csr")
    X = sp.vstack([X, X[:5]], format="csr")  # duplicated rows
    dense = X.toarray()
    canonical = dense[canonical_row_order(X)]
    assert_array_equal(dense[canonical_row_order(dense)], canonical)
    perm = rng.permutation(X.shape[0])
    assert_array_equal(dense[perm][canonical_row_order(X[perm])], canonical)
    # The same data as float32 is put in the same order (no two rows of X
    # are equal in float32 without being equal).
    assert_array_equal(dense[canonical_row_order(dense.astype(np.float32))], canonical)


@pytest.mark.parametrize("float32_ties", [False, True])
def test_canonical_row_order_sorts_by_rounded_then_exact_hashes(float32_ties):
    # Rows equal in float32 but not in float64 tie on the rounded hashes;
    # the exact hashes order them, whatever order they come in.
    from skfed._numerics._rows import rounded_row_hashes, row_hashes

    rng = np.random.RandomState(1)
    X = rng.randn(30, 4)
    if float32_ties:
        X[10:20] = X[0] + rng.randint(1, 50, size=(10, 1)) * 1e-12
    expected = np.lexsort((row_hashes(X), rounded_row_hashes(X)))
    assert_array_equal(canonical_row_order(X), expected)
    perm = rng.permutation(len(X))
    assert_array_equal(X[perm][canonical_row_order(X[perm])], X[expected])
