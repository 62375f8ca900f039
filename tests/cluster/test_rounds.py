"""The rounds each clustering estimator declares (``_rounds``, from the
protocols' Round constants) are the rounds its fit runs: in that order, a
repeated round at most as often as declared, every other round once, with
the declared disclosure and, under differential privacy, the declared
noised releases (which the accountant charges)."""

import warnings

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from skfed import (
    DistributedKMeans,
    FederatedKernelKMeans,
    FederatedRKHSClassifier,
    KFed,
)
from skfed._testing import assert_runs_its_declared_rounds
from skfed.cluster._protocols import _coreset, _kfed
from skfed.privacy import DifferentialPrivacy

BOUNDS = (np.full(2, -15.0), np.full(2, 15.0))


def _dp():
    return DifferentialPrivacy(epsilon=4.0, bounds=BOUNDS)


@pytest.fixture(scope="module")
def data():
    X, _ = make_blobs(600, centers=3, n_features=2, random_state=0)
    return X, np.arange(len(X)) % 3


CASES = [
    KFed(3, random_state=0),
    KFed(3, refine_iter=4, random_state=0),
    KFed(3, privacy=_dp(), private_iter=3, random_state=0),
    DistributedKMeans(3, random_state=0),
    DistributedKMeans(3, refine_iter=0, random_state=0),
    DistributedKMeans(3, secure_aggregation=True, random_state=0),
    DistributedKMeans(3, raw_rows="refuse", max_iter=5, random_state=0),
    DistributedKMeans(3, privacy=_dp(), random_state=0),
    DistributedKMeans(3, privacy=_dp(), secure_aggregation=True, refine_iter=2),
    FederatedKernelKMeans(3, random_state=0),
    FederatedKernelKMeans(3, secure_aggregation=True, random_state=0),
    FederatedKernelKMeans(3, gamma=0.1, privacy=_dp(), refine_iter=2, random_state=0),
    FederatedKernelKMeans(3, raw_rows="refuse", random_state=0),
    FederatedKernelKMeans(
        3,
        features="random",
        n_random_features=60,
        raw_rows="refuse",
        secure_aggregation=True,
        random_state=0,
    ),
]


@pytest.mark.parametrize("est", CASES, ids=lambda e: repr(e)[:80])
def test_a_fit_runs_the_rounds_it_declares(est, data, rounds_run):
    X, partitions = data
    names = [r.name for r in est._rounds()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, partitions=partitions)
    # A round declared once per possible run (Lloyd until tol) may run
    # fewer times; every other runs as declared.
    repeated = {n for n in names if names.count(n) > 1}
    assert_runs_its_declared_rounds(est, rounds_run, optional=repeated)
    if est.privacy is not None:
        noised = sum(r["noised"] for r in est.communication_.disclosure())
        assert noised == est._privacy_releases() > 0


def test_dspgd_declares_each_of_its_rounds(data, rounds_run):
    # How many iterations and Lanczos products DSPGD takes depends on the
    # data: each of its rounds is declared once, and every one it runs is.
    X, partitions = data
    est = FederatedKernelKMeans(3, algorithm="dspgd", max_iter=3, random_state=0)
    declared = {r.name for r in est._rounds()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, partitions=partitions)
    assert set(rounds_run) <= declared
    assert {"random features", "eigenpairs", "coreset sampling"} <= set(rounds_run)


def test_the_rounds_decide_the_refusals_before_any_round(data, rounds_run):
    X, partitions = data
    # DSPGD's coreset samples rows of the embedding, which determine X's:
    # under raw_rows="refuse" refused, naming the round and the one-shot,
    # which clusters by sums there.
    with pytest.raises(ValueError, match="'coreset sampling'.*algorithm='one_shot'"):
        FederatedKernelKMeans(3, algorithm="dspgd", raw_rows="refuse").fit(
            X, partitions=partitions
        )
    # Un-noised rounds under differential privacy: refused, naming them and
    # what to use instead.
    y = (X[:, 0] > np.median(X[:, 0])).astype(int)
    with pytest.raises(ValueError, match=r"'critical samples.*random_features"):
        FederatedRKHSClassifier(method="critical_samples", privacy=_dp()).fit(
            X, y, partitions=partitions
        )
    assert rounds_run == []
    # Nothing to mask: k-FED without refinement uploads only per-client
    # local centers.
    with pytest.warns(UserWarning, match="secure_aggregation=True has no effect"):
        KFed(3, secure_aggregation=True).fit(X, partitions=partitions)


def test_repeated_rounds_are_one_declaration():
    # The refinement is one round, whichever protocol runs it; the private
    # local step is the plain one's name with its noised releases.
    assert _kfed.REFINEMENT is _coreset.REFINEMENT
    private = _kfed.kfed_rounds(private_iter=4)[0]
    assert private.name == _kfed.LOCAL_CENTERS.name
    assert private.disclosure.noised == 4 and private.sensitivity is not None
    assert _coreset.coreset_rounds("auto").count(_coreset.REFINEMENT) == 3
