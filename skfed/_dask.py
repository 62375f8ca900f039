"""Clients resident on dask workers: the dask transport under a Federation.

Each client's data lives on one worker for the whole fit, as a future;
what it keeps between rounds (its state) stays there too. A round submits
the registered step's name and options with the message to the worker that
holds the client, and only the upload comes back. Two ways in:

* :meth:`DaskTransport.from_dask` builds the clients on the workers from a
  ``dask.array`` (each chunk of rows a client, or grouped by an aligned
  ``partitions`` array) or a ``dask.dataframe`` with a client column: the
  data never passes through this process, and per-sample results come back
  as dask arrays.
* :meth:`DaskTransport.scatter` sends in-memory clients to the workers once
  each (used when joblib's active backend is dask).

Input checks (dtype, finite values, magnitude) run on the clients, on their
own rows.
"""

import uuid
import weakref

import numpy as np
import scipy.sparse as sp
from joblib import parallel_config

from ._remote import aligned, make_client
from ._transport import kept_after, picked, placed_rows, run_step
from ._validation import _canonical_order

__all__ = ["DaskTransport", "dask_client"]


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


def _remote_steps(call, token, clients, messages):
    """The clients of one worker, one after the other (one task)."""
    return [_remote_step(call, c, token, m) for c, m in zip(clients, messages)]


def _read(token, client_id, namespace, key):
    return picked(_STORE[token, client_id][namespace], key)


def _placed(client, token, namespace, key):
    """(sample positions, values) of one client, for reassembly."""
    values = _read(token, client.client_id, namespace, key)
    return np.asarray(client.sample_indices), np.asarray(values)


def _forget_everywhere(dask_client, token):
    try:
        dask_client.run(_forget, token)
    except Exception:  # the client or cluster is already gone
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

    def __init__(self, dask_client, data, homes, sizes, data_info, layout=None):
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
        self._layout = layout

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
        workers = sorted(dask_client.scheduler_info(n_workers=-1)["workers"])
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
            ``skfed._remote.validate_client_rows``).
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
        if partitions is None:
            ids = list(range(len(x_blocks))) if client_ids is None else client_ids
            clients = [
                dask.delayed(make_client, pure=True)(
                    cid, xb, yb, np.arange(o, o + n), seed, spec
                )
                for cid, xb, yb, (o, n) in zip(ids, x_blocks, y_blocks, layout)
            ]
        else:
            p_blocks = partitions.to_delayed().ravel()
            pieces = [
                dask.delayed(_split_chunk, pure=True)(xb, pb, yb, int(o))
                for xb, pb, yb, (o, _) in zip(x_blocks, p_blocks, y_blocks, layout)
            ]
            pieces = dask_client.compute(pieces)
            counts = dask_client.gather(
                [dask_client.submit(_chunk_ids, p) for p in pieces]
            )
            # In chunk order before sorting: ids that cannot be sorted keep it.
            ids = _canonical_order(dict.fromkeys(cid for c in counts for cid in c))
            clients = []
            for cid in ids:
                holders = [p for p, c in zip(pieces, counts) if cid in c]
                clients.append(dask.delayed(_join)(cid, seed, spec, *holders))
        futures = dask_client.compute(clients)
        meta = dask_client.gather([dask_client.submit(_size, f) for f in futures])
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
        return cls(dask_client, data, homes, sizes, (n_features, dtype), layout=layout)

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

    def _fetch(self, futures):
        return [aligned(v) for v in self.client.gather(futures)]

    def run(self, call, client_ids, messages):
        """Run ``call`` on each client where it lives; return the uploads
        (or ``StepFailure``).

        One task per worker and round runs all of that worker's clients in
        turn: iterative protocols (Lanczos) run thousands of short rounds,
        and each task costs the scheduler a round trip.
        """
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
            )
            for group in by_worker.values()
        ]
        uploads = {}
        for group, results in zip(by_worker.values(), self._fetch(batches)):
            uploads.update((c, u) for (c, _), u in zip(group, results))
        return [uploads[c] for c in client_ids]

    def local_values(self, namespace, key, client_ids):
        """Client id -> what the client keeps (fetched from its worker)."""
        futures = [
            self._at_home(c, _read, self._token, c, namespace, key) for c in client_ids
        ]
        return dict(zip(client_ids, self._fetch(futures)))

    def assemble(self, namespace, key, client_ids, n_samples, *, fill, dtype):
        """A per-sample output in training-sample order: a dask array for
        clients built from dask data (nothing leaves the workers), a numpy
        array for scattered in-memory clients."""
        import dask
        import dask.array as da
        from distributed import wait

        parts = [
            self._at_home(c, _placed, self._data[c], self._token, namespace, key)
            for c in client_ids
        ]
        # They read the clients' state, which is dropped with the transport.
        wait(parts)
        tail, found = self._fetch(
            [self.client.submit(_shape_dtype, parts[0], pure=False)]
        )[0]
        options = {
            "fill": fill,
            "dtype": np.dtype(found) if dtype is None else np.dtype(dtype),
            "tail_shape": tail,
        }
        if self._layout is None:
            # Scattered in-memory clients: the output is an in-memory array.
            return placed_rows(self._fetch(parts), 0, n_samples, **options)
        blocks = [
            da.from_delayed(
                dask.delayed(placed_rows)(parts, o, n, **options),
                shape=(n, *tail),
                dtype=options["dtype"],
            )
            for o, n in self._layout
        ]
        return da.concatenate(blocks) if len(blocks) > 1 else blocks[0]


def _shape_dtype(part):
    return part[1].shape[1:], part[1].dtype.str
