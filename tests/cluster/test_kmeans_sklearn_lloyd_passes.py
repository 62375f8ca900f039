"""The large clients' Lloyd takes scikit-learn's compiled iteration where
the installed release has it, the NumPy pass otherwise: the two make the
same run, and a changed private iteration falls back to NumPy."""

import numpy as np
from numpy.testing import assert_allclose, assert_array_equal

import skfed.cluster._kmeans._sklearn_lloyd as lloyd_module
from skfed.cluster._kmeans import lloyd, lloyd_rows


def mixture(n, d, k, separation, seed):
    rng = np.random.RandomState(seed)
    means = rng.normal(scale=separation / np.sqrt(2 * d), size=(k, d))
    return means[rng.randint(k, size=n)] + rng.normal(size=(n, d))


def test_the_installed_release_has_the_compiled_iteration():
    # Every supported scikit-learn (1.6 to 1.9) has it: the fallback is for
    # a future release only.
    assert lloyd_module._compiled_iteration is not None


def test_both_passes_make_the_same_run(monkeypatch):
    # The compiled iteration and the NumPy pass: the same iterations, so
    # the same labels, iteration count and centers within rounding.
    X = mixture(4000, 12, 10, 3.0, 4)
    w = np.random.RandomState(4).uniform(0.5, 2.0, len(X))
    start = X[:10]
    rows = lloyd_rows(X, w, 1e-4)
    first = lloyd(rows, start, max_iter=300)
    monkeypatch.setattr(lloyd_module, "_compiled_iteration", None)
    second = lloyd(rows, start, max_iter=300)
    assert_allclose(first[0], second[0], rtol=1e-10, atol=1e-10)
    assert_array_equal(first[1], second[1])
    assert first[2] == second[2]


def test_a_changed_compiled_iteration_falls_back_to_numpy(monkeypatch):
    # A release whose private iteration takes other arguments: the run
    # goes to the NumPy pass and gives the same result.
    X = mixture(2500, 5, 6, 4.0, 5)
    rows = lloyd_rows(X, np.ones(len(X)), 1e-4)
    expected = lloyd(rows, X[:6], max_iter=300)

    def changed(*args, **kwargs):
        raise TypeError("lloyd_iter_chunked_dense() takes other arguments")

    monkeypatch.setattr(lloyd_module, "_compiled_iteration", changed)
    fallback = lloyd(rows, X[:6], max_iter=300)
    assert_allclose(fallback[0], expected[0], rtol=1e-10, atol=1e-10)
    assert_array_equal(fallback[1], expected[1])
