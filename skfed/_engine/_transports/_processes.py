"""Many small clients held by worker processes for the whole fit.

A small client's step is mostly the interpreter's work (a few hundred numpy
calls on arrays of a hundred rows), which threads take turns at. Worker
processes each have an interpreter, but the joblib transport's process
rounds sent every client's rows, and what it keeps, to a worker and back
on each round. Here each worker process receives its share of the clients
once, when the fit opens its federation, and keeps their rows and their
state until the fit closes its federation, as a dask worker does
(``skfed._engine._transports._dask``): a round sends a worker the step's
name and options and its clients' messages, and only the uploads come back.

:func:`resident_workers` decides, in ``Federation.from_arrays``,
which fits go here: more than one worker, joblib's default backend, and
many clients of at most ``_SMALL_CLIENT`` rows on average, 32,768 rows or
more in all. Over 1,000
clients of 100 rows (N = 100,000), two workers ran k-FED's local step in
0.47 s against 0.89 s in one (0.56 s in joblib's worker processes, which
received the clients' rows again).

The workers are processes of joblib's loky, one single-process executor
per worker, so that a client's every round runs where its rows are. They
are started by the first such fit (about 2 s: each imports numpy, scipy,
scikit-learn) and kept for later fits with as many workers; they stop
after ``_IDLE_SECONDS`` without an open fit, as joblib's do. Their OpenMP
pools run as many threads as this process's do at each fit, and their BLAS
as many as the round's step has here (one, or this process's for a step
of large products: see ``skfed._numerics._threads``), so that a step computes what
it would compute here: the same seed gives the same model whatever
``n_jobs``.
"""

import pickle
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np
from joblib import parallel_config
from joblib.externals.loky import ProcessPoolExecutor
from joblib.externals.loky.process_executor import BrokenProcessPool
from joblib.parallel import LokyBackend, get_active_backend
from sklearn import config_context, get_config

from ..._numerics._threads import blas_limits, round_uses_process_threads, thread_pools
from .._protocol import resolve_step
from ._common import (
    StepFailure,
    assembled,
    collected,
    kept_after,
    run_steps,
    server_thread_map,
    worker_count,
)
from ._joblib import _MIN_PROCESS_ROWS, _SMALL_CLIENT

__all__ = ["ProcessTransport", "resident_processes_pay", "resident_workers"]

# Clients per worker, and rows, from which a fit over small clients goes
# to resident worker processes. Below them a fit's rounds are short (k-FED
# over 32,768 rows of 100-row clients: about 0.3 s in one process), and
# starting the workers, 1.5 to 2 s for a process's first such fit, is not
# paid back.
_MIN_CLIENTS_PER_WORKER = 16
_MIN_ROWS = _MIN_PROCESS_ROWS


def resident_workers(n_jobs, sizes):
    """How many resident worker processes a fit's clients (of ``sizes``
    rows) go to: 0 when they stay in this process.

    ``n_jobs`` workers (``joblib.effective_n_jobs``), at most one per
    ``_MIN_CLIENTS_PER_WORKER`` clients (fewer clients per worker do not pay
    for its start), when that leaves more than one worker, the clients hold
    at least ``_MIN_ROWS`` rows, at most ``_SMALL_CLIENT`` on average, and
    joblib's backend is its default or loky chosen explicitly. Threads asked
    for explicitly (``parallel_config(backend="threading")``) are threads.
    """
    n_workers = worker_count(n_jobs, len(sizes) // _MIN_CLIENTS_PER_WORKER)
    if n_workers < 2 or np.sum(sizes) < _MIN_ROWS:
        return 0
    # Processes preferred: joblib answers with loky unless a backend was
    # chosen, then with that one.
    backend, _ = get_active_backend(prefer="processes")
    if type(backend) is not LokyBackend or np.mean(sizes) > _SMALL_CLIENT:
        return 0
    return n_workers


def resident_processes_pay(n_jobs, sizes):
    """Whether a fit's clients go to resident worker processes (see
    :func:`resident_workers`)."""
    return resident_workers(n_jobs, sizes) > 0


# -- the worker's side --------------------------------------------------------

# Fit token -> (client id -> ClientData, client id -> {namespace: state}),
# in the memory of the worker process that holds those clients.
_FITS = {}


def _hold_memory():
    """Keep this worker whatever memory it holds.

    loky replaces a worker whose memory grew by 300 MB since its first task
    (a guard against leaks, when psutil is installed), and a new worker
    would have lost its clients: here the memory is the clients' rows and
    state, held on purpose (disKPCA over 1,000,000 rows went past it)."""
    from joblib.externals.loky import process_executor

    process_executor._USE_PSUTIL = False


def _fit(token):
    """A fit's (clients, states) in this worker."""
    try:
        return _FITS[token]
    except KeyError:
        raise RuntimeError(
            "This worker process no longer holds the fit's clients (it was "
            "replaced during the fit). Fit again, or with n_jobs=1."
        ) from None


def _settle(token, clients):
    """Keep a fit's clients in this worker."""
    _FITS[token] = (
        {c.client_id: c for c in clients},
        {c.client_id: {} for c in clients},
    )


def _limit_threads(limits):
    """Run BLAS and OpenMP on as many threads as the server's process
    (``limits``: library prefix -> threads): a product can round
    differently on another number of threads, and a solver with a
    tolerance can turn that into another model. Checked every round (20
    us): a step may have changed them."""
    pools = thread_pools()
    if any(
        lib["num_threads"] != limits.get(lib["prefix"], lib["num_threads"])
        for lib in pools.info()
    ):
        pools.limit(limits=limits)


def _run(token, client_ids, messages, config, limits, *, call):
    """A round's step on this worker's clients; their new states stay here,
    the uploads (or StepFailures) go back."""
    _limit_threads(limits)
    clients, storage = _fit(token)
    calls = [(call, clients[c], storage[c], m) for c, m in zip(client_ids, messages)]
    # The server's scikit-learn configuration, as the joblib transport's
    # workers see it.
    with config_context(**config):
        results = run_steps(calls)
    answers = []
    for cid, result in zip(client_ids, results):
        storage[cid], answer = kept_after(call, storage[cid], result)
        answers.append(_sendable(answer))
    return answers


def _sendable(answer):
    """A StepFailure whose exception cannot be pickled gets a RuntimeError
    with the same message (the traceback travels as text)."""
    if isinstance(answer, StepFailure):
        try:
            pickle.loads(pickle.dumps(answer.exc))
        except Exception:
            exc = RuntimeError(f"{type(answer.exc).__name__}: {answer.exc}")
            return StepFailure(exc, answer.tb)
    return answer


def _read(token, client_ids, namespace, key):
    """What the clients keep under ``namespace`` (and ``key``)."""
    clients, storage = _fit(token)
    return [collected(clients[c], storage[c], namespace, key) for c in client_ids]


def _client(token, client_id):
    return _fit(token)[0][client_id]


def _forget(token):
    """Drop a fit's clients from this worker."""
    _FITS.pop(token, None)


# -- the server's side --------------------------------------------------------

# Number of workers -> their executors, one single-process executor each;
# how many transports have them open; the timer that stops them when idle.
_WORKERS = {}
_OPEN = {}
_IDLE_TIMERS = {}
_LOCK = threading.Lock()
# Seconds the workers wait without an open fit before they stop (joblib's
# own reused workers wait 300 s too).
_IDLE_SECONDS = 300


def _open_workers(n_workers):
    """``n_workers`` executors of one process each, started on first use
    and kept for later fits with as many workers while they come within
    ``_IDLE_SECONDS`` of each other."""
    with _LOCK:
        timer = _IDLE_TIMERS.pop(n_workers, None)
        if timer is not None:
            timer.cancel()
        if n_workers not in _WORKERS:
            _WORKERS[n_workers] = [
                ProcessPoolExecutor(1, initializer=_hold_memory)
                for _ in range(n_workers)
            ]
        _OPEN[n_workers] = _OPEN.get(n_workers, 0) + 1
        return _WORKERS[n_workers]


def _close_workers(n_workers):
    """A fit is done with its workers: stop them if no fit opens them
    within ``_IDLE_SECONDS``."""
    with _LOCK:
        _OPEN[n_workers] -= 1
        if _OPEN[n_workers] == 0 and n_workers in _WORKERS:
            timer = threading.Timer(
                _IDLE_SECONDS, _stop_idle, (n_workers, _WORKERS[n_workers])
            )
            timer.daemon = True
            _IDLE_TIMERS[n_workers] = timer
            timer.start()


def _stop_idle(n_workers, executors):
    with _LOCK:
        if _OPEN.get(n_workers) or _WORKERS.get(n_workers) is not executors:
            return
        del _WORKERS[n_workers]
        _IDLE_TIMERS.pop(n_workers, None)
    for executor in executors:
        executor.shutdown(wait=False)


def _drop_workers(executors):
    """Stop a set of workers of which one died; the next fit starts anew."""
    with _LOCK:
        for n, kept in list(_WORKERS.items()):
            if kept is executors:
                del _WORKERS[n]
    for executor in executors:
        executor.shutdown(wait=False, kill_workers=True)


def _forget_everywhere(executors, token):
    for executor in executors:
        try:
            executor.submit(_forget, token)
        except Exception:  # the worker is gone, and the clients with it
            pass


def _shares(sizes, n_workers):
    """The clients cut into one run of consecutive clients (positions into
    ``sizes``) per worker, of about equal rows."""
    ends = np.cumsum(sizes)
    # The client in which a share's last row falls closes the share.
    cuts = np.searchsorted(ends, ends[-1] * np.arange(1, n_workers) / n_workers) + 1
    return np.split(np.arange(len(sizes)), np.minimum(cuts, len(sizes)))


class ProcessTransport:
    """Clients held by worker processes of this machine for the whole fit.

    The transport interface of ``skfed._engine._transports._common``. The
    clients' rows go to the workers when the federation is entered; this
    process keeps only their sizes and sample positions (for the fitted
    attributes).

    Parameters
    ----------
    clients : list of ClientData
        In canonical order.
    n_jobs : int
        The number of worker processes (``joblib.effective_n_jobs``), at
        most one per client.
    """

    def __init__(self, clients, *, n_jobs):
        self._clients = {c.client_id: c for c in clients}
        self.client_ids = [c.client_id for c in clients]
        self._sizes = {c.client_id: c.n_samples for c in clients}
        self._positions = {c.client_id: c.sample_indices for c in clients}
        first = clients[0].X
        self.data_info = (first.shape[1], first.dtype)
        self.n_jobs = n_jobs
        self._token = uuid.uuid4().hex
        self._home = None
        self._threads = None

    @property
    def client_sizes(self):
        """Client id -> n_m."""
        return dict(self._sizes)

    def client(self, client_id):
        """The :class:`~skfed._engine._client.ClientData` of one client (a copy
        fetched from its worker once the fit has started)."""
        if self._home is None:
            return self._clients[client_id]
        executor = self._executors[self._home[client_id]]
        return self._wait([executor.submit(_client, self._token, client_id)])[0]

    def __enter__(self):
        if self._home is not None:
            raise RuntimeError(
                "A ProcessTransport serves one fit: its workers dropped the "
                "clients when it exited."
            )
        # At most one worker per client (its clients are its only work).
        n_workers = self._n_workers = worker_count(self.n_jobs, len(self._clients))
        executors = _open_workers(n_workers)
        try:
            self._settle(executors)
        except BaseException:
            # No __exit__ follows a failed __enter__.
            _close_workers(n_workers)
            raise
        # The workers' BLAS and OpenMP threads follow this process's, read
        # at each fit (a benchmark pins them with threadpool_limits); BLAS
        # is set per round (see run).
        self._limits = {
            lib["prefix"]: lib["num_threads"] for lib in thread_pools().info()
        }
        self._threads = ThreadPoolExecutor(n_workers)
        # As the joblib transport: the server's code between rounds must not
        # pick up an enclosing joblib configuration.
        self._server_config = parallel_config(backend="sequential")
        self._server_config.__enter__()
        return self

    def _settle(self, executors):
        """Send each worker its share of the clients, once; keep here only
        what the fitted attributes need."""
        self._executors = executors
        sizes = [self._sizes[c] for c in self.client_ids]
        home = {}
        settled = []
        for worker, share in enumerate(_shares(sizes, len(executors))):
            ids = [self.client_ids[i] for i in share]
            home.update((c, worker) for c in ids)
            clients = [self._clients[c] for c in ids]
            settled.append(
                self._executors[worker].submit(_settle, self._token, clients)
            )
        self._wait(settled)
        self._home = home
        self._clients = None

    def __exit__(self, *exc_info):
        self._server_config.__exit__(*exc_info)
        threads, self._threads = self._threads, None
        threads.shutdown()
        # The fit is over (the estimators gather what the clients keep
        # inside it): the workers drop its clients. Not from a finalizer,
        # which the garbage collector can run inside an executor's submit,
        # whose lock is not reentrant (a test hung so).
        _forget_everywhere(self._executors, self._token)
        _close_workers(self._n_workers)
        return False

    def _wait(self, futures):
        try:
            return [f.result() for f in futures]
        except BrokenProcessPool as exc:
            _drop_workers(self._executors)
            raise RuntimeError(
                "A worker process holding clients of this fit stopped (out "
                "of memory, or killed), and their rows and state with it. "
                "Fit again (new workers start), or with n_jobs=1 to keep the "
                "clients in this process."
            ) from exc

    def _by_worker(self, client_ids, values):
        """Worker -> (its clients among ``client_ids``, their values)."""
        groups = {}
        for cid, value in zip(client_ids, values):
            ids, vals = groups.setdefault(self._home[cid], ([], []))
            ids.append(cid)
            vals.append(value)
        return groups

    def _on_workers(self, func, client_ids, *args, values=None):
        """Client id -> its answer from ``func(token, ids, *args)`` on the
        worker that holds it (``func(token, ids, values, *args)`` with
        per-client ``values``), each worker called once for its clients."""
        groups = self._by_worker(client_ids, client_ids if values is None else values)
        futures = [
            self._executors[w].submit(
                func, self._token, ids, *(() if values is None else (vals,)), *args
            )
            for w, (ids, vals) in groups.items()
        ]
        answers = {}
        for (ids, _), part in zip(groups.values(), self._wait(futures)):
            answers.update(zip(ids, part))
        return answers

    def run(self, call, client_ids, messages):
        """Run ``call`` on each client where it lives; return the uploads
        (or ``StepFailure``). A worker's messages travel as one pickle, so
        a broadcast goes to each worker once."""
        # BLAS threads as the round has them in this process (see
        # skfed._numerics._threads): one, or the process's for large products.
        large = round_uses_process_threads(
            resolve_step(call.name, call.module), [self._sizes[c] for c in client_ids]
        )
        answers = self._on_workers(
            partial(_run, call=call),
            client_ids,
            get_config(),
            {**self._limits, **blas_limits(large)},
            values=messages,
        )
        return [answers[c] for c in client_ids]

    def server_map(self, func, items):
        """``[func(item) for item in items]`` in this transport's threads
        (``skfed._engine._transports._common.server_thread_map``)."""
        return server_thread_map(self._threads, func, items)

    def local_values(self, namespace, key, client_ids):
        """Client id -> what the client keeps (fetched from its worker)."""
        answers = self._on_workers(_read, client_ids, namespace, key)
        return {c: answers[c] for c in client_ids}

    def assemble(self, namespace, key, client_ids, n_samples, *, fill, dtype):
        """A per-sample value kept by the clients, in training-sample order;
        samples of clients not in ``client_ids`` get ``fill``."""
        values = self.local_values(namespace, key, client_ids)
        parts = [(self._positions[c], np.asarray(v)) for c, v in values.items()]
        return assembled(parts, n_samples, fill=fill, dtype=dtype)
