"""Tests for the multi-width Gaussian kernel (skfed.kernel._multiwidth): its
atoms evaluated exactly."""

import numpy as np
from sklearn import config_context

from skfed._testing import rkhs_paper_data
from skfed.kernel._multiwidth import AtomDictionary, gaussian_atoms


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
