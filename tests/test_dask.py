"""The simulated network on a dask.distributed cluster of worker processes."""

import numpy as np
import pytest
from joblib import parallel_config

from skfed._federation import Federation
from skfed._testing import client_data_received, noisy_sum
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
    with Federation.from_arrays(X, None, p, random_state=0) as fed:
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

    before = sum(dask_client.run(client_data_received).values())
    with parallel_config(backend="dask"):
        fed, got = _fit(X, ids, n_rounds)
    shipped = sum(dask_client.run(client_data_received).values()) - before

    np.testing.assert_array_equal(got, expected)
    assert fed.local_results(lambda s: s["calls"]) == dict.fromkeys(range(5), n_rounds)
    # Each client's data reaches each worker once per fit (broadcast scatter),
    # not once per round (which would be n_rounds * n_clients here).
    assert shipped == 5 * N_WORKERS
