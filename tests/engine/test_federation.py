import functools
import os
import threading
import types
from contextlib import nullcontext

import numpy as np
import pytest
import scipy.sparse as sp
import sklearn
from joblib import parallel_config
from threadpoolctl import threadpool_info

from skfed import ClientStepError, ClientValueError
from skfed._engine._client import fingerprint as _fingerprint
from skfed._engine._federation import Federation
from skfed._engine._protocol import client_step, run_alone
from skfed._engine._transports import _common as transport_module
from skfed._engine._transports import _joblib as joblib_module
from skfed._engine._validation import check_partitions
from skfed._testing import (
    SharedSum,
    fail_on,
    joblib_backend,
    keep_message_as_labels,
    leak_thread_limits,
    noisy_sum,
    shared_sum,
    sklearn_config,
    where,
    where_not_in_processes,
)


def _run(X, ids, n_rounds=3, *, random_state=0, n_jobs=None):
    p = check_partitions(ids, X.shape[0])
    with Federation.from_arrays(
        X, None, p, random_state=random_state, n_jobs=n_jobs
    ) as fed:
        out = [
            fed.run_round("sum", noisy_sum, {"round": r, "scale": 1.0})
            for r in range(n_rounds)
        ]
    return fed, {c: np.array([o[i] for o in out]) for i, c in enumerate(fed.client_ids)}


@pytest.fixture
def data():
    rng = np.random.RandomState(0)
    return rng.standard_normal((60, 4)), rng.randint(0, 5, 60)


@pytest.mark.parametrize(
    "backend, n_jobs",
    [("sequential", 1), ("threading", 2), ("loky", 2), ("threading", 1)],
)
def test_same_result_for_any_backend_and_n_jobs(data, backend, n_jobs):
    X, ids = data
    _, ref = _run(X, ids)
    with parallel_config(backend=backend, n_jobs=n_jobs):
        _, got = _run(X, ids)
    for c in ref:
        np.testing.assert_array_equal(ref[c], got[c])


def test_client_streams_ignore_names_and_order(data):
    X, ids = data
    _, ref = _run(X, ids)
    perm = np.random.RandomState(1).permutation(len(ids))
    names = np.array(["z", "q", "m", "b", "a"])
    _, got = _run(X[perm], names[ids[perm]])
    for c in ref:
        match = [
            v for v in got.values() if np.allclose(v[:, 0].sum(), ref[c][:, 0].sum())
        ]
        assert len(match) == 1
        np.testing.assert_allclose(match[0], ref[c], rtol=1e-12, atol=1e-12)


def test_client_streams_differ_between_clients_and_seeds(data):
    X, ids = data
    p = check_partitions(ids, X.shape[0])
    fed = Federation.from_arrays(X, None, p, random_state=0)
    clients = [fed.transport.client(c) for c in fed.client_ids]
    draws = [c.random_state("test.stream").rand() for c in clients]
    assert len(set(draws)) == len(draws)
    other = Federation.from_arrays(X, None, p, random_state=1)
    assert other.transport.client(0).random_state("test.stream").rand() != draws[0]
    # Streams of different names are independent; a stream needs a name.
    assert clients[0].random_state("test.other").rand() != draws[0]
    assert clients[0].random_state("test.stream", 1).rand() != draws[0]
    with pytest.raises(TypeError, match="named by a str"):
        clients[0].random_state(0)


def test_fingerprint_is_row_order_free_and_content_sensitive():
    X = np.random.RandomState(0).standard_normal((30, 5))
    assert _fingerprint(X) == _fingerprint(X[::-1].copy())
    Y = X.copy()
    # Sensitive at float32 resolution (the seed must not depend on the dtype).
    Y[3, 2] = np.nextafter(np.float32(Y[3, 2]), np.float32(np.inf))
    assert _fingerprint(X) != _fingerprint(Y)
    Xs = sp.csr_matrix(np.where(np.abs(X) > 1, X, 0))
    assert _fingerprint(Xs) == _fingerprint(Xs[::-1])
    assert _fingerprint(X.astype(np.float32)) == _fingerprint(X)
    assert _fingerprint(Xs.astype(np.float32)) == _fingerprint(X_sparse := Xs)
    assert _fingerprint(X_sparse) != _fingerprint(X)


def test_ledger_counts_what_was_sent(data):
    X, ids = data
    fed, _ = _run(X, ids, n_rounds=2)
    log = fed.log
    n_clients, d = len(np.unique(ids)), X.shape[1]
    assert log.n_rounds == 2
    assert log.upload_floats == 2 * n_clients * d
    # {"round": r, "scale": 1.0} is two numbers, received by every client.
    assert log.download_floats == 2 * n_clients * 2
    assert all(r.clients == tuple(fed.client_ids) for r in log.records)


def test_state_stays_with_each_client(data):
    X, ids = data
    fed, _ = _run(X, ids, n_rounds=3)
    assert fed.local_results("testing", "calls") == dict.fromkeys(range(5), 3)


def test_per_client_messages_and_assemble(data):
    X, ids = data
    p = check_partitions(ids, X.shape[0])

    with Federation.from_arrays(X, None, p, random_state=0) as fed:
        msgs = [np.full(c + 1, float(c)) for c in fed.client_ids]
        fed.run_round("label", keep_message_as_labels, messages=msgs)
        labels = fed.assemble("testing", "labels", X.shape[0])
        with pytest.raises(ValueError, match="2 messages for 5 clients"):
            fed.run_round("label", keep_message_as_labels, messages=msgs[:2])
    np.testing.assert_array_equal(labels, ids)
    down = fed.log.records[0]
    assert down.direction == "download" and down.floats == (1, 2, 3, 4, 5)


@pytest.mark.parametrize("backend", ["sequential", "threading", "loky"])
def test_client_failure_names_the_client(data, backend):
    X, ids = data
    p = check_partitions(ids, X.shape[0])
    step = functools.partial(fail_on, bad=3)
    with parallel_config(backend=backend, n_jobs=2):
        with pytest.raises(
            ClientStepError, match="Client 3 failed in round 'size'"
        ) as e:
            with Federation.from_arrays(X, None, p, random_state=0) as fed:
                fed.run_round("size", step)
    assert e.value.client_id == 3 and e.value.round_name == "size"
    assert isinstance(e.value.__cause__, RuntimeError)


def test_client_value_error_is_a_value_error(data):
    X, ids = data
    p = check_partitions(ids, X.shape[0])
    step = functools.partial(fail_on, bad=1, exc="ValueError")
    with pytest.raises(ValueError, match="Client 1 failed"):
        with Federation.from_arrays(X, None, p, random_state=0) as fed:
            fed.run_round("size", step)
    assert issubclass(ClientValueError, ClientStepError)


def test_tolerated_failures_and_dropout(data):
    X, ids = data
    p = check_partitions(ids, X.shape[0])
    with Federation.from_arrays(X, None, p, random_state=0) as fed:
        sizes = fed.run_round("size", functools.partial(fail_on, bad=2), tolerate=True)
        assert fed.client_ids == [0, 1, 3, 4]
        assert sizes == [float(np.sum(ids == c)) for c in (0, 1, 3, 4)]
        assert "RuntimeError" in fed.failed_clients[2]
        fed.drop([4], "dropped by the simulation")
        again = fed.run_round("size", functools.partial(fail_on, bad=None))
    assert len(again) == 3 and fed.n_clients == 3
    assert fed.log.records[-1].clients == (0, 1, 3)
    assert fed.log.records[0].clients == (0, 1, 3, 4)


def test_on_client_error_sets_what_rounds_do_by_default(data):
    X, ids = data
    p = check_partitions(ids, X.shape[0])
    step = functools.partial(fail_on, bad=2, exc="MemoryError")
    with pytest.raises(ClientStepError, match="Client 2 failed in round 'size'"):
        with Federation.from_arrays(X, None, p, random_state=0) as fed:
            fed.run_round("size", step)
    with Federation.from_arrays(
        X, None, p, random_state=0, on_client_error="drop"
    ) as fed:
        fed.run_round("size", step)
        fed.drop([4], "dropped by the simulation")
        # A round can still insist on every client answering.
        with pytest.raises(ClientStepError, match="Client 3"):
            fed.run_round("size", functools.partial(fail_on, bad=3), tolerate=False)
    assert set(fed.failed_clients) == {2, 4}
    # The reason is a sentence; the decision is made on the exception type.
    assert set(fed.client_errors) == {2}
    assert isinstance(fed.client_errors[2], MemoryError)
    with pytest.raises(ValueError, match="on_client_error must be"):
        Federation([], on_client_error="ignore")


def test_verbose_reports_each_round(data, capsys):
    X, ids = data
    p = check_partitions(ids, X.shape[0])
    with Federation.from_arrays(X, None, p, random_state=0, verbose=1) as fed:
        fed.run_round("sum", noisy_sum, {"round": 0, "scale": 0.0})
    err = capsys.readouterr().err
    assert "round 0 'sum': 5 clients, up 20 floats, down 10 floats" in err


def test_clients_hold_copies_cut_once(data):
    X, ids = data
    p = check_partitions(ids, X.shape[0])
    fed = Federation.from_arrays(X, None, p, random_state=0)
    client = fed.transport.client(0)
    assert not np.shares_memory(client.X, X)
    np.testing.assert_array_equal(client.X, X[ids == 0])
    np.testing.assert_array_equal(fed.client_sizes, np.bincount(ids))


def test_sample_weight_is_cut_with_the_data(data):
    X, ids = data
    w = np.arange(len(ids), dtype=float)
    p = check_partitions(ids, X.shape[0])
    fed = Federation.from_arrays(X, None, p, random_state=0, sample_weight=w)
    for cid in fed.client_ids:
        np.testing.assert_array_equal(
            fed.transport.client(cid).sample_weight, w[ids == cid]
        )
    unweighted = Federation.from_arrays(X, None, p, random_state=0)
    assert unweighted.transport.client(0).sample_weight is None


@pytest.mark.parametrize("backend", ["sequential", "threading"])
def test_thread_limits_are_restored_after_the_fit(data, backend):
    X, ids = data
    p = check_partitions(ids, X.shape[0])
    before = [(i["filepath"], i["num_threads"]) for i in threadpool_info()]
    with parallel_config(backend=backend, n_jobs=2):
        with Federation.from_arrays(X, None, p, random_state=0) as fed:
            fed.run_round("leak", leak_thread_limits)
    assert [(i["filepath"], i["num_threads"]) for i in threadpool_info()] == before


def test_zero_weight_rows_do_not_change_client_streams(data):
    # Zero sample weights are documented as if the rows were removed: the
    # client's random streams must not see them.
    X, ids = data
    weights = np.ones(X.shape[0])
    weights[::5] = 0.0
    kept = weights > 0
    weighted = Federation.from_arrays(
        X,
        None,
        check_partitions(ids, X.shape[0]),
        random_state=0,
        sample_weight=weights,
    )
    removed = Federation.from_arrays(
        X[kept], None, check_partitions(ids[kept], kept.sum()), random_state=0
    )
    for c in weighted.client_ids:
        assert (
            weighted.transport.client(c).random_state("test.stream").rand()
            == removed.transport.client(c).random_state("test.stream").rand()
        )


def _unregistered(client, state, message):
    return state, None


def test_only_registered_steps_run(data):
    X, ids = data
    p = check_partitions(ids, X.shape[0])
    with Federation.from_arrays(X, None, p, random_state=0) as fed:
        with pytest.raises(TypeError, match="not a registered client step"):
            fed.run_round("code", _unregistered)
        with pytest.raises(TypeError, match="options are data"):
            fed.run_round("code", functools.partial(fail_on, bad=_unregistered))
        # By name, as a remote transport would receive it.
        sums = fed.run_round("sum", "testing.noisy_sum", {"round": 0, "scale": 0.0})
    assert len(sums) == 5
    assert fed.log.n_rounds == 1


def test_steps_write_only_their_namespace(data):
    X, ids = data
    p = check_partitions(ids, X.shape[0])
    with Federation.from_arrays(X, None, p, random_state=0) as fed:
        fed.run_round("sum", noisy_sum, {"round": 0, "scale": 0.0})
        fed.run_round("label", keep_message_as_labels, (3,))
        state = fed.local_results("testing")
    # Both testing.* steps share the "testing" namespace; each kept its key.
    assert all(s["calls"] == 1 and (s["labels"] == 3).all() for s in state.values())
    with pytest.raises(KeyError, match="keeps nothing under 'kfed'"):
        fed.transport.client(0).with_storage({}).read("kfed")


def _where(X, ids, **config):
    # One round: later rounds of a step whose round was cheap run in this
    # thread (see JoblibTransport.run).
    p = check_partitions(ids, X.shape[0])
    with parallel_config(**config):
        with Federation.from_arrays(X, None, p, random_state=0, n_jobs=2) as fed:
            answers = fed.run_round("where", where)
    return fed, {pid for pid, _ in answers}, {t for _, t in answers}


def test_python_bound_steps_on_small_clients_run_in_processes(data, monkeypatch):
    # Threads serialise a Python-bound step on the GIL: with n_jobs=2 and
    # joblib's default backend its rounds over small clients run in worker
    # processes (from _MIN_PROCESS_ROWS rows in all, lowered here), and
    # what the clients keep comes back.
    monkeypatch.setattr(joblib_module, "_MIN_PROCESS_ROWS", 0)
    X, ids = data
    fed, pids, _ = _where(X, ids)
    assert os.getpid() not in pids
    assert fed.local_results("testing", "calls") == dict.fromkeys(range(5), 1)
    # An explicit backend still decides.
    _, pids, threads = _where(X, ids, backend="threading")
    assert pids == {os.getpid()} and threading.get_ident() not in threads


def test_python_bound_steps_on_few_rows_run_in_threads(data):
    # Below _MIN_PROCESS_ROWS rows a round is too short to pay for starting
    # worker processes: over a few clients, threads, whatever the step is
    # marked (over many, see
    # test_python_bound_steps_on_many_small_clients_and_few_rows_run_here).
    X, ids = data
    _, pids, threads = _where(X, ids)
    assert pids == {os.getpid()} and threading.get_ident() not in threads


def test_python_bound_steps_on_large_clients_run_in_threads(monkeypatch):
    # Above the small-client size a client's work is compiled code that
    # releases the GIL: threads, no copies of the data.
    monkeypatch.setattr(joblib_module, "_SMALL_CLIENT", 5)
    X = np.random.RandomState(0).standard_normal((60, 2))
    _, pids, threads = _where(X, np.arange(60) % 5)
    assert pids == {os.getpid()} and threading.get_ident() not in threads


class _VirtualClock:
    """The transport's clock in tests of where rounds run: time passes only
    when a client step "sleeps", so that the placement the tests expect
    does not depend on the machine's load (real sleeps of 10 ms in two
    threads came back late enough on a busy machine to flip a decision).

    A sleep in the server's thread moves the clock at once; sleeps in a
    pool task add up within the task, and a pool round lasts as long as its
    longest task (the tasks run side by side), which the clock adds when
    the transport next reads it, after the round.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._local = threading.local()
        self._now = 0.0
        self._tasks = []

    def perf_counter(self):
        with self._lock:
            self._now += max(self._tasks, default=0.0)
            self._tasks.clear()
            return self._now

    def sleep(self, seconds):
        task = getattr(self._local, "task", None)
        with self._lock:
            if task is None:
                self._now += seconds
            else:
                self._tasks[task] += seconds

    def timed_task(self, run_steps):
        """``run_steps`` with its sleeps counted as one pool task's."""

        def run(calls):
            with self._lock:
                self._local.task = len(self._tasks)
                self._tasks.append(0.0)
            try:
                return run_steps(calls)
            finally:
                self._local.task = None

        return run


_CLOCK = []


@pytest.fixture
def virtual_clock(monkeypatch):
    clock = _VirtualClock()
    monkeypatch.setattr(
        joblib_module, "time", types.SimpleNamespace(perf_counter=clock.perf_counter)
    )
    monkeypatch.setattr(
        joblib_module, "run_steps", clock.timed_task(joblib_module.run_steps)
    )
    _CLOCK.append(clock)
    yield clock
    _CLOCK.remove(clock)


@client_step("test_federation.sleep_by_place")
def _sleep_by_place(client, state, seconds):
    """Sleep ``seconds["pool"]`` in a pool thread, ``seconds["here"]`` in
    the main thread, on the test's virtual clock; upload the thread's id."""
    here = threading.current_thread() is threading.main_thread()
    _CLOCK[-1].sleep(seconds["here" if here else "pool"])
    return state, threading.get_ident()


_SLOW_POOL = {"pool": 0.02, "here": 0.0}
_FAST_POOL = {"pool": 0.01, "here": 0.03}
_HICCUP = {"pool": 0.01, "here": 0.05}
_FAST_HERE = {"pool": 0.01, "here": 0.0}
# 5 clients over two workers: 0.15 s a round in the pool.
_LONG_POOL = {"pool": 0.05, "here": 0.0}


@pytest.mark.parametrize(
    "seconds, places",
    [
        # Pool rounds cost more than the server's thread: trial, then here,
        # the pool timed again in round 4 (and 8, 16, ...).
        ([_SLOW_POOL] * 6, ["pool", "here", "here", "pool", "here", "here"]),
        # The pool is faster: one trial here, then the pool, here again in
        # round 4.
        ([_FAST_POOL] * 6, ["pool", "here", "pool", "here", "pool", "pool"]),
        # A round so short that dispatching it costs more: here at once.
        ([{"pool": 0.0, "here": 0.0}] * 6, ["pool"] + ["here"] * 5),
        # The trial here was slow once (a pause): the pool until round 4
        # times here again, then here, where the rounds are faster.
        (
            [_FAST_HERE, _HICCUP] + [_FAST_HERE] * 5,
            ["pool", "here", "pool", "here", "here", "here", "here"],
        ),
        # Rounds of at least _LONG_ROUND in the pool stay there, untimed in
        # the server's thread (long compiled work, which threads share);
        # once they are shorter the trials resume.
        ([_LONG_POOL] * 4, ["pool"] * 4),
        (
            [_LONG_POOL] * 2 + [_SLOW_POOL] * 3,
            ["pool", "pool", "pool", "here", "here"],
        ),
    ],
)
def test_repeated_rounds_run_where_they_took_less_time(
    data, seconds, places, virtual_clock
):
    # Iterative protocols repeat a step many times; after timing a round in
    # the pool and one in the server's thread, the rest run where the latest
    # round was faster, and the other place is timed again now and then.
    X, ids = data
    p = check_partitions(ids, X.shape[0])
    with parallel_config(backend="threading"):
        with Federation.from_arrays(X, None, p, random_state=0, n_jobs=2) as fed:
            seen = []
            for round_seconds in seconds:
                threads = set(fed.run_round("sleep", _sleep_by_place, round_seconds))
                seen.append("here" if threads == {threading.get_ident()} else "pool")
            # Another step starts its own trials, in the pool.
            other = {thread for _, thread in fed.run_round("where", where)}
    assert seen == places
    assert threading.get_ident() not in other


@pytest.mark.parametrize(
    "sizes, n_workers, n_tasks",
    [
        ([100] * 1000, 2, 2),  # small clients: one task per worker
        ([100_000] * 10, 2, 10),  # large clients: one each, taken in turn
        ([10_000] * 100, 2, 15),  # about 2**16 rows a task
        ([70_000] * 3, 4, 3),  # never more tasks than clients
        ([5], 2, 1),
    ],
)
def test_pool_tasks_cover_the_clients_in_order(sizes, n_workers, n_tasks):
    shares = joblib_module._task_shares(sizes, n_workers)
    assert len(shares) == n_tasks
    np.testing.assert_array_equal(np.concatenate(shares), np.arange(len(sizes)))
    assert max(map(len, shares)) - min(map(len, shares)) <= 1


def test_clients_cut_into_more_tasks_than_workers_give_the_same_model(
    data, monkeypatch
):
    # Large clients go to the pool in more tasks than workers (a worker that
    # finishes early takes the next): the clients' results must not change.
    X, ids = data
    _, ref = _run(X, ids)
    monkeypatch.setattr(joblib_module, "_TASK_ROWS", 12)
    tasks = []
    original = joblib_module.run_steps

    def counted(calls):
        tasks.append(len(calls))
        return original(calls)

    monkeypatch.setattr(joblib_module, "run_steps", counted)
    with parallel_config(backend="threading"):
        _, got = _run(X, ids, n_jobs=2)
    assert tasks[:1] == [1] and len(tasks) >= 5
    for c in ref:
        np.testing.assert_array_equal(ref[c], got[c])


# 64 clients of 2 rows: the first round of a step starts with a pilot of
# 4 clients in the server's thread.
_MANY = np.repeat(np.arange(64), 2)


def test_a_long_first_round_over_many_small_clients_goes_to_the_pool(virtual_clock):
    # Timed here, the 64 clients would take 0.26 s: after the pilot's 4,
    # the rest run in the pool.
    X = np.random.RandomState(0).standard_normal((128, 3))
    p = check_partitions(_MANY, 128)
    with parallel_config(backend="threading"):
        with Federation.from_arrays(X, None, p, random_state=0, n_jobs=2) as fed:
            threads = fed.run_round(
                "sleep", _sleep_by_place, {"pool": 0.0, "here": 0.004}
            )
    places = ["here" if t == threading.get_ident() else "pool" for t in threads]
    assert places == ["here"] * 4 + ["pool"] * 60


def test_a_short_first_round_over_many_small_clients_stays_here(virtual_clock):
    # Timed here, the whole round would take under _LONG_ROUND: too little
    # to gain from the pool, whose timing on it would be noise.
    X = np.random.RandomState(0).standard_normal((128, 3))
    p = check_partitions(_MANY, 128)
    with parallel_config(backend="threading"):
        with Federation.from_arrays(X, None, p, random_state=0, n_jobs=2) as fed:
            threads = fed.run_round("sleep", _sleep_by_place, _SLOW_POOL)
            second = fed.run_round("sleep", _sleep_by_place, _SLOW_POOL)
    assert set(threads) == set(second) == {threading.get_ident()}


@client_step("test_federation.python_bound_sleep", python_bound=True)
def _python_bound_sleep(client, state, seconds):
    """:func:`_sleep_by_place` for a step registered as Python-bound."""
    return _sleep_by_place(client, state, seconds)


@pytest.mark.parametrize(
    "config, places",
    [
        # joblib's default backend: threads only for want of rows for
        # processes, where the clients would queue on the GIL; the server's
        # thread, although timed there the round would take 0.26 s, which
        # sends an unmarked step's round to the pool (see
        # test_a_long_first_round_over_many_small_clients_goes_to_the_pool).
        ({}, ["here"] * 64),
        ({"n_jobs": 2}, ["here"] * 64),
        # The server's thread meets a shared-memory requirement.
        ({"require": "sharedmem"}, ["here"] * 64),
        # Threads chosen by the user are threads: the pilot, then the pool.
        ({"backend": "threading"}, ["here"] * 4 + ["pool"] * 60),
    ],
)
def test_python_bound_steps_on_many_small_clients_and_few_rows_run_here(
    config, places, virtual_clock
):
    X = np.random.RandomState(0).standard_normal((128, 3))
    p = check_partitions(_MANY, 128)
    seconds = {"pool": 0.0, "here": 0.004}
    with parallel_config(**config):
        with Federation.from_arrays(X, None, p, random_state=0, n_jobs=2) as fed:
            rounds = [
                fed.run_round("sleep", _python_bound_sleep, seconds) for _ in range(2)
            ]
    seen = [
        ["here" if t == threading.get_ident() else "pool" for t in threads]
        for threads in rounds
    ]
    assert seen[0] == places
    if places[-1] == "here":
        # Every round, not the first alone (no trial in the pool).
        assert seen[1] == places


def test_python_bound_steps_on_a_few_small_clients_keep_their_trials(virtual_clock):
    # Too few clients per worker for the rule above: the first round in the
    # pool (threads), the server's thread tried next (its time decides).
    X = np.random.RandomState(0).standard_normal((60, 3))
    p = check_partitions(np.repeat(np.arange(20), 3), 60)
    with Federation.from_arrays(X, None, p, random_state=0, n_jobs=2) as fed:
        seen = []
        for _ in range(3):
            threads = fed.run_round("sleep", _python_bound_sleep, _FAST_POOL)
            seen.append("here" if set(threads) == {threading.get_ident()} else "pool")
    assert seen == ["pool", "here", "pool"]


def test_python_bound_steps_over_many_small_clients_give_the_same_model():
    # KFed's local step is Python-bound: over 64 clients of 6 rows, n_jobs=2
    # runs it in the server's thread, and the model is n_jobs=1's.
    from skfed import KFed

    X = np.random.RandomState(0).standard_normal((384, 3))
    partitions = np.repeat(np.arange(64), 6)
    ref = KFed(3, n_local_clusters=2, random_state=0).fit(X, partitions=partitions)
    model = KFed(3, n_local_clusters=2, random_state=0, n_jobs=2)
    model.fit(X, partitions=partitions)
    np.testing.assert_allclose(model.cluster_centers_, ref.cluster_centers_, rtol=1e-12)
    np.testing.assert_array_equal(model.labels_, ref.labels_)


@pytest.mark.parametrize("rows, place", [(2, "here"), (3000, "pool")])
def test_python_bound_steps_kept_out_of_processes_run_here_on_small_clients(
    rows, place
):
    # Threads cannot help such a step on small clients and processes that
    # receive the clients each round do not pay: the server's thread. Large
    # clients: the threads. (24 clients: too few to be held by worker
    # processes for the fit, see test_processes.py.)
    X = np.random.RandomState(0).standard_normal((24 * rows, 2))
    p = check_partitions(np.repeat(np.arange(24), rows), X.shape[0])
    with Federation.from_arrays(X, None, p, random_state=0, n_jobs=2) as fed:
        seen = fed.run_round("where", where_not_in_processes)
    assert {pid for pid, _ in seen} == {os.getpid()}
    here = {thread for _, thread in seen} == {threading.get_ident()}
    assert here == (place == "here")


@pytest.mark.filterwarnings("error")
def test_a_round_without_clients_answers_nothing(data):
    X, ids = data
    p = check_partitions(ids, X.shape[0])
    with Federation.from_arrays(X, None, p, random_state=0, n_jobs=2) as fed:
        fed.drop(list(fed.client_ids), "left")
        assert fed.run_round("where", where) == []


def test_pilot_rounds_give_the_same_model():
    X = np.random.RandomState(0).standard_normal((128, 3))
    _, ref = _run(X, _MANY, n_jobs=1)
    with parallel_config(backend="threading"):
        _, got = _run(X, _MANY, n_jobs=2)
    for c in ref:
        np.testing.assert_array_equal(ref[c], got[c])


def test_client_threads_see_the_servers_scikit_learn_configuration(data):
    X, ids = data
    p = check_partitions(ids, X.shape[0])
    with sklearn.config_context(assume_finite=True):
        with Federation.from_arrays(X, None, p, random_state=0, n_jobs=2) as fed:
            seen = fed.run_round("config", sklearn_config)
    assert [finite for finite, _ in seen] == [True] * 5
    assert threading.get_ident() not in {thread for _, thread in seen}


@pytest.mark.parametrize("n_jobs, backend", [(1, None), (2, None), (2, "loky")])
def test_server_map_keeps_order_and_uses_the_threads_it_has(data, n_jobs, backend):
    # The server's own work between rounds goes to the fit's threads (with
    # the server's scikit-learn configuration), and stays in the server's
    # thread when the fit has none.
    X, ids = data
    p = check_partitions(ids, X.shape[0])

    def square(item):
        return item**2, threading.get_ident(), sklearn.get_config()["assume_finite"]

    config = parallel_config(backend=backend) if backend else nullcontext()
    with config, sklearn.config_context(assume_finite=True):
        with Federation.from_arrays(X, None, p, random_state=0, n_jobs=n_jobs) as fed:
            out = fed.server_map(square, list(range(40)))
    assert [o[0] for o in out] == [i**2 for i in range(40)]
    assert all(o[2] for o in out)
    in_threads = threading.get_ident() not in {o[1] for o in out}
    assert in_threads == (n_jobs == 2 and backend is None)


@pytest.mark.parametrize("backend", ["sequential", "threading", "loky"])
def test_client_steps_always_see_a_sequential_joblib(data, backend):
    # Steps run sequential inside, whether the round runs in the server's
    # thread (one worker, or a round too short for the pool), in threads or
    # in processes: scikit-learn helpers must not split work by backend.
    X, ids = data
    p = check_partitions(ids, X.shape[0])
    with parallel_config(backend=backend, n_jobs=2):
        with Federation.from_arrays(X, None, p, random_state=0) as fed:
            seen = [fed.run_round("backend", joblib_backend) for _ in range(3)]
    for answers in seen:
        assert {a[0] for a in answers} == {"SequentialBackend"}


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_shared_work_is_solved_together_and_answers_each_client(data, n_jobs):
    # Steps that hand over shared work advance side by side: each of the
    # two items is solved for all the clients of a batch at once, and every
    # client gets its own answers, as when solved alone.
    X, ids = data
    p = check_partitions(ids, X.shape[0])
    SharedSum.batches.clear()
    with Federation.from_arrays(X, None, p, random_state=0, n_jobs=n_jobs) as fed:
        got = fed.run_round("sums", shared_sum)
        clients = [fed.transport.client(c) for c in fed.client_ids]
    expected = [(c.X[:, 0].sum(), c.X[:, 1].sum()) for c in clients]
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    if n_jobs == 1:
        assert SharedSum.batches == [5, 5]
    else:  # a batch per worker
        assert sorted(SharedSum.batches) == [2, 2, 3, 3]
    alone = [run_alone(shared_sum(c, None, None)) for c in clients]
    np.testing.assert_allclose([upload for _, upload in alone], expected, rtol=1e-12)


@pytest.mark.parametrize("catch", [False, True])
def test_shared_work_that_fails_fails_only_its_client(data, catch):
    # One client's bad item makes the batch's solve raise; the items are
    # then solved one by one and the error goes into that client's step
    # only: it fails (or, catching it, goes on); the others are unaffected.
    X, ids = data
    X = X.copy()
    X[np.flatnonzero(ids == 3)[0], 0] = np.nan
    p = check_partitions(ids, X.shape[0])
    step = functools.partial(shared_sum, catch=catch)
    with Federation.from_arrays(
        X, None, p, random_state=0, n_jobs=1, on_client_error="drop"
    ) as fed:
        uploads = fed.run_round("sums", step)
        got = dict(zip(fed.client_ids, uploads))  # the clients still in
    if catch:
        assert np.isnan(got[3][0]) and np.isfinite(got[3][1])
        assert 3 not in fed.failed_clients
    else:
        assert 3 not in got
        assert "FloatingPointError" in fed.failed_clients[3]
    for c in (0, 1, 2, 4):
        rows = ids == c
        np.testing.assert_allclose(got[c], X[rows, :2].sum(axis=0), rtol=1e-12)


@pytest.mark.parametrize("sparse", [False, True])
def test_client_entropy_is_the_fingerprint_of_its_rows(sparse):
    # The set-up hashes every row once for all clients; each client's
    # entropy must still be the fingerprint of its own rows (of positive
    # weight), as a client built alone (on a dask worker) computes it.
    rng = np.random.RandomState(0)
    X = rng.standard_normal((80, 3))
    X[rng.rand(80, 3) < 0.3] = 0.0
    X = sp.csr_matrix(X) if sparse else X
    ids = rng.randint(0, 4, 80)
    w = rng.rand(80)
    w[::5] = 0.0
    p = check_partitions(ids, 80)
    with Federation.from_arrays(X, None, p, random_state=0, sample_weight=w) as fed:
        for c in fed.client_ids:
            rows = X[np.flatnonzero(ids == c)]
            kept = rows[w[ids == c] != 0]
            fp = _fingerprint(kept)
            entropy = fed.transport.client(c).entropy
            assert entropy[1:] == (fp & 0xFFFFFFFF, fp >> 32)


@pytest.mark.parametrize("sparse", [False, True])
def test_set_up_in_threads_builds_the_same_clients(sparse, monkeypatch):
    # With n_jobs > 1 the set-up hashes rows and cuts clients in threads:
    # every client gets the same rows and entropy as with one thread.
    import skfed._engine._client as client_module

    monkeypatch.setattr(client_module.SetUpThreads, "MIN_ROWS", 0)
    rng = np.random.RandomState(0)
    X = rng.standard_normal((500, 4))
    X[rng.rand(500, 4) < 0.3] = 0.0
    X = sp.csr_matrix(X) if sparse else X
    p = check_partitions(rng.randint(0, 7, 500), 500)
    built = {}
    for n_jobs in (1, 2, 3):
        with Federation.from_arrays(X, None, p, random_state=0, n_jobs=n_jobs) as fed:
            built[n_jobs] = [fed.transport.client(c) for c in fed.client_ids]
    for clients in (built[2], built[3]):
        for ours, alone in zip(clients, built[1]):
            assert ours.client_id == alone.client_id
            assert ours.entropy == alone.entropy
            as_dense = (lambda A: A.toarray()) if sparse else np.asarray
            np.testing.assert_array_equal(as_dense(ours.X), as_dense(alone.X))


def test_shared_work_advances_in_waves_of_rows(data, monkeypatch):
    # Suspended steps hold their arrays: the clients advance together in
    # waves of about _WAVE_ROWS rows, each wave solved as one batch, and
    # the answers do not change.
    X, ids = data
    p = check_partitions(ids, X.shape[0])
    with Federation.from_arrays(X, None, p, random_state=0, n_jobs=1) as fed:
        whole = fed.run_round("sums", shared_sum)
    sizes = np.bincount(ids)
    monkeypatch.setattr(transport_module, "_WAVE_ROWS", int(sizes[:4].sum()))
    SharedSum.batches.clear()
    with Federation.from_arrays(X, None, p, random_state=0, n_jobs=1) as fed:
        waves = fed.run_round("sums", shared_sum)
    np.testing.assert_array_equal(waves, whole)
    # Clients 0-3 fill the first wave, client 4 is the second.
    assert SharedSum.batches == [4, 4, 1, 1]
