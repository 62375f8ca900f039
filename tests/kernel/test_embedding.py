"""Tests for the random features' kernel PCA embedding
(skfed.kernel._embedding), shared by kernel PCA and kernel k-means."""

import numpy as np
from numpy.testing import assert_allclose

from skfed.kernel._embedding import feature_covariance_basis, feature_embedding
from skfed.kernel._private_features import (
    feature_blocks,
    feature_gram_statistics,
    paired_fourier_map,
)


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
