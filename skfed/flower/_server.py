"""The server side: fit an estimator over the Flower nodes a grid reaches.

:class:`NodeData` stands for the training data of the nodes: it asks each
node for its size once, and hands the estimator ``X`` (and ``y``) that
``fit`` accepts like a dask array, without any row leaving its node.
Opening the fit builds a :class:`FlowerTransport` under the estimator's
:class:`~skfed._federation.Federation`: every round of the protocol is one
``query.skfed`` message per node, answered by the ClientApp of
:mod:`skfed.flower._client`.
"""

import time

import numpy as np
from flwr.app import Message
from flwr.serverapp import ServerApp
from sklearn.base import clone, is_classifier

from .._remote import RemoteArray
from .._transport import StepFailure, assembled
from .._validation import _canonical_order
from ._client import ACTION, client_app
from ._records import from_records, to_records, wire_bytes

__all__ = ["FlowerTransport", "NodeData", "fit_on_grid", "server_app", "simulate"]

_MESSAGE_TYPE = f"query.{ACTION}"
# Seconds between polls of the simulation's in-memory grid for replies;
# Flower's 0.1 s default would dominate the many short rounds of Lanczos.
_PULL_INTERVAL = 0.005


class NodeData:
    """The training data held by the Flower nodes of a grid.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
        The grid a ServerApp's ``main`` receives.
    n_nodes : int
        How many nodes hold the data; waits until that many are connected.
    timeout : float, default=600.0
        Seconds to wait for the nodes to connect, and for their answers in
        each round; a node that does not answer in time fails the round.

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
    """

    def __init__(self, grid, *, n_nodes, timeout=600.0):
        self.grid = grid
        self.timeout = timeout
        if hasattr(grid, "pull_interval"):
            grid.pull_interval = min(grid.pull_interval, _PULL_INTERVAL)
        self._wire = []
        self._group = 0
        nodes = self._wait_for(n_nodes)
        answers = self._exchange({n: {"op": "describe"} for n in nodes}, by="node")
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
        self.client_ids = _canonical_order(self._node_of)
        # The describe messages went out before the ids were known.
        client_of = {node: cid for cid, node in self._node_of.items()}
        self._wire = [
            (direction, {client_of[n]: b for n, b in by_node.items()})
            for direction, by_node in self._wire
        ]
        info = {c: answers[self._node_of[c]] for c in self.client_ids}
        self.client_sizes = {c: info[c]["n_samples"] for c in self.client_ids}
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

    def _exchange(self, requests, *, by="client"):
        """One message to each addressee, their answers; never raises for a
        node's error (it becomes a ``StepFailure``).

        Parameters
        ----------
        requests : dict
            Client id (or node id, ``by="node"``) -> request payload.

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
        replies = self.grid.send_and_receive(messages, timeout=self.timeout)
        answers, up = {}, {}
        for reply in replies:
            key = key_of.get(reply.metadata.src_node_id)
            if key is None:
                continue
            up[key] = wire_bytes(reply)
            if reply.has_error():
                exc = RuntimeError(f"Flower error on the node: {reply.error.reason}")
                answers[key] = StepFailure(exc, "")
                continue
            answer = from_records(reply.content)
            error = answer.get("error")
            answers[key] = answer if error is None else _failure(error)
        for key in requests:
            if key not in answers:
                answers[key] = StepFailure(
                    TimeoutError(f"no answer within {self.timeout} s"), ""
                )
        if None not in down.values() and None not in up.values():
            self._wire += [("download", down), ("upload", up)]
        return answers

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


def _failure(error):
    """A node's error record as a ``StepFailure`` (a ``ValueError`` stays a
    ``ValueError``: it is the client rejecting its input)."""
    cls = ValueError if error["value_error"] else RuntimeError
    return StepFailure(cls(f"{error['type']}: {error['text']}"), error["traceback"])


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
    ``skfed._transport`` for the interface). Opening it asks every node to
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
            {c: {"op": "open", **settings} for c in self.client_ids},
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
        requests = {
            cid: {
                "op": "step",
                "name": call.name,
                "options": call.options,
                "module": call.module,
                "message": message,
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
        offsets = dict(
            zip(
                self.client_ids,
                np.cumsum([0] + [self.client_sizes[c] for c in self.client_ids]),
            )
        )
        parts = [
            (np.arange(offsets[c], offsets[c] + len(v)), np.asarray(v))
            for c, v in values.items()
        ]
        return assembled(parts, n_samples, fill=fill, dtype=dtype)


def fit_on_grid(estimator, grid, *, n_nodes, timeout=600.0, **fit_params):
    """Fit ``estimator`` on the data of the Flower nodes ``grid`` reaches.

    Call it in a ServerApp's ``main``; the nodes run
    :func:`~skfed.flower.client_app`. A classifier is fitted with the
    nodes' labels.

    Parameters
    ----------
    estimator : skfed estimator
        Fitted in place.
    grid : flwr.serverapp.Grid
    n_nodes : int
        Nodes to wait for; every connected node takes part.
    timeout : float, default=600.0
        See :class:`NodeData`.
    **fit_params
        Passed to ``fit``.

    Returns
    -------
    estimator
        The fitted estimator.
    """
    data = NodeData(grid, n_nodes=n_nodes, timeout=timeout)
    if is_classifier(estimator):
        if data.y is None:
            raise ValueError("A classifier needs labels; the nodes hold none.")
        return estimator.fit(data.X, data.y, **fit_params)
    return estimator.fit(data.X, **fit_params)


def server_app(estimator, *, n_nodes=None, save_to=None, timeout=600.0):
    """A Flower ServerApp that fits a copy of ``estimator`` over its grid.

    Parameters
    ----------
    estimator : skfed estimator
        Cloned, then fitted with :func:`fit_on_grid`.
    n_nodes : int, default=None
        Nodes to wait for; when None, the run config's ``n-nodes``.
    save_to : str or path, default=None
        Where to save the fitted estimator (``joblib.dump``); when None, the
        run config's ``model-path`` if it has one. A simulation keeps the
        fitted estimator in ``app.fitted_estimator`` as well.
    timeout : float, default=600.0
        See :class:`NodeData`.

    Returns
    -------
    app : flwr.serverapp.ServerApp
    """
    app = ServerApp()
    app.fitted_estimator = None

    @app.main()
    def main(grid, context):
        import joblib

        nodes = n_nodes if n_nodes is not None else context.run_config.get("n-nodes")
        if nodes is None:
            raise ValueError(
                "Say how many nodes hold the data: server_app(..., n_nodes=) "
                "or the run config's n-nodes."
            )
        fitted = fit_on_grid(
            clone(estimator), grid, n_nodes=int(nodes), timeout=timeout
        )
        path = save_to if save_to is not None else context.run_config.get("model-path")
        if path:
            joblib.dump(fitted, path)
        app.fitted_estimator = fitted

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
        See :class:`NodeData`.

    Returns
    -------
    estimator
        A fitted copy of ``estimator``.
    """
    from flwr.simulation import run_simulation

    server = server_app(estimator, n_nodes=n_nodes, save_to=save_to, timeout=timeout)
    client = client_app(load_data, client_id=client_id)
    run_simulation(
        server_app=server,
        client_app=client,
        num_supernodes=n_nodes,
        backend_config=backend_config or {"client_resources": {"num_cpus": 1}},
    )
    if server.fitted_estimator is None:
        raise RuntimeError("The simulated fit did not finish; see Flower's log.")
    return server.fitted_estimator
