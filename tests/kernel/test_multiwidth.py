"""Tests for the multi-width Gaussian kernel (skfed.kernel._multiwidth): its
atoms evaluated exactly, and its shared random-feature map."""

import numpy as np
from sklearn import config_context

from skfed._testing import rkhs_paper_data
from skfed.kernel._multiwidth import (
    AtomDictionary,
    features_per_width,
    gaussian_atoms,
    multiwidth_map,
)
from skfed.kernel._private_features import feature_blocks


def test_kernels_do_not_depend_on_an_offset_in_the_data():
    """Gaussian kernels see only differences. Φ in float32 from ‖x‖² − 2x·s
    + ‖s‖² at the raw coordinates cancelled: with an offset of 1000 some
    kernel values were off by 1 (measured from the centres' mean, the
    float32 values are identical)."""
    X, _, _ = rkhs_paper_data(300, seed=2)
    widths = np.array([0.05, 0.2])
    every = np.arange(len(X) * len(widths))
    reference = AtomDictionary(X, X, widths).columns(every)
    shifted = AtomDictionary(X + 1000, X + 1000, widths)
    np.testing.assert_allclose(shifted.columns(every), reference, atol=1e-6)
    v = np.random.RandomState(0).standard_normal(len(X))
    with config_context(working_memory=0.05):  # the chunked products
        chunked = AtomDictionary(X + 1000, X + 1000, widths)
        assert chunked._full is None
        np.testing.assert_allclose(chunked.columns(every), reference, atol=1e-6)
        np.testing.assert_allclose(
            chunked.rmatvec(v), reference.T @ v, rtol=1e-5, atol=1e-4
        )
    # Prediction in float32 (the user's dtype) measures from the centres too.
    np.testing.assert_allclose(
        gaussian_atoms(X + 1000, X[:20] + 1000, np.full(20, 0.05)),
        gaussian_atoms(X, X[:20], np.full(20, 0.05)),
        atol=1e-6,
    )


def _mean_kernel(X, Y, widths):
    sq = ((X[:, None, :] - Y[None, :, :]) ** 2).sum(-1)
    return np.mean([np.exp(-sq / (2 * w**2)) for w in widths], axis=0)


def test_atoms_are_the_gaussian_kernels_of_their_widths():
    rng = np.random.RandomState(0)
    X, centers = rng.normal(size=(40, 3)), rng.normal(size=(6, 3))
    widths = np.array([0.3, 0.3, 1.0, 2.0, 5.0, 0.7])
    sq = ((X[:, None, :] - centers[None, :, :]) ** 2).sum(-1)
    np.testing.assert_allclose(
        gaussian_atoms(X, centers, widths, dtype=np.float64),
        np.exp(-sq / (2 * widths**2)),
        rtol=1e-12,
    )
    # The dictionary: every center at every width, width-major.
    dictionary = AtomDictionary(X, centers, [0.5, 2.0], dtype=np.float64)
    Phi = np.hstack([np.exp(-sq / (2 * w**2)) for w in (0.5, 2.0)])
    np.testing.assert_allclose(dictionary.columns(), Phi, rtol=1e-12)
    v = rng.normal(size=len(X))
    np.testing.assert_allclose(dictionary.rmatvec(v), Phi.T @ v, rtol=1e-10)
    atoms = np.array([0, 7, 11])
    np.testing.assert_array_equal(dictionary.atom_widths(atoms), [0.5, 2.0, 2.0])
    np.testing.assert_array_equal(dictionary.atom_centers(atoms), centers[[0, 1, 5]])


def test_the_multiwidth_map_has_norm_one_and_estimates_the_mean_kernel():
    rng = np.random.RandomState(1)
    X = rng.normal(size=(30, 4)) + 1e3  # far from the origin as well
    widths = (0.8, 2.0, 4.0)
    D = 3 * features_per_width(6000, 3)
    omega, offset = multiwidth_map(7, 4, D, widths)
    assert omega.shape == (4, D) and D % 6 == 0
    Z = np.vstack([rows.copy() for _, rows in feature_blocks(X, omega, offset)])
    np.testing.assert_allclose(np.linalg.norm(Z, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(Z @ Z.T, _mean_kernel(X, X, widths), atol=0.05)
    # Drawn from the seed alone: every client builds the same map.
    again = multiwidth_map(7, 4, D, widths)
    np.testing.assert_array_equal(again[0], omega)
    assert not np.array_equal(multiwidth_map(8, 4, D, widths)[0], omega)
