"""What the server may gather, after the rounds, of what the clients keep.

A protocol declares the entries of its clients' state the server may
collect (``skfed._engine._protocol.collectable``); the server checks a
collection against the fit's settings before asking, each client checks it
again against its own (``skfed._engine._protocol.check_collectable``), and
every collection is recorded in the ledger's ``collections``.
"""

import numpy as np

from ._ledger import count_payload
from ._protocol import check_collectable

__all__ = ["Collections"]


class Collections:
    """The collections of a :class:`~skfed._engine._federation.Federation`
    (its base class): per-client values for fitted attributes, and per-row
    outputs reassembled in training-sample order."""

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


def _collect_name(namespace, key):
    keys = () if key is None else key if isinstance(key, tuple) else (key,)
    return f"collect {namespace}" + "".join(f".{k}" for k in keys)
