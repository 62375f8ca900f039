"""What one client holds for the duration of a fit, and how it is made.

A fit cuts the data once into :class:`ClientData` pieces that live for the
whole fit: in this process from in-memory arrays (``cut_clients``), or
where the rows live, on a dask worker or a Flower node, after the client
has checked them (:func:`make_client`). Per-client random streams are
fixed when the client is made and depend on the fit's seed and on an
order-free fingerprint of the client's data, never on the backend, on
``n_jobs``, on the order of the clients or on their names.
"""

import hashlib
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_array

from .._numerics._rows import rounded_row_hashes
from .._numerics._seeds import SEED_MAX
from ..privacy._secure_aggregation import KEYS_NAMESPACE
from ._protocol import stream_key
from ._remote import aligned
from ._transports._common import worker_count
from ._validation import check_magnitude

__all__ = [
    "ClientData",
    "SetUpThreads",
    "client_config",
    "cut_clients",
    "digest",
    "fingerprint",
    "make_client",
    "validate_client_rows",
]


class ClientData:
    """What one simulated client holds for the duration of a fit.

    Parameters
    ----------
    client_id : hashable
        The client's id as given in ``partitions``.
    X : {ndarray, sparse matrix} of shape (n_m, n_features)
        The client's samples.
    y : ndarray of shape (n_m,) or None
        The client's targets.
    sample_weight : ndarray of shape (n_m,) or None
        The client's sample weights.
    sample_indices : ndarray of int
        Positions of the client's samples in the training data (bookkeeping
        of the simulation, used to reassemble per-sample local outputs).
    entropy : tuple of int
        Seed material for the client's random streams.
    config : dict, default=None
        The client's own privacy settings, fixed when it is made (never by
        a round): ``secure_aggregation`` (it masks every sum-only upload
        and refuses to send one unmasked), ``raw_rows`` ("refuse": no
        per-row output leaves it) and ``private`` (differential privacy:
        no exact statistic of its rows leaves it either). See
        ``client_config``.
    """

    def __init__(
        self,
        client_id,
        X,
        y,
        sample_indices,
        entropy,
        sample_weight=None,
        config=None,
    ):
        self._storage = None
        self.config = dict(config or {})
        self.client_id = client_id
        self.X = X
        self.y = y
        self.sample_weight = sample_weight
        self.sample_indices = sample_indices
        self.entropy = tuple(int(e) for e in entropy)

    @property
    def n_samples(self):
        """n_m, the number of samples on this client."""
        return self.X.shape[0]

    def random_state(self, name, *keys):
        """A ``RandomState`` private to this client, one stream per name.

        Parameters
        ----------
        name : str
            Names the stream, e.g. ``"kfed.seeding"``: streams of different
            names are independent.
        *keys : int
            Further distinguish streams of one name, e.g. the round index.

        Returns
        -------
        rng : numpy.random.RandomState
        """
        # A PCG64 bit generator behind the legacy interface: seeding an
        # MT19937 costs ~70 µs, a noticeable share of a small client's step
        # when a fit has a thousand clients; PCG64 costs ~8 µs.
        return np.random.RandomState(np.random.PCG64(self._stream(name, keys)))

    def seed(self, name, *keys):
        """An int seed private to this client (for ``random_state=`` args).

        Drawn from the stream's seed sequence directly, without a
        generator.
        """
        return int(self._stream(name, keys).generate_state(1)[0] % SEED_MAX)

    def _stream(self, name, keys):
        if not isinstance(name, str):
            raise TypeError(f"A random stream is named by a str, got {name!r}.")
        words = [*self.entropy, stream_key(name), *(int(k) for k in keys)]
        return np.random.SeedSequence(words)

    def read(self, namespace, key=None):
        """What this client kept under another protocol's ``namespace``
        (read-only; a step writes only its own namespace).

        Raises
        ------
        KeyError
            If no step of that protocol has run on this client.
        PermissionError
            For the secure-aggregation keys, which only the client's
            masking reads: a step a server names (with a ``rows=`` option,
            say) could otherwise upload them.
        """
        if namespace == KEYS_NAMESPACE:
            raise PermissionError(
                "A client's secure-aggregation keys are read by its masking "
                "only, never by a step."
            )
        storage = getattr(self, "_storage", None) or {}
        if namespace not in storage:
            raise KeyError(
                f"Client {self.client_id!r} keeps nothing under {namespace!r}: "
                "run that protocol's steps first."
            )
        value = storage[namespace]
        return value if key is None else value[key]

    def masking_keys(self):
        """What this client's secure-aggregation key exchange kept (None
        before it ran): for its own masking only
        (``skfed.privacy._secure_aggregation.mask_upload``)."""
        storage = getattr(self, "_storage", None) or {}
        return storage.get(KEYS_NAMESPACE)

    def with_storage(self, storage):
        """This client as a step sees it: the same data, plus read access to
        what the client kept in earlier rounds (``storage``: namespace ->
        state)."""
        # Not copy.copy, which would go through __setstate__ (a test patches
        # it to count data shipments).
        view = object.__new__(type(self))
        view.__dict__.update(self.__dict__)
        view._storage = MappingProxyType(storage)
        return view

    def __repr__(self):
        return f"ClientData(client_id={self.client_id!r}, n_samples={self.n_samples})"


def client_config(estimator):
    """The settings every client of a fit of ``estimator`` holds as its own
    (``ClientData.config``): ``secure_aggregation`` (mask every sum-only
    upload, and refuse to send one unmasked), ``raw_rows`` and ``private``
    (what may be collected from it; see ``skfed._engine._protocol.check_collectable``).
    """
    return {
        "secure_aggregation": bool(getattr(estimator, "secure_aggregation", False)),
        "raw_rows": str(getattr(estimator, "raw_rows", "allow")),
        "private": getattr(estimator, "privacy", None) is not None,
    }


def fingerprint(X):
    """An order-free fingerprint of a client's rows.

    The row hashes (:func:`skfed._numerics._rows.rounded_row_hashes`) are sorted and
    digested with the shape. Reordering rows or renaming the client does not
    change it, and neither does passing the data as float32 instead of
    float64, so a client draws the same random numbers for both.
    """
    return digest(rounded_row_hashes(X), X.shape)


def digest(hashes, shape):
    """:func:`fingerprint` of rows whose rounded hashes are ``hashes``."""
    digest = hashlib.blake2b(np.sort(hashes).tobytes(), digest_size=8)
    digest.update(repr(tuple(int(n) for n in shape)).encode())
    return int.from_bytes(digest.digest(), "little")


class SetUpThreads:
    """Threads for the simulation's set-up on many rows (hashing them,
    cutting them into clients), as many as ``n_jobs`` asks for.

    The set-up runs before any round, in the server's thread: on a million
    rows it was a fifth of a k-FED fit that two workers otherwise share,
    and numpy releases the GIL in all of it. Each row's hash and each
    client's rows are the same whichever thread makes them.
    """

    # Rows from which threads are worth starting.
    MIN_ROWS = 2**16
    # Rows per item from which items are shared out to the threads.
    MIN_ROWS_EACH = 2048

    def __init__(self, n_jobs, n_rows):
        # Each thread gets at least MIN_ROWS_EACH rows to hash: n_jobs
        # beyond that would start threads for nothing.
        workers = worker_count(n_jobs, n_rows // self.MIN_ROWS_EACH)
        self._n_workers = workers if n_rows >= self.MIN_ROWS else 1
        self._pool = None

    def __enter__(self):
        if self._n_workers > 1:
            self._pool = ThreadPoolExecutor(self._n_workers)
        return self

    def __exit__(self, *exc_info):
        if self._pool is not None:
            self._pool.shutdown()

    def map(self, func, items, *, rows_each=None):
        """``[func(item) for item in items]``, in the threads: one run of
        consecutive items per thread. Items of fewer than ``MIN_ROWS_EACH``
        rows on average (``rows_each``) are mapped in this thread: their
        work is the interpreter's, on which threads queue (100,000 rows cut
        into 1,000 clients: 28 ms in one thread, 35-42 ms in two)."""
        small = rows_each is not None and rows_each < self.MIN_ROWS_EACH
        if self._pool is None or small:
            return [func(item) for item in items]

        def run(share):
            return [func(items[i]) for i in share]

        shares = np.array_split(np.arange(len(items)), self._n_workers)
        return [out for part in self._pool.map(run, shares) for out in part]

    def row_blocks(self, X):
        """X cut into one block of consecutive rows per thread."""
        bounds = np.linspace(0, X.shape[0], self._n_workers + 1).astype(int)
        return [X[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def cut_clients(
    X, y, partitioning, *, seed, sample_weight=None, n_jobs=None, config=None
):
    """Cut ``X`` (and ``y``, ``sample_weight``) into clients, once.

    Parameters
    ----------
    X : {ndarray, sparse matrix} of shape (n_samples, n_features)
    y : ndarray of shape (n_samples,) or None
    partitioning : Partitioning
        From :func:`skfed._engine._validation.check_partitions`.
    seed : int
        The fit's seed for every client's streams (with each client's own
        fingerprint).
    sample_weight : ndarray of shape (n_samples,), default=None
        Rows of zero weight do not enter the clients' fingerprints, so
        their random streams are those of the clients without them.
    n_jobs : int, default=None
        Threads for the set-up on many rows (:class:`SetUpThreads`).
    config : dict, default=None
        Every client's own settings (``ClientData.config``; see
        :func:`client_config`).

    Returns
    -------
    clients : list of ClientData
        In the partitioning's (canonical) order.
    """
    if sp.issparse(X):
        X = X.tocsr()
    with SetUpThreads(n_jobs, X.shape[0]) as threads:
        # Each row's hash, once for all clients (a hashing call per
        # client cost 15 of 26 ms of this set-up over 1,000 clients).
        hashes = np.concatenate(threads.map(rounded_row_hashes, threads.row_blocks(X)))

        def cut(idx):
            # Each client's own copy of its rows, and its fingerprint
            # (sorting its hashes: 50 ms over a million rows, in the
            # threads too).
            weights = None if sample_weight is None else sample_weight[idx]
            # Rows of zero weight are documented as if removed: they must
            # not change the client's random streams either.
            kept = hashes[idx] if weights is None else hashes[idx][weights != 0]
            # take: a third faster than X[idx] on dense rows, same rows.
            rows = X[idx] if sp.issparse(X) else X.take(idx, axis=0)
            return rows, weights, digest(kept, (len(kept), X.shape[1]))

        indices = partitioning.indices
        pieces = threads.map(cut, indices, rows_each=X.shape[0] / len(indices))
    return [
        ClientData(
            cid,
            Xm,
            None if y is None else y[idx],
            idx,
            (seed, fp & 0xFFFFFFFF, fp >> 32),
            sample_weight=weights,
            config=config,
        )
        for cid, idx, (Xm, weights, fp) in zip(
            partitioning.client_ids, partitioning.indices, pieces
        )
    ]


def validate_client_rows(X, spec):
    """The in-memory checks of a fit, on one client's rows.

    Parameters
    ----------
    X : array-like or sparse matrix
    spec : dict
        ``accept_sparse`` (False or "csr") and ``dtype`` (names of the
        accepted float dtypes, the first one used for other inputs).
    """
    X = check_array(
        X,
        accept_sparse=spec.get("accept_sparse", False),
        dtype=[np.dtype(d) for d in spec.get("dtype", ("float64", "float32"))],
    )
    check_magnitude(X)
    return X


def make_client(cid, X, y, indices, base, spec):
    """A client built where its rows are, after checking them.

    Parameters
    ----------
    cid : hashable
        The client's id.
    X : array-like of shape (n_m, n_features)
    y : array-like of shape (n_m,) or None
    indices : array-like of int
        Positions of the rows in the training data.
    base : int
        The fit's seed for every client's streams (with the client's own
        fingerprint, as in ``cut_clients``).
    spec : dict
        See ``validate_client_rows`` in this module; its ``"client"`` entry
        (when present) is the client's own configuration
        (``ClientData.config``).

    Raises
    ------
    ValueError
        Naming the client, when its rows fail the checks.
    """
    try:
        X = aligned(validate_client_rows(X, spec))
    except ValueError as exc:
        raise ValueError(f"Client {cid!r}: {exc}") from exc
    if y is not None:
        y = aligned(np.asarray(y))
    fp = fingerprint(X)
    entropy = (base, fp & 0xFFFFFFFF, fp >> 32)
    config = spec.get("client") if spec else None
    return ClientData(cid, X, y, np.asarray(indices), entropy, config=config)
