"""Many small clients held by worker processes for the whole fit
(skfed._engine._transports._processes)."""

import functools
import os
import time

import numpy as np
import pytest
from joblib import parallel_config
from sklearn.datasets import make_blobs
from threadpoolctl import threadpool_info, threadpool_limits

import skfed
import skfed._engine._transports as transports_module
import skfed._engine._transports._processes as processes_module
from skfed._engine._federation import ClientStepError, Federation
from skfed._engine._transports._joblib import JoblibTransport
from skfed._engine._transports._processes import (
    ProcessTransport,
    _close_workers,
    _open_workers,
    _shares,
    resident_processes_pay,
)
from skfed._engine._validation import check_partitions
from skfed._testing import (
    INTEGRATION_CASES,
    TwoArgumentError,
    blas_threads,
    blas_threads_large,
    client_data_received,
    exit_on,
    fail_on,
    fail_unpicklably_on,
    hold_megabytes,
    install_receive_counter,
    keep_message_as_labels,
    where,
    where_not_in_processes,
)

N_CLIENTS = 64


@pytest.fixture(autouse=True)
def few_rows_are_enough(monkeypatch):
    # Small data keeps these tests fast; the rule on rows has its own test.
    monkeypatch.setattr(processes_module, "_MIN_ROWS", 0)


@pytest.fixture
def small_clients():
    rng = np.random.RandomState(0)
    ids = np.repeat(np.arange(N_CLIENTS), 3)
    return rng.standard_normal((ids.size, 2)), ids


def _federation(X, ids, **kwargs):
    p = check_partitions(ids, X.shape[0])
    return Federation.from_arrays(X, None, p, random_state=0, n_jobs=2, **kwargs)


@pytest.fixture
def opened(monkeypatch):
    """The ProcessTransports that fits open, in order."""
    made = []

    class Recorded(ProcessTransport):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(transports_module, "ProcessTransport", Recorded)
    return made


def test_many_small_clients_stay_in_the_same_worker_process(small_clients):
    X, ids = small_clients
    with _federation(X, ids) as fed:
        assert isinstance(fed.transport, ProcessTransport)
        first = fed.run_round("where", where)
        second = fed.run_round("where", where)
        # Also the steps kept out of processes that receive the clients each
        # round: here the rows are already in the worker.
        third = fed.run_round("where", where_not_in_processes)
        calls = fed.local_results("testing", "calls")
    pids = [pid for pid, _ in first]
    assert len(set(pids)) == 2 and os.getpid() not in pids
    assert [pid for pid, _ in second] == pids == [pid for pid, _ in third]
    # Consecutive clients share a worker.
    assert pids == sorted(pids, key=pids.index)
    assert calls == dict.fromkeys(range(N_CLIENTS), 2)
    # Once the fit is over the workers hold nothing of it.
    with pytest.raises(RuntimeError, match="no longer holds the fit's clients"):
        fed.transport.client(0)
    with pytest.raises(RuntimeError, match="serves one fit"):
        fed.__enter__()


def test_clients_are_sent_to_the_workers_once(small_clients):
    X, ids = small_clients
    executors = _open_workers(2)
    for executor in executors:
        executor.submit(install_receive_counter).result()
    with _federation(X, ids) as fed:
        for _ in range(3):
            fed.run_round("where", where)
        fed.run_round("labels", keep_message_as_labels, [7])
        labels = fed.assemble("testing", "labels", fed.n_samples)
        base = fed.transport.client(0).entropy[0]
    received = [e.submit(client_data_received).result().get(base, 0) for e in executors]
    _close_workers(2)
    assert sum(received) == N_CLIENTS
    assert min(received) > 0
    np.testing.assert_array_equal(labels, np.full(X.shape[0], 7))


@pytest.mark.parametrize(
    "sizes, n_workers, expected",
    [
        ([100] * 10, 2, [5, 5]),
        ([1000, 1, 1], 2, [1, 2]),
        ([1, 1, 1000], 2, [3, 0]),
        ([5] * 9, 3, [3, 3, 3]),
    ],
)
def test_shares_are_consecutive_runs_of_about_equal_rows(sizes, n_workers, expected):
    shares = _shares(np.array(sizes), n_workers)
    assert [len(s) for s in shares] == expected
    np.testing.assert_array_equal(np.concatenate(shares), np.arange(len(sizes)))


def test_which_fits_go_to_resident_processes(monkeypatch):
    many_small = [100] * 40
    assert resident_processes_pay(2, many_small)
    assert not resident_processes_pay(1, many_small)
    assert not resident_processes_pay(None, many_small)
    assert not resident_processes_pay(2, [100] * 31)
    assert not resident_processes_pay(2, [5000] * 40)
    with parallel_config(backend="threading"):
        assert not resident_processes_pay(2, many_small)
    with parallel_config(backend="loky", n_jobs=2):
        assert resident_processes_pay(None, many_small)
    with parallel_config(backend="sequential"):
        assert not resident_processes_pay(2, many_small)
    monkeypatch.setattr(processes_module, "_MIN_ROWS", 4001)
    assert not resident_processes_pay(2, many_small)
    assert resident_processes_pay(2, [*many_small, 1])


def test_a_protocol_can_keep_its_clients_here(small_clients):
    X, ids = small_clients
    with _federation(X, ids, in_processes=False) as fed:
        assert isinstance(fed.transport, JoblibTransport)


def _blobs_for(kind):
    X, y = make_blobs(N_CLIENTS * 12, centers=3, cluster_std=1.5, random_state=0)
    return X, (y % 2 if kind == "classify" else None)


@pytest.mark.parametrize("name", sorted(INTEGRATION_CASES))
def test_resident_clients_give_the_in_process_model(name, opened):
    params, _, kind = INTEGRATION_CASES[name]
    X, y = _blobs_for(kind)
    partitions = np.arange(X.shape[0]) % N_CLIENTS
    Estimator = getattr(skfed, name)
    fits = [
        Estimator(**params, n_jobs=n_jobs).fit(X, y, partitions=partitions)
        for n_jobs in (1, 2)
    ]
    if name in ("FederatedKernelKMeans", "DistributedKMeans"):
        # Kernel k-means' uploads (a Gram matrix per client and round) and
        # the coreset k-means' rows outweigh their clients' work: they stay
        # here.
        assert not opened
    else:
        assert len(opened) == 1
    one, two = fits
    if kind == "classify":
        np.testing.assert_array_equal(
            one.decision_function(X), two.decision_function(X)
        )
    elif kind == "transform":
        np.testing.assert_array_equal(one.transform(X), two.transform(X))
    else:
        np.testing.assert_array_equal(one.labels_, two.labels_)
        np.testing.assert_array_equal(one.cluster_centers_, two.cluster_centers_)
    assert one.communication_.summary() == two.communication_.summary()


@pytest.mark.parametrize("limit", [1, 2])
def test_workers_run_a_step_on_the_blas_threads_it_has_here(small_clients, limit):
    # One BLAS thread, as in the server's process (a step of large products
    # too: the clients are small), so that a step rounds alike wherever it
    # runs.
    X, ids = small_clients
    with threadpool_limits(limit, user_api="blas"):
        here = [
            lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"
        ]
        with _federation(X, ids) as fed:
            assert isinstance(fed.transport, ProcessTransport)
            ordinary = fed.run_round("threads", blas_threads)
            large = fed.run_round("large", blas_threads_large)
    assert max(here) == limit
    assert {max(s) for s in ordinary} == {max(s) for s in large} == {1}


def test_a_failing_client_is_named_and_can_be_dropped(small_clients):
    X, ids = small_clients
    with pytest.raises(ClientStepError, match="Client 40 failed in round 'size'") as e:
        with _federation(X, ids) as fed:
            fed.run_round("size", functools.partial(fail_on, bad=40))
    assert isinstance(e.value.__cause__, RuntimeError)
    with _federation(X, ids, on_client_error="drop") as fed:
        sizes = fed.run_round(
            "size", functools.partial(fail_on, bad=40, exc="MemoryError")
        )
        again = fed.run_round("size", functools.partial(fail_on, bad=None))
    assert len(sizes) == len(again) == N_CLIENTS - 1
    assert 40 not in fed.client_ids and isinstance(fed.client_errors[40], MemoryError)


def test_an_error_that_cannot_travel_back_keeps_its_message(small_clients):
    X, ids = small_clients
    with _federation(X, ids, on_client_error="drop") as fed:
        fed.run_round("size", functools.partial(fail_unpicklably_on, bad=5))
    error = fed.client_errors[5]
    assert type(error) is RuntimeError and not isinstance(error, TwoArgumentError)
    assert str(error) == "TwoArgumentError: disk on fire"


def test_a_worker_that_stops_fails_the_fit_and_the_next_fit_starts_anew(
    small_clients,
):
    X, ids = small_clients
    with pytest.raises(RuntimeError, match="worker process holding clients"):
        with _federation(X, ids) as fed:
            fed.run_round("exit", functools.partial(exit_on, bad=3))
    with _federation(X, ids) as fed:
        assert len(fed.run_round("where", where)) == N_CLIENTS


def test_idle_workers_stop_and_the_next_fit_starts_new_ones(small_clients, monkeypatch):
    X, ids = small_clients
    monkeypatch.setattr(processes_module, "_IDLE_SECONDS", 0.1)
    with _federation(X, ids) as fed:
        pids = {pid for pid, _ in fed.run_round("where", where)}
    for _ in range(100):
        if 2 not in processes_module._WORKERS:
            break
        time.sleep(0.05)
    assert 2 not in processes_module._WORKERS
    with _federation(X, ids) as fed:
        again = {pid for pid, _ in fed.run_round("where", where)}
    assert len(again) == 2 and not again & pids


def test_a_worker_holding_much_memory_keeps_its_clients(small_clients):
    # loky replaces a worker that grew by 300 MB since its first task (when
    # psutil is installed), checking at most once a second after a task.
    X, ids = small_clients
    with _federation(X, ids) as fed:
        time.sleep(1.1)
        fed.run_round("hold", functools.partial(hold_megabytes, megabytes=400))
        time.sleep(1.1)
        held = fed.run_round("read", functools.partial(hold_megabytes, megabytes=None))
    assert held[0] == 400.0
