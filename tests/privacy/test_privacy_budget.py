"""PrivacyBudget: a budget shared by the private fits on the same rows
(sequential composition, a cap checked before the first round, and no fit
that escapes it in another process)."""

import copy
import math
import os
import pickle
import threading

import joblib
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV

from skfed import DistributedKernelPCA, KFed
from skfed._testing import blobs
from skfed.privacy import (
    DifferentialPrivacy,
    PrivacyBudget,
    PrivacyBudgetError,
    _budget,
)

BOUNDS = (-15.0, 15.0)


def _data(n=300):
    return blobs(n)[0]


def _kfed(epsilon=1.0, delta=1e-7, **kw):
    dp = DifferentialPrivacy(epsilon=epsilon, delta=delta, bounds=BOUNDS)
    return KFed(3, privacy=dp, private_iter=2, **kw)


def test_fits_compose_sequentially_and_report_each_charge():
    X = _data()
    with PrivacyBudget(epsilon=10, delta=1e-5) as budget:
        _kfed(epsilon=1.0).fit(X, partitions=3)
        _kfed(epsilon=2.5, delta=3e-7).fit(X, partitions=3)
        KFed(3).fit(X, partitions=3)  # not private: no charge
    epsilon, delta = budget.spent()
    assert epsilon == pytest.approx(3.5)
    assert delta == pytest.approx(4e-7)
    assert [(e.epsilon, e.delta) for e in budget.entries] == [
        (1.0, 1e-7),
        (2.5, 3e-7),
    ]
    assert all(e.label.startswith("KFed fit") for e in budget.entries)
    assert budget.remaining() == pytest.approx((6.5, 1e-5 - 4e-7))
    # Closed: a fit after the block charges nothing.
    _kfed().fit(X, partitions=3)
    assert len(budget.entries) == 2


def test_a_fit_past_the_cap_is_refused_before_any_round(rounds_run):
    X = _data()
    with PrivacyBudget(epsilon=1.5) as budget:
        _kfed(epsilon=1.0).fit(X, partitions=3)
        sent = len(rounds_run)
        with pytest.raises(PrivacyBudgetError, match="past its cap"):
            _kfed(epsilon=1.0).fit(X, partitions=3)
        assert len(rounds_run) == sent  # nothing was sent
    # The refused fit charged nothing.
    assert budget.spent()[0] == 1.0
    with PrivacyBudget(epsilon=5, delta=1e-8):
        with pytest.raises(PrivacyBudgetError, match="delta=1e-07"):
            _kfed().fit(X, partitions=3)
    # epsilon = inf is the non-private fit: no finite cap covers it.
    with PrivacyBudget(epsilon=100):
        with pytest.raises(PrivacyBudgetError):
            _kfed(epsilon=math.inf).fit(X, partitions=3)


def test_rounding_does_not_refuse_a_fit_that_fits():
    with PrivacyBudget(epsilon=1.0, delta=1e-5) as budget:
        for _ in range(10):
            budget.charge(0.1, 1e-6)
    assert len(budget.entries) == 10
    with pytest.raises(PrivacyBudgetError):
        budget.charge(1e-3, 0.0, label="one more")


def test_grid_search_is_charged_every_fit_and_stops_at_the_cap():
    X = _data(400)
    grid = {"privacy__epsilon": [0.5, 1.0, 2.0]}
    with PrivacyBudget(epsilon=100, delta=1e-5) as budget:
        search = GridSearchCV(_kfed(), grid, cv=3).fit(X)
    best = search.best_params_["privacy__epsilon"]
    # 3 candidates x 3 folds, then the refit.
    assert len(budget.entries) == 10
    assert budget.spent()[0] == pytest.approx(3 * 3.5 + best)
    assert budget.spent()[1] == pytest.approx(10 * 1e-7)

    # Under a cap of 5, the search stops at the fit that would pass it.
    with PrivacyBudget(epsilon=5) as budget:
        with pytest.raises(PrivacyBudgetError, match="past its cap"):
            GridSearchCV(_kfed(), grid, cv=3, error_score="raise").fit(X)
    # Folds of 0.5 (1.5), then of 1.0 (3.0): 4.5; the first at 2.0 would pass 5.
    assert budget.spent()[0] == pytest.approx(4.5)


def test_fits_in_threads_are_charged():
    X = _data(400)
    grid = {"privacy__epsilon": [0.5, 1.0]}
    with PrivacyBudget(epsilon=100) as budget:
        with joblib.parallel_config(backend="threading"):
            GridSearchCV(_kfed(), grid, cv=2, n_jobs=2).fit(X)
    assert len(budget.entries) == 5
    assert budget.spent()[0] >= 2 * 1.5 + 0.5


def test_charges_from_many_threads_add_up():
    budget = PrivacyBudget(epsilon=1000)

    def charge():
        for _ in range(200):
            budget.charge(0.5, 0.0)

    threads = [threading.Thread(target=charge) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(budget.entries) == 800
    assert budget.spent()[0] == 400.0


@pytest.mark.slow  # starts loky's worker processes
def test_a_fit_in_a_worker_process_refuses_instead_of_running_uncharged():
    X = _data(400)
    grid = {"privacy__epsilon": [0.5, 1.0]}
    with PrivacyBudget(epsilon=100) as budget:
        search = GridSearchCV(_kfed(), grid, cv=2, n_jobs=2, error_score="raise")
        with pytest.raises(PrivacyBudgetError, match="n_jobs=1"):
            search.fit(X)
    assert budget.entries == []
    # Without an open budget the same search runs in the workers.
    GridSearchCV(_kfed(), grid, cv=2, n_jobs=2).fit(X)


def test_copies_in_this_process_are_the_budget():
    budget = PrivacyBudget(epsilon=3)
    for twin in (
        copy.copy(budget),
        copy.deepcopy(budget),
        pickle.loads(pickle.dumps(budget)),
        clone(budget, safe=False),
    ):
        assert twin is budget
    # An estimator pickled while a budget is open, unpickled here, is
    # charged like any other fit.
    X = _data()
    with budget:
        est = pickle.loads(pickle.dumps(_kfed()))
        est.fit(X, partitions=3)
    assert len(budget.entries) == 1
    est.fit(X, partitions=3)  # outside the block
    assert len(budget.entries) == 1


def test_a_copy_in_another_process_refuses(monkeypatch):
    budget = PrivacyBudget(epsilon=3)
    pid = os.getpid()
    with budget:
        state = pickle.dumps(_kfed())
        # A process forked while the budget is open inherits it open.
        monkeypatch.setattr(_budget.os, "getpid", lambda: pid + 1)
        with pytest.raises(PrivacyBudgetError, match="forked"):
            _kfed().fit(_data(), partitions=3)
    # As a worker process sees an estimator pickled while it was open.
    remote = pickle.loads(state)
    with pytest.raises(PrivacyBudgetError, match=f"lives in process {pid}"):
        remote.fit(_data(), partitions=3)
    with pytest.raises(PrivacyBudgetError, match="lives in process"):
        pickle.loads(pickle.dumps(budget)).charge(0.1, 0.0)
    # A clone starts afresh: it carries no handle.
    clone(remote).fit(_data(), partitions=3)
    monkeypatch.undo()
    assert budget.entries == []
    assert not hasattr(remote, "cluster_centers_")  # refused: never fitted


def test_nested_budgets_are_charged_together_or_not_at_all():
    X = _data()
    with PrivacyBudget(epsilon=10) as session:
        _kfed(epsilon=1.0).fit(X, partitions=3)
        with PrivacyBudget(epsilon=2) as search:
            _kfed(epsilon=1.5).fit(X, partitions=3)
            with pytest.raises(PrivacyBudgetError):
                _kfed(epsilon=1.0).fit(X, partitions=3)
        _kfed(epsilon=1.0).fit(X, partitions=3)
    assert session.spent()[0] == pytest.approx(3.5)
    assert search.spent()[0] == pytest.approx(1.5)


def test_partial_fit_and_other_estimators_are_charged():
    X = _data(400)
    with PrivacyBudget(epsilon=10) as budget:
        est = _kfed(epsilon=1.0).fit(X[:200], partitions=2)
        est.partial_fit(X[200:], partitions=2)
        DistributedKernelPCA(
            2,
            gamma=0.1,
            n_random_features=20,
            privacy=DifferentialPrivacy(epsilon=2.0, delta=1e-7),
        ).fit(X, partitions=2)
    assert [e.epsilon for e in budget.entries] == [1.0, 1.0, 2.0]
    assert budget.entries[2].label.startswith("DistributedKernelPCA")


def test_a_fit_that_spent_more_than_it_asked_is_counted_and_warns():
    budget = PrivacyBudget(epsilon=2)
    with budget:
        charges = _budget.charge_fit(_kfed(), DifferentialPrivacy(epsilon=1.5))
    with pytest.warns(UserWarning, match="past its cap"):
        _budget.settle_fit(charges, (2.5, 1e-5))
    assert budget.spent() == pytest.approx((2.5, 1e-5))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"epsilon": 0}, "epsilon must be positive"),
        ({"epsilon": -1}, "epsilon must be positive"),
        ({"epsilon": float("nan")}, "epsilon must be positive"),
        ({"epsilon": 1, "delta": 1.5}, "delta must be in"),
        ({"epsilon": 1, "delta": -1e-9}, "delta must be in"),
    ],
)
def test_bad_budgets_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PrivacyBudget(**kwargs)
    with pytest.raises(ValueError, match="A charge is"):
        PrivacyBudget(1).charge(-1, 0)
    assert np.isinf(PrivacyBudget().epsilon)
