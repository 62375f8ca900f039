"""The server's view of the Flower nodes a grid reaches: their data and the
transport that runs the rounds on them.

:class:`NodeData` stands for the training data of the nodes: it asks each
node for its size once, and hands the estimator ``X`` (and ``y``) that
``fit`` accepts like a dask array, without any row leaving its node.
Opening the fit builds a :class:`FlowerTransport` under the estimator's
:class:`~skfed._engine._federation.Federation`: every round of the
protocol is one ``query.skfed`` message per node, answered by the ClientApp of
:mod:`skfed.flower._client`.
"""

import time

import numpy as np
from flwr.app import Message

from .._engine._protocol import resolve_step
from .._engine._remote import RemoteArray
from .._engine._transports._common import StepFailure, assembled
from .._engine._validation import canonical_order
from .._numerics._threads import round_uses_process_threads
from ._client import ACTION
from ._records import from_records, to_records, wire_bytes

__all__ = ["FlowerTransport", "NodeData", "locate_rows"]

_MESSAGE_TYPE = f"query.{ACTION}"
# Seconds between polls for a round's replies: from _MIN_POLL, growing by
# half each time up to _MAX_POLL, so that short rounds (simulation, the
# many rounds of Lanczos) are not slowed and long ones poll a deployed
# SuperLink a few times a second at most.
_MIN_POLL = 0.005
_MAX_POLL = 0.25
# Seconds between checks that the nodes a round waits for are connected.
_NODE_CHECK = 1.0
# A node still silent once the round has lasted this many times what the
# nodes that answered took (per row of its own against theirs), and at
# least ``straggler_timeout`` seconds, is taken as lost: nodes run the same
# step on their own rows, so a live node is rarely this far behind, and a
# node killed outright stays in Flower's connected nodes for about a minute.
_STRAGGLER_FACTOR = 4.0
# A SuperNode (Flower 1.42) sends its next heartbeat at most 0.9 x (its
# heartbeat interval - 5 s) after the last one, each call taking under 5 s;
# the SuperLink pushes the node's ``online_until`` forward at each. One
# that has not moved for (interval - _HEARTBEAT_SLACK) seconds means a
# missed heartbeat; Flower itself waits for two intervals.
_HEARTBEAT_SLACK = 5.0


class NodeData:
    """The training data held by the Flower nodes of a grid.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
        The grid a ServerApp's ``main`` receives.
    n_nodes : int
        How many nodes hold the data; waits until that many are connected.
    timeout : float, default=600.0
        Seconds to wait for the nodes to connect and answer a first message
        (which installs the app on a deployed node).
    round_timeout : float, default=60.0
        Seconds to wait for the nodes' answers in each round (a deployed
        node starts a ClientApp process for each message: several seconds
        on a busy machine). A node that has not answered by then, or that
        leaves the grid's nodes or gets an error from Flower before, fails
        the round; the error names the node and its client. Raise it for
        rounds that take long on the nodes (large sites).
    straggler_timeout : float or None, default=20.0
        Once some node of a round has answered and the round has lasted
        ``straggler_timeout`` seconds, a node still silent is taken as lost,
        and fails the round as above, when it has missed a heartbeat to
        the SuperLink (its ``online_until`` in ``grid.get_nodes()`` has not
        moved for its heartbeat interval less 5 s: 25 s with Flower 1.42),
        or when the round has lasted 4 times what the answered nodes took
        (scaled by its rows against theirs). This is how a SuperNode killed
        outright (its machine gone) is noticed within about 25 s: Flower
        drops it from the connected nodes only when it has missed two
        heartbeats, 40 to 60 s after its end. None: wait up to
        ``round_timeout``.

    Attributes
    ----------
    X : RemoteArray of shape (n_samples, n_features)
        Pass to an estimator's ``fit`` in place of an array.
    y : RemoteArray of shape (n_samples,) or None
        The nodes' labels, when every node holds some.
    client_ids : list
        The nodes' client ids (their ``partition-id`` by default), sorted:
        the order of the clients, as ``partitions`` ids order them in
        memory.
    client_sizes : dict
        Client id -> number of rows (public protocol metadata).
    first_rows : dict
        Client id -> the index of its node's first row in the fit's sample
        indices: sample ``first_rows[c] + i`` is row ``i`` of client ``c``'s
        node, as if the nodes' rows were stacked in client order. Fitted
        attributes that hold sample indices (the RKHS classifier's
        ``support_`` and ``sent_samples_``) use these; see
        :meth:`locate`.
    node_ids : dict
        Client id -> the Flower node id that holds it.
    """

    def __init__(
        self,
        grid,
        *,
        n_nodes,
        timeout=600.0,
        round_timeout=60.0,
        straggler_timeout=20.0,
    ):
        self.grid = grid
        self.timeout = timeout
        self.round_timeout = round_timeout
        self.straggler_timeout = straggler_timeout
        self._rows = {}
        # Node id -> (its online_until, heartbeat interval, when this
        # process first saw that online_until), from grid.get_nodes().
        self._beats = {}
        self._wire = []
        self._group = 0
        nodes = self._wait_for(n_nodes)
        # The first message to a node installs the app there and starts its
        # first ClientApp: part of connecting, so under `timeout`.
        answers = self._exchange(
            {n: {"op": "describe"} for n in nodes}, by="node", wait=self.timeout
        )
        failed = {n: a for n, a in answers.items() if isinstance(a, StepFailure)}
        if failed:
            node, failure = next(iter(failed.items()))
            raise RuntimeError(
                f"Node {node} could not describe its data: {failure.exc}"
            ) from failure.exc
        self._node_of = {}
        for node, info in answers.items():
            cid = info["client_id"]
            if cid in self._node_of:
                raise ValueError(
                    f"Two nodes say they are client {cid!r}; give each node its "
                    "own partition-id (--node-config) or client_id function."
                )
            self._node_of[cid] = node
        self.client_ids = canonical_order(self._node_of)
        self.node_ids = {c: self._node_of[c] for c in self.client_ids}
        # The describe messages went out before the ids were known.
        client_of = {node: cid for cid, node in self._node_of.items()}
        self._wire = [
            (direction, {client_of[n]: b for n, b in by_node.items()})
            for direction, by_node in self._wire
        ]
        info = {c: answers[self._node_of[c]] for c in self.client_ids}
        self.client_sizes = {c: info[c]["n_samples"] for c in self.client_ids}
        self._rows = {self._node_of[c]: n for c, n in self.client_sizes.items()}
        sizes = [self.client_sizes[c] for c in self.client_ids]
        self.first_rows = dict(
            zip(self.client_ids, np.cumsum([0] + sizes[:-1]).tolist())
        )
        widths = {info[c]["n_features"] for c in self.client_ids}
        if len(widths) != 1 or -1 in widths:
            raise ValueError(
                "The nodes' data must be 2-D with the same number of features; "
                f"got {sorted(widths)} feature(s) across nodes."
            )
        n_samples = sum(self.client_sizes.values())
        dtype = np.result_type(*(np.dtype(info[c]["dtype"]) for c in info))
        self.X = _NodeArray(self, "X", (n_samples, widths.pop()), dtype)
        with_y = [info[c]["has_y"] for c in self.client_ids]
        if any(with_y) and not all(with_y):
            missing = [c for c, h in zip(self.client_ids, with_y) if not h]
            raise ValueError(f"Client(s) {missing[:5]} hold no labels; others do.")
        self.y = _NodeArray(self, "y", (n_samples,), None) if all(with_y) else None

    def locate(self, indices):
        """The node and row of each sample index of a fit on this data.

        Parameters
        ----------
        indices : array-like of int
            Sample indices, e.g. a fitted classifier's ``support_``.

        Returns
        -------
        client_ids : list
            The client (node) that holds each sample.
        rows : ndarray of int
            Its row in that node's data.
        """
        return locate_rows(self.client_sizes, indices, self.client_ids)

    def _wait_for(self, n_nodes):
        deadline = time.monotonic() + self.timeout
        while True:
            nodes = sorted(self.grid.get_node_ids())
            if len(nodes) >= n_nodes:
                return nodes
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{len(nodes)} of {n_nodes} Flower nodes connected within "
                    f"{self.timeout} s."
                )
            time.sleep(0.05)

    def _exchange(self, requests, *, by="client", wait=None):
        """One message to each addressee, their answers; never raises for a
        node's error (it becomes a ``StepFailure`` naming the node).

        Parameters
        ----------
        requests : dict
            Client id (or node id, ``by="node"``) -> request payload.
        wait : float, default=None
            Seconds to wait for the answers; ``round_timeout`` when None.

        Returns
        -------
        answers : dict
            Same keys -> the node's answer (a dict) or a ``StepFailure``.
        """
        node_of = self._node_of if by == "client" else {n: n for n in requests}
        key_of = {node_of[k]: k for k in requests}
        self._group += 1
        messages = [
            Message(
                to_records(payload),
                dst_node_id=node_of[key],
                message_type=_MESSAGE_TYPE,
                group_id=str(self._group),
            )
            for key, payload in requests.items()
        ]
        down = {key_of[m.metadata.dst_node_id]: wire_bytes(m) for m in messages}
        # The first exchange (installing the app, starting the nodes' first
        # ClientApps) is too uneven across nodes to judge stragglers by.
        straggler = self.straggler_timeout if wait is None else None
        wait = self.round_timeout if wait is None else wait
        replies, lost = self._send_and_receive(messages, wait, straggler)
        answers, up = {}, {}
        for node, exc in lost.items():
            answers[key_of[node]] = StepFailure(exc, "")
        for node, reply in replies:
            # The node the message went to: Flower's own error replies (a
            # node it knows is gone) come from the SuperLink's node id.
            key = key_of[node]
            up[key] = wire_bytes(reply)
            if reply.has_error():
                exc = RuntimeError(
                    f"node {node}: Flower error (code {reply.error.code}): "
                    f"{reply.error.reason}"
                )
                answers[key] = StepFailure(exc, "")
                continue
            answer = from_records(reply.content)
            error = answer.get("error")
            answers[key] = answer if error is None else _failure(error, node)
        if None not in down.values() and None not in up.values():
            self._wire += [("download", down), ("upload", up)]
        return answers

    def _send_and_receive(self, messages, wait, straggler=None):
        """Push the messages, then poll for their replies until all came,
        a node left the grid or straggles (``straggler`` seconds, see the
        class), or the round timed out.

        Flower's own ``send_and_receive`` waits 3 s between polls of a
        deployed SuperLink, and only gives up at its timeout. Polling here
        starts at a few milliseconds and backs off to ``_MAX_POLL``, and
        checks every ``_NODE_CHECK`` s that the nodes still waited for are
        connected and not straggling.

        Returns
        -------
        replies : list of (int, Message)
            The node each message went to, and its reply.
        lost : dict
            Node id -> the exception saying why its reply will not come.
        """
        ids = list(self.grid.push_messages(messages))
        pending, lost = {}, {}
        for message, message_id in zip(messages, ids):
            node = message.metadata.dst_node_id
            if message_id:
                pending[message_id] = node
            else:
                lost[node] = RuntimeError(
                    f"node {node}: Flower did not accept the message for it"
                )
        replies = []
        # Seconds each answered node took.
        took = {}
        start = time.monotonic()
        checked, pause = start, _MIN_POLL
        while pending:
            for reply in self.grid.pull_messages(list(pending)):
                node = pending.pop(reply.metadata.reply_to_message_id, None)
                if node is not None:
                    replies.append((node, reply))
                    took[node] = time.monotonic() - start
            now = time.monotonic()
            if not pending:
                break
            if now - start >= wait:
                for node in pending.values():
                    lost[node] = TimeoutError(
                        f"node {node} sent no answer within {wait} s"
                    )
                break
            if now - checked >= _NODE_CHECK:
                checked = now
                connected = self._connected(now)
                for message_id, node in list(pending.items()):
                    if node not in connected:
                        del pending[message_id]
                        lost[node] = ConnectionError(
                            f"node {node} left the federation before answering"
                        )
                    elif straggler is not None and took and now - start >= straggler:
                        quiet = self._heartbeat_missed(node, now)
                        limit = self._straggler_limit(node, took, straggler)
                        if quiet is not None or now - start >= limit:
                            del pending[message_id]
                            why = (
                                f" and sent Flower no heartbeat for {quiet:.0f} s"
                                if quiet is not None
                                else ""
                            )
                            lost[node] = ConnectionError(
                                f"node {node} is taken as lost: no answer "
                                f"{now - start:.0f} s into the round, when the "
                                f"other {len(took)} answered within "
                                f"{max(took.values()):.1f} s{why} (killed, cut "
                                f"off or overloaded; straggler_timeout="
                                f"{straggler} s)"
                            )
            time.sleep(pause)
            pause = min(pause * 1.5, _MAX_POLL)
        return replies, lost

    def _connected(self, now):
        """The grid's connected node ids; notes when each node's heartbeat
        last moved its ``online_until`` (``now``: ``time.monotonic()``)."""
        get_nodes = getattr(self.grid, "get_nodes", None)
        if get_nodes is None:
            return set(self.grid.get_node_ids())
        connected = set()
        for info in get_nodes():
            node = info.node_id
            connected.add(node)
            until = getattr(info, "online_until", None)
            interval = getattr(info, "heartbeat_interval", None)
            if not until or not interval:
                continue
            kept = self._beats.get(node)
            if kept is None or kept[0] != until:
                self._beats[node] = (until, interval, now)
        return connected

    def _heartbeat_missed(self, node, now):
        """Seconds since the node's last heartbeat was seen, when it has
        missed one since; else None (or when the grid does not say)."""
        kept = self._beats.get(node)
        if kept is None:
            return None
        _, interval, seen = kept
        quiet = now - seen
        return quiet if quiet > interval - _HEARTBEAT_SLACK else None

    def _straggler_limit(self, node, took, straggler):
        """Seconds into a round after which the silent ``node`` is taken as
        lost, given what the answered nodes took (``took``: node -> s)."""
        # What the slowest answered node would take on this node's rows
        # (the first exchange, before the sizes are known: one row each).
        rows = self._rows.get(node, 1)
        expected = max(
            seconds * max(1.0, rows / self._rows.get(n, 1))
            for n, seconds in took.items()
        )
        return max(straggler, _STRAGGLER_FACTOR * expected)

    def _ask(self, requests, what):
        """Answers of every addressed client; raises for the first failure."""
        answers = self._exchange(requests)
        for cid, answer in answers.items():
            if isinstance(answer, StepFailure):
                exc = answer.exc
                cls = ValueError if isinstance(exc, ValueError) else RuntimeError
                raise cls(f"Client {cid!r} could not {what}: {exc}") from exc
        return answers

    def pending_wire(self):
        """The wire bytes of the messages since the last call:
        ``[(direction, {client id: bytes}), ...]``."""
        pending, self._wire = self._wire, []
        return pending


def _failure(error, node):
    """A node's error record as a ``StepFailure`` (a ``ValueError`` stays a
    ``ValueError``: it is the client rejecting its input)."""
    cls = ValueError if error["value_error"] else RuntimeError
    text = f"node {node}: {error['type']}: {error['text']}"
    return StepFailure(cls(text), error["traceback"])


def locate_rows(client_sizes, indices, client_ids=None):
    """The client and row of each sample index of a fit over nodes.

    A fit through Flower numbers the samples as if the nodes' rows were
    stacked in client order (``NodeData.first_rows``); this undoes it.

    Parameters
    ----------
    client_sizes : dict
        Client id -> number of rows (``NodeData.client_sizes``).
    indices : array-like of int
        Sample indices of the fit.
    client_ids : list, default=None
        The clients' order; by default the order of ``client_sizes``.

    Returns
    -------
    client_ids : list
        The client holding each sample.
    rows : ndarray of int
        Its row in that client's node.
    """
    order = list(client_sizes if client_ids is None else client_ids)
    ends = np.cumsum([client_sizes[c] for c in order])
    indices = np.asarray(indices, dtype=np.intp)
    if indices.size and (indices.min() < 0 or indices.max() >= ends[-1]):
        raise ValueError(
            f"Sample indices must lie in [0, {int(ends[-1])}), the rows of the "
            "nodes together."
        )
    which = np.searchsorted(ends, indices, side="right")
    starts = np.concatenate([[0], ends[:-1]])
    return [order[i] for i in which], indices - starts[which]


class _NodeArray(RemoteArray):
    """``X`` or ``y`` of :class:`NodeData` as an estimator's ``fit`` sees
    it."""

    def __init__(self, nodes, kind, shape, dtype, classes=None):
        self.nodes = nodes
        self.kind = kind
        self.shape = shape
        self.dtype = dtype
        self.classes = classes

    def __repr__(self):
        n_nodes = len(self.nodes.client_ids)
        return f"<{self.kind} of shape {self.shape} on {n_nodes} Flower nodes>"

    def distinct(self):
        answers = self.nodes._ask(
            {c: {"op": "distinct_y"} for c in self.nodes.client_ids},
            "list its labels",
        )
        return np.unique(np.concatenate([a["values"] for a in answers.values()]))

    def coded(self, classes):
        return _NodeArray(self.nodes, "y", self.shape, np.intp, classes)

    def open_transport(self, y, *, seed, spec):
        return FlowerTransport(self.nodes, y=y, seed=seed, spec=spec)


class FlowerTransport:
    """Clients on Flower nodes; every round is one message per node.

    Built by an estimator's ``fit`` from :class:`NodeData` (see
    ``skfed._engine._transports._common`` for the interface). Opening it asks
    every node to check its rows for the fit.
    """

    def __init__(self, nodes, *, y, seed, spec):
        self.nodes = nodes
        self.client_ids = list(nodes.client_ids)
        self.client_sizes = dict(nodes.client_sizes)
        classes = None if y is None else y.classes
        settings = {
            "seed": seed,
            "spec": spec,
            "classes": classes,
            "use_y": y is not None,
        }
        answers = nodes._ask(
            {
                c: {"op": "open", "first_row": nodes.first_rows[c], **settings}
                for c in self.client_ids
            },
            "check its data",
        )
        first = answers[self.client_ids[0]]
        self.data_info = (first["n_features"], np.dtype(first["dtype"]))

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return False

    def pending_wire(self):
        return self.nodes.pending_wire()

    def run(self, call, client_ids, messages):
        """Run the step on each client's node; per client its upload or a
        ``StepFailure``."""
        # The BLAS threads the step gets on the nodes, decided here as the
        # in-memory transports decide them (see skfed._numerics._threads), so that a
        # node computes what a client in memory does.
        large = round_uses_process_threads(
            resolve_step(call.name, call.module),
            [self.client_sizes[c] for c in client_ids],
        )
        requests = {
            cid: {
                "op": "step",
                "name": call.name,
                "options": call.options,
                "module": call.module,
                "message": message,
                "large_products": large,
            }
            for cid, message in zip(client_ids, messages)
        }
        answers = self.nodes._exchange(requests)
        return [
            a if isinstance(a, StepFailure) else a["upload"]
            for a in (answers[c] for c in client_ids)
        ]

    def local_values(self, namespace, key, client_ids):
        """Client id -> what the client keeps (fetched from its node)."""
        request = {"op": "values", "namespace": namespace, "key": key}
        answers = self.nodes._ask(
            dict.fromkeys(client_ids, request), f"send its {namespace!r} values"
        )
        return {c: answers[c]["value"] for c in client_ids}

    def assemble(self, namespace, key, client_ids, n_samples, *, fill, dtype):
        """A per-sample value kept by the nodes, fetched, in client order
        (the rows of all nodes one after the other)."""
        values = self.local_values(namespace, key, client_ids)
        first = self.nodes.first_rows
        parts = [
            (np.arange(first[c], first[c] + len(v)), np.asarray(v))
            for c, v in values.items()
        ]
        return assembled(parts, n_samples, fill=fill, dtype=dtype)
