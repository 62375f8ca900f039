"""Tests for the random features' kernel PCA embedding
(skfed.kernel._embedding), shared by kernel PCA and kernel k-means."""

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy.linalg import subspace_angles

from skfed.kernel._embedding import (
    feature_covariance_basis,
    feature_embedding,
    sketched_covariance_basis,
)
from skfed.kernel._private_features import (
    feature_blocks,
    feature_gram_statistics,
    paired_fourier_map,
)
from skfed.kernel._sketch import sketch_matrix


def _statistics(X, D, seed=3, gamma=0.4):
    omega, offset = paired_fourier_map(seed, X.shape[1], D, gamma)
    upper, sums = feature_gram_statistics(X, omega, offset)
    Z = np.vstack([rows.copy() for _, rows in feature_blocks(X, omega, offset)])
    return omega, offset, np.concatenate([upper, sums]), Z


def test_basis_and_embedding_are_the_pooled_features_pca():
    X = np.random.RandomState(0).normal(size=(200, 3))
    D, k = 40, 4
    # Any split of the rows gives the same sums: two "clients" here.
    omega, offset, first, Z_first = _statistics(X[:120], D)
    _, _, second, Z_second = _statistics(X[120:], D)
    Z = np.vstack([Z_first, Z_second])
    mu, V, shift = feature_covariance_basis(first + second, len(X), D, k)
    Zc = Z - Z.mean(axis=0)
    w, U = np.linalg.eigh(Zc.T @ Zc)
    assert_allclose(mu, w[::-1][:k], rtol=1e-8)
    # The same subspace, signed so that each column's largest entry is > 0.
    assert_allclose(np.abs(V.T @ U[:, ::-1][:, :k]), np.eye(k), atol=1e-6)
    assert np.all(V[np.argmax(np.abs(V), axis=0), np.arange(k)] > 0)
    H = feature_embedding(X, omega, offset, V, shift)
    assert_allclose(H, Zc @ V, atol=1e-10)
    assert_allclose(H.mean(axis=0), 0.0, atol=1e-10)


def test_features_that_do_not_vary_embed_every_row_at_zero():
    X = np.ones((30, 2))
    omega, offset, total, _ = _statistics(X, 10)
    mu, V, shift = feature_covariance_basis(total, len(X), 10, 3)
    assert mu.tolist() == [0.0] and V.shape == (10, 1)
    np.testing.assert_array_equal(feature_embedding(X, omega, offset, V, shift), 0.0)


def _sketch_statistics(Z, test):
    """The summed triangle and the summed sketch of the features Z (what
    the clients' uploads add up to), each followed by Z's column sums."""
    gram = Z.T @ Z
    upper = gram[np.triu_indices(Z.shape[1])]
    sums = Z.sum(axis=0)
    return np.concatenate([upper, sums]), np.concatenate([(gram @ test).ravel(), sums])


@pytest.mark.parametrize("rank", [1, 5, 12])
def test_sketched_basis_is_the_triangles_on_low_rank_features(rank):
    # Features of rank r <= l around a mean far from 0: the Nyström
    # approximation of the centred Gram matrix is exact, so the sketch's
    # eigenpairs are the triangle's (the centring, done on the server from
    # the feature sums, must be exact too: uncentred, the mean's direction
    # would come first).
    rng = np.random.RandomState(rank)
    N, D, width = 500, 70, 16
    Z = rng.standard_normal((N, rank)) @ rng.standard_normal((rank, D))
    Z += 5.0 * rng.standard_normal(D)
    test = sketch_matrix(3, D, width)
    triangle, sketch = _sketch_statistics(Z, test)
    mu, V, shift = feature_covariance_basis(triangle, N, D, rank)
    mu_s, V_s, shift_s = sketched_covariance_basis(sketch, N, test, rank)
    assert V_s.shape == (D, rank)
    np.testing.assert_allclose(mu_s, mu, rtol=1e-8)
    assert np.max(subspace_angles(V, V_s)) < 1e-6
    # Same signs (largest entry positive), so the same embedding shift.
    np.testing.assert_allclose(V_s, V, atol=1e-6)
    np.testing.assert_allclose(shift_s, shift, atol=1e-6 * np.abs(shift).max())
    # More components asked for than the rank: the round-off ones dropped.
    mu_s, V_s, _ = sketched_covariance_basis(sketch, N, test, width)
    assert len(mu_s) == rank


def test_sketched_basis_approximates_a_decaying_spectrum():
    # Full rank with a fast-decaying spectrum: the top s directions are
    # found within a small angle with l = 2s.
    rng = np.random.RandomState(0)
    N, D, s = 2000, 120, 8
    Q = np.linalg.qr(rng.standard_normal((D, D)))[0]
    Z = rng.standard_normal((N, D)) * 0.7 ** np.arange(D) @ Q.T
    test = sketch_matrix(0, D, 2 * s)
    triangle, sketch = _sketch_statistics(Z, test)
    mu, V, _ = feature_covariance_basis(triangle, N, D, s)
    mu_s, V_s, _ = sketched_covariance_basis(sketch, N, test, s)
    assert np.max(subspace_angles(V[:, :4], V_s)) < 0.05
    np.testing.assert_allclose(mu_s[:4], mu[:4], rtol=0.01)
