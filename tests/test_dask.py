"""The simulated network on a dask.distributed cluster of worker processes."""

import numpy as np
import pytest
from joblib import parallel_config
from sklearn.datasets import make_blobs
from threadpoolctl import threadpool_limits

import skfed
from skfed._federation import Federation
from skfed._testing import (
    INTEGRATION_CASES,
    noisy_sum,
    settled_receipts,
    shipped_since,
)
from skfed._validation import check_partitions

distributed = pytest.importorskip("distributed")

N_WORKERS = 2


@pytest.fixture(scope="module")
def dask_client():
    cluster = distributed.LocalCluster(
        n_workers=N_WORKERS,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
    )
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


def _fit(X, ids, n_rounds):
    p = check_partitions(ids, X.shape[0])
    # A random_state of its own: the shipment counter tells fits apart by
    # the seed their clients derive from it.
    with Federation.from_arrays(X, None, p, random_state=48_611) as fed:
        out = [
            fed.run_round("sum", noisy_sum, {"round": r, "scale": 1.0})
            for r in range(n_rounds)
        ]
    return fed, np.array(out)


def test_dask_gives_the_sequential_result_and_ships_data_once(dask_client):
    rng = np.random.RandomState(0)
    X, ids = rng.standard_normal((200, 5)), rng.randint(0, 5, 200)
    n_rounds = 6
    _, expected = _fit(X, ids, n_rounds)

    before = settled_receipts(dask_client)
    with parallel_config(backend="dask"):
        fed, got = _fit(X, ids, n_rounds)
    shipped = shipped_since(before, settled_receipts(dask_client))

    np.testing.assert_array_equal(got, expected)
    assert fed.local_results("testing", "calls") == dict.fromkeys(range(5), n_rounds)
    # Each client's data reaches each worker once per fit (broadcast scatter),
    # not once per round (which would be n_rounds * n_clients here).
    assert shipped == 5 * N_WORKERS


@pytest.mark.parametrize("name", [n for n in INTEGRATION_CASES if n in skfed.__all__])
def test_estimators_on_dask_match_the_sequential_fit(name, dask_client):
    X, y = make_blobs(n_samples=240, centers=3, n_features=4, random_state=1)
    y = (y == 0).astype(int) if INTEGRATION_CASES[name][2] == "classify" else y
    partitions = np.arange(240) % 6
    # Each estimator's fit gets its own seed (the shipment counter tells
    # fits apart by it).
    seed = 1000 + sorted(INTEGRATION_CASES).index(name)
    params = dict(INTEGRATION_CASES[name][0], random_state=seed)

    # dask workers run BLAS on one thread; so do both fits in this process
    # (the server's steps run here), because a multithreaded BLAS sums in
    # another order (differences of ~1e-14).
    with threadpool_limits(limits=1):
        expected = getattr(skfed, name)(**params).fit(X, y, partitions=partitions)
        before = settled_receipts(dask_client)
        with parallel_config(backend="dask"):
            got = getattr(skfed, name)(**params).fit(X, y, partitions=partitions)
    shipped = shipped_since(before, settled_receipts(dask_client))

    for method in ("predict", "transform", "decision_function"):
        if hasattr(expected, method):
            np.testing.assert_array_equal(
                getattr(got, method)(X), getattr(expected, method)(X)
            )
    assert got.communication_.to_records() == expected.communication_.to_records()
    # Each client's data is received at most once per worker in the fit,
    # however many rounds the algorithm runs.
    assert 6 <= shipped <= 6 * N_WORKERS
