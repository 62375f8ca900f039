"""The default transport: clients held in this process, their steps run in
one joblib pool per fit (threads, or worker processes for Python-bound steps
over small clients), or in the server's thread when a round is too short for
the pool or its Python-level work would queue on the GIL in threads."""

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from joblib import effective_n_jobs, parallel_config
from joblib.parallel import ThreadingBackend, get_active_backend
from sklearn.utils.parallel import Parallel, delayed

from ..._numerics._threads import blas_limits, round_uses_process_threads, thread_pools
from .._protocol import resolve_step
from ._common import (
    assembled,
    collected,
    kept_after,
    run_sequential_steps,
    run_steps,
    server_thread_map,
    thread_map,
    worker_count,
)

__all__ = ["JoblibTransport"]

# Seconds: a parallel round this short is mostly the pool's dispatch.
_CHEAP_ROUND = 0.02
# Seconds: a round this long in the pool is compiled work on large clients,
# which threads share; timing it again in the server's thread costs a whole
# sequential round each time (kernel k-means over 10 clients of 10,000
# rows, 30 iterations: 9.23 s with those trials against 7.89 s without,
# 12.7 s with one worker).
_LONG_ROUND = 0.1
# Mean rows per client up to which a Python-bound step runs in processes
# (about where skfed's steps leave per-call-bound array code for compiled
# scikit-learn routines).
_SMALL_CLIENT = 2048
# Rows of a round from which a Python-bound step's worker processes can
# pay for their start (1.5 to 2 s for a process's first, more on a busy
# machine): below them the round is short whatever runs it (3 clients of
# 100 rows with n_jobs=2 took 12 s in processes, 0.04 s in one thread).
_MIN_PROCESS_ROWS = 2**15
# Small clients per worker from which a round counts as over many of
# them: the first round of a step then times this share of them in the
# server's thread (see JoblibTransport._pilot), and a Python-bound step's
# rounds bound for threads run there (see JoblibTransport._place).
_PILOT_SHARE = 16
# Rows of a pool task, when the round's clients hold more than a task per
# worker (see _task_shares): a wave's worth (see
# skfed._engine._transports._common.run_sequential_steps).
_TASK_ROWS = 2**16


def _task_shares(sizes, n_workers):
    """The clients of a pool round cut into tasks: runs of consecutive
    clients (positions into ``sizes``, their rows).

    At least one task per worker, and tasks of about ``_TASK_ROWS`` rows
    when the clients hold more: a task per small client costs more to
    dispatch than its step, and a worker that finishes early takes the next
    task instead of waiting for the other's fixed share (ten clients of
    100,000 rows in two shares of five: one worker's local k-means ran
    0.59 s, the other's 0.73 s).
    """
    if not len(sizes):
        return []
    n_tasks = min(len(sizes), max(n_workers, int(np.sum(sizes)) // _TASK_ROWS))
    return np.array_split(np.arange(len(sizes)), n_tasks)


def _small(calls):
    """Whether a round's clients hold at most ``_SMALL_CLIENT`` rows on
    average."""
    return np.mean([args[1].n_samples for args in calls]) <= _SMALL_CLIENT


def _python_bound_here(step, calls):
    """Whether ``step`` is Python-bound on these clients: registered so,
    and the clients small (their sizes are only averaged for such steps:
    the placement runs every round)."""
    return getattr(step, "python_bound", False) and _small(calls)


def _rows(calls):
    """The rows of a round's clients."""
    return sum(args[1].n_samples for args in calls)


class JoblibTransport:
    """Clients held in this process; steps run in one joblib pool per fit.

    With several workers, rounds run in threads: a client's work on many
    rows is in compiled code that releases the GIL. When joblib's backend
    is threads (the default), the threads are an executor of the
    transport's own, which returns a round as soon as its last task ends
    (see __enter__). A step registered as ``python_bound`` runs over
    clients of at most 2,048 rows on average, 32,768 rows or more in all,
    in worker processes instead (joblib's loky backend), where threads
    would queue on the GIL: KFed
    over 1,000 clients of 100 rows took 2.1 s with one worker, 3.0 s with
    two threads and 1.3 s with two processes. Over fewer rows, too few
    for processes to pay for their start, its rounds over many such
    clients (at least 16 per worker) run in the server's thread: kernel
    k-means' landmark centers over 1,000 clients of 10 rows took 0.28 s
    there and 0.35 s in two threads (over 10 clients of 1,000 rows, whose
    larger arrays release the GIL more, 0.076 s against 0.062 s: those
    stay in threads). One registered with ``in_processes=False`` (its
    result depends on BLAS's thread count, or its round is too short for
    processes) runs over small clients in the server's thread whatever
    their number. An enclosing ``joblib.parallel_config(backend=...)``
    still decides for both kinds of round: threads chosen there run the
    rounds that processes would, and those over too few rows, in threads.

    Clients are handed to the workers in tasks of consecutive clients
    (``_task_shares``); where a round runs, in the pool or in the
    server's thread, is decided per step from how long its rounds took
    (``_place``). Neither changes a client's result.

    Parameters
    ----------
    clients : list of ClientData
        In canonical order.
    n_jobs : int, default=None
        The number of workers (``joblib.effective_n_jobs``), at most one
        per client (``worker_count``); ``None`` lets an enclosing
        ``joblib.parallel_config`` decide.
    """

    def __init__(self, clients, *, n_jobs=None):
        self._clients = {c.client_id: c for c in clients}
        self._storage = {c.client_id: {} for c in clients}
        self.client_ids = [c.client_id for c in clients]
        self.n_jobs = n_jobs
        self._open = False
        self._sequential = True

    @property
    def client_sizes(self):
        """Client id -> n_m."""
        return {cid: c.n_samples for cid, c in self._clients.items()}

    @property
    def data_info(self):
        """(n_features, dtype) of the clients' rows (protocol metadata)."""
        first = next(iter(self._clients.values()))
        return first.X.shape[1], first.X.dtype

    def client(self, client_id):
        """The :class:`~skfed._engine._client.ClientData` of one client (the
        simulation's own access, e.g. for tests)."""
        return self._clients[client_id]

    def __enter__(self):
        # Client steps that call scikit-learn (e.g. KMeans) limit BLAS/OpenMP
        # threads while they run; limits set and undone from several client
        # threads at once interleave and can leave the process with one
        # thread after the fit. Snapshot them here, restore them on exit.
        # The process's cached controller: building one looks for every
        # loaded library (4 ms, a tenth of a small fit).
        self._thread_limits = thread_pools().limit(limits=None)
        # A round has at most one task per client (_task_shares): more
        # workers than clients would only be started to wait.
        self._n_workers = worker_count(self.n_jobs, len(self.client_ids))
        self._sequential = self._n_workers == 1
        # Step name -> seconds per client of its first round in the pool and
        # of its second in this thread.
        self._timings = {}
        # Under joblib's dask backend Federation.from_arrays uses the dask
        # transport instead; a pool built here serves threads or processes.
        backend, _ = get_active_backend(prefer="threads")
        # Threads chosen by the user, not by joblib's default: asked for
        # processes, joblib answers with loky unless a backend was set
        # (require=None: an enclosing require="sharedmem" would make the
        # question an error). Read before the server's sequential
        # configuration below hides the user's.
        chosen, _ = get_active_backend(prefer="processes", require=None)
        self._threads_chosen = isinstance(chosen, ThreadingBackend)
        self._threads = self._parallel = None
        n_threads = effective_n_jobs(self.n_jobs)
        if isinstance(backend, ThreadingBackend) and n_threads > 1:
            # joblib's own choice, threads, in an executor of our own:
            # joblib's Parallel looks for finished tasks every 10 ms, so a
            # round in its thread pool took at least 10 ms and ended on a
            # multiple of 10 ms (tasks of 20 ms: 31 ms), which an iterative
            # protocol paid on each of hundreds of rounds. It starts a
            # thread only for a task that finds none idle: a round's tasks
            # (at most one per client) or server_map's items bound them,
            # and server work (the RKHS server's chunks) may use n_jobs
            # threads over one client.
            self._threads = ThreadPoolExecutor(n_threads)
        if self._threads is None:
            # batch_size=1: the tasks are already batches of clients (see
            # _task_shares), which joblib's automatic batching would pair.
            self._parallel = Parallel(
                n_jobs=self._n_workers, prefer="threads", batch_size=1
            )
            self._parallel.__enter__()
        self._open = True
        # Opened on the first round that needs it (see the class docstring).
        self._processes = None
        # The pool above has taken the enclosing joblib configuration; the
        # server code that runs in this thread from now on must not (see
        # run_step).
        self._server_config = parallel_config(backend="sequential")
        self._server_config.__enter__()
        return self

    def __exit__(self, *exc_info):
        self._server_config.__exit__(*exc_info)
        self._open = False
        parallel, self._parallel = self._parallel, None
        processes, self._processes = self._processes, None
        threads, self._threads = self._threads, None
        try:
            if threads is not None:
                threads.shutdown()
            if processes is not None:
                processes.__exit__(*exc_info)
            if parallel is not None:
                return parallel.__exit__(*exc_info)
        finally:
            self._thread_limits.restore_original_limits()

    def run(self, call, client_ids, messages):
        """Run ``call`` on each client with its message; keep the states.

        Returns
        -------
        results : list
            Per client, its upload or a ``StepFailure``.
        """
        calls = [
            (call, self._clients[c], self._storage[c], m)
            for c, m in zip(client_ids, messages)
        ]
        if not self._open:
            results = run_steps(calls)
        elif round_uses_process_threads(
            resolve_step(call.name, call.module), [a[1].n_samples for a in calls]
        ):
            # The fit runs BLAS on one thread (see skfed._numerics._threads); this
            # round's products are large enough for the process's threads.
            with thread_pools().limit(limits=blas_limits(True)):
                results = self._run_open(call, calls)
        else:
            results = self._run_open(call, calls)
        out = []
        for cid, result in zip(client_ids, results):
            self._storage[cid], answer = kept_after(call, self._storage[cid], result)
            out.append(answer)
        return out

    def _run_open(self, call, calls):
        """The results of a round's ``calls`` in the open transport: in
        this thread, or where :meth:`_place` says."""
        if self._sequential or not calls:
            results = run_sequential_steps(calls)
        else:
            place = self._place(call, calls)
            results = []
            if place == "pilot":
                place, results = self._pilot(call, calls)
                calls = calls[len(results) :]
            start = time.perf_counter()
            results += self._run_at(place, call, calls)
            timings = self._timings.setdefault(call.name, {"rounds": 0})
            # Every round refreshes its place's time, so that a first timing
            # thrown off (a collection pause, another process) is corrected
            # by the next round there or by a probe (see _place). With the
            # time per client, the round's total (the cheap-round rule).
            if calls:
                timings[place] = (time.perf_counter() - start) / len(calls)
            timings["clients"] = len(results)
            timings["rounds"] += 1
        return results

    def _run_at(self, place, call, calls):
        """Run ``calls`` in the server's thread or in the pool."""
        if not calls:
            return []
        if place == "here":
            # The server's thread, configured sequential while the transport
            # is open (see __enter__).
            return run_sequential_steps(calls)
        shares = _task_shares([args[1].n_samples for args in calls], self._n_workers)
        tasks = [[calls[i] for i in share] for share in shares]
        pool = self._pool(call, calls)
        if pool is self._threads:
            batches = thread_map(self._threads, run_steps, tasks)
        else:
            batches = pool(delayed(run_steps)(t) for t in tasks)
        return [r for batch in batches for r in batch]

    def _pilot(self, call, calls):
        """The first round of a step over many small clients in threads:
        1/16 of them run in the server's thread first; if the whole round
        would take under ``_LONG_ROUND`` there, the rest run there too,
        otherwise in the pool.

        A small client's step is partly interpreter work, which threads
        cannot share, and partly numpy work on arrays large enough to
        release the GIL. Over 1,000 clients of 100 rows the coreset
        k-means' label step took 57 us a client alone and 148 us over two
        threads; disKPCA's low-rank step 1.9 ms alone and 1.0 ms over two
        threads. A short round has little to gain from the pool whichever
        it is; a long one goes to the pool, as before. (Timing a few
        clients in the pool as well was tried: over a pilot the threads'
        time per client was 10-80% above their time over the whole round,
        and the comparison sent disKPCA's rounds to the server's thread.)

        Returns the place for the rest and the results of the pilot
        clients (the first ones, in order).
        """
        pilot = calls[: max(1, len(calls) // _PILOT_SHARE)]
        start = time.perf_counter()
        results = self._run_at("here", call, pilot)
        per_client = (time.perf_counter() - start) / len(pilot)
        timings = self._timings.setdefault(call.name, {"rounds": 0})
        timings["here"] = per_client
        short = per_client * len(calls) < _LONG_ROUND
        return ("here" if short else "pool"), results

    def server_map(self, func, items):
        """``[func(item) for item in items]`` in the transport's threads
        (``server_thread_map``); in this thread when the fit has none
        (``n_jobs=1``, or processes chosen by an enclosing joblib
        backend)."""
        return server_thread_map(self._threads, func, items)

    def _place(self, call, calls):
        """Where a round of ``call``'s step runs: in the pool (``"pool"``),
        in the server's thread (``"here"``), or split by a pilot
        (``"pilot"``, see :meth:`_pilot`).

        For small clients a round in the pool can cost more than it saves:
        the dispatch, and threads queueing on the GIL in Python-level work.
        A ``python_bound`` step runs here over small clients when it is
        registered with ``in_processes=False``, and over at least
        ``_PILOT_SHARE`` of them per worker when its round would go to the
        transport's threads only for want of rows for processes (see
        :meth:`_pool`) and the user did not choose threads: a one-shot
        protocol runs such a step once, too few times to learn from its
        timings. A step's first round runs in the pool, except over at
        least ``_PILOT_SHARE`` clients per worker, of at most
        ``_SMALL_CLIENT`` rows on average, bound for threads: that round
        starts with a pilot. Iterative protocols (Lanczos, Lloyd) repeat a step many
        times: a step whose pool round took less than ``_CHEAP_ROUND`` runs
        here from then on, one whose pool round took at least
        ``_LONG_ROUND`` stays in the pool while its rounds take that long
        (unless here was timed faster); otherwise the place not yet timed
        is tried, and later rounds run where the latest round per client
        took less time, except rounds 4, 8, 16, ..., which run in the other
        place to time it again: one timing each decided for the whole fit
        before, and a slow second round (kernel k-means' Lanczos over 1,000
        clients of 10 rows) sent 800 rounds to a pool that took twice as
        long. Each client's step is deterministic, so the model is the same
        wherever it runs; only the time changes.
        """
        step = resolve_step(call.name, call.module)
        many = len(calls) >= _PILOT_SHARE * self._n_workers
        if _python_bound_here(step, calls):
            if not getattr(step, "in_processes", True):
                # Threads cannot help it, and processes would change it or
                # cost more than they save.
                return "here"
            if (
                many
                and self._threads is not None
                and not self._threads_chosen
                and _rows(calls) < _MIN_PROCESS_ROWS
            ):
                # Threads only because processes would not pay for their
                # start: the clients' Python-level work would queue on the
                # GIL there.
                return "here"
        timings = self._timings.get(call.name)
        if timings is None:
            if many and _small(calls) and self._pool(call, calls) is self._threads:
                return "pilot"
            return "pool"
        if "pool" not in timings:
            # The pilot ran the first round here: the pool is tried next,
            # unless the round was too short for it to gain anything.
            here_round = timings["here"] * timings["clients"]
            return "here" if here_round < _CHEAP_ROUND else "pool"
        pool_round = timings["pool"] * timings["clients"]
        if pool_round < _CHEAP_ROUND:
            return "here"
        here = timings.get("here")
        if here is None:
            return "pool" if pool_round >= _LONG_ROUND else "here"
        if pool_round >= _LONG_ROUND and timings["pool"] <= here:
            return "pool"
        faster = "pool" if timings["pool"] <= here else "here"
        upcoming = timings["rounds"] + 1
        if upcoming & (upcoming - 1) == 0:
            return "here" if faster == "pool" else "pool"
        return faster

    def _pool(self, call, calls):
        """The pool for a round: processes for a Python-bound step over
        small clients holding at least ``_MIN_PROCESS_ROWS`` rows in all,
        threads otherwise."""
        step = resolve_step(call.name, call.module)
        if not _python_bound_here(step, calls) or _rows(calls) < _MIN_PROCESS_ROWS:
            return self._parallel if self._threads is None else self._threads
        if self._processes is None:
            # Entered inside the server's sequential configuration: leave it
            # for the moment, so that the pool sees the user's.
            self._server_config.__exit__(None, None, None)
            try:
                self._processes = Parallel(
                    n_jobs=self._n_workers, prefer="processes", batch_size=1
                )
                self._processes.__enter__()
            finally:
                self._server_config = parallel_config(backend="sequential")
                self._server_config.__enter__()
        return self._processes

    def local_values(self, namespace, key, client_ids):
        """Client id -> what the client keeps under ``namespace`` (and
        ``key`` within it, when given)."""
        return {
            c: collected(self._clients[c], self._storage[c], namespace, key)
            for c in client_ids
        }

    def assemble(self, namespace, key, client_ids, n_samples, *, fill, dtype):
        """A per-sample value kept by the clients, in training-sample order;
        samples of clients not in ``client_ids`` get ``fill``."""
        values = self.local_values(namespace, key, client_ids)
        parts = [
            (self._clients[c].sample_indices, np.asarray(v)) for c, v in values.items()
        ]
        return assembled(parts, n_samples, fill=fill, dtype=dtype)
