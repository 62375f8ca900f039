"""Tests for disKPCA's low-rank rounds
(skfed.decomposition._protocols._representatives): the server's solve from
the clients' factors."""

import numpy as np
import pytest
from numpy.testing import assert_allclose
from scipy.linalg import subspace_angles

import skfed.decomposition._protocols._representatives as representatives


@pytest.mark.parametrize("n_clients", [3, 200])
def test_master_lowrank_solve_spans_the_svd_subspace(n_clients):
    # With many clients the master takes the top singular vectors from the
    # r x r Gram matrix of the stacked factors; they span what the SVD's do.
    rng = np.random.RandomState(0)
    r, q, k = 60, 8, 5
    scales = np.logspace(0, -2, r)[:, None]
    factors = [scales * rng.standard_normal((r, q)) for _ in range(n_clients)]
    W = representatives._lowrank_solve(factors, k)
    U = np.linalg.svd(np.hstack(factors), full_matrices=False)[0][:, :k]
    assert W.shape == (r, k)
    assert np.max(subspace_angles(W, U)) < 1e-8
    assert_allclose(W.T @ W, np.eye(k), atol=1e-10)


def test_master_lowrank_solve_keeps_the_svd_rank_cut():
    # Stacked factors of rank 3 < k: the Gram path cannot tell a tiny
    # singular value from rounding, so the SVD decides and keeps 3.
    rng = np.random.RandomState(1)
    basis = np.linalg.qr(rng.standard_normal((40, 3)))[0]
    factors = [basis @ rng.standard_normal((3, 6)) for _ in range(50)]
    W = representatives._lowrank_solve(factors, 5)
    assert W.shape == (40, 3)
    assert np.max(subspace_angles(W, basis)) < 1e-8
