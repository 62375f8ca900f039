"""Bad input gets a clear error or a sensible result, for every estimator.

Each estimator's own tests go deeper; this module holds the line the whole
library promises: NaN/inf, wrong shapes, ``partitions`` of the wrong length
or with missing ids, a single client, a client with a single sample, and
constant data.
"""

import warnings

import numpy as np
import pytest
from sklearn.datasets import make_blobs

import skfed
from skfed._testing import INTEGRATION_CASES

NAMES = [n for n in INTEGRATION_CASES if n in skfed.__all__]


def _data(name, n=120):
    X, y = make_blobs(n_samples=n, centers=3, n_features=4, random_state=0)
    if INTEGRATION_CASES[name][2] == "classify":
        y = (y == 0).astype(int)
    return X, y


def _make(name):
    return getattr(skfed, name)(**INTEGRATION_CASES[name][0])


def _outputs(est, X):
    return [
        np.asarray(getattr(est, m)(X))
        for m in ("predict", "transform", "decision_function")
        if hasattr(est, m)
    ]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_rejected(name, bad):
    X, y = _data(name)
    X[5, 2] = bad
    with pytest.raises(ValueError, match="(NaN|infinity)"):
        _make(name).fit(X, y, partitions=3)


@pytest.mark.parametrize("name", NAMES)
def test_partitions_of_the_wrong_length(name):
    X, y = _data(name)
    with pytest.raises(ValueError, match="partitions has 119 entries but X has 120"):
        _make(name).fit(X, y, partitions=np.arange(119) % 3)


@pytest.mark.parametrize("name", NAMES)
def test_partitions_with_missing_ids(name):
    X, y = _data(name)
    ids = (np.arange(120) % 3).astype(float)
    ids[7] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        _make(name).fit(X, y, partitions=ids)


@pytest.mark.parametrize("name", NAMES)
def test_more_clients_than_samples(name):
    X, y = _data(name)
    with pytest.raises(ValueError, match="more clients than there are samples"):
        _make(name).fit(X, y, partitions=121)


@pytest.mark.parametrize("name", NAMES)
def test_wrong_number_of_features_after_fit(name):
    X, y = _data(name)
    est = _make(name).fit(X, y, partitions=3)
    for method in ("predict", "transform", "decision_function"):
        if hasattr(est, method):
            with pytest.raises(ValueError, match="features"):
                getattr(est, method)(X[:, :3])


@pytest.mark.parametrize("name", NAMES)
def test_one_client_is_the_centralized_fit(name):
    X, y = _data(name)
    est = _make(name).fit(X, y)
    assert est.n_clients_ == 1
    assert all(np.all(np.isfinite(out)) for out in _outputs(est, X))


def _sensible_or_clear_error(name, X, y, partitions):
    """Fit; a ValueError must say something, a fit must give finite output."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = _make(name).fit(X, y, partitions=partitions)
    except ValueError as exc:
        assert len(str(exc)) > 30, f"unhelpful error: {exc!r}"
        return None
    for out in _outputs(est, X):
        assert np.all(np.isfinite(out))
    return est


@pytest.mark.parametrize("name", NAMES)
def test_a_client_with_a_single_sample(name):
    X, y = _data(name)
    ids = np.where(np.arange(120) == 0, 99, np.arange(120) % 3)
    est = _sensible_or_clear_error(name, X, y, ids)
    if est is not None:
        assert est.n_clients_ == 4


@pytest.mark.parametrize("name", NAMES)
def test_constant_data(name):
    X, y = _data(name)
    X[:] = 1.5
    _sensible_or_clear_error(name, X, y, 3)


@pytest.mark.parametrize("name", NAMES)
def test_duplicated_samples(name):
    X, y = _data(name, n=30)
    X, y = np.repeat(X, 4, axis=0), np.repeat(y, 4)
    est = _sensible_or_clear_error(name, X, y, 3)
    if est is not None and hasattr(est, "labels_"):
        # Copies of a point end up in the same cluster.
        labels = est.labels_.reshape(-1, 4)
        assert np.all(labels == labels[:, :1])
