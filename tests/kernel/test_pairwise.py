"""Tests for the exact kernel evaluation (skfed.kernel._pairwise)."""

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose
from sklearn.metrics.pairwise import pairwise_kernels

from skfed.kernel._pairwise import kernel_diag, kernel_matrix

_SPECS = [
    {"kernel": "rbf", "gamma": 0.5},
    {"kernel": "laplacian", "gamma": 0.3},
    {"kernel": "poly", "gamma": 0.2, "degree": 3, "coef0": 1.0},
    {"kernel": "linear", "gamma": None},
]


def _params(spec):
    params = {k: v for k, v in spec.items() if k != "kernel"}
    return {} if spec["kernel"] == "linear" else params


@pytest.mark.parametrize("spec", _SPECS, ids=lambda s: s["kernel"])
@pytest.mark.parametrize("sparse", [False, True])
def test_kernel_matches_scikit_learn(spec, sparse):
    rng = np.random.RandomState(0)
    X, Y = rng.normal(size=(30, 4)), rng.normal(size=(7, 4))
    expected = pairwise_kernels(X, Y, metric=spec["kernel"], **_params(spec))
    if sparse:
        X, Y = sp.csr_matrix(X), sp.csr_matrix(Y)
    K = kernel_matrix(X, Y, spec)
    assert K.dtype == np.float64 and K.shape == (30, 7)
    assert_allclose(K, expected, rtol=1e-10, atol=1e-12)
    diag = np.diag(pairwise_kernels(X, metric=spec["kernel"], **_params(spec)))
    assert_allclose(kernel_diag(X, spec), diag, rtol=1e-10, atol=1e-12)


def test_kernel_rows_far_from_the_origin():
    # The model's kernels are exact at an offset of 1e9 (the expanded
    # squared distances inside "rbf" cancelled there).
    X = np.random.RandomState(1).normal(size=(80, 3))
    spec = {"kernel": "rbf", "gamma": 0.5}
    near = kernel_matrix(X, X[:20], spec)
    far = kernel_matrix(X + 1e9, X[:20] + 1e9, spec)
    np.testing.assert_allclose(far, near, atol=1e-6)
