"""Tests for the ridge regression on summed random-feature statistics
(skfed.classification._solvers._feature_ridge)."""

import numpy as np
from sklearn.linear_model import RidgeCV

from skfed.classification._solvers._feature_ridge import (
    solve_from_statistics,
)


def test_solve_from_statistics_against_pooled_ridge_and_noisy_floor():
    rng = np.random.RandomState(0)
    Z = rng.uniform(-0.3, 0.3, size=(80, 6))
    codes = rng.randint(0, 3, size=80)
    E = np.eye(3)[codes]
    total = np.concatenate([(Z.T @ Z)[np.triu_indices(6)], (Z.T @ E).ravel(), E.sum(0)])
    coef, intercept, alpha, _ = solve_from_statistics(total, 6, 3, alpha_floor=0.5)
    assert alpha >= 0.5
    T = 2 * E - 1
    ridge = RidgeCV(alphas=[alpha]).fit(Z, T)
    np.testing.assert_allclose(coef, ridge.coef_.T, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(intercept, ridge.intercept_, atol=1e-10)
