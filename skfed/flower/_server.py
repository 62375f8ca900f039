"""The server side: fit an estimator over the Flower nodes a grid reaches.

:class:`NodeData` stands for the training data of the nodes: it asks each
node for its size once, and hands the estimator ``X`` (and ``y``) that
``fit`` accepts like a dask array, without any row leaving its node.
Opening the fit builds a :class:`FlowerTransport` under the estimator's
:class:`~skfed._engine._federation.Federation`: every round of the protocol is one
``query.skfed`` message per node, answered by the ClientApp of
:mod:`skfed.flower._client`.
"""

import math
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from flwr.app import Message
from flwr.serverapp import ServerApp
from sklearn.base import clone, is_classifier

from .._engine._protocol import resolve_step
from .._engine._remote import RemoteArray
from .._engine._transport import StepFailure, assembled
from .._engine._validation import canonical_order
from .._numerics._threads import round_uses_process_threads
from ._client import ACTION, client_app
from ._records import from_records, to_records, wire_bytes

__all__ = [
    "FlowerTransport",
    "NodeData",
    "fit_on_grid",
    "locate_rows",
    "server_app",
    "simulate",
]

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
    ``skfed._engine._transport`` for the interface). Opening it asks every node to
    check its rows for the fit.
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


def fit_on_grid(
    estimator,
    grid,
    *,
    n_nodes,
    timeout=600.0,
    round_timeout=60.0,
    straggler_timeout=20.0,
    **fit_params,
):
    """Fit ``estimator`` on the data of the Flower nodes ``grid`` reaches.

    Call it in a ServerApp's ``main``; the nodes run
    :func:`~skfed.flower.client_app`. A classifier is fitted with the
    nodes' labels. Sample indices in the fitted attributes number the
    nodes' rows stacked in client order (see ``NodeData.first_rows`` and
    :func:`locate_rows`).

    Parameters
    ----------
    estimator : skfed estimator
        Fitted in place.
    grid : flwr.serverapp.Grid
    n_nodes : int
        Nodes to wait for; every connected node takes part.
    timeout : float, default=600.0
        Seconds to wait for the nodes to connect.
    round_timeout : float, default=60.0
        Seconds to wait for each round's answers; see :class:`NodeData`.
    straggler_timeout : float or None, default=20.0
        When a node that has not answered is taken as lost; see
        :class:`NodeData`.
    **fit_params
        Passed to ``fit``.

    Returns
    -------
    estimator
        The fitted estimator.
    """
    data = NodeData(
        grid,
        n_nodes=n_nodes,
        timeout=timeout,
        round_timeout=round_timeout,
        straggler_timeout=straggler_timeout,
    )
    if is_classifier(estimator):
        if data.y is None:
            raise ValueError("A classifier needs labels; the nodes hold none.")
        return estimator.fit(data.X, data.y, **fit_params)
    return estimator.fit(data.X, **fit_params)


# Run config keys server_app reads itself; every other key names a
# parameter of the estimator, with dashes for underscores.
_APP_KEYS = ("n-nodes", "model-path", "round-timeout", "straggler-timeout")


def configured(estimator, run_config):
    """A copy of ``estimator`` with the parameters ``run_config`` sets.

    Every key of the run config other than ``n-nodes``, ``model-path`` and
    ``round-timeout`` names a parameter of the estimator, spelled with
    dashes (``n-clusters`` sets ``n_clusters``); its value (a TOML string,
    number or boolean) is checked as the estimator checks its parameters.

    Raises
    ------
    ValueError
        For a key that is no parameter (naming the valid keys), or a value
        the parameter does not accept.
    """
    estimator = clone(estimator)
    valid = {name.replace("_", "-"): name for name in estimator.get_params(deep=False)}
    params = {}
    for key, value in run_config.items():
        if key in _APP_KEYS:
            continue
        if key not in valid:
            raise ValueError(
                f"The run config's {key!r} is not a parameter of "
                f"{type(estimator).__name__}; valid keys: "
                f"{', '.join(sorted(valid) + list(_APP_KEYS))}."
            )
        params[valid[key]] = value
    estimator.set_params(**params)
    # Check now, before waiting for nodes: a bad value from the command
    # line should not cost a connection and the setup rounds.
    estimator._validate_params()
    return estimator


def _writable_path(path):
    """``path`` as a Path whose directory exists (created if missing) and
    accepts a new file; raises ``ValueError`` saying why not."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise ValueError(f"model-path {str(path)!r} is a directory; name a file.")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".skfed-check-"):
            pass
    except OSError as exc:
        raise ValueError(
            f"Cannot save the fitted model at {str(path)!r}: {exc}. Give a "
            "model-path in a directory this ServerApp may write to."
        ) from exc
    return path


def save_model(estimator, path):
    """``joblib.dump`` the fitted ``estimator`` at ``path``; if that fails,
    keep it in a temporary file and raise ``OSError`` naming both."""
    import joblib

    try:
        joblib.dump(estimator, path)
    except Exception as exc:
        fd, kept = tempfile.mkstemp(prefix="skfed-model-", suffix=".joblib")
        os.close(fd)
        joblib.dump(estimator, kept)
        raise OSError(
            f"Could not save the fitted model at {str(path)!r} ({exc}); it is "
            f"kept at {kept!r}."
        ) from exc
    return path


def server_app(
    estimator,
    *,
    n_nodes=None,
    save_to=None,
    timeout=600.0,
    round_timeout=None,
    straggler_timeout=None,
):
    """A Flower ServerApp that fits a copy of ``estimator`` over its grid.

    The run config (``[tool.flwr.app.config]`` of the app's
    ``pyproject.toml``, overridden by ``flwr run --run-config``) says:

    ``n-nodes``
        how many nodes to wait for (unless ``n_nodes`` is given);
    ``model-path``
        where to save the fitted estimator (unless ``save_to`` is given);
    ``round-timeout``
        seconds to wait for each round's answers (unless ``round_timeout``
        is given);
    ``straggler-timeout``
        when a silent node is taken as lost (unless ``straggler_timeout``
        is given);
    any other key
        a parameter of the estimator, with dashes for underscores:
        ``n-clusters = 8`` sets ``n_clusters=8``. Flower accepts on the
        command line only keys the ``pyproject.toml`` lists, so list there
        every parameter a run may change.

    Unknown keys and bad values raise ``ValueError`` before any node is
    contacted, as does a save path whose directory cannot be created or
    written to. If saving fails after the fit, the fitted estimator is
    kept in a temporary file and the ServerApp fails with an ``OSError``
    naming it (Flower then marks the run failed).

    Parameters
    ----------
    estimator : skfed estimator
        Cloned, configured from the run config, then fitted with
        :func:`fit_on_grid`.
    n_nodes : int, default=None
        Nodes to wait for; when None, the run config's ``n-nodes``.
    save_to : str or path, default=None
        Where to save the fitted estimator (``joblib.dump``); when None, the
        run config's ``model-path`` if it has one. Its directory is
        created if missing. A simulation keeps the fitted estimator in
        ``app.fitted_estimator`` as well.
    timeout : float, default=600.0
        Seconds to wait for the nodes to connect.
    round_timeout : float, default=None
        Seconds to wait for each round's answers; when None, the run
        config's ``round-timeout``, else 60. See :class:`NodeData`.
    straggler_timeout : float, default=None
        When None, the run config's ``straggler-timeout``, else 20. See
        :class:`NodeData`.

    Returns
    -------
    app : flwr.serverapp.ServerApp
    """
    app = ServerApp()
    app.fitted_estimator = None
    app.save_error = None

    @app.main()
    def main(grid, context):
        config = context.run_config
        est = configured(estimator, config)
        nodes = n_nodes if n_nodes is not None else config.get("n-nodes")
        if nodes is None:
            raise ValueError(
                "Say how many nodes hold the data: server_app(..., n_nodes=) "
                "or the run config's n-nodes."
            )
        waits = {}
        for key, given, default in (
            ("round-timeout", round_timeout, 60.0),
            ("straggler-timeout", straggler_timeout, 20.0),
        ):
            wait = config.get(key, default) if given is None else given
            if (
                isinstance(wait, bool)
                or not isinstance(wait, (int, float))
                or not wait > 0
            ):
                raise ValueError(f"{key} must be a positive number; got {wait!r}.")
            waits[key] = wait
        path = save_to if save_to is not None else config.get("model-path")
        if path:
            path = _writable_path(path)
        fitted = fit_on_grid(
            est,
            grid,
            n_nodes=int(nodes),
            timeout=timeout,
            round_timeout=waits["round-timeout"],
            straggler_timeout=waits["straggler-timeout"],
        )
        app.fitted_estimator = fitted
        if path:
            try:
                save_model(fitted, path)
            except OSError as exc:
                app.save_error = exc
                raise

    return app


def simulate(
    estimator,
    load_data,
    n_nodes,
    *,
    client_id=None,
    save_to=None,
    backend_config=None,
    timeout=600.0,
    round_timeout=60.0,
    straggler_timeout=20.0,
):
    """Fit ``estimator`` through Flower's simulation engine.

    The same ServerApp and ClientApp as a deployment, with the nodes
    simulated in this machine's Ray workers: check the model here against
    an in-memory fit before deploying. Needs ``pip install 'skfed[flower]'``
    (Flower with its simulation engine).

    Parameters
    ----------
    estimator : skfed estimator
        Cloned, then fitted.
    load_data : callable
        ``load_data(context) -> X`` or ``(X, y)`` for the node of
        ``context.node_config["partition-id"]`` (0 to ``n_nodes - 1``);
        runs in the simulation's worker processes, so it must pickle
        (cloudpickle: closures are fine).
    n_nodes : int
        Simulated nodes.
    client_id : callable, default=None
        See :func:`client_app`.
    save_to : str or path, default=None
        Where to save the fitted estimator, as :func:`server_app` does.
    backend_config : dict, default=None
        Flower's simulation backend config; by default one CPU per node.
    timeout : float, default=600.0
        Seconds to wait for the nodes to connect.
    round_timeout : float, default=60.0
        Seconds to wait for each round's answers; see :class:`NodeData`.
    straggler_timeout : float or None, default=20.0
        When a node that has not answered is taken as lost; see
        :class:`NodeData`.

    Returns
    -------
    estimator
        A fitted copy of ``estimator``.
    """
    from flwr.simulation import run_simulation

    server = server_app(
        estimator,
        n_nodes=n_nodes,
        save_to=save_to,
        timeout=timeout,
        round_timeout=round_timeout,
        # server_app reads None as "from the run config".
        straggler_timeout=math.inf if straggler_timeout is None else straggler_timeout,
    )
    client = client_app(load_data, client_id=client_id)
    run_simulation(
        server_app=server,
        client_app=client,
        num_supernodes=n_nodes,
        backend_config=backend_config or {"client_resources": {"num_cpus": 1}},
    )
    if server.save_error is not None:
        raise server.save_error
    if server.fitted_estimator is None:
        raise RuntimeError("The simulated fit did not finish; see Flower's log.")
    return server.fitted_estimator
