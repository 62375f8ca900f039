"""The network of one fit: its clients, the rounds, and the ledger.

A fit cuts the data once into :class:`ClientData` pieces that live for the
whole fit. Client steps are module-level functions registered by name
(:func:`skfed._engine._protocol.client_step`)::

    @client_step("myalgo.local")
    def step(client, state, message, **options):
        ...
        return new_state, upload

``client`` is the client's own data, ``state`` what the same client kept
under the step's namespace in earlier rounds (``None`` at first) and
``message`` what the server sent it. ``new_state`` stays on the client;
``upload`` goes to the server and is measured by the ledger. Server steps
are plain functions of uploads: they never see a :class:`ClientData`, which
is the privacy boundary of the code.

Where the clients live and their steps run is the federation's transport
(``skfed._engine._transport``); by default one reused
``sklearn.utils.parallel.Parallel`` pool serves all rounds, so the backend
(sequential, threads, loky, dask) is chosen by ``n_jobs`` and any enclosing
``joblib.parallel_config``. Per-client random streams are fixed before the
first round and depend on the fit's seed and on an order-free fingerprint
of the client's data, never on the backend, on ``n_jobs``, on the order of
the clients or on their names.
"""

import hashlib
import numbers
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from types import MappingProxyType

import numpy as np
import scipy.sparse as sp
from joblib.parallel import get_active_backend
from sklearn.utils import check_random_state
from sklearn.utils.validation import validate_data

from .._numerics._reduce import content_sorted
from .._numerics._rows import rounded_row_hashes
from .._numerics._seeds import SEED_MAX
from .._numerics._threads import close_fit, open_fit
from ..privacy import Accountant, check_privacy
from ..privacy import _secure_aggregation as secagg
from ..privacy._budget import carry_open_budgets, charge_fit, settle_fit
from ._ledger import (
    DOWNLOAD,
    NO_UPLOAD,
    PER_CLIENT,
    RAW_ROWS,
    SUM_ONLY,
    UPLOAD,
    CommunicationLog,
    Disclosure,
    as_disclosure,
    count_payload,
)
from ._processes import ProcessTransport, resident_workers
from ._protocol import as_step_call, check_collectable, client_step, stream_key
from ._remote import RemoteArray, is_dask_collection, is_remote
from ._rounds import (
    Round,
    masked_rounds,
    refused_rounds,
    releases,
    unnoised_rounds,
)
from ._transport import JoblibTransport, StepFailure, worker_count
from ._validation import check_partitions

__all__ = [
    "ClientData",
    "ClientStepError",
    "ClientValueError",
    "FederatedMixin",
    "Federation",
]

# What a client keeps of its key exchange (skfed.privacy._secure_aggregation's
# namespace): never readable by a step.
_SECRET_NAMESPACE = "secure_aggregation"


class ClientStepError(RuntimeError):
    """A client step raised; the message names the client and the round.

    The original exception is chained as ``__cause__``.

    Attributes
    ----------
    client_id : hashable
        The client that failed.
    round_name : str
        The round it failed in.
    """

    def __init__(self, message, *, client_id=None, round_name=None):
        super().__init__(message)
        self.client_id = client_id
        self.round_name = round_name


class ClientValueError(ClientStepError, ValueError):
    """A client step rejected its input (a ``ValueError`` on one client)."""


class WorkerLostError(RuntimeError):
    """A dask worker holding clients of a fit left the cluster during it,
    or a task of the fit failed in dask (not in a client's step).

    The clients' rows and what they kept between rounds were in that
    worker's memory, so the fit cannot go on with the same model: fit
    again.

    Attributes
    ----------
    workers : list of str
        The addresses of the lost workers.
    client_ids : list
        The clients they held.
    """

    def __init__(self, message, *, workers=(), client_ids=()):
        super().__init__(message)
        self.workers = list(workers)
        self.client_ids = list(client_ids)


def _fingerprint(X):
    """An order-free fingerprint of a client's rows.

    The row hashes (:func:`skfed._numerics._rows.rounded_row_hashes`) are sorted and
    digested with the shape. Reordering rows or renaming the client does not
    change it, and neither does passing the data as float32 instead of
    float64, so a client draws the same random numbers for both.
    """
    return _digest(rounded_row_hashes(X), X.shape)


def _digest(hashes, shape):
    """:func:`_fingerprint` of rows whose rounded hashes are ``hashes``."""
    digest = hashlib.blake2b(np.sort(hashes).tobytes(), digest_size=8)
    digest.update(repr(tuple(int(n) for n in shape)).encode())
    return int.from_bytes(digest.digest(), "little")


class _SetUpThreads:
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
        if namespace == _SECRET_NAMESPACE:
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
        return storage.get(_SECRET_NAMESPACE)

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


class Federation:
    """The clients of one fit and the network between them and the server.

    Use as a context manager so that what serves the clients (a worker pool,
    a dask client) is opened once for every round::

        with Federation.from_arrays(X, y, partitioning, ...) as fed:
            uploads = fed.run_round("local step", local_step, message)

    Parameters
    ----------
    clients : list of ClientData, default=None
        In canonical order, held in this process (a
        :class:`~skfed._engine._transport.JoblibTransport` is built for them).
    transport : transport, default=None
        Where the clients live and their steps run (see
        ``skfed._engine._transport``); replaces ``clients``.
    n_jobs : int, default=None
        For the joblib transport built from ``clients``: passed to
        ``sklearn.utils.parallel.Parallel``; ``None`` lets an enclosing
        ``joblib.parallel_config`` decide.
    verbose : int, default=0
        Print one line per round when positive.
    log : CommunicationLog, default=None
        Ledger to append to; a new one when omitted.
    on_client_error : {"raise", "drop"}, default="raise"
        What a round does when a client step raises, unless the round says
        otherwise (``tolerate``): raise a :class:`ClientStepError`, or drop
        the client from this and every later round.

    Attributes
    ----------
    log : CommunicationLog
    n_samples : int
        N, the rows of all clients at the start of the fit.
    n_features : int
        d, the columns every client's rows have.
    dtype : numpy.dtype
        Of the clients' rows.
    client_ids : list
        Ids of the clients still taking part (failed or dropped clients are
        removed).
    failed_clients : dict
        Client id -> reason (a sentence), for clients that failed or were
        dropped.
    client_errors : dict
        Client id -> the exception its step raised, for the clients in
        ``failed_clients`` that failed (not those dropped by :meth:`drop`).
        Decide on failures by the exception's type, never by the reason's
        text.
    secure_aggregation : bool
        Whether the clients mask the uploads of ``"sum_only"`` rounds with
        pairwise masks (``skfed.privacy._secure_aggregation``); False unless set
        (by ``FederatedMixin._federation`` from the estimator).
    raw_rows : {"allow", "refuse"}
        With "refuse", a round declared ``"raw_rows"`` raises before
        anything is sent.
    """

    secure_aggregation = False
    raw_rows = "allow"
    # The fit's skfed.privacy.Accountant under differential privacy.
    accountant = None

    def __init__(
        self,
        clients=None,
        *,
        transport=None,
        n_jobs=None,
        verbose=0,
        log=None,
        on_client_error="raise",
    ):
        if on_client_error not in ("raise", "drop"):
            raise ValueError(
                f"on_client_error must be 'raise' or 'drop', got {on_client_error!r}."
            )
        if (clients is None) == (transport is None):
            raise ValueError("Pass either clients or a transport.")
        if transport is None:
            transport = JoblibTransport(clients, n_jobs=n_jobs)
        self.transport = transport
        self.client_ids = list(transport.client_ids)
        self._sizes = transport.client_sizes
        self.n_samples = int(sum(self._sizes.values()))
        self.n_features, self.dtype = (
            transport.data_info if self._sizes else (0, np.float64)
        )
        self.failed_clients = {}
        self.client_errors = {}
        self.on_client_error = on_client_error
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.log = CommunicationLog() if log is None else log
        # What sending the clients' rows to one place would upload (X as a
        # dense array), for the ledger's comparison with the raw data.
        raw = self.n_samples * self.n_features
        self.log.add_raw_data(raw, raw * np.dtype(self.dtype).itemsize)
        # Clients that answered a round of the protocol running now, and
        # those of them that failed or were dropped afterwards (see
        # run_protocol).
        self._answered = set()
        self._late_failures = []
        self._record_wire("setup", None)

    @classmethod
    def from_arrays(
        cls,
        X,
        y,
        partitioning,
        *,
        random_state,
        sample_weight=None,
        n_jobs=None,
        verbose=0,
        log=None,
        on_client_error="raise",
        in_processes=True,
        client_config=None,
    ):
        """Cut ``X`` (and ``y``, ``sample_weight``) into clients, once.

        Parameters
        ----------
        X : {ndarray, sparse matrix} of shape (n_samples, n_features)
        y : ndarray of shape (n_samples,) or None
        sample_weight : ndarray of shape (n_samples,), default=None
            Rows of zero weight do not enter the clients' fingerprints, so
            their random streams are those of the clients without them.
        partitioning : Partitioning
            From :func:`skfed._engine._validation.check_partitions`.
        random_state : int or RandomState
            One integer is drawn from it to seed every client's streams.
        n_jobs, verbose, log, on_client_error
            See :class:`Federation`.
        in_processes : bool, default=True
            Whether many small clients may be held by worker processes for
            the fit (see ``skfed._engine._processes``); False keeps them in this
            process, for a protocol whose uploads are large beside the
            clients' work (a worker process sends each upload back as a
            copy).
        client_config : dict, default=None
            Every client's own settings (``ClientData.config``; see
            ``client_config``).
        """
        base = int(check_random_state(random_state).randint(SEED_MAX))
        if sp.issparse(X):
            X = X.tocsr()
        clients = []
        with _SetUpThreads(n_jobs, X.shape[0]) as threads:
            # Each row's hash, once for all clients (a hashing call per
            # client cost 15 of 26 ms of this set-up over 1,000 clients).
            hashes = np.concatenate(
                threads.map(rounded_row_hashes, threads.row_blocks(X))
            )

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
                return rows, weights, _digest(kept, (len(kept), X.shape[1]))

            indices = partitioning.indices
            pieces = threads.map(cut, indices, rows_each=X.shape[0] / len(indices))
        for cid, idx, (Xm, weights, fp) in zip(
            partitioning.client_ids, partitioning.indices, pieces
        ):
            clients.append(
                ClientData(
                    cid,
                    Xm,
                    None if y is None else y[idx],
                    idx,
                    (base, fp & 0xFFFFFFFF, fp >> 32),
                    sample_weight=weights,
                    config=client_config,
                )
            )
        backend, _ = get_active_backend()
        if type(backend).__name__ == "DaskDistributedBackend":
            # Under joblib's dask backend the clients go to the workers once,
            # each to one worker, and every round runs where they are.
            from ._dask import DaskTransport

            return cls(
                transport=DaskTransport.scatter(backend.client, clients),
                verbose=verbose,
                log=log,
                on_client_error=on_client_error,
            )
        sizes = [c.n_samples for c in clients]
        n_workers = resident_workers(n_jobs, sizes) if in_processes else 0
        if n_workers:
            # Many small clients: each worker process receives its clients
            # once and keeps them (see skfed._engine._processes).
            return cls(
                transport=ProcessTransport(clients, n_jobs=n_workers),
                n_jobs=n_jobs,
                verbose=verbose,
                log=log,
                on_client_error=on_client_error,
            )
        return cls(
            clients,
            n_jobs=n_jobs,
            verbose=verbose,
            log=log,
            on_client_error=on_client_error,
        )

    @classmethod
    def from_remote(
        cls,
        X,
        y,
        partitions,
        *,
        random_state,
        input_checks,
        min_samples=1,
        verbose=0,
        log=None,
        on_client_error="raise",
    ):
        """Clients built where ``X`` lives: on the dask workers that hold its
        chunks, or on the Flower nodes that hold it.

        Parameters
        ----------
        X : dask.array.Array or RemoteArray of shape (n_samples, n_features)
        y : dask.array.Array or RemoteArray of shape (n_samples,), or None
        partitions : None or dask.array.Array of shape (n_samples,)
            None: each chunk of rows (each node) is a client; a dask array:
            the client id of each row.
        random_state : RandomState
            One integer is drawn from it to seed every client's streams, as
            in :meth:`from_arrays`, so the same partition gives the same
            model.
        input_checks : dict
            What each client checks on its rows (see
            ``skfed._engine._remote.validate_client_rows``).
        min_samples : int, default=1
        verbose, log, on_client_error
            See :class:`Federation`.
        """
        base = int(check_random_state(random_state).randint(SEED_MAX))
        if isinstance(X, RemoteArray):
            if partitions is not None:
                raise ValueError(
                    "With data on Flower nodes each node is a client; pass "
                    f"partitions=None, got {type(partitions).__name__}."
                )
            transport = X.open_transport(y, seed=base, spec=input_checks)
        else:
            from ._dask import DaskTransport, dask_client

            if partitions is not None and not is_dask_collection(partitions):
                raise ValueError(
                    "With a dask X, partitions must be None (each chunk of rows "
                    "a client), a dask array or series aligned with X, or the "
                    "name of a client column of a dask dataframe; got "
                    f"{type(partitions).__name__}."
                )
            transport = DaskTransport.from_dask(
                dask_client(),
                X,
                y=y,
                partitions=partitions,
                seed=base,
                spec=input_checks,
            )
        small = [c for c, n in transport.client_sizes.items() if n < min_samples]
        if small:
            raise ValueError(
                f"Client(s) {small[:5]} hold fewer than {min_samples} sample(s), "
                "which this estimator needs per client; merge small clients "
                "(e.g. rechunk the dask array) or use fewer clients."
            )
        return cls(
            transport=transport,
            verbose=verbose,
            log=log,
            on_client_error=on_client_error,
        )

    def __enter__(self):
        # The fit's BLAS calls are small: one thread, so that they do not
        # wait for a core another process holds (see skfed._numerics._threads).
        open_fit()
        try:
            self.transport.__enter__()
        except BaseException:
            close_fit()
            raise
        return self

    def __exit__(self, *exc_info):
        try:
            return self.transport.__exit__(*exc_info)
        finally:
            close_fit()

    @property
    def n_clients(self):
        """Number of clients still taking part."""
        return len(self.client_ids)

    @property
    def client_sizes(self):
        """n_m of every client still taking part (public protocol metadata:
        the server learns each client's size)."""
        return np.array([self._sizes[c] for c in self.client_ids])

    def server_map(self, func, items):
        """``[func(item) for item in items]`` for the server's own work, in
        the simulation's threads when its transport has them (see
        ``JoblibTransport.server_map``), else one after another.

        For independent items whose results do not depend on where they
        run (each computed alone, assembled in order).
        """
        mapper = getattr(self.transport, "server_map", None)
        if mapper is None:
            return [func(item) for item in items]
        return mapper(func, items)

    def drop(self, client_ids, reason):
        """Remove clients from every later round (simulated dropout)."""
        for cid in client_ids:
            if cid in self._sizes:
                self.failed_clients[cid] = reason
                self._note_late(cid)
        self.client_ids = [c for c in self.client_ids if c not in self.failed_clients]

    def _note_late(self, cid):
        if cid in self._answered:
            self._late_failures.append(cid)

    def run_protocol(self, protocol, *, random_state):
        """``protocol()``, run again while a client fails after it has
        answered a round, until the clients that took part all finished.

        A client dropped in a later round must not shape the model: its
        earlier uploads (local centers, a cost that set the other clients'
        sample counts, a data scale, critical samples) would otherwise stay
        in what the server computed. The run is repeated without it, from
        the state ``random_state`` had at the first run, so the model is the
        one a fit gives whose failing clients failed in its first round.
        The ledger counts the rounds of every run.

        Parameters
        ----------
        protocol : callable
            Drives the rounds (e.g. ``partial(run_kfed, fed, ...)``). Its
            first round must make each client's kept state afresh.
        random_state : RandomState
            The server's generator (the fit's ``rng``), rewound before a
            rerun.

        Returns
        -------
        result : object
            What the last run of ``protocol`` returned.
        """
        saved = random_state.get_state()
        while True:
            self._answered = set()
            self._late_failures = []
            result = protocol()
            if not self._late_failures:
                return result
            if self.verbose:
                print(
                    f"[skfed] client(s) {self._late_failures[:5]} failed after "
                    "answering: running the protocol again without them",
                    file=sys.stderr,
                )
            if self.accountant is not None:
                # The clients' releases of the first run happened; the
                # rerun's depend on what the server sends without the failed
                # clients, so they are new releases and are counted too.
                warnings.warn(
                    f"Client(s) {self._late_failures[:5]} failed after answering, "
                    "so the protocol runs again without them; under differential "
                    "privacy the rerun's noised releases add to the budget "
                    "spent, which can then exceed the requested epsilon (see "
                    "privacy_spent_).",
                    UserWarning,
                    stacklevel=2,
                )
            random_state.set_state(saved)

    def run_round(
        self,
        name,
        step,
        message=None,
        *,
        messages=None,
        tolerate=None,
        disclosure=None,
    ):
        """One round: the server sends, every client runs ``step``, uploads.

        Parameters
        ----------
        name : Round or str
            The round as its protocol declares it
            (:class:`skfed._engine._rounds.Round`: its name in the ledger
            and what its uploads reveal), or a bare name together with
            ``disclosure`` (toy steps in tests).
        step : callable, functools.partial or str
            A registered client step (:func:`skfed._engine._protocol.client_step`),
            a ``functools.partial`` of one giving keyword options (plain
            data), or its registered name. Only the name and the options
            reach the clients.
        message : object, default=None
            Broadcast to every client (counted once per receiving client).
        messages : sequence, default=None
            One message per client, aligned with ``client_ids``; replaces
            ``message``.
        tolerate : bool, default=None
            If True, a client whose step raises is dropped from this and all
            later rounds and recorded in ``failed_clients`` and
            ``client_errors``; if False its error is raised. None follows
            ``on_client_error``.
        disclosure : {"raw_rows", "per_client", "sum_only"} or Disclosure
            What the uploads reveal to the server
            (``skfed._engine._ledger.Disclosure``), recorded in the ledger with
            the raw rows per client. For ``"sum_only"`` the round returns
            only the sum over clients
            (``skfed.privacy._secure_aggregation.sum_uploads``),
            masked by the clients when ``secure_aggregation`` is on. None
            records the round as undeclared (toy steps in tests).

        Returns
        -------
        uploads : list or sum
            One upload per client that answered, aligned with ``client_ids``
            after the round; for a ``"sum_only"`` round, their sum alone.

        Raises
        ------
        ClientStepError
            When a client step raised and the round does not tolerate it (a
            ``ClientValueError``, also a ``ValueError``, when the client's
            error was a ``ValueError``); always when a client fails in a
            masked round (its masks cannot cancel).
        ValueError
            Before anything is sent, for a ``"raw_rows"`` round when
            ``raw_rows`` is "refuse".
        RuntimeError
            Before anything is sent, under differential privacy, for a round
            whose uploads depend on the rows and declare no noised release.
        """
        if isinstance(name, Round):
            if disclosure is not None:
                raise TypeError(
                    f"Round {name.name!r} is declared: its disclosure comes "
                    "from the declaration, not from the call."
                )
            name, disclosure = name.name, name.disclosure
        disclosure = as_disclosure(disclosure)
        kind = None if disclosure is None else disclosure.kind
        if kind == RAW_ROWS and self.raw_rows == "refuse":
            raise ValueError(
                f"Round {name!r} would send raw rows of the clients' data, "
                "which raw_rows='refuse' forbids."
            )
        call = as_step_call(step)
        empty = disclosure is not None and disclosure.empty
        noised = 0 if disclosure is None else disclosure.noised
        if self.accountant is not None and not (
            empty or noised or (disclosure is not None and disclosure.data_free)
        ):
            # A safety net under the protocols: nothing computed from the
            # rows leaves a client without noise that the accountant counts.
            raise RuntimeError(
                f"Round {name!r} would upload statistics of the clients' rows "
                "without noise, which differential privacy forbids."
            )
        if kind == SUM_ONLY and not empty and not call.sum_only:
            # A client that masks must know, without the server's word, that
            # this step's upload is only ever summed.
            raise RuntimeError(
                f"Round {name!r} is declared sum-only, but its step "
                f"{call.name!r} is not registered as such: register it with "
                "client_step(..., sum_only=True)."
            )
        masked = self.secure_aggregation and kind == SUM_ONLY and not empty
        if masked:
            alive = self._secure_aggregation_keys()
            tolerate = False
        if tolerate is None:
            tolerate = self.on_client_error == "drop"
        ids = list(self.client_ids)
        if messages is None:
            messages = [message] * len(ids)
            # A broadcast is measured once (a Lanczos fit over 1,000 clients
            # broadcasts three million times).
            down = [count_payload(message)] * len(ids)
        elif len(messages) != len(ids):
            raise ValueError(
                f"round {name!r}: {len(messages)} messages for {len(ids)} clients."
            )
        else:
            down = [count_payload(m) for m in messages]
        rnd = self.log.new_round()
        if masked:
            spec = {"round": rnd, "alive": [alive[c] for c in ids]}
            call = call._replace(options={**call.options, secagg.MASK_OPTION: spec})
        forwarded = None
        if disclosure is not None and disclosure.forwarded is not None:
            forwarded = {c: disclosure.forwarded(m) for c, m in zip(ids, messages)}
        if any(f or b for f, b in down):
            self.log.record(
                name,
                DOWNLOAD,
                {c: f for c, (f, _) in zip(ids, down)},
                bytes={c: b for c, (_, b) in zip(ids, down)},
                round=rnd,
                disclosure=kind or "",
                raw_rows=forwarded,
            )
        results = self.transport.run(call, ids, list(messages))
        self._record_wire(name, rnd)
        uploads, up = [], {}
        for cid, result in zip(ids, results):
            if isinstance(result, StepFailure):
                if masked:
                    self._raise(
                        cid,
                        name,
                        result,
                        note=" Under secure aggregation a client that drops "
                        "out of a round leaves its masks in the others' "
                        "uploads, so the sum cannot be recovered.",
                    )
                if not tolerate:
                    self._raise(cid, name, result)
                self.failed_clients[cid] = (
                    f"{type(result.exc).__name__} in round {name!r}: {result.exc}"
                )
                self.client_errors[cid] = result.exc
                self._note_late(cid)
                continue
            uploads.append(result)
            up[cid] = count_payload(result)
        self.client_ids = [c for c in ids if c not in self.failed_clients]
        self._answered.update(self.client_ids)
        if ids and not self.client_ids:
            self._raise_none_left(name)
        if empty and any(u is not None for u in uploads):
            raise RuntimeError(
                f"Round {name!r} is declared to upload nothing, but clients "
                "uploaded something: declare what it reveals."
            )
        rows, recorded = None, kind
        # Counted from what each client sent: a masked upload shows nothing
        # of its client, an unmasked sum-only one all of it.
        if disclosure is not None and disclosure.rows is not None and not masked:
            answered = [c for c in ids if c in up]
            rows = {c: int(disclosure.rows(u)) for c, u in zip(answered, uploads)}
            if kind in (PER_CLIENT, SUM_ONLY) and any(rows.values()):
                recorded = RAW_ROWS  # a statistic that degenerated into rows
        self.log.record(
            name,
            UPLOAD,
            {c: f for c, (f, _) in up.items()},
            bytes={c: b for c, (_, b) in up.items()},
            round=rnd,
            disclosure=recorded or "",
            raw_rows=rows,
            noised=noised,
        )
        if noised and self.accountant is not None:
            self.accountant.register(name, noised)
        if self.verbose:
            print(
                f"[skfed] round {rnd} {name!r}: {len(uploads)} clients, "
                f"up {sum(f for f, _ in up.values()):,} floats, "
                f"down {sum(f for f, _ in down):,} floats",
                file=sys.stderr,
            )
        if masked:
            # The server's step receives the sum, never a masked vector.
            return secagg.unmask_sum(uploads)
        if kind == SUM_ONLY:
            # Added in an order set by their content: renamed clients give
            # the same sum, bit for bit.
            return secagg.sum_uploads(content_sorted(uploads))
        return uploads

    def _secure_aggregation_keys(self):
        """Run the key exchange once per fit (two rounds: each client's
        public key up, all public keys down); the key index of every client
        that took part."""
        keys = getattr(self, "_key_index", None)
        if keys is not None:
            return keys
        ids = list(self.client_ids)
        publics = self.run_round(
            "secure aggregation keys",
            secagg.keys_step,
            tolerate=False,
            disclosure=Disclosure(PER_CLIENT, data_free=True),
        )
        table = np.stack(publics)
        self.run_round(
            "secure aggregation peers",
            secagg.peers_step,
            messages=[(table, i) for i in range(len(ids))],
            tolerate=False,
            disclosure=NO_UPLOAD,
        )
        self._key_index = {c: i for i, c in enumerate(ids)}
        return self._key_index

    def _record_wire(self, name, rnd):
        """Move the bytes the transport measured on its wire, if it does
        (Flower), into the ledger."""
        pending = getattr(self.transport, "pending_wire", None)
        if pending is not None:
            for direction, by_client in pending():
                self.log.record_wire(name, direction, by_client, round=rnd)

    def broadcast(self, name, message):
        """A download with no answer (e.g. the final model)."""
        self.run_round(name, _receive, message, disclosure=NO_UPLOAD)

    @staticmethod
    def _raise(cid, name, failure, note=""):
        exc = failure.exc
        cls = ClientValueError if isinstance(exc, ValueError) else ClientStepError
        raise cls(
            f"Client {cid!r} failed in round {name!r}: {type(exc).__name__}: "
            f"{exc}{note}",
            client_id=cid,
            round_name=name,
        ) from exc

    def _raise_none_left(self, name):
        """Every client has failed or been dropped: no protocol can go on.

        Raised whatever ``tolerate`` says (a model of no client is no
        model), from the first failure's exception.
        """
        errors = list(self.client_errors.items())
        cid, exc = errors[0] if errors else (None, None)
        first = (
            f" The first failure: client {cid!r}: {self.failed_clients[cid]}."
            if errors
            else ""
        )
        cls = ClientValueError if isinstance(exc, ValueError) else ClientStepError
        raise cls(
            f"Every client failed or was dropped by round {name!r} "
            f"({len(self.failed_clients)} client(s)), so there is nothing left "
            "to fit: on_client_error='drop' goes on without failing clients, "
            "not without all of them." + first,
            client_id=cid,
            round_name=name,
        ) from exc

    @property
    def per_row_allowed(self):
        """Whether the server may collect per-row outputs (labels, an
        embedding) from the clients: not under ``raw_rows="refuse"``, nor
        under differential privacy. The clients refuse such a collection
        on their own settings too."""
        return self.raw_rows != "refuse" and self.accountant is None

    def _collect(self, namespace, key):
        """Check a collection on the server before asking the clients (who
        check it again against their own settings); its kind."""
        config = {"raw_rows": self.raw_rows, "private": self.accountant is not None}
        try:
            return check_collectable(namespace, key, config)
        except PermissionError as exc:
            raise ValueError(str(exc)) from None

    def _record_collection(self, namespace, key, kind, values):
        name = _collect_name(namespace, key)
        counts = {c: count_payload(v) for c, v in values.items()}
        self.log.record_collection(
            name,
            kind,
            {c: f for c, (f, _) in counts.items()},
            {c: b for c, (_, b) in counts.items()},
        )
        self._record_wire(name, None)

    def local_results(self, namespace, key=None):
        """Gather something each client keeps, for fitted attributes.

        Only entries a protocol declared collectable
        (``skfed._engine._protocol.collectable``) can be gathered, and only as the
        fit's settings and each client's own allow (never a client's keys;
        no exact per-client statistic under differential privacy). Each
        collection is recorded in the ledger's ``collections``.

        Parameters
        ----------
        namespace : str
            The protocol's client-state key.
        key : str or tuple of str, default=None
            An entry of that state (a dict), or a tuple of entries fetched
            together (one message per client on a remote transport); the
            whole state when None.

        Returns
        -------
        results : dict
            Client id -> value (a tuple for a tuple of keys), for the
            clients still taking part.
        """
        kind = self._collect(namespace, key)
        values = self.transport.local_values(namespace, key, self.client_ids)
        self._record_collection(namespace, key, kind, values)
        return values

    def assemble(self, namespace, key, n_samples, *, fill=-1, dtype=None):
        """Reassemble a per-sample local output in training-sample order.

        For attributes such as ``labels_``: one value per row, collected
        from every client (a declared per-row collection, recorded in the
        ledger's ``collections``). Refused under ``raw_rows="refuse"`` and
        differential privacy (see :attr:`per_row_allowed`), here and by
        each client. Samples of failed clients get ``fill``.

        Raises
        ------
        ValueError
            When the collection is refused.
        """
        kind = self._collect(namespace, key)
        values = self.transport.assemble(
            namespace, key, self.client_ids, n_samples, fill=fill, dtype=dtype
        )
        # Each client sent its rows' values: counted per client.
        rows = {c: int(self._sizes[c]) for c in self.client_ids}
        width = int(np.prod(values.shape[1:])) if values is not None else 1
        itemsize = values.dtype.itemsize if values is not None else 8
        self.log.record_collection(
            _collect_name(namespace, key),
            kind,
            {c: n * width for c, n in rows.items()},
            {c: n * width * itemsize for c, n in rows.items()},
        )
        self._record_wire(_collect_name(namespace, key), None)
        return values


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


def _collect_name(namespace, key):
    keys = () if key is None else key if isinstance(key, tuple) else (key,)
    return f"collect {namespace}" + "".join(f".{k}" for k in keys)


@client_step("federation.receive")
def _receive(client, state, message):
    """Client step that keeps what the server sent."""
    return state, None


class FederatedMixin:
    """Mixin for estimators whose ``fit`` takes ``partitions``.

    Requests ``partitions`` for ``fit`` (and ``partial_fit``) by default, so
    that a ``Pipeline`` or a search routes it when metadata routing is
    enabled. An estimator whose algorithm can go on without a failed client
    has an ``on_client_error`` parameter ({"raise", "drop"}, default
    "raise"), which ``_federation()`` hands to the network, and lists the
    dropped clients in ``failed_clients_``.
    """

    __metadata_request__fit = {"partitions": True}
    __metadata_request__partial_fit = {"partitions": True}

    # Whether a fit over many small clients with n_jobs > 1 may hold them in
    # worker processes (see skfed._engine._processes); False for a protocol whose
    # uploads outweigh the clients' work.
    _clients_in_processes = True

    # What to use instead, named when raw_rows="refuse" or differential
    # privacy refuses a fit with these parameters.
    _raw_rows_alternative = ""
    _private_alternative = ""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # A finite epsilon draws the noise from fresh entropy on the
        # clients: every fit gives another model, whatever random_state is.
        epsilon = getattr(getattr(self, "privacy", None), "epsilon", None)
        if isinstance(epsilon, numbers.Real) and epsilon < float("inf"):
            tags.non_deterministic = True
        return tags

    def _rounds(self):
        """The declared rounds (:class:`skfed._engine._rounds.Round`) a fit
        with these parameters runs, a repeated round once per run, or None
        for an estimator that still answers the older per-estimator hooks.

        The refusals before the first round (``raw_rows``, ``privacy``,
        ``secure_aggregation`` with nothing to mask) and the privacy
        accounting are read from them.
        """
        return None

    def _has_sum_only_rounds(self):
        rounds = self._rounds()
        return True if rounds is None else bool(masked_rounds(rounds))

    _privacy_refusal = ""
    _raw_row_rounds = ()

    def _privacy_releases(self):
        """How many noised releases each client makes in a fit with these
        parameters (see ``skfed.privacy.Accountant``)."""
        rounds = self._rounds()
        if rounds is None:
            raise NotImplementedError
        return releases(rounds)

    def _check_privacy_settings(self):
        """Refuse a fit that would send raw rows against ``raw_rows``, or
        that differential privacy cannot cover, and say when
        ``secure_aggregation`` has nothing to mask, before any round."""
        privacy = check_privacy(getattr(self, "privacy", None))
        rounds = self._rounds()
        name = type(self).__name__
        if rounds is not None:
            unnoised = unnoised_rounds(rounds)
            refused = refused_rounds(rounds)
        else:
            unnoised = ("",) if self._privacy_refusal else ()
            refused = tuple(self._raw_row_rounds)
        if privacy is not None and unnoised:
            if rounds is None:
                reason = self._privacy_refusal
            else:
                reason = (
                    f"round(s) {', '.join(map(repr, unnoised))} upload what "
                    "no noise of bounded sensitivity covers. "
                    f"{self._private_alternative}"
                )
            raise ValueError(
                f"{name} cannot fit under differential privacy with these "
                f"parameters: {reason}".rstrip()
            )
        if getattr(self, "raw_rows", "allow") == "refuse" and refused:
            raise ValueError(
                f"{name} sends rows of X, or uploads that determine them, in "
                f"round(s) {', '.join(map(repr, refused))}, which "
                "raw_rows='refuse' forbids. "
                f"{self._raw_rows_alternative}".rstrip()
            )
        if getattr(self, "secure_aggregation", False) and not (
            self._has_sum_only_rounds()
        ):
            warnings.warn(
                f"secure_aggregation=True has no effect on {name} with these "
                "parameters: none of its rounds uploads only a sum (see "
                "communication_.disclosure()), so there is nothing to mask.",
                UserWarning,
                stacklevel=4,
            )

    def _client_input_checks(self):
        """What each client checks on its rows when the data is a dask
        collection (the in-memory fit's ``validate_data`` arguments)."""
        sparse = self.__sklearn_tags__().input_tags.sparse
        return {
            "accept_sparse": "csr" if sparse else False,
            "dtype": ("float64", "float32"),
        }

    def _remote_fit_input(self, X, y=None, partitions=None, *, reset=True):
        """Prepare remote training data (dask, Flower nodes) without
        computing it.

        A dask dataframe becomes a dask array of its feature columns (a
        ``partitions`` that names one of its columns is that column, which
        is not a feature); ``n_features_in_`` and ``feature_names_in_`` are
        set as ``validate_data`` sets them. The rows are checked later, on
        the clients.

        Returns
        -------
        X, y, partitions : remote arrays (y and partitions may be None)
        """
        if hasattr(X, "columns"):
            if isinstance(partitions, str):
                if partitions not in X.columns:
                    raise ValueError(
                        f"partitions={partitions!r} names no column of X "
                        f"(columns: {list(X.columns)[:10]})."
                    )
                column = partitions
                partitions = X[column]
                X = X.drop(columns=[column])
            # The empty pandas frame dask keeps as metadata carries the
            # column names scikit-learn reads.
            validate_data(self, X._meta, skip_check_array=True, reset=reset)
            X = X.to_dask_array(lengths=True)
        else:
            validate_data(self, X, skip_check_array=True, reset=reset)
        if X.ndim != 2:
            raise ValueError(
                f"Expected 2D data, got a dask array of shape {X.shape}; "
                "reshape it to (n_samples, n_features)."
            )
        for name, value in (("y", y), ("partitions", partitions)):
            if value is None or isinstance(value, str):
                continue
            if not is_remote(value):
                raise ValueError(
                    f"With remote X, {name} must be held where X is (a dask "
                    "array or series aligned with X's rows, or the nodes' "
                    f"own); got {type(value).__name__}."
                )
        # Labels and client ids of a pandas extension dtype (strings) become
        # objects, as NumPy holds them, instead of dask's converting them
        # with a warning.
        if y is not None and hasattr(y, "to_dask_array"):
            y = y if isinstance(y.dtype, np.dtype) else y.astype(object)
            y = y.to_dask_array(lengths=True)
        if partitions is not None and hasattr(partitions, "to_dask_array"):
            if not isinstance(partitions.dtype, np.dtype):
                partitions = partitions.astype(object)
            partitions = partitions.to_dask_array(lengths=True)
        for name, value in (("y", y), ("partitions", partitions)):
            if value is not None and value.shape[0] != X.shape[0]:
                raise ValueError(
                    f"{name} has {value.shape[0]} entries but X has {X.shape[0]} rows."
                )
        return X, y, partitions

    def _federation(
        self,
        X,
        y,
        partitions,
        *,
        random_state,
        sample_weight=None,
        min_samples=1,
        log=None,
    ):
        """Validate ``partitions`` and open the simulated network.

        Parameters
        ----------
        X, y : validated arrays
        partitions : None, int or array-like
            See :func:`skfed._engine._validation.check_partitions`.
        random_state : RandomState
            The fit's generator: used for an int ``partitions`` and to seed
            the clients.
        sample_weight : validated array or None, default=None
            Cut with the data; each client sees its own as
            ``client.sample_weight``.
        min_samples : int, default=1
            Smallest client size the estimator accepts.
        log : CommunicationLog, default=None
            Ledger to continue (``partial_fit``); new when omitted.

        Returns
        -------
        federation : Federation
            Not yet entered; use it in a ``with`` block.
        """
        self._check_privacy_settings()
        fed = self._open_federation(
            X,
            y,
            partitions,
            random_state=random_state,
            sample_weight=sample_weight,
            min_samples=min_samples,
            log=log,
        )
        if y is not None:
            # The labels are raw data too: one per row (8 bytes each).
            fed.log.add_raw_data(fed.n_samples, 8 * fed.n_samples)
        return self._privacy_settings(fed)

    def _client_config(self):
        """Each client's own settings, made part of the client when it is
        made (``ClientData.config``), so that no round can turn them off."""
        return client_config(self)

    def _open_federation(
        self, X, y, partitions, *, random_state, sample_weight, min_samples, log
    ):
        """The network over remote (dask, Flower) or in-memory data."""
        config = self._client_config()
        if is_remote(X):
            if sample_weight is not None:
                raise ValueError(
                    "sample_weight is not supported with remote (dask or "
                    "Flower) data yet; weight the rows before fitting, or fit "
                    "in memory."
                )
            return Federation.from_remote(
                X,
                y,
                partitions,
                random_state=random_state,
                input_checks={**self._client_input_checks(), "client": config},
                min_samples=min_samples,
                verbose=getattr(self, "verbose", 0),
                log=log,
                on_client_error=getattr(self, "on_client_error", "raise"),
            )
        partitioning = check_partitions(
            partitions,
            X.shape[0],
            random_state=random_state,
            min_samples=min_samples,
        )
        return Federation.from_arrays(
            X,
            y,
            partitioning,
            random_state=random_state,
            sample_weight=sample_weight,
            n_jobs=getattr(self, "n_jobs", None),
            verbose=getattr(self, "verbose", 0),
            log=log,
            on_client_error=getattr(self, "on_client_error", "raise"),
            in_processes=self._clients_in_processes,
            client_config=config,
        )

    def _privacy_settings(self, fed):
        """Hand the estimator's ``secure_aggregation`` and ``raw_rows`` to
        the network (off and "allow" for an estimator without them)."""
        fed.secure_aggregation = bool(getattr(self, "secure_aggregation", False))
        fed.raw_rows = getattr(self, "raw_rows", "allow")
        if fed.secure_aggregation and len(fed.client_ids) == 1:
            # The sum of one upload is the upload: the masks cancel on it.
            warnings.warn(
                f"secure_aggregation=True has no effect on {type(self).__name__} "
                "with one client: the sum of one client's uploads is its "
                "upload, which the server then sees. Fit over several "
                "clients, or add privacy=DifferentialPrivacy(...) to protect "
                "that client's rows.",
                UserWarning,
                stacklevel=4,
            )
        privacy = getattr(self, "privacy", None)
        if privacy is not None:
            fed.accountant = Accountant(
                privacy,
                self._privacy_releases(),
                estimator=type(self).__name__,
                n_samples=fed.n_samples,
            )
            # Open PrivacyBudgets are charged before the first round.
            fed.budget_charges = charge_fit(self, privacy)
        return fed

    def _record_privacy(self, fed):
        """Set ``privacy_spent_``: the (epsilon, delta) the fit's noised
        releases spent, from the accountant; None without ``privacy``."""
        accountant = fed.accountant
        self.privacy_spent_ = None if accountant is None else accountant.spent()
        settle_fit(getattr(fed, "budget_charges", ()), self.privacy_spent_)

    def __getstate__(self):
        # Unpickled in another process, a private fit refuses instead of
        # spending outside the PrivacyBudgets open here (skfed.privacy._budget).
        return carry_open_budgets(self, super().__getstate__())
