"""Tests for the explicit feature maps drawn from a shared generator
(skfed.kernel._feature_maps)."""

import numpy as np
import pytest
from sklearn.metrics.pairwise import laplacian_kernel, polynomial_kernel, rbf_kernel
from sklearn.utils import check_random_state

from skfed.kernel._feature_maps import explicit_feature_map


def _features(kernel, X, D, seed=0, **params):
    shared = check_random_state(seed)
    features, dim = explicit_feature_map(
        shared,
        X.shape[1],
        kernel,
        params.get("gamma"),
        params.get("degree", 3),
        params.get("coef0", 1.0),
        D,
        np.float64,
    )
    Z = np.asarray(features(X, np.empty((X.shape[0], dim))), dtype=np.float64)
    return Z, dim, shared


@pytest.mark.parametrize(
    "kernel, params, exact, atol",
    [
        ("rbf", {"gamma": 0.2}, lambda X: rbf_kernel(X, gamma=0.2), 0.05),
        ("laplacian", {"gamma": 0.2}, lambda X: laplacian_kernel(X, gamma=0.2), 0.06),
        (
            "poly",
            {"gamma": 0.3, "degree": 2, "coef0": 1.0},
            lambda X: polynomial_kernel(X, gamma=0.3, degree=2, coef0=1.0),
            None,
        ),
    ],
)
def test_the_map_estimates_its_kernel(kernel, params, exact, atol):
    X = np.random.RandomState(0).normal(size=(25, 3)) / 2
    Z, dim, _ = _features(kernel, X, 8000, **params)
    assert Z.shape == (25, 8000) and dim == 8000
    K = exact(X)
    if atol is None:
        # TensorSketch: an estimate unbiased up to a relative error.
        assert np.abs(Z @ Z.T - K).max() < 0.1 * np.abs(K).max()
    else:
        np.testing.assert_allclose(Z @ Z.T, K, atol=atol)


def test_linear_is_the_coordinates_and_draws_nothing():
    X = np.random.RandomState(0).normal(size=(5, 3))
    Z, dim, shared = _features("linear", X, 100, seed=3)
    assert dim == 3
    np.testing.assert_array_equal(Z, X)
    # What the caller draws next is what it would have drawn first.
    np.testing.assert_array_equal(
        shared.standard_normal(4), check_random_state(3).standard_normal(4)
    )


def test_every_party_drawing_from_one_seed_applies_one_map():
    X = np.random.RandomState(1).normal(size=(10, 4))
    first, _, after_first = _features("rbf", X, 50, seed=5, gamma=0.5)
    second, _, after_second = _features("rbf", X, 50, seed=5, gamma=0.5)
    np.testing.assert_array_equal(first, second)
    # The generator is left where the map's draw ended, alike for both.
    np.testing.assert_array_equal(
        after_first.normal(size=3), after_second.normal(size=3)
    )
