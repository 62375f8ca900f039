"""`partitions` travels like sample-aligned metadata through sklearn tools.

A minimal federated estimator stands in for the real ones so that the
mechanism of `FederatedMixin` is tested on its own.
"""

import numpy as np
import pytest
import sklearn
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.model_selection import GroupKFold, cross_validate
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils import check_random_state
from sklearn.utils.validation import validate_data

from skfed._engine._federation import FederatedMixin
from skfed._testing import noisy_sum


class FederatedColumnSum(FederatedMixin, TransformerMixin, BaseEstimator):
    """Sums columns over clients; remembers which clients it saw."""

    def __init__(self, random_state=None):
        self.random_state = random_state

    def fit(self, X, y=None, *, partitions=None):
        X = validate_data(self, X)
        rng = check_random_state(self.random_state)
        fed = self._federation(X, None, partitions, random_state=rng)
        with fed:
            sums = fed.run_round("sum", noisy_sum, {"round": 0, "scale": 0.0})
        self.sum_ = np.sum(sums, axis=0)
        self.clients_ = list(fed.client_ids)
        self.communication_ = fed.log
        return self

    def transform(self, X):
        return validate_data(self, X, reset=False) - self.sum_

    def score(self, X, y=None):
        return -float(np.abs(self.transform(X)).mean())


@pytest.fixture
def data():
    rng = np.random.RandomState(0)
    X = rng.standard_normal((40, 3))
    partitions = np.repeat(["a", "b", "c", "d"], 10)
    return X, partitions


def test_pipeline_without_routing_uses_step_prefix(data):
    X, p = data
    pipe = make_pipeline(StandardScaler(), FederatedColumnSum())
    pipe.fit(X, federatedcolumnsum__partitions=p)
    assert pipe[-1].clients_ == ["a", "b", "c", "d"]


def test_pipeline_with_routing_requests_partitions_by_default(data):
    X, p = data
    with sklearn.config_context(enable_metadata_routing=True):
        pipe = make_pipeline(StandardScaler(), FederatedColumnSum())
        pipe.fit(X, partitions=p)
    assert pipe[-1].clients_ == ["a", "b", "c", "d"]


def test_cross_validation_slices_partitions(data):
    X, p = data
    with sklearn.config_context(enable_metadata_routing=True):
        res = cross_validate(
            FederatedColumnSum(),
            X,
            cv=GroupKFold(n_splits=4).set_split_request(groups="partitions"),
            params={"partitions": p},
            return_estimator=True,
        )
    # Leave-one-client-out: every fold trains on the three other clients.
    seen = sorted(tuple(e.clients_) for e in res["estimator"])
    assert seen == [("a", "b", "c"), ("a", "b", "d"), ("a", "c", "d"), ("b", "c", "d")]


def test_cross_validation_without_routing(data):
    X, p = data
    res = cross_validate(
        FederatedColumnSum(),
        X,
        groups=p,
        cv=GroupKFold(n_splits=2),
        params={"partitions": p},
        return_estimator=True,
    )
    assert all(len(e.clients_) == 2 for e in res["estimator"])


def test_unsliced_partitions_give_a_clear_error(data):
    X, p = data
    with pytest.raises(ValueError, match="partitions has 40 entries but X has 20"):
        FederatedColumnSum().fit(X[:20], partitions=p)
