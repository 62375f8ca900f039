"""Tests for the distributed Lanczos solver (skfed._numerics._lanczos)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skfed._numerics._lanczos import block_lanczos, lanczos


def _psd(n, rank, seed, decay=0.7):
    """A random PSD matrix with eigenvalues decay**i on ``rank`` directions."""
    rng = np.random.RandomState(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    w = np.zeros(n)
    w[:rank] = 10.0 * decay ** np.arange(rank)
    return (Q * w) @ Q.T, w


class _Counting:
    """A matvec that counts its calls, as the federation counts rounds."""

    def __init__(self, G):
        self.G = G
        self.calls = 0

    def __call__(self, c):
        self.calls += 1
        return self.G @ c


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(8, 60),
    n_above=st.integers(1, 6),
    seed=st.integers(0, 2**16),
)
def test_threshold_mode_matches_eigh(n, n_above, seed):
    G, w = _psd(n, n, seed)
    # Halfway between two eigenvalues: the wanted set is unambiguous.
    threshold = 0.5 * (w[n_above - 1] + w[n_above])
    matvec = _Counting(G)
    res = lanczos(matvec, n, threshold=threshold, tol=1e-10, random_state=seed)
    assert res.converged
    assert res.n_iter == matvec.calls
    np.testing.assert_allclose(res.eigenvalues, w[:n_above], rtol=1e-8, atol=1e-9)
    V = res.eigenvectors
    np.testing.assert_allclose(V.T @ V, np.eye(n_above), atol=1e-8)
    np.testing.assert_allclose(G @ V, V * res.eigenvalues, atol=1e-7)


@pytest.mark.parametrize("n_components", [1, 3, 7])
def test_n_components_mode_matches_eigh(n_components):
    G, w = _psd(40, 40, 0, decay=0.8)
    res = lanczos(G.__matmul__, 40, n_components=n_components, random_state=0)
    assert res.converged
    assert res.eigenvalues.shape == (n_components,)
    np.testing.assert_allclose(res.eigenvalues, w[:n_components], rtol=1e-7)
    # Few products are needed for the top of a decaying spectrum.
    assert res.n_iter < 40


def test_both_criteria_return_the_union():
    G, w = _psd(30, 30, 1)
    threshold = 0.5 * (w[4] + w[5])  # five eigenvalues above it
    res = lanczos(G.__matmul__, 30, n_components=2, threshold=threshold)
    np.testing.assert_allclose(res.eigenvalues, w[:5], rtol=1e-7)
    res = lanczos(G.__matmul__, 30, n_components=7, threshold=threshold)
    np.testing.assert_allclose(res.eigenvalues, w[:7], rtol=1e-7)


def test_nothing_above_threshold_returns_empty_after_top_converges():
    G, w = _psd(20, 20, 2)
    res = lanczos(G.__matmul__, 20, threshold=2 * w[0], random_state=0)
    assert res.converged
    assert res.eigenvalues.shape == (0,)
    assert res.eigenvectors.shape == (20, 0)
    # Not a trivial stop: the largest Ritz value had to converge first.
    assert res.n_iter > 2


def test_rank_deficient_matrix_restarts_after_breakdown():
    # Rank 3 in dimension 25: the Krylov space is exhausted after 3 steps.
    G, w = _psd(25, 3, 3)
    res = lanczos(G.__matmul__, 25, n_components=5, random_state=0)
    assert res.converged
    np.testing.assert_allclose(res.eigenvalues[:3], w[:3], rtol=1e-9)
    np.testing.assert_allclose(res.eigenvalues[3:], 0.0, atol=1e-9)
    V = res.eigenvectors
    np.testing.assert_allclose(V.T @ V, np.eye(5), atol=1e-9)

    res = lanczos(G.__matmul__, 25, threshold=0.0, random_state=0)
    np.testing.assert_allclose(res.eigenvalues, w[:3], rtol=1e-9)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("noise", [1e-16, -1e-16, 3e-13])
def test_round_off_ritz_values_never_pass_a_zero_threshold(seed, noise):
    # What a BLAS leaves in the null space of a rank-3 matrix: Ritz values of
    # order 1e-16 of the norm, positive or negative. threshold=0 must return
    # the three real eigenvalues, whatever the round-off's sign and size.
    G, w = _psd(25, 3, seed)
    rng = np.random.RandomState(seed)
    E = rng.standard_normal((25, 25))
    G = G + noise * w[0] * (E + E.T) / 2
    res = lanczos(G.__matmul__, 25, threshold=0.0, random_state=seed)
    assert res.eigenvalues.shape == (3,)
    np.testing.assert_allclose(res.eigenvalues, w[:3], rtol=1e-9)


def test_rank_one():
    a = np.arange(1.0, 11.0)
    G = np.outer(a, a)
    res = lanczos(G.__matmul__, 10, n_components=1, random_state=0)
    np.testing.assert_allclose(res.eigenvalues, [a @ a])
    np.testing.assert_allclose(np.abs(res.eigenvectors[:, 0]), a / np.linalg.norm(a))


def test_full_reorthogonalisation_prevents_ghost_eigenvalues():
    # A spectrum with a few dominant eigenvalues and many small ones makes
    # plain Lanczos lose orthogonality and repeat ("ghost") the top values;
    # running to the full dimension must give every eigenvalue once.
    n = 80
    rng = np.random.RandomState(4)
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    w = np.concatenate([[1e4, 5e3, 1e3], np.linspace(1.0, 2.0, n - 3)])[::-1]
    w = np.sort(w)[::-1]
    G = (Q * w) @ Q.T
    res = lanczos(G.__matmul__, n, n_components=n, tol=1e-12, random_state=0)
    assert res.n_iter == n
    np.testing.assert_allclose(res.eigenvalues, w, rtol=1e-8, atol=1e-8)
    V = res.eigenvectors
    np.testing.assert_allclose(V.T @ V, np.eye(n), atol=1e-8)


def test_max_iter_reached_reports_not_converged():
    G, w = _psd(60, 60, 5, decay=0.99)  # flat spectrum: slow convergence
    matvec = _Counting(G)
    res = lanczos(matvec, 60, n_components=10, tol=1e-12, max_iter=5)
    assert not res.converged
    assert res.n_iter == matvec.calls == 5
    assert res.eigenvalues.shape == (5,)


def test_start_vector_and_seed_make_it_deterministic():
    G, _ = _psd(30, 30, 6)
    a = lanczos(G.__matmul__, 30, n_components=3, random_state=7)
    b = lanczos(G.__matmul__, 30, n_components=3, random_state=7)
    np.testing.assert_array_equal(a.eigenvalues, b.eigenvalues)
    v0 = np.ones(30)
    c = lanczos(G.__matmul__, 30, n_components=3, v0=v0)
    d = lanczos(G.__matmul__, 30, n_components=3, v0=2 * v0)
    np.testing.assert_allclose(c.eigenvalues, d.eigenvalues, rtol=1e-12)
    assert c.n_iter == d.n_iter


def test_distributed_matvec_equals_centralized():
    # The intended use: G = Σ_m W[m]ᵀW[m], each product summed from blocks.
    rng = np.random.RandomState(8)
    blocks = [rng.standard_normal((n_m, 12)) for n_m in (5, 30, 1, 14)]
    G = sum(W.T @ W for W in blocks)
    w = np.linalg.eigvalsh(G)[::-1]

    def matvec(c):
        return np.sum([W.T @ (W @ c) for W in blocks], axis=0)

    res = lanczos(matvec, 12, threshold=0.5 * (w[3] + w[4]), random_state=0)
    np.testing.assert_allclose(res.eigenvalues, w[:4], rtol=1e-8)


def test_bad_arguments():
    G = np.eye(4)
    with pytest.raises(ValueError, match="n_components, threshold or both"):
        lanczos(G.__matmul__, 4)
    with pytest.raises(ValueError, match=r"n_components=5 must be in \[1, n=4\]"):
        lanczos(G.__matmul__, 4, n_components=5)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tol_relative_to_each_ritz_value(seed):
    # A spectrum whose 6th eigenvalue is 1/500 of the 1st (a kernel
    # matrix's is often 1/100): measured against the largest, a loose tol
    # accepts a small pair that is far from its eigenvector; measured
    # against each value, every wanted pair is accurate in its own scale.
    rng = np.random.RandomState(seed)
    n = 80
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    w = np.concatenate([[500, 200, 100, 50, 10, 1.0], rng.uniform(0, 0.5, n - 6)])
    G = (Q * w) @ Q.T
    res = lanczos(
        G.__matmul__, n, n_components=6, tol=1e-3, tol_scale="each", random_state=0
    )
    for theta, v in zip(res.eigenvalues, res.eigenvectors.T):
        assert np.linalg.norm(G @ v - theta * v) <= 1e-3 * theta * 1.0001
    np.testing.assert_allclose(res.eigenvalues, w[:6], rtol=1e-4)
    with pytest.raises(ValueError, match="tol_scale"):
        lanczos(G.__matmul__, n, n_components=2, tol_scale="smallest")


# --------------------------------------------------------------------------
# Block Lanczos


class _CountingBlocks:
    """A matmat that counts its calls (rounds) and the vectors it multiplied
    (products), and checks that no block is wider than asked."""

    def __init__(self, G, block_size):
        self.G = G
        self.block_size = block_size
        self.calls = self.products = 0

    def __call__(self, C):
        assert C.ndim == 2 and C.shape[1] <= self.block_size
        self.calls += 1
        self.products += C.shape[1]
        return self.G @ C


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(8, 60),
    n_above=st.integers(1, 6),
    block_size=st.integers(1, 7),
    seed=st.integers(0, 2**16),
)
def test_block_threshold_mode_matches_eigh(n, n_above, block_size, seed):
    G, w = _psd(n, n, seed)
    threshold = 0.5 * (w[n_above - 1] + w[n_above])
    matmat = _CountingBlocks(G, block_size)
    res = block_lanczos(
        matmat, n, block_size=block_size, threshold=threshold, tol=1e-10,
        random_state=seed,
    )  # fmt: skip
    assert res.converged
    assert res.n_calls == matmat.calls
    assert res.n_iter == matmat.products
    np.testing.assert_allclose(res.eigenvalues, w[:n_above], rtol=1e-8, atol=1e-9)
    V = res.eigenvectors
    np.testing.assert_allclose(V.T @ V, np.eye(n_above), atol=1e-8)
    np.testing.assert_allclose(G @ V, V * res.eigenvalues, atol=1e-7)


@pytest.mark.parametrize("block_size", [2, 4, 8])
def test_block_n_components_and_union_of_criteria(block_size):
    G, w = _psd(40, 40, 0, decay=0.8)
    res = block_lanczos(
        G.__matmul__, 40, block_size=block_size, n_components=7, random_state=0
    )
    assert res.converged
    np.testing.assert_allclose(res.eigenvalues, w[:7], rtol=1e-7)
    threshold = 0.5 * (w[4] + w[5])
    res = block_lanczos(
        G.__matmul__, 40, block_size=block_size, n_components=2,
        threshold=threshold, random_state=0,
    )  # fmt: skip
    np.testing.assert_allclose(res.eigenvalues, w[:5], rtol=1e-7)


def test_block_takes_fewer_rounds_and_more_products():
    # What the federated solver trades: b vectors a round cut the rounds,
    # the lower-degree Krylov space costs products.
    G, _ = _psd(200, 200, 9, decay=0.97)
    single = lanczos(G.__matmul__, 200, n_components=20, tol=1e-8, random_state=0)
    block = block_lanczos(
        G.__matmul__, 200, block_size=8, n_components=20, tol=1e-8, random_state=0
    )
    np.testing.assert_allclose(block.eigenvalues, single.eigenvalues, rtol=1e-7)
    assert block.n_calls * 2 < single.n_calls
    assert block.n_iter >= single.n_iter


def test_block_finds_repeated_eigenvalues():
    # A single Krylov vector sees one copy of an exactly repeated
    # eigenvalue; a block of b sees up to b.
    rng = np.random.RandomState(3)
    Q, _ = np.linalg.qr(rng.standard_normal((30, 30)))
    w = np.concatenate([[5.0, 5.0, 5.0, 2.0], np.linspace(0.1, 0.5, 26)[::-1]])
    G = (Q * w) @ Q.T
    threshold = 1.0
    single = lanczos(G.__matmul__, 30, threshold=threshold, tol=1e-10, random_state=0)
    assert single.eigenvalues.shape == (2,)  # one copy of 5, then 2
    res = block_lanczos(
        G.__matmul__, 30, block_size=4, threshold=threshold, tol=1e-10,
        random_state=0,
    )  # fmt: skip
    np.testing.assert_allclose(res.eigenvalues, w[:4], rtol=1e-9)


def test_block_rank_deficient_matrix_fills_the_block():
    # Rank 3 in dimension 25: the first product already spans the range;
    # the next block's dependent directions are replaced by fresh ones.
    G, w = _psd(25, 3, 3)
    res = block_lanczos(G.__matmul__, 25, block_size=4, n_components=5, random_state=0)
    assert res.converged
    np.testing.assert_allclose(res.eigenvalues[:3], w[:3], rtol=1e-9)
    np.testing.assert_allclose(res.eigenvalues[3:], 0.0, atol=1e-9)
    V = res.eigenvectors
    np.testing.assert_allclose(V.T @ V, np.eye(5), atol=1e-9)
    res = block_lanczos(G.__matmul__, 25, block_size=4, threshold=0.0, random_state=0)
    np.testing.assert_allclose(res.eigenvalues, w[:3], rtol=1e-9)
    a = np.arange(1.0, 11.0)
    res = block_lanczos(
        np.outer(a, a).__matmul__, 10, block_size=3, n_components=1, random_state=0
    )
    np.testing.assert_allclose(res.eigenvalues, [a @ a])


def test_block_spans_the_whole_space_when_asked():
    n = 30
    G, w = _psd(n, n, 4, decay=0.95)
    matmat = _CountingBlocks(G, 7)
    res = block_lanczos(matmat, n, block_size=7, n_components=n, random_state=0)
    assert res.converged and res.n_iter == n
    # 7 + 7 + 7 + 7 + 2: the last block is cut to the directions left.
    assert matmat.calls == 5
    np.testing.assert_allclose(res.eigenvalues, w, rtol=1e-8, atol=1e-10)
    small = np.diag([3.0, 2.0, 1.0])
    res = block_lanczos(small.__matmul__, 3, block_size=9, n_components=2)
    np.testing.assert_allclose(res.eigenvalues, [3.0, 2.0])
    assert res.n_calls == 1


def test_block_max_iter_counts_products():
    G, _ = _psd(60, 60, 5, decay=0.99)
    matmat = _CountingBlocks(G, 4)
    res = block_lanczos(
        matmat, 60, block_size=4, n_components=10, tol=1e-12, max_iter=10
    )
    assert not res.converged
    assert res.n_iter == matmat.products == 10  # 4 + 4 + 2
    assert res.n_calls == 3


def test_block_is_deterministic_and_distributed_products_agree():
    rng = np.random.RandomState(8)
    blocks = [rng.standard_normal((n_m, 12)) for n_m in (5, 30, 1, 14)]
    G = sum(W.T @ W for W in blocks)
    w = np.linalg.eigvalsh(G)[::-1]

    def matmat(C):
        return np.sum([W.T @ (W @ C) for W in blocks], axis=0)

    threshold = 0.5 * (w[3] + w[4])
    a = block_lanczos(matmat, 12, block_size=3, threshold=threshold, random_state=0)
    b = block_lanczos(matmat, 12, block_size=3, threshold=threshold, random_state=0)
    np.testing.assert_allclose(a.eigenvalues, w[:4], rtol=1e-8)
    np.testing.assert_array_equal(a.eigenvalues, b.eigenvalues)
    np.testing.assert_array_equal(a.eigenvectors, b.eigenvectors)


def test_block_bad_arguments():
    G = np.eye(4)
    with pytest.raises(ValueError, match="block_size=0 must be at least 1"):
        block_lanczos(G.__matmul__, 4, block_size=0, n_components=1)
    with pytest.raises(ValueError, match="n_components, threshold or both"):
        block_lanczos(G.__matmul__, 4, block_size=2)
