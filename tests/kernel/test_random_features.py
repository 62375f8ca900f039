import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import make_blobs
from sklearn.metrics import euclidean_distances

from skfed._engine._federation import Federation
from skfed._engine._validation import check_partitions
from skfed.kernel import (
    gamma_from_moments,
    mean_from_moments,
    moments_step,
    random_fourier_features,
    sample_fourier_weights,
)
from skfed.kernel._random_features import scaled_cosines


def _gamma(X, ids):
    p = check_partitions(ids, X.shape[0])
    with Federation.from_arrays(X, None, p, random_state=0) as fed:
        return gamma_from_moments(fed.run_round("moments", moments_step)), fed.log


def _exact_gamma(X):
    return 1 / (2 * np.mean(euclidean_distances(X, squared=True)))


@pytest.mark.parametrize("sparse", [False, True])
def test_federated_gamma_is_the_mean_squared_distance(sparse):
    X, _ = make_blobs(200, n_features=5, random_state=0)
    X[X < 0] = 0  # zeros, so that CSR stores only part of the rows
    ids = np.arange(200) % 7
    gamma, log = _gamma(sp.csr_matrix(X) if sparse else X, ids)
    assert gamma == pytest.approx(_exact_gamma(X), rel=1e-10)
    assert log.upload_floats == 7 * (X.shape[1] + 2)


def test_federated_gamma_survives_data_far_from_the_origin():
    X, _ = make_blobs(200, n_features=5, random_state=0)
    ids = np.arange(200) % 4
    gamma, _ = _gamma(X, ids)
    for shift in (1e6, 1e8):
        shifted, _ = _gamma(X + shift, ids)
        assert shifted == pytest.approx(gamma, rel=1e-6)


@pytest.mark.parametrize("value", [0.0, 1.5, 1e8])
def test_identical_samples_have_no_kernel_width(value):
    X = np.full((30, 3), value)
    with pytest.raises(ValueError, match="All samples are identical"):
        _gamma(X, np.arange(30) % 3)


@settings(max_examples=20, deadline=None)
@given(st.permutations(range(5)), st.integers(0, 2**16))
def test_gamma_ignores_the_order_of_the_uploads(order, seed):
    X = np.random.RandomState(seed).standard_normal((50, 3)) * 10 + 3
    uploads = [moments_step(_Client(X[i::5]), None, None)[1] for i in range(5)]
    assert gamma_from_moments([uploads[i] for i in order]) == gamma_from_moments(
        uploads
    )


class _Client:
    def __init__(self, X):
        self.X = X


def test_random_fourier_features_approximate_the_rbf_kernel():
    X = np.random.RandomState(0).standard_normal((40, 3))
    omega, offset = sample_fourier_weights(0, 3, 20_000, 0.3)
    Z = random_fourier_features(X, omega, offset)
    K = np.exp(-0.3 * euclidean_distances(X, squared=True))
    assert np.abs(Z @ Z.T - K).max() < 0.05
    Zs = random_fourier_features(sp.csr_matrix(X), omega, offset)
    # The cosines are float32-accurate (scaled_cosines): sparse and dense
    # phases that differ in their last float64 bit may round to neighbouring
    # float32 values, 6e-8 apart before the scale √(2 / D).
    np.testing.assert_allclose(Zs, Z, rtol=0, atol=1e-7 * np.sqrt(2 / 20_000))
    # ``out``: written into a column block of a wider matrix, nothing else.
    wide = np.full((40, 20_003), 7.0)
    got = random_fourier_features(X, omega, offset, out=wide[:, 1:-2])
    assert np.shares_memory(got, wide)
    np.testing.assert_array_equal(wide[:, 1:-2], Z)
    assert np.all(wide[:, 0] == 7.0) and np.all(wide[:, -2:] == 7.0)


@pytest.mark.parametrize("offset", [0.0, 1e6])
@pytest.mark.parametrize("shape", [(3000, 7), (301, 500)])
def test_scaled_cosines_are_float32_accurate_far_from_the_origin(offset, shape):
    # The phase is reduced modulo 2π in float64 before the float32 cosine:
    # phases of order 1e6 (data far from the origin) keep about 1e-10 of
    # their value, so the cosine stays within float32 rounding of the exact
    # one instead of being noise. 500 columns: blocks of 80 rows, the last
    # one partial.
    rng = np.random.RandomState(0)
    n_rows, n_cols = shape
    phase = offset + 50 * rng.standard_normal(shape)
    out = np.full((n_rows, n_cols + 3), -5.0)
    scaled_cosines(phase.copy(), 0.5, out=out[:, 2:-1])
    np.testing.assert_allclose(out[:, 2:-1], 0.5 * np.cos(phase), rtol=0, atol=2e-7)
    # Only the column block asked for is written.
    assert np.all(out[:, :2] == -5.0) and np.all(out[:, -1] == -5.0)
    # float32 phases are taken as they are (no reduction to gain).
    low = phase.astype(np.float32) - np.float32(offset)
    got = scaled_cosines(low.copy(), 2.0, out=np.empty_like(low))
    np.testing.assert_allclose(got, 2 * np.cos(low), rtol=0, atol=1e-5)


@pytest.mark.parametrize("sparse", [False, True])
def test_global_mean_from_moments_is_order_free(sparse):
    X, _ = make_blobs(60, n_features=3, random_state=0)
    X += 1e9
    ids = np.arange(60) % 4
    p = check_partitions(ids, 60)
    Xc = sp.csr_matrix(X) if sparse else X
    with Federation.from_arrays(Xc, None, p, random_state=0) as fed:
        uploads = fed.run_round("moments", moments_step)
    np.testing.assert_allclose(mean_from_moments(uploads), X.mean(axis=0), rtol=1e-15)
    assert np.array_equal(mean_from_moments(uploads[::-1]), mean_from_moments(uploads))
