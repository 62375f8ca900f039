"""The communication ledger: what crossed the simulated network, round by round.

Every message a :class:`~skfed._engine._federation.Federation` delivers is measured
here from the payload itself (array sizes, scalars), never estimated from a
formula, so ``communication_`` on a fitted estimator is the ground truth that
the formulas in the documentation are tested against.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

__all__ = [
    "DISCLOSURES",
    "NO_UPLOAD",
    "PER_CLIENT",
    "RAW_ROWS",
    "SUM_ONLY",
    "CommunicationLog",
    "Disclosure",
    "RoundRecord",
    "count_payload",
]

UPLOAD = "upload"
DOWNLOAD = "download"

# What a round's uploads reveal to the server, in three words shared by the
# ledger, the documentation and the protocols (see doc/privacy.rst):
RAW_ROWS = "raw_rows"  # rows of X or y as they are (counted per client)
PER_CLIENT = "per_client"  # a statistic of one client's rows, seen alone
SUM_ONLY = "sum_only"  # the server receives only the sum over clients
DISCLOSURES = (RAW_ROWS, PER_CLIENT, SUM_ONLY)


class Disclosure(NamedTuple):
    """What a round's uploads reveal, and how to count the raw rows in them.

    Parameters
    ----------
    kind : {"raw_rows", "per_client", "sum_only"}
        ``"raw_rows"``: uploads carry rows of X or y as they are;
        ``"per_client"``: a statistic of one client's rows that the server
        sees individually; ``"sum_only"``: the server step uses only the
        sum over clients, and :meth:`~skfed._engine._federation.Federation.run_round`
        hands it only that sum.
    rows : callable, default=None
        ``rows(upload) -> int``: the rows of X (or samples of y) one upload
        carries as they are, read from the upload's arrays (exact: it is
        what crossed). Required for ``"raw_rows"``; for ``"per_client"`` a
        round whose statistic can degenerate into rows (k-FED's local
        centers of a client with at most k distinct rows) counts them here,
        and the ledger then records the round as ``"raw_rows"``.
    forwarded : callable, default=None
        ``forwarded(message) -> int``: rows of X in one download, which the
        server forwards from the clients that sent them to every client it
        broadcasts them to (disKPCA's representatives, the RKHS model's
        support vectors).
    empty : bool, default=False
        The round uploads nothing (a download the clients keep): recorded
        as ``"sum_only"``, since the server sees nothing of any client, and
        never masked.
    noised : int, default=0
        How many differentially private releases (Gaussian mechanisms at the
        fit's noise multiplier, see ``skfed.privacy``) each client's
        upload holds. Under ``privacy`` the federation registers them with
        the fit's accountant and refuses an upload round that declares none.
    data_free : bool, default=False
        The uploads do not depend on the clients' rows (secure aggregation's
        public keys): allowed un-noised under ``privacy``.
    """

    kind: str
    rows: Callable = None
    forwarded: Callable = None
    empty: bool = False
    noised: int = 0
    data_free: bool = False


def _rows_of_array(upload):
    return int(upload.shape[0])


#: A round that uploads nothing (the server only sends).
NO_UPLOAD = Disclosure(SUM_ONLY, empty=True)


def raw_rows_of(position=None):
    """A ``"raw_rows"`` :class:`Disclosure` whose uploads carry their rows
    as an array, the whole upload or its item at ``position``."""
    if position is None:
        return Disclosure(RAW_ROWS, rows=_rows_of_array)
    return Disclosure(RAW_ROWS, rows=lambda upload: int(upload[position].shape[0]))


def as_disclosure(disclosure):
    """A :class:`Disclosure` from one, a word, or None (undeclared)."""
    if disclosure is None or isinstance(disclosure, Disclosure):
        kind = None if disclosure is None else disclosure.kind
    else:
        kind, disclosure = disclosure, Disclosure(disclosure)
    if kind is not None and kind not in DISCLOSURES:
        raise ValueError(f"A round's disclosure is one of {DISCLOSURES}, got {kind!r}.")
    if kind == RAW_ROWS and disclosure.rows is None:
        raise ValueError(
            "A 'raw_rows' round must say how many rows each upload carries "
            "(Disclosure(RAW_ROWS, rows=...))."
        )
    return disclosure


def count_payload(payload):
    """Count the floats and bytes of one message.

    Parameters
    ----------
    payload : object
        ``None``, a number, a numpy array or scalar, a scipy sparse matrix, a
        string, or a (nested) tuple, list or dict of those.

    Returns
    -------
    n_floats : int
        Numbers carried: array elements, one per Python or numpy scalar
        (a seed counts as one), ``data + indices + indptr`` for a sparse
        matrix. Strings and dict keys carry protocol, not data: zero floats.
    n_bytes : int
        Bytes of the same numbers as they are stored (8 per Python scalar).

    Raises
    ------
    TypeError
        For a payload of any other type, so that nothing crosses the network
        uncounted.
    """
    if payload is None:
        return 0, 0
    if isinstance(payload, np.ndarray):
        return int(payload.size), int(payload.nbytes)
    if sp.issparse(payload):
        payload = payload.tocsr()
        parts = (payload.data, payload.indices, payload.indptr)
        return sum(int(p.size) for p in parts), sum(int(p.nbytes) for p in parts)
    if isinstance(payload, np.generic):
        return 1, int(payload.nbytes)
    if isinstance(payload, (bool, int, float, complex)):
        return 1, 8
    if isinstance(payload, (str, bytes)):
        return 0, len(payload)
    if isinstance(payload, dict):
        payload = list(payload.values())
    if isinstance(payload, (list, tuple)):
        floats = nbytes = 0
        for item in payload:
            f, b = count_payload(item)
            floats += f
            nbytes += b
        return floats, nbytes
    raise TypeError(
        f"Cannot measure a message of type {type(payload).__name__}; send "
        "numpy arrays, sparse matrices, numbers, strings, or tuples/lists/"
        "dicts of those so that the ledger can count them."
    )


@dataclass(frozen=True)
class RoundRecord:
    """One direction of one round: who sent how much.

    Attributes
    ----------
    round : int
        Zero-based index of the round within the fit (a download and the
        upload that answers it share the index).
    name : str
        What the round does, e.g. ``"local centers"`` or ``"lanczos"``.
    direction : {"upload", "download"}
        ``"upload"`` is client to server, ``"download"`` server to client.
    clients : tuple
        Client ids, in the order of the counts below.
    floats : tuple of int
        Floats sent to or by each client.
    bytes : tuple of int
        Bytes sent to or by each client.
    disclosure : str
        What the round's uploads reveal: ``"raw_rows"``, ``"per_client"``
        or ``"sum_only"`` (empty for a record made without one).
    raw_rows : tuple of int
        Rows of X or y each client sent as they are (upload), or received
        from other clients through the server (download); empty when none.
    noised : int
        Differentially private releases in each client's upload (0 for a
        round without noise).
    """

    round: int
    name: str
    direction: str
    clients: tuple
    floats: tuple
    bytes: tuple = field(default=())
    disclosure: str = ""
    raw_rows: tuple = field(default=())
    noised: int = 0

    @property
    def total_raw_rows(self):
        """Raw rows summed over clients."""
        return int(sum(self.raw_rows))

    @property
    def total_floats(self):
        """Floats summed over clients."""
        return int(sum(self.floats))

    @property
    def total_bytes(self):
        """Bytes summed over clients."""
        return int(sum(self.bytes))

    def as_dict(self):
        """This record as a plain dict (one row of a table)."""
        return {
            "round": self.round,
            "name": self.name,
            "direction": self.direction,
            "n_clients": len(self.clients),
            "floats": self.total_floats,
            "floats_per_client_max": max(self.floats, default=0),
            "bytes": self.total_bytes,
            "disclosure": self.disclosure,
            "raw_rows": self.total_raw_rows,
            "noised": self.noised,
        }


class CommunicationLog:
    """Ledger of everything a federated fit sent over the simulated network.

    Every fitted skfed estimator exposes one as ``communication_``. Records
    are appended by the federation as messages are delivered; counts are taken
    from the payloads themselves (see :func:`skfed._engine._ledger.count_payload`).

    Attributes
    ----------
    records : list of RoundRecord
        One record per round and direction, in the order they happened.
    wire_records : list of RoundRecord
        What a transport that measures its messages (Flower) really put on
        the wire, in bytes, per round and direction (round -1: the setup
        before the first round and the collection of what clients keep);
        empty for in-process and dask fits.
    raw_data_floats : int
        Floats of the data the fit's clients held (N x d for X as a dense
        array, plus N for labels): what sending the data to one place would
        upload, recorded by the federation (summed over the fits that
        continued this ledger); 0 when unknown.
    raw_data_bytes : int
        The same data in bytes (X at its dtype's size, 8 bytes per label).
    collections : list of RoundRecord
        What the server collected of the clients' kept state after the
        protocol's rounds, for fitted attributes (round -1, upload): its
        ``disclosure`` is ``"per_row"`` (one value per row: labels, an
        embedding), ``"per_client"`` (an exact statistic per client) or
        ``"public"`` (what the protocol's messages already told the
        server). Not counted in the protocol's totals.

    Examples
    --------
    >>> from skfed import CommunicationLog
    >>> log = CommunicationLog()
    >>> log.record("local centers", "upload", {"a": 30, "b": 30})
    >>> log.upload_floats, log.n_rounds
    (60, 1)
    >>> log.to_records()[0]["floats"]
    60
    """

    # Class defaults: ledgers pickled before the raw data was recorded.
    raw_data_floats = 0
    raw_data_bytes = 0
    collections = ()

    def __init__(self):
        self.records = []
        self.wire_records = []
        self._n_rounds = 0
        self.raw_data_floats = 0
        self.raw_data_bytes = 0
        self.collections = []

    def record_collection(self, name, kind, floats, bytes):
        """Add a collection of what clients keep (see ``collections``):
        ``floats`` and ``bytes`` per client id."""
        clients = tuple(floats)
        self.__dict__.setdefault("collections", []).append(
            RoundRecord(
                -1,
                str(name),
                UPLOAD,
                clients,
                tuple(int(floats[c]) for c in clients),
                tuple(int(bytes[c]) for c in clients),
                disclosure=kind,
            )
        )

    def add_raw_data(self, floats, bytes):
        """Count data the clients hold: ``floats`` (and ``bytes``) that
        sending it to one place would upload, for :attr:`upload_ratio`."""
        self.raw_data_floats += int(floats)
        self.raw_data_bytes += int(bytes)

    @property
    def upload_ratio(self):
        """Floats uploaded over the floats of the raw data (None when the
        raw data is unknown)."""
        if not self.raw_data_floats:
            return None
        return self.upload_floats / self.raw_data_floats

    def new_round(self):
        """Open a new round and return its index."""
        self._n_rounds += 1
        return self._n_rounds - 1

    def record(
        self,
        name,
        direction,
        floats,
        *,
        bytes=None,
        round=None,
        disclosure="",
        raw_rows=None,
        noised=0,
    ):
        """Add what one round sent in one direction.

        Parameters
        ----------
        name : str
            Name of the round.
        direction : {"upload", "download"}
            Client to server, or server to client.
        floats : dict
            Mapping client id -> number of floats sent by (upload) or to
            (download) that client.
        bytes : dict, default=None
            Mapping client id -> bytes; 8 bytes per float when omitted.
        round : int, default=None
            Index of the round; a new round is opened when omitted.
        disclosure : str, default=""
            What the round's uploads reveal (see ``skfed._engine._ledger.Disclosure``).
        raw_rows : dict, default=None
            Mapping client id -> rows of X or y sent by (upload) or
            forwarded to (download) that client; none when omitted.
        noised : int, default=0
            Differentially private releases in each client's upload.
        """
        if direction not in (UPLOAD, DOWNLOAD):
            raise ValueError(
                f"direction must be 'upload' or 'download', got {direction!r}."
            )
        if round is None:
            round = self.new_round()
        clients = self._shared(tuple(floats))
        n_floats = self._shared(tuple(int(floats[c]) for c in clients))
        if bytes is None:
            n_bytes = self._shared(tuple(8 * f for f in n_floats))
        else:
            n_bytes = self._shared(tuple(int(bytes[c]) for c in clients))
        rows = ()
        if raw_rows and any(raw_rows.get(c, 0) for c in clients):
            rows = self._shared(tuple(int(raw_rows.get(c, 0)) for c in clients))
        self.records.append(
            RoundRecord(
                round,
                str(name),
                direction,
                clients,
                n_floats,
                n_bytes,
                str(disclosure or ""),
                rows,
                int(noised),
            )
        )

    def _shared(self, counts):
        """One tuple object for equal per-client tuples: a Lanczos fit over
        1,000 clients records thousands of rounds in which every client
        sends the same count, and a tuple of 1,000 fresh ints each held
        about 0.5 GB over such a fit (pickles share them too)."""
        memo = self.__dict__.setdefault("_memo", {})
        return memo.setdefault(counts, counts)

    def record_wire(self, name, direction, bytes, *, round=None):
        """Add the bytes a transport really put on the wire for one round
        (or for setup, ``round=None``), per client, beside the protocol's
        own counts (a Flower fit records them; in-process fits do not)."""
        if direction not in (UPLOAD, DOWNLOAD):
            raise ValueError(
                f"direction must be 'upload' or 'download', got {direction!r}."
            )
        clients = tuple(bytes)
        self.wire_records.append(
            RoundRecord(
                -1 if round is None else round,
                str(name),
                direction,
                clients,
                tuple(0 for _ in clients),
                tuple(int(bytes[c]) for c in clients),
            )
        )

    @property
    def wire_upload_bytes(self):
        """Bytes the transport put on the wire from clients to the server,
        protocol and setup messages included (0 when it records none)."""
        return self._total(UPLOAD, "total_bytes", self.wire_records)

    @property
    def wire_download_bytes(self):
        """Bytes the transport put on the wire from the server to clients."""
        return self._total(DOWNLOAD, "total_bytes", self.wire_records)

    def _total(self, direction, attr, records=None):
        records = self.records if records is None else records
        return int(sum(getattr(r, attr) for r in records if r.direction == direction))

    @property
    def upload_floats(self):
        """Floats sent by all clients to the server."""
        return self._total(UPLOAD, "total_floats")

    @property
    def download_floats(self):
        """Floats sent by the server to all clients (a broadcast counts once
        per receiving client)."""
        return self._total(DOWNLOAD, "total_floats")

    @property
    def total_floats(self):
        """Floats in both directions."""
        return self.upload_floats + self.download_floats

    @property
    def upload_bytes(self):
        """Bytes sent by all clients to the server."""
        return self._total(UPLOAD, "total_bytes")

    @property
    def download_bytes(self):
        """Bytes sent by the server to all clients."""
        return self._total(DOWNLOAD, "total_bytes")

    @property
    def n_rounds(self):
        """Number of rounds that sent anything, in either direction."""
        return len({r.round for r in self.records})

    @property
    def n_upload_rounds(self):
        """Number of rounds in which clients uploaded something."""
        return len(
            {r.round for r in self.records if r.direction == UPLOAD and r.total_floats}
        )

    def floats_by_name(self, direction=UPLOAD):
        """Total floats per round name, in first-seen order.

        Parameters
        ----------
        direction : {"upload", "download"}, default="upload"

        Returns
        -------
        totals : dict
            Round name -> floats summed over clients and over every round of
            that name.
        """
        totals = {}
        for r in self.records:
            if r.direction == direction:
                totals[r.name] = totals.get(r.name, 0) + r.total_floats
        return totals

    @property
    def raw_rows(self):
        """Rows of X or y that left the clients as they are, in all."""
        return self._total(UPLOAD, "total_raw_rows")

    def raw_rows_by_client(self, direction=UPLOAD):
        """Raw rows per client over the fit.

        Parameters
        ----------
        direction : {"upload", "download"}, default="upload"
            Rows a client sent, or rows of other clients' it received
            through the server.

        Returns
        -------
        rows : dict
            Client id -> rows, for every client that sent (received) any.
        """
        rows = {}
        for r in self.records:
            if r.direction == direction and r.raw_rows:
                for c, n in zip(r.clients, r.raw_rows):
                    if n:
                        rows[c] = rows.get(c, 0) + n
        return rows

    def disclosure(self):
        """What each round revealed to the server, one dict per round.

        Returns
        -------
        rounds : list of dict
            In the order of the rounds that uploaded anything, each with
            ``round``, ``name``, ``disclosure`` (``"raw_rows"``,
            ``"per_client"`` or ``"sum_only"``), ``floats`` (uploaded),
            ``noised`` (differentially private releases per client, 0 for
            a round without noise),
            ``raw_rows`` (client id -> rows of X or y it sent as they are,
            only clients that sent some) and ``forwarded_rows`` (client id
            -> raw rows of other clients it received in that round's
            download).
        """
        down = {r.round: r for r in self.records if r.direction == DOWNLOAD}
        rounds = []
        for r in self.records:
            if r.direction != UPLOAD:
                continue
            d = down.get(r.round)
            rounds.append(
                {
                    "round": r.round,
                    "name": r.name,
                    "disclosure": r.disclosure,
                    "floats": r.total_floats,
                    "noised": r.noised,
                    "raw_rows": {c: n for c, n in zip(r.clients, r.raw_rows) if n},
                    "forwarded_rows": {}
                    if d is None
                    else {c: n for c, n in zip(d.clients, d.raw_rows) if n},
                }
            )
        return rounds

    def to_records(self):
        """The ledger as a list of plain dicts, one per round and direction.

        Ready for ``pandas.DataFrame(log.to_records())``.
        """
        return [r.as_dict() for r in self.records]

    def summary(self):
        """A readable table of the ledger, one line per round name.

        Beside the floats and bytes, each line says what the round's
        uploads revealed (``raw_rows``, ``per_client`` or ``sum_only``;
        several words when rounds of one name differed) and how many rows
        of X or y crossed as they are: sent by the clients (upload) or
        forwarded by the server to other clients (download). Then the
        uploads against the raw data, when the ledger knows it, and the raw
        rows each client sent. A round in which the clients sent nothing
        shows its download line only.
        """
        rows = {}
        for r in self.records:
            key = (r.name, r.direction)
            count, floats, n_bytes, kinds, raw = rows.get(key, (0, 0, 0, (), 0))
            kind = r.disclosure + (" noised" if r.noised else "")
            if r.direction == UPLOAD and kind not in kinds:
                kinds = kinds + (kind,)
            raw += r.total_raw_rows
            rows[key] = (
                count + 1,
                floats + r.total_floats,
                n_bytes + r.total_bytes,
                kinds,
                raw,
            )
        width = max([len(name) for name, _ in rows] + [5])
        lines = [
            f"{'round':<{width}}  {'direction':<9}  {'times':>5}  {'floats':>12}"
            f"  {'bytes':>13}  {'raw rows':>8}  disclosure"
        ]
        for (name, direction), (count, floats, n_bytes, kinds, raw) in rows.items():
            if direction == UPLOAD and not (floats or n_bytes or raw):
                # A round in which the server only sends: an upload line of
                # zeros would read as if the clients had sent something.
                continue
            shown = "/".join(k or "undeclared" for k in kinds)
            lines.append(
                f"{name:<{width}}  {direction:<9}  {count:>5}  {floats:>12,}"
                f"  {n_bytes:>13,}  {raw:>8,}  {shown}".rstrip()
            )
        lines.append(
            f"{'total':<{width}}  {'up':<9}  {'':>5}  {self.upload_floats:>12,}"
            f"  {self.upload_bytes:>13,}  {self.raw_rows:>8,}"
        )
        lines.append(
            f"{'':<{width}}  {'down':<9}  {'':>5}  {self.download_floats:>12,}"
            f"  {self.download_bytes:>13,}"
        )
        lines.append(f"{self.n_rounds} rounds, {self.n_upload_rounds} with uploads")
        if self.raw_data_floats:
            lines.append(
                f"uploads = {self.upload_ratio:.3g}x the raw data "
                f"({self.raw_data_floats:,} floats, {self.raw_data_bytes:,} bytes)"
            )
        by_client = self.raw_rows_by_client()
        if by_client:
            shown = ", ".join(f"{c!r}: {n:,}" for c, n in list(by_client.items())[:10])
            more = f" and {len(by_client) - 10} more" if len(by_client) > 10 else ""
            lines.append(f"raw rows sent per client: {shown}{more}")
        else:
            lines.append("no raw rows left any client")
        return "\n".join(lines)

    def __repr__(self):
        return (
            f"CommunicationLog(n_rounds={self.n_rounds}, "
            f"upload_floats={self.upload_floats:,}, "
            f"download_floats={self.download_floats:,})"
        )

    def __len__(self):
        return len(self.records)

    def __iter__(self):
        return iter(self.records)
