"""Every skfed estimator inside scikit-learn's tools.

Pipelines, searches and cross-validation with ``partitions`` passed with
metadata routing off (``step__partitions``) and on (requested by default),
leave-clients-out CV with ``GroupKFold``, ``clone``, pickling and
``set_output(transform="pandas")``.
"""

import pickle

import numpy as np
import pytest
import sklearn
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, GroupKFold, cross_validate
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import skfed
from skfed._testing import INTEGRATION_CASES as CASES

CLIENTS = np.array(["north", "south", "east", "west"])

AVAILABLE = [name for name in CASES if name in skfed.__all__]


def _make(name):
    params, _, _ = CASES[name]
    return getattr(skfed, name)(**params)


def _pipeline(name):
    kind = CASES[name][2]
    steps = [StandardScaler(), _make(name)]
    if kind == "transform":
        steps.append(LogisticRegression())
    return make_pipeline(*steps)


def _scoring(name):
    return "adjusted_rand_score" if CASES[name][2] == "cluster" else "accuracy"


def _step(name):
    return name.lower()


@pytest.fixture(scope="module")
def data(blob_data):
    X, y = blob_data(160, d=4, cluster_std=1.0)
    rng = np.random.RandomState(0)
    partitions = CLIENTS[rng.permutation(np.arange(160) % 4)]
    return X, y, partitions


def _binary(y, name):
    # The classifier case learns "blob 0 vs the rest".
    return (y == 0).astype(int) if CASES[name][2] == "classify" else y


@pytest.mark.parametrize("name", AVAILABLE)
def test_pipeline_without_routing(name, data):
    X, y, p = data
    pipe = _pipeline(name)
    pipe.fit(X, _binary(y, name), **{f"{_step(name)}__partitions": p})
    assert pipe.named_steps[_step(name)].n_clients_ == 4


@pytest.mark.parametrize("name", AVAILABLE)
def test_pipeline_with_routing(name, data):
    X, y, p = data
    with sklearn.config_context(enable_metadata_routing=True):
        pipe = _pipeline(name)
        if CASES[name][2] == "transform":
            pipe[-1].set_fit_request(sample_weight=False)
        pipe.fit(X, _binary(y, name), partitions=p)
    assert pipe.named_steps[_step(name)].n_clients_ == 4


def _grid(name):
    return {f"{_step(name)}__{k}": v for k, v in CASES[name][1].items()}


@pytest.mark.parametrize("name", AVAILABLE)
def test_grid_search_without_routing(name, data):
    X, y, p = data
    search = GridSearchCV(
        _pipeline(name), _grid(name), cv=GroupKFold(n_splits=2), scoring=_scoring(name)
    )
    search.fit(X, _binary(y, name), groups=p, **{f"{_step(name)}__partitions": p})
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
    assert search.best_estimator_.named_steps[_step(name)].n_clients_ == 4


@pytest.mark.parametrize("name", AVAILABLE)
def test_grid_search_with_routing(name, data):
    X, y, p = data
    with sklearn.config_context(enable_metadata_routing=True):
        pipe = _pipeline(name)
        if CASES[name][2] == "transform":
            pipe[-1].set_fit_request(sample_weight=False).set_score_request(
                sample_weight=False
            )
        search = GridSearchCV(
            pipe,
            _grid(name),
            cv=GroupKFold(n_splits=2).set_split_request(groups="partitions"),
            scoring=_scoring(name),
        )
        search.fit(X, _binary(y, name), partitions=p)
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
    assert search.best_estimator_.named_steps[_step(name)].n_clients_ == 4


@pytest.mark.parametrize("name", AVAILABLE)
def test_leave_clients_out_cross_validation(name, data):
    X, y, p = data
    res = cross_validate(
        _pipeline(name),
        X,
        _binary(y, name),
        groups=p,
        cv=GroupKFold(n_splits=4),
        params={f"{_step(name)}__partitions": p},
        scoring=_scoring(name),
        return_estimator=True,
    )
    # Each fold trains on three clients and scores on the fourth.
    fitted = [e.named_steps[_step(name)] for e in res["estimator"]]
    assert [e.n_clients_ for e in fitted] == [3, 3, 3, 3]
    assert np.all(np.isfinite(res["test_score"]))


@pytest.mark.parametrize("name", AVAILABLE)
def test_clone_and_pickle_round_trip(name, data):
    X, y, p = data
    est = _make(name).fit(X, _binary(y, name), partitions=p)
    fresh = clone(est)
    assert fresh.get_params() == est.get_params()
    assert not hasattr(fresh, "communication_")

    restored = pickle.loads(pickle.dumps(est))
    for method in ("predict", "transform", "decision_function"):
        if hasattr(est, method):
            np.testing.assert_array_equal(
                getattr(restored, method)(X), getattr(est, method)(X)
            )
    assert restored.communication_.to_records() == est.communication_.to_records()


@pytest.mark.parametrize(
    "name", [n for n in AVAILABLE if hasattr(getattr(skfed, n), "transform")]
)
def test_set_output_pandas(name, data):
    pd = pytest.importorskip("pandas")
    X, y, p = data
    est = _make(name).set_output(transform="pandas")
    out = est.fit(X, _binary(y, name), partitions=p).transform(X)
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == list(est.get_feature_names_out())
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    est.fit(frame, _binary(y, name), partitions=p)
    assert list(est.feature_names_in_) == list(frame.columns)
