"""The network of one fit: its clients, the rounds, and the ledger.

Client steps are module-level functions registered by name
(:func:`skfed._engine._protocol.client_step`)::

    @client_step("myalgo.local")
    def step(client, state, message, **options):
        ...
        return new_state, upload

``client`` is the client's own data (:class:`~skfed._engine._client.ClientData`),
``state`` what the same client kept under the step's namespace in earlier
rounds (``None`` at first) and ``message`` what the server sent it.
``new_state`` stays on the client; ``upload`` goes to the server and is
measured by the ledger. Server steps are plain functions of uploads: they
never see a ``ClientData``, which is the privacy boundary of the code.

Where the clients live and their steps run is the federation's transport
(``skfed._engine._transports``); by default one reused
``sklearn.utils.parallel.Parallel`` pool serves all rounds, so the backend
(sequential, threads, loky, dask) is chosen by ``n_jobs`` and any enclosing
``joblib.parallel_config``.

A round (:meth:`Federation.run_round`) is a short sequence of named steps:
the refusals before anything is sent (raw rows, un-noised statistics under
differential privacy), the masking of a sum-only round under secure
aggregation, the ledger, the failure policy, and the sum the server's step
receives. The estimator side, which opens a federation for a fit, is
:class:`skfed._engine._estimator.FederatedMixin`.
"""

import sys
import warnings

import numpy as np
from sklearn.utils import check_random_state

from .._numerics._reduce import content_sorted
from .._numerics._seeds import SEED_MAX
from .._numerics._threads import close_fit, open_fit
from ..privacy import _secure_aggregation as secagg
from ._client import ClientData, client_config, cut_clients
from ._collections import Collections
from ._errors import ClientStepError, ClientValueError, WorkerLostError
from ._ledger import (
    DOWNLOAD,
    NO_UPLOAD,
    PER_CLIENT,
    RAW_ROWS,
    SUM_ONLY,
    UPLOAD,
    CommunicationLog,
    as_disclosure,
    count_payload,
)
from ._protocol import as_step_call, client_step
from ._rounds import Round
from ._secure_aggregation import (
    exchange_keys,
    masked_call,
    masked_messages,
    round_keys,
    unmask,
)
from ._transports import make_transport, remote_transport
from ._transports._common import StepFailure
from ._transports._joblib import JoblibTransport

__all__ = [
    "ClientData",
    "ClientStepError",
    "ClientValueError",
    "Federation",
    "WorkerLostError",
    "client_config",
]


class Federation(Collections):
    """The clients of one fit and the network between them and the server.

    Use as a context manager so that what serves the clients (a worker pool,
    a dask client) is opened once for every round::

        with Federation.from_arrays(X, y, partitioning, ...) as fed:
            uploads = fed.run_round("local step", local_step, message)

    Parameters
    ----------
    clients : list of ClientData, default=None
        In canonical order, held in this process (a
        :class:`~skfed._engine._transports._joblib.JoblibTransport` is built for them).
    transport : transport, default=None
        Where the clients live and their steps run (see
        ``skfed._engine._transports._common``); replaces ``clients``.
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
        otherwise (``tolerate``): raise a :class:`~skfed.ClientStepError`, or drop
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
    secure_aggregation_threshold : float
        A client's round key (it dropped out of a masked round) or
        self-mask seed (it answered) is rebuilt from more than this
        fraction of the k + 1 shares it made, one per neighbour on the
        round's ring and its own
        (``skfed.privacy._secure_aggregation.share_threshold``); 0.5 (a
        majority) unless set, which every estimator's fit uses. Fewer
        shares fail the round before anything of it is released. Higher
        tolerates fewer dropouts; clients refuse below 0.5, where a server
        could collect shares of both secrets of one client.
    raw_rows : {"allow", "refuse"}
        With "refuse", a round declared ``"raw_rows"`` raises before
        anything is sent.
    """

    secure_aggregation = False
    secure_aggregation_threshold = secagg.DEFAULT_THRESHOLD
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

        The transport is ``skfed._engine._transports.make_transport``'s
        choice.

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
            the fit (see ``skfed._engine._transports._processes``); False
            keeps them in this process, for a protocol whose uploads are
            large beside the clients' work (a worker process sends each
            upload back as a copy).
        client_config : dict, default=None
            Every client's own settings (``ClientData.config``; see
            ``client_config``).
        """
        seed = int(check_random_state(random_state).randint(SEED_MAX))
        clients = cut_clients(
            X,
            y,
            partitioning,
            seed=seed,
            sample_weight=sample_weight,
            n_jobs=n_jobs,
            config=client_config,
        )
        return cls(
            transport=make_transport(clients, n_jobs=n_jobs, in_processes=in_processes),
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
            ``skfed._engine._client.validate_client_rows``).
        min_samples : int, default=1
        verbose, log, on_client_error
            See :class:`Federation`.
        """
        seed = int(check_random_state(random_state).randint(SEED_MAX))
        transport = remote_transport(X, y, partitions, seed=seed, spec=input_checks)
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
            error was a ``ValueError``); when a client fails in a masked
            round and too few of its neighbours answer the recovery for its
            masks to be rebuilt.
        ValueError
            Before anything is sent, for a ``"raw_rows"`` round when
            ``raw_rows`` is "refuse".
        RuntimeError
            Before anything is sent, under differential privacy, for a round
            whose uploads depend on the rows and declare no noised release.
        """
        name, disclosure = _declared(name, disclosure)
        kind = None if disclosure is None else disclosure.kind
        self._refuse_raw_rows(name, kind)
        call = as_step_call(step)
        self._require_noise(name, disclosure)
        _check_sum_only_step(name, kind, disclosure, call)
        masked = self.secure_aggregation and kind == SUM_ONLY and not disclosure.empty
        if tolerate is None:
            tolerate = self.on_client_error == "drop"
        if masked:
            setup = self._masked_round_keys(name, tolerate)
        ids = list(self.client_ids)
        messages, down = _sent(name, ids, message, messages)
        # Rows a message forwards are counted from the protocol's message.
        forwards = messages
        if masked:
            # Each client's message carries its neighbours' round keys.
            messages = masked_messages(setup, list(messages))
            call = masked_call(call, setup)
            down = [count_payload(m) for m in messages]
        rnd = self.log.new_round()
        self._record_download(name, rnd, kind, disclosure, ids, forwards, down)
        results = self.transport.run(call, ids, list(messages))
        self._record_wire(name, rnd)
        # A client that answered only rounds of no data (keys, shares) has
        # shaped nothing: failing later, it needs no rerun.
        shaped = disclosure is None or not (disclosure.data_free or disclosure.empty)
        uploads, up = self._answers(
            name, ids, results, tolerate=tolerate, shaped=shaped
        )
        _check_declared_empty(name, disclosure, uploads)
        self._record_upload(name, rnd, kind, disclosure, ids, uploads, up, masked)
        self._report(rnd, name, len(uploads), up, down)
        correction = None
        if masked and len(setup["alive"]) > 1 and any(u is not None for u in uploads):
            secagg.check_masked(uploads)
            # The self-masks, and the masks the answered vectors share with
            # clients that dropped out, do not cancel: rebuild and remove
            # them before anything is released.
            correction = unmask(
                self,
                name,
                setup,
                self._key_index,
                self.secure_aggregation_threshold,
                next(u for u in uploads if u is not None)["masked"].size,
                honest=getattr(self.accountant, "honest", None),
            )
        return _server_view(uploads, kind, masked, correction)

    # -- the steps of a round (run_round) ---------------------------------

    def _refuse_raw_rows(self, name, kind):
        """Refuse, before anything is sent, a round declared to send raw
        rows under ``raw_rows="refuse"``."""
        if kind == RAW_ROWS and self.raw_rows == "refuse":
            raise ValueError(
                f"Round {name!r} would send raw rows of the clients' data, "
                "which raw_rows='refuse' forbids."
            )

    def _require_noise(self, name, disclosure):
        """The safety net under the protocols: under differential privacy,
        nothing computed from the rows leaves a client without noise that
        the accountant counts."""
        if self.accountant is None:
            return
        if disclosure is not None and (
            disclosure.empty or disclosure.noised or disclosure.data_free
        ):
            return
        raise RuntimeError(
            f"Round {name!r} would upload statistics of the clients' rows "
            "without noise, which differential privacy forbids."
        )

    def _record_download(self, name, rnd, kind, disclosure, ids, messages, down):
        """What the server sends, per client, in the ledger (nothing when
        the round sends nothing)."""
        if not any(f or b for f, b in down):
            return
        forwarded = None
        if disclosure is not None and disclosure.forwarded is not None:
            forwarded = {c: disclosure.forwarded(m) for c, m in zip(ids, messages)}
        self.log.record(
            name,
            DOWNLOAD,
            {c: f for c, (f, _) in zip(ids, down)},
            bytes={c: b for c, (_, b) in zip(ids, down)},
            round=rnd,
            disclosure=kind or "",
            raw_rows=forwarded,
        )

    def _answers(self, name, ids, results, *, tolerate, shaped=True):
        """The failure policy: the uploads of the clients that answered and
        their sizes (client id -> (floats, bytes)); a client that failed
        raises, or is dropped from this and every later round. ``shaped``:
        the uploads depend on the clients' data (a client that fails after
        such a round makes the protocol run again, ``run_protocol``)."""
        uploads, up = [], {}
        for cid, result in zip(ids, results):
            if isinstance(result, StepFailure):
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
        if shaped:
            self._answered.update(self.client_ids)
        if ids and not self.client_ids:
            self._raise_none_left(name)
        return uploads, up

    def _record_upload(self, name, rnd, kind, disclosure, ids, uploads, up, masked):
        """What the clients uploaded, in the ledger with the raw rows it
        holds, and the noised releases in the accountant."""
        rows, recorded = None, kind
        # Counted from what each client sent: a masked upload shows nothing
        # of its client, an unmasked sum-only one all of it.
        if disclosure is not None and disclosure.rows is not None and not masked:
            answered = [c for c in ids if c in up]
            rows = {c: int(disclosure.rows(u)) for c, u in zip(answered, uploads)}
            if kind in (PER_CLIENT, SUM_ONLY) and any(rows.values()):
                recorded = RAW_ROWS  # a statistic that degenerated into rows
        noised = 0 if disclosure is None else disclosure.noised
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
            self.accountant.register(name, noised, shared=masked)

    def _report(self, rnd, name, n_answered, up, down):
        """One line per round at ``verbose`` > 0."""
        if self.verbose:
            print(
                f"[skfed] round {rnd} {name!r}: {n_answered} clients, "
                f"up {sum(f for f, _ in up.values()):,} floats, "
                f"down {sum(f for f, _ in down):,} floats",
                file=sys.stderr,
            )

    def _masked_round_keys(self, name, tolerate):
        """The keys of the next masked round (:func:`round_keys`), after
        the fit's key exchange, run once (:func:`exchange_keys`)."""
        if getattr(self, "_key_index", None) is None:
            self._key_index = exchange_keys(self)
        self._masked_rounds = getattr(self, "_masked_rounds", 0) + 1
        return round_keys(
            self,
            self._key_index,
            self._masked_rounds,
            self.secure_aggregation_threshold,
            tolerate,
            honest=getattr(self.accountant, "honest", None),
            name=name,
        )

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


def _declared(name, disclosure):
    """The round's name and its disclosure (a ``Disclosure`` or None), from
    a declared :class:`~skfed._engine._rounds.Round` or a bare name with a
    ``disclosure``."""
    if isinstance(name, Round):
        if disclosure is not None:
            raise TypeError(
                f"Round {name.name!r} is declared: its disclosure comes "
                "from the declaration, not from the call."
            )
        name, disclosure = name.name, name.disclosure
    return name, as_disclosure(disclosure)


def _check_sum_only_step(name, kind, disclosure, call):
    """A client that masks must know, without the server's word, that the
    step of a sum-only round uploads only what is summed: it must be
    registered so."""
    if kind == SUM_ONLY and not disclosure.empty and not call.sum_only:
        raise RuntimeError(
            f"Round {name!r} is declared sum-only, but its step "
            f"{call.name!r} is not registered as such: register it with "
            "client_step(..., sum_only=True)."
        )


def _sent(name, ids, message, messages):
    """Each client's message and its size (floats, bytes)."""
    if messages is None:
        # A broadcast is measured once (a Lanczos fit over 1,000 clients
        # broadcasts three million times).
        return [message] * len(ids), [count_payload(message)] * len(ids)
    if len(messages) != len(ids):
        raise ValueError(
            f"round {name!r}: {len(messages)} messages for {len(ids)} clients."
        )
    return messages, [count_payload(m) for m in messages]


def _check_declared_empty(name, disclosure, uploads):
    if (
        disclosure is not None
        and disclosure.empty
        and any(u is not None for u in uploads)
    ):
        raise RuntimeError(
            f"Round {name!r} is declared to upload nothing, but clients "
            "uploaded something: declare what it reveals."
        )


def _server_view(uploads, kind, masked, correction=None):
    """What the server's step receives of the uploads: their sum alone for
    a sum-only round, else the list."""
    if masked:
        # The sum, never a masked vector.
        return secagg.unmask_sum(uploads, correction)
    if kind == SUM_ONLY:
        # Added in an order set by their content: renamed clients give
        # the same sum, bit for bit.
        return secagg.sum_uploads(content_sorted(uploads))
    return uploads


@client_step("federation.receive")
def _receive(client, state, message):
    """Client step that keeps what the server sent."""
    return state, None
