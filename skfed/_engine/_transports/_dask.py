"""Clients resident on dask workers: the dask transport under a Federation.

Each client's data lives on one worker for the whole fit, as a future;
what it keeps between rounds (its state) stays there too. A round submits
the registered step's name and options with the message to the worker that
holds the client, and only the upload comes back. Two ways in:

* :meth:`DaskTransport.from_dask` builds the clients on the workers from a
  ``dask.array`` (each chunk of rows a client, or grouped by an aligned
  ``partitions`` array) or a ``dask.dataframe`` with a client column: the
  data never passes through this process, which holds a few numbers per
  client. Per-sample fitted attributes (``labels_``) are fetched into this
  process at the end of the fit, each client's values once.
* :meth:`DaskTransport.scatter` sends in-memory clients to the workers once
  each (used when joblib's active backend is dask).

Input checks (dtype, finite values, magnitude) run on the clients, on their
own rows.

Faults are loud: a worker that leaves the cluster during a fit takes its
clients' rows and state with it, and the fit raises
:class:`WorkerLostError` naming the worker and those clients as soon as the
scheduler has noticed (the round's tasks are pinned to the clients' workers,
and would otherwise wait for the lost worker forever). Every wait for the
workers has a deadline, the dask configuration value ``skfed.timeout``
(seconds or a dask time string; none by default): a round that takes longer
raises :class:`TimeoutError` naming the workers and clients still running.
"""

import threading
import time
import uuid
import weakref
from concurrent.futures import CancelledError
from contextlib import nullcontext

import numpy as np
import scipy.sparse as sp
from joblib import parallel_config

from ..._numerics._threads import round_uses_process_threads, thread_pools
from .._client import make_client
from .._errors import WorkerLostError
from .._protocol import resolve_step
from .._remote import aligned
from .._validation import canonical_order
from ._common import collected, kept_after, run_step

__all__ = ["DaskTransport", "WorkerLostError", "dask_client", "wait_timeout"]

# How often a wait for the workers checks that the workers it waits for are
# still in the cluster (one scheduler query each time).
_POLL_SECONDS = 0.5


def wait_timeout():
    """The deadline of each wait for the workers, in seconds (None: no
    deadline), from the dask configuration value ``skfed.timeout``.

    A dask configuration value rather than an estimator parameter: the
    deadline belongs to the cluster the fit runs on (its network, its
    workers' speed), not to the model, and it is set with the rest of the
    cluster's settings (``dask.config.set({"skfed.timeout": "10 minutes"})``,
    a YAML file or ``DASK_SKFED__TIMEOUT``).
    """
    import dask
    from dask.utils import parse_timedelta

    value = dask.config.get("skfed.timeout", None)
    if value is None:
        return None
    try:
        seconds = parse_timedelta(value, default="seconds")
    except (TypeError, ValueError, KeyError):
        seconds = None
    if seconds is None or not seconds > 0:
        raise ValueError(
            f"The dask configuration value skfed.timeout must be a positive "
            f"number of seconds or a time string such as '10 minutes', got "
            f"{value!r}."
        )
    return float(seconds)


def _alive_workers(dask_client):
    """The addresses of the cluster's workers, asked of the scheduler now.

    Not ``Client.scheduler_info()``: it returns the client's cached copy,
    which the client's own periodic refresh replaces with one that lists
    no workers, so a read right after the query could see none.
    """
    identity = dask_client.sync(dask_client.scheduler.identity, n_workers=-1)
    return set(identity["workers"])


def _named(ids, limit=10):
    shown = ", ".join(repr(c) for c in list(ids)[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def wait_for_workers(dask_client, futures, owners, what):
    """The results of ``futures``, each computed on the worker ``owners``
    gives as ``(worker address, client ids)``; raise a named error when one
    of those workers leaves the cluster or the deadline passes.

    Parameters
    ----------
    dask_client : distributed.Client
    futures : list of Future
    owners : list of (str, list)
        Per future, the worker that runs it and the clients it concerns.
    what : str
        What the futures compute, for the messages ("round 'x'").
    """
    timeout = wait_timeout()
    start = time.monotonic()
    # One done-callback per future, set once: each distributed.wait with a
    # timeout left a waiter per future pending until the round ended (some
    # 6 KB a check), memory that grew with the round's length, hence with
    # the clients' rows.
    finished = _all_done(futures)
    while not finished.wait(_POLL_SECONDS):
        _check_workers(dask_client, futures, owners, what)
        if timeout is not None and time.monotonic() - start > timeout:
            running = [o for f, o in zip(futures, owners) if not f.done()]
            dask_client.cancel(futures)
            raise TimeoutError(
                f"{what} did not finish within skfed.timeout={timeout:g} s: "
                f"worker(s) {_named(sorted({w for w, _ in running}))} still "
                f"run client(s) {_named([c for _, ids in running for c in ids])}. "
                "Raise the dask configuration value skfed.timeout (e.g. "
                "dask.config.set({'skfed.timeout': '1 hour'})) for longer "
                "rounds, or look at those workers' logs."
            )
    try:
        # A future that failed or was cancelled (its data lost) raises here.
        return dask_client.gather(futures)
    except Exception as exc:
        _raise_failed(dask_client, futures, owners, what, exc)


def _all_done(futures):
    """A :class:`threading.Event` set once every future has finished,
    failed or been cancelled."""
    finished = threading.Event()
    left = [len(futures)]
    lock = threading.Lock()

    def one_done(_):
        with lock:
            left[0] -= 1
            if left[0] == 0:
                finished.set()

    if not futures:
        finished.set()
    for future in futures:
        future.add_done_callback(one_done)
    return finished


def _raise_failed(dask_client, futures, owners, what, exc):
    """Raise :class:`WorkerLostError` for futures that failed in dask (not
    in a client step, whose errors come back as answers), naming their
    workers and clients."""
    _check_workers(dask_client, futures, owners, what, cause=exc)
    from distributed import KilledWorker

    if not isinstance(exc, (KilledWorker, CancelledError)):
        raise exc  # raised by skfed's code on a worker (a client's input check)
    failed = [o for f, o in zip(futures, owners) if f.status != "finished"]
    workers = sorted({w for w, _ in failed if w is not None})
    ids = [c for _, cids in failed for c in cids]
    if not workers:
        # The clients had no worker yet: what was lost is the input they
        # are built from.
        raise WorkerLostError(
            f"{what} failed before client(s) {_named(ids)} had a worker: "
            f"{type(exc).__name__}: {exc}. The chunks of X they are built "
            "from were lost on the cluster or could not be computed there "
            "(persisted data released or on a worker that left, or a task "
            "the scheduler or the workers cannot load, e.g. a function from "
            "a module they cannot import); check that X.compute() works on "
            "this cluster, then fit again.",
            workers=workers,
            client_ids=ids,
        ) from exc
    raise WorkerLostError(
        f"{what} failed on dask worker(s) {_named(workers)}, which held "
        f"client(s) {_named(ids)}: {type(exc).__name__}: {exc}. Their rows "
        "or state are gone with the task; fit again.",
        workers=workers,
        client_ids=ids,
    ) from exc


def _check_workers(dask_client, futures, owners, what, cause=None):
    """Raise :class:`WorkerLostError` if a worker of ``owners`` left."""
    alive = _alive_workers(dask_client)
    lost = sorted({w for w, _ in owners if w is not None and w not in alive})
    if not lost:
        return
    dask_client.cancel(futures)
    ids = [c for w, cids in owners if w in lost for c in cids]
    raise WorkerLostError(
        f"dask worker(s) {_named(lost)} left the cluster during {what}, with "
        f"the rows and state of client(s) {_named(ids)}. A fit keeps its "
        "clients in their workers' memory for all its rounds, so it cannot "
        "go on without them: fit again (the clients are built anew on the "
        "workers that remain), and give the workers enough memory (a "
        "worker the nanny restarts after running out of memory is lost "
        "too).",
        workers=lost,
        client_ids=ids,
    ) from cause


def dask_client():
    """The dask.distributed Client this process works with (the default
    one: ``distributed.Client(...)`` sets it)."""
    try:
        from distributed import get_client
    except ImportError as exc:  # pragma: no cover - the extra is missing
        raise ImportError(
            "Fitting on dask collections needs dask.distributed: pip install "
            "'skfed[dask]'."
        ) from exc
    try:
        return get_client()
    except ValueError:
        raise ValueError(
            "Fitting on a dask collection needs a dask.distributed Client: "
            "create one first, distributed.Client() for a local cluster or "
            "distributed.Client('tcp://scheduler-address:8786') for a running "
            "one."
        ) from None


def _settle(client):
    """The client's data in memory of its own, on its worker."""
    client.X = aligned(client.X)
    client.y = aligned(client.y)
    client.sample_weight = aligned(client.sample_weight)
    client.sample_indices = aligned(client.sample_indices)
    return client


# Rows whose per-sample outputs ``assemble`` fetches together (a client
# with more rows sends them in slices of this many; at most 64 clients a
# fetch): what a fetch holds here besides the output.
_ASSEMBLY_ROWS = 2**18
_ASSEMBLY_CLIENTS = 64


def _batches(client_ids, sizes):
    """``(client id, start, stop)`` slices of the clients' rows in order,
    in consecutive batches of at most ``_ASSEMBLY_ROWS`` rows and
    ``_ASSEMBLY_CLIENTS`` pieces."""
    batch, rows = [], 0
    for cid in client_ids:
        for start in range(0, max(sizes[cid], 1), _ASSEMBLY_ROWS):
            stop = min(start + _ASSEMBLY_ROWS, sizes[cid])
            if batch and (
                rows + stop - start > _ASSEMBLY_ROWS or len(batch) == _ASSEMBLY_CLIENTS
            ):
                yield batch
                batch, rows = [], 0
            batch.append((cid, start, stop))
            rows += stop - start
    if batch:
        yield batch


# What each client keeps between rounds, in the memory of the worker that
# holds the client: (fit token, client id) -> {namespace: state}. Keeping it
# here rather than as a future of its own saves two tasks per client and
# round, which the many short rounds of Lanczos feel.
_STORE = {}


def _remote_step(call, client, token, message):
    """Run a step on the worker holding the client; its new state stays
    there, only the upload is returned."""
    key = (token, client.client_id)
    storage = _STORE.get(key, {})
    result = run_step(call, client, storage, aligned(message))
    _STORE[key], answer = kept_after(call, storage, result)
    return answer


def _remote_steps(call, token, clients, messages, one_blas_thread=True):
    """The clients of one worker, one after the other (one task).

    BLAS runs on one thread unless the round is one of large products (see
    ``skfed._numerics._threads``), whatever the worker's own setting: a product can
    round differently on another number of threads, and the model must
    not depend on how the workers were started.
    """
    with _blas_on_one_thread(one_blas_thread):
        return [_remote_step(call, c, token, m) for c, m in zip(clients, messages)]


def _blas_on_one_thread(wanted):
    """A context in which BLAS runs on one thread in this worker (checked
    each round, about 20 us: limiting costs more, and dask's nanny usually
    starts workers on one thread already)."""
    pools = thread_pools()
    if not wanted or all(
        lib["num_threads"] == 1 for lib in pools.info() if lib["user_api"] == "blas"
    ):
        return nullcontext()
    return pools.limit(limits=1, user_api="blas")


def _read(client, token, namespace, key):
    """What the client sends back of its kept state (checked on the worker
    against what it may send, ``skfed._engine._transports._common.collected``)."""
    storage = _STORE.get((token, client.client_id), {})
    return collected(client, storage, namespace, key)


def _values(client, token, namespace, key, dtype, start, stop):
    """Rows ``start:stop`` of a client's per-sample values in the output's
    dtype (cast here, so that int32 labels travel as int32)."""
    values = np.asarray(_read(client, token, namespace, key))[start:stop]
    return values if dtype is None else values.astype(dtype, copy=False)


def _placed(client, token, namespace, key, dtype, start, stop):
    """(sample positions, values) of rows ``start:stop`` of one client,
    for reassembly."""
    values = _values(client, token, namespace, key, dtype, start, stop)
    return np.asarray(client.sample_indices)[start:stop], values


def _forget_everywhere(dask_client, token):
    """Ask every worker to drop a finished fit's client state; return at once.

    This is the transport's finalizer, which a garbage collection can run
    inside any call of the dask client, ``persist`` included, while that
    call holds the client's locks: a blocking ``client.run`` here would
    wait on the client's event loop, and the loop on those locks, forever.
    So the request is handed to the event loop and not waited for.
    """
    try:
        dask_client.loop.add_callback(_forget_on_workers, dask_client, token)
    except Exception:  # the client or its event loop is already gone
        pass


async def _forget_on_workers(dask_client, token):
    try:
        await dask_client.run(_forget, token, asynchronous=True)
    except Exception:  # the cluster is gone or going: nothing left to drop
        pass


def _forget(token):
    """Drop a finished fit's client state from this worker."""
    for key in [k for k in _STORE if k[0] == token]:
        del _STORE[key]


def _size(client):
    return client.n_samples, client.X.shape[1], client.X.dtype.str


def _split_chunk(X, ids, y, offset):
    """One chunk of rows cut by client id: {id: (rows, y, positions)}."""
    ids = np.asarray(ids)
    pieces = {}
    for cid in np.unique(ids):
        where = np.flatnonzero(ids == cid)
        rows = X[where] if not hasattr(X, "iloc") else X.iloc[where]
        pieces[cid.item() if hasattr(cid, "item") else cid] = (
            rows,
            None if y is None else np.asarray(y)[where],
            where + offset,
        )
    return pieces


def _chunk_ids(pieces):
    return {cid: len(piece[2]) for cid, piece in pieces.items()}


def _join(cid, base, spec, *pieces_list):
    parts = [pieces[cid] for pieces in pieces_list if cid in pieces]
    X = [np.asarray(p[0]) if not sp.issparse(p[0]) else p[0] for p in parts]
    X = sp.vstack(X, format="csr") if sp.issparse(X[0]) else np.concatenate(X)
    y = None if parts[0][1] is None else np.concatenate([p[1] for p in parts])
    idx = np.concatenate([p[2] for p in parts])
    return make_client(cid, X, y, idx, base, spec)


class DaskTransport:
    """Clients held on dask workers; steps run where their data lives.

    Build it with :meth:`from_dask` or :meth:`scatter`.

    Attributes
    ----------
    client : distributed.Client
    """

    def __init__(self, dask_client, data, homes, sizes, data_info, spans=None):
        self.client = dask_client
        self._data = data
        self._home = homes
        self._token = uuid.uuid4().hex
        # The clients' state lives on the workers as long as this transport
        # (its federation) does, like the state of in-process clients.
        weakref.finalize(self, _forget_everywhere, dask_client, self._token)
        self.client_ids = list(data)
        self._sizes = sizes
        self.data_info = data_info
        # Client id -> (first row, rows) for clients that are one chunk of
        # rows each (their positions need not travel); None otherwise.
        self._spans = spans

    @property
    def client_sizes(self):
        """Client id -> n_m."""
        return dict(self._sizes)

    # -- construction ---------------------------------------------------------

    @classmethod
    def scatter(cls, dask_client, clients):
        """Send in-memory clients to the workers, each to one worker, once.

        Workers are assigned in turn, largest clients first, so that the
        rows spread evenly; every round of the fit then runs each client
        where its data already is.
        """
        workers = sorted(_alive_workers(dask_client))
        order = sorted(clients, key=lambda c: -c.n_samples)
        homes = {c.client_id: workers[i % len(workers)] for i, c in enumerate(order)}
        data = {}
        for c in clients:
            home = homes[c.client_id]
            [raw] = dask_client.scatter(
                [c], workers=[home], broadcast=False, hash=False
            )
            data[c.client_id] = dask_client.submit(
                _settle, raw, workers=[home], allow_other_workers=False, pure=False
            )
        sizes = {c.client_id: c.n_samples for c in clients}
        first = clients[0].X if clients else np.zeros((0, 0))
        return cls(dask_client, data, homes, sizes, (first.shape[1], first.dtype))

    @classmethod
    def from_dask(
        cls, dask_client, X, *, y=None, partitions=None, seed, spec, client_ids=None
    ):
        """Clients built on the workers from a dask array.

        Parameters
        ----------
        dask_client : distributed.Client
        X : dask.array.Array of shape (n_samples, n_features)
            Chunked along rows only; never computed here.
        y : dask.array.Array of shape (n_samples,), default=None
            Aligned with X's row chunks.
        partitions : dask.array.Array of shape (n_samples,), default=None
            Client id of each row, aligned with X's row chunks; None makes
            each chunk of rows a client (ids 0, 1, ...).
        seed : int
            The fit's base seed of every client's random streams.
        spec : dict
            The input checks each client runs (see
            ``skfed._engine._client.validate_client_rows``).
        """
        import dask

        if X.ndim != 2:
            raise ValueError(f"Expected a 2-D dask array, got {X.ndim} dimension(s).")
        if len(X.chunks[1]) != 1:
            X = X.rechunk({1: -1})
        if any(np.isnan(c) for c in X.chunks[0]):
            raise ValueError(
                "The dask array's row chunks have unknown sizes; compute them "
                "first (X.compute_chunk_sizes(), or to_dask_array(lengths=True) "
                "on a dataframe)."
            )
        n_features = X.shape[1]
        rechunked = [
            a.rechunk({0: X.chunks[0]}) if a is not None else None
            for a in (y, partitions)
        ]
        y, partitions = rechunked
        offsets = np.concatenate([[0], np.cumsum(X.chunks[0])[:-1]]).astype(int)
        x_blocks = X.to_delayed().ravel()
        y_blocks = y.to_delayed().ravel() if y is not None else [None] * len(x_blocks)
        layout = [(int(o), int(n)) for o, n in zip(offsets, X.chunks[0])]
        spans = None
        if partitions is None:
            ids = list(range(len(x_blocks))) if client_ids is None else client_ids
            # The positions are a range here, an array only on the worker:
            # this process holds O(clients), whatever the rows.
            clients = [
                dask.delayed(make_client, pure=True)(
                    cid, xb, yb, range(o, o + n), seed, spec
                )
                for cid, xb, yb, (o, n) in zip(ids, x_blocks, y_blocks, layout)
            ]
            spans = dict(zip(ids, layout))
        else:
            p_blocks = partitions.to_delayed().ravel()
            pieces = [
                dask.delayed(_split_chunk, pure=True)(xb, pb, yb, int(o))
                for xb, pb, yb, (o, _) in zip(x_blocks, p_blocks, y_blocks, layout)
            ]
            pieces = dask_client.compute(pieces)
            counts = wait_for_workers(
                dask_client,
                [dask_client.submit(_chunk_ids, p) for p in pieces],
                [(None, []) for _ in pieces],
                "cutting the dask array's chunks by client",
            )
            # In chunk order before sorting: ids that cannot be sorted keep it.
            ids = canonical_order(dict.fromkeys(cid for c in counts for cid in c))
            clients = []
            for cid in ids:
                holders = [p for p, c in zip(pieces, counts) if cid in c]
                clients.append(dask.delayed(_join)(cid, seed, spec, *holders))
        futures = dask_client.compute(clients)
        meta = wait_for_workers(
            dask_client,
            [dask_client.submit(_size, f) for f in futures],
            [(None, [cid]) for cid in ids],
            "building the clients on the workers",
        )
        data = dict(zip(ids, futures))
        who = dask_client.who_has(futures)
        homes = {cid: who[f.key][0] for cid, f in zip(ids, futures)}
        sizes = {cid: int(m[0]) for cid, m in zip(ids, meta)}
        empty = [cid for cid, n in sizes.items() if n == 0]
        if empty:
            raise ValueError(
                f"Client(s) {empty[:5]} hold no rows (empty chunks of the dask "
                "array); rechunk it so that every chunk has rows."
            )
        dtypes = {m[2] for m in meta}
        dtype = np.result_type(*[np.dtype(d) for d in dtypes])
        return cls(dask_client, data, homes, sizes, (n_features, dtype), spans=spans)

    # -- the transport interface ----------------------------------------------

    def __enter__(self):
        # As the joblib transport: the server code that runs here between
        # rounds must not pick up an enclosing joblib configuration.
        self._server_config = parallel_config(backend="sequential")
        self._server_config.__enter__()
        return self

    def __exit__(self, *exc_info):
        self._server_config.__exit__(*exc_info)
        return False

    def _at_home(self, client_id, fn, *args):
        """Submit ``fn(*args)`` to the worker that holds ``client_id``."""
        return self.client.submit(
            fn,
            *args,
            workers=[self._home[client_id]],
            allow_other_workers=False,
            pure=False,
        )

    def _fetch(self, futures, owners, what):
        """The futures' results, in memory of their own; a named error when
        a worker of ``owners`` (per future: its worker and clients) leaves
        or the deadline passes (:func:`wait_for_workers`)."""
        values = wait_for_workers(self.client, futures, owners, what)
        return [aligned(v) for v in values]

    def run(self, call, client_ids, messages):
        """Run ``call`` on each client where it lives; return the uploads
        (or ``StepFailure``).

        One task per worker and round runs all of that worker's clients in
        turn: iterative protocols (Lanczos) run thousands of short rounds,
        and each task costs the scheduler a round trip.
        """
        large = round_uses_process_threads(
            resolve_step(call.name, call.module), [self._sizes[c] for c in client_ids]
        )
        by_worker = {}
        for c, m in zip(client_ids, messages):
            by_worker.setdefault(self._home[c], []).append((c, m))
        batches = [
            self._at_home(
                group[0][0],
                _remote_steps,
                call,
                self._token,
                [self._data[c] for c, _ in group],
                [m for _, m in group],
                not large,
            )
            for group in by_worker.values()
        ]
        owners = [(w, [c for c, _ in g]) for w, g in by_worker.items()]
        fetched = self._fetch(batches, owners, f"step {call.name!r}")
        uploads = {}
        for group, results in zip(by_worker.values(), fetched):
            uploads.update((c, u) for (c, _), u in zip(group, results))
        return [uploads[c] for c in client_ids]

    def local_values(self, namespace, key, client_ids):
        """Client id -> what the client keeps (fetched from its worker)."""
        futures = [
            self._at_home(c, _read, self._data[c], self._token, namespace, key)
            for c in client_ids
        ]
        owners = [(self._home[c], [c]) for c in client_ids]
        what = f"collecting {namespace!r} from the clients"
        return dict(zip(client_ids, self._fetch(futures, owners, what)))

    def assemble(self, namespace, key, client_ids, n_samples, *, fill, dtype):
        """A per-sample output in training-sample order, as a numpy array
        in this process (a fitted attribute such as ``labels_`` must
        outlive the cluster).

        Each client's values travel once, straight from its worker to this
        process, a batch of at most 2**18 rows at a time (a larger client's
        in slices), and are written into place: the output, plus one
        batch's values, is what this costs here (4 or 8 bytes per sample
        for labels, 8 s for an embedding of s columns), whatever the size
        of the clients. A client that is one chunk of rows sends its values
        alone, in the chunk's order; one cut by ``partitions`` sends their
        positions with them. Nothing moves between workers.
        """
        out = None
        for batch in _batches(client_ids, self._sizes):
            if self._spans is not None:
                futures = [
                    self._at_home(
                        c,
                        _values,
                        self._data[c],
                        self._token,
                        namespace,
                        key,
                        dtype,
                        a,
                        b,
                    )
                    for c, a, b in batch
                ]
            else:
                futures = [
                    self._at_home(
                        c,
                        _placed,
                        self._data[c],
                        self._token,
                        namespace,
                        key,
                        dtype,
                        a,
                        b,
                    )
                    for c, a, b in batch
                ]
            owners = [(self._home[c], [c]) for c, _, _ in batch]
            what = f"collecting {namespace!r} from the clients"
            # Written into place at once: no copy of their own (``_fetch``)
            # for values that the output copies anyway.
            parts = wait_for_workers(self.client, futures, owners, what)
            for (cid, a, b), part in zip(batch, parts):
                if self._spans is not None:
                    offset = self._spans[cid][0]
                    where, values = slice(offset + a, offset + b), np.asarray(part)
                else:
                    where, values = part[0], np.asarray(part[1])
                if out is None:
                    kind = values.dtype if dtype is None else np.dtype(dtype)
                    out = np.full((n_samples, *values.shape[1:]), fill, dtype=kind)
                out[where] = values
            del parts
        return out
