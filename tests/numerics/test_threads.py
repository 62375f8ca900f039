"""BLAS threads during a fit (skfed._numerics._threads): one for the fit's small
products, the process's for steps of large products, the process's own
setting back afterwards."""

import numpy as np
import pytest
from joblib import parallel_config
from threadpoolctl import threadpool_info, threadpool_limits

from skfed import DistributedKMeans
from skfed._engine._federation import Federation
from skfed._engine._validation import check_partitions
from skfed._numerics._threads import LARGE_ROWS, blas_limits, close_fit, open_fit
from skfed._testing import blas_threads, blas_threads_large


def _blas():
    """The BLAS thread counts of this process."""
    libs = threadpool_info()
    return {lib["num_threads"] for lib in libs if lib["user_api"] == "blas"}


def _federation(n_jobs=None, n_clients=2, rows=LARGE_ROWS):
    X = np.random.RandomState(0).standard_normal((n_clients * rows, 3))
    ids = check_partitions(np.arange(X.shape[0]) % n_clients, X.shape[0])
    return Federation.from_arrays(X, None, ids, random_state=0, n_jobs=n_jobs)


@pytest.mark.parametrize(
    "backend, n_jobs", [("sequential", None), ("threading", 2), ("loky", 1)]
)
def test_a_fit_runs_blas_on_one_thread_but_for_large_products(backend, n_jobs):
    with threadpool_limits(2, user_api="blas"), parallel_config(backend=backend):
        with _federation(n_jobs) as fed:
            # The server's steps between rounds, and ordinary client steps.
            server = _blas()
            ordinary = fed.run_round("threads", blas_threads)
            large = fed.run_round("large", blas_threads_large)
            after_large = _blas()
        after = _blas()
    assert server == after_large == {1}
    assert {max(s) for s in ordinary} == {1}
    assert {max(s) for s in large} == {2}
    assert after == {2}


def test_the_process_gets_its_threads_back_when_the_last_fit_closes():
    # Fits open at once (in several threads) close in any order: the first
    # to close must not give the threads back under the other.
    with threadpool_limits(2, user_api="blas"):
        open_fit()
        open_fit()
        close_fit()
        assert _blas() == {1}
        assert blas_limits(True) == dict.fromkeys(blas_limits(True), 2)
        close_fit()
        assert _blas() == {2}
    # A failing transport does not leave the process bounded.
    with threadpool_limits(2, user_api="blas"):
        fed = _federation()
        fed.transport.__enter__ = None  # not callable: entering raises
        with pytest.raises(TypeError):
            with fed:
                pass
        assert _blas() == {2}


def test_large_products_over_small_clients_run_on_one_thread():
    # Over a block of rows or less a product waits for other threads more
    # than it computes, on a busy machine.
    with threadpool_limits(2, user_api="blas"):
        with _federation(n_clients=4, rows=LARGE_ROWS // 2) as fed:
            large = fed.run_round("large", blas_threads_large)
    assert {max(s) for s in large} == {1}


def test_a_user_limit_is_kept_for_large_products():
    with threadpool_limits(1, user_api="blas"):
        with _federation() as fed:
            large = fed.run_round("large", blas_threads_large)
    assert {max(s) for s in large} == {1}


def test_an_estimator_leaves_the_blas_threads_as_it_found_them():
    X = np.random.RandomState(0).standard_normal((300, 2))
    with threadpool_limits(2, user_api="blas"):
        DistributedKMeans(3, coreset_size=50, random_state=0).fit(X, partitions=3)
        assert _blas() == {2}
