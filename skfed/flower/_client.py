"""The node side: a Flower ClientApp that runs skfed's client steps.

The ClientApp answers ``query.skfed`` messages from the ServerApp of a fit
(:mod:`skfed.flower._server`). A message names one operation:

``describe``
    The node's client id, number of rows and features, dtype, and whether
    it holds labels (protocol metadata, as ``Federation.client_sizes``).
``open``
    Start a fit: the fit's seed, the estimator's input checks and, for a
    classifier, the classes. The node checks its rows, as the in-memory
    fit would, and keeps the fit's settings in its state.
``step``
    Run a registered client step (:func:`skfed._engine._protocol.client_step`) by
    name, with its options and the server's message; keep the state the
    step returns, answer with the upload.
``values``
    Send back an entry of what the node keeps that a protocol declared
    collectable (``skfed._engine._protocol.collectable``), as the node's settings
    allow: never its secure-aggregation keys or anything undeclared; no
    per-row output (labels, an embedding) under ``raw_rows="refuse"`` or
    differential privacy; no exact per-client statistic under privacy.
``distinct_y``
    The distinct labels the node holds (a classifier's classes).

The node's own configuration (``--node-config``) can fix settings that no
server can turn off:

``secure-aggregation``
    ``true``: the node masks every sum-only upload, refuses to send one
    unmasked, and refuses to open a fit whose server did not ask for
    secure aggregation.
``raw-rows``
    ``"refuse"``: no per-row output leaves the node, whatever the fit's
    settings say.

What a node keeps between messages lives in ``context.state``, as codec
records: a deployed SuperNode (Flower 1.42) starts a new ClientApp process
for every message, so nothing may rely on module globals for correctness.
A process that answers several messages (the simulation engine's workers)
loads the node's data once and checks it once per fit: both are cached,
keyed by the node config and the size and modification time of every file
it names, so a changed file is read again. A step runs only if it is
registered under the name the message gives; no code is received.
"""

import json
import os
import traceback

import numpy as np
from flwr.app import Message
from flwr.clientapp import ClientApp

from .._engine._client import make_client
from .._engine._protocol import StepCall
from .._engine._transports._common import StepFailure, collected, kept_after, run_step
from .._numerics._threads import blas_limits, thread_pools
from ._records import from_records, to_records

__all__ = ["client_app"]

ACTION = "skfed"
_STATE = "skfed.state"


def client_app(load_data, *, client_id=None, step_modules=("skfed",)):
    """A Flower ClientApp serving skfed fits with this node's data.

    Parameters
    ----------
    load_data : callable
        ``load_data(context) -> X`` or ``(X, y)``: the node's own training
        data, e.g. read from a file named in ``context.node_config``. Called
        once per process and node config: again only when a file the node
        config names changes size or modification time (a deployed node
        runs every message in a new process, so there it is called per
        message).
    client_id : callable, default=None
        ``client_id(context) -> int or str``: the node's client id, which
        orders the clients as ``partitions`` ids do in memory. By default
        the node's ``partition-id`` (``--node-config``) when it has one,
        else its Flower node id.
    step_modules : tuple of str, default=("skfed",)
        Packages whose modules a message may ask this node to import to
        find a client step (a contributor's protocol, say). A step named in
        a message runs only if it is registered in this process after that.

    Returns
    -------
    app : flwr.clientapp.ClientApp
    """
    app = ClientApp()
    node = _Node(load_data, client_id, tuple(step_modules))

    @app.query(ACTION)
    def query(message, context):
        request = from_records(message.content)
        try:
            answer = node.answer(request, context)
        except Exception as exc:  # sent back; the server decides
            answer = {"error": _error_record(exc, traceback.format_exc())}
        return Message(to_records(answer), reply_to=message)

    return app


def _data_key(context):
    """What identifies the data ``load_data`` would load: the node, its
    config, and the size and modification time of each file it names."""
    items = []
    for name, value in sorted(context.node_config.items()):
        stat = None
        if isinstance(value, str) and value:
            try:
                info = os.stat(value)
                stat = (info.st_size, info.st_mtime_ns)
            except OSError:
                pass
        items.append((name, value, stat))
    return context.node_id, tuple(items)


def _node_flag(context, key):
    """A true/false setting of the node config (TOML gives a bool; a
    string "true"/"false" is read as one)."""
    value = context.node_config.get(key, False)
    if isinstance(value, str):
        if value.strip().lower() not in ("true", "false", ""):
            raise ValueError(
                f"The node config's {key!r} is true or false, got {value!r}."
            )
        return value.strip().lower() == "true"
    return bool(value)


def _own_settings(context, spec):
    """The fit's input checks with the client's configuration as the node
    fixes it: the server's settings, made stricter (never looser) by the
    node config."""
    server = dict((spec or {}).get("client") or {})
    masks = _node_flag(context, "secure-aggregation")
    if masks and not server.get("secure_aggregation", False):
        raise PermissionError(
            "This node masks its sums (secure-aggregation in its node config) "
            "and refuses a fit whose server did not ask for secure "
            "aggregation: fit with secure_aggregation=True."
        )
    config = {
        "secure_aggregation": bool(server.get("secure_aggregation", False) or masks),
        "raw_rows": str(server.get("raw_rows", "allow")),
        "private": bool(server.get("private", False)),
    }
    raw_rows = context.node_config.get("raw-rows")
    if raw_rows is not None:
        if raw_rows not in ("allow", "refuse"):
            raise ValueError(
                f"The node config's 'raw-rows' is 'allow' or 'refuse', got "
                f"{raw_rows!r}."
            )
        if raw_rows == "refuse":
            config["raw_rows"] = "refuse"
    return {**(spec or {}), "client": config}


def _error_record(exc, tb):
    return {
        "type": type(exc).__name__,
        "value_error": isinstance(exc, ValueError),
        "text": str(exc),
        "traceback": tb,
    }


class _Node:
    """This node's answers; its data is loaded and checked once per process
    (and fit), its state always read from the context."""

    def __init__(self, load_data, client_id, step_modules):
        self.load_data = load_data
        self.client_id = client_id
        self.step_modules = step_modules
        self._cache = {}
        self._loaded = {}

    def _id(self, context):
        if self.client_id is not None:
            return self.client_id(context)
        return context.node_config.get("partition-id", context.node_id)

    def _data(self, context):
        """``(X, y)`` as ``load_data`` gives them, loaded once per node
        config and state of the files it names."""
        key = _data_key(context)
        kept = self._loaded.get(context.node_id)
        if kept is None or kept[0] != key:
            data = self.load_data(context)
            # One entry per node: a simulation worker serves several nodes.
            kept = key, data if isinstance(data, tuple) else (data, None)
            self._loaded[context.node_id] = kept
        return kept[1]

    def _client(self, context, settings):
        """This node's ClientData for the fit ``settings`` describe (built
        once per process and fit: checking and fingerprinting the rows is
        not free). The cache is keyed by every setting, so two fits of one
        run never share a client built for the other."""
        classes = settings["classes"]
        key = (
            _data_key(context),
            context.run_id,
            settings["first_row"],
            settings["seed"],
            settings["use_y"],
            json.dumps(settings["spec"], sort_keys=True),
            None if classes is None else (classes.dtype.str, classes.tobytes()),
        )
        kept = self._cache.get(context.node_id)
        if kept is None or kept[0] != key:
            X, y = self._data(context)
            if not settings["use_y"]:
                y = None
            elif settings["classes"] is not None:
                y = np.searchsorted(settings["classes"], np.asarray(y))
            client = make_client(
                self._id(context),
                X,
                y,
                settings["first_row"] + np.arange(len(X)),
                settings["seed"],
                settings["spec"],
            )
            # One fit per node at a time: drop the node's other fits'
            # clients (a simulation worker serves several nodes).
            kept = key, client
            self._cache[context.node_id] = kept
        return kept[1]

    def answer(self, request, context):
        op = request["op"]
        if op == "describe":
            X, y = self._data(context)
            X = X if hasattr(X, "shape") else np.asarray(X)
            return {
                "client_id": self._id(context),
                "n_samples": int(X.shape[0]),
                "n_features": int(X.shape[1]) if X.ndim == 2 else -1,
                "dtype": np.dtype(X.dtype).str,
                "has_y": y is not None,
            }
        if op == "distinct_y":
            _, y = self._data(context)
            return {"values": np.unique(np.asarray(y))}
        state = from_records(context.state, prefix=_STATE, default={})
        if op == "open":
            settings = {k: request[k] for k in ("seed", "spec", "classes", "use_y")}
            settings["spec"] = _own_settings(context, settings["spec"])
            # Where this node's rows start among all nodes' (sample indices
            # the fit reports are global).
            settings["first_row"] = int(request.get("first_row", 0))
            client = self._client(context, settings)
            state = {"settings": settings, "storage": {}}
            to_records(state, context.state, prefix=_STATE)
            return {"n_features": client.X.shape[1], "dtype": client.X.dtype.str}
        if "settings" not in state:
            raise RuntimeError("This node has not been opened for a fit.")
        if op == "step":
            client = self._client(context, state["settings"])
            module = request["module"]
            if module is not None and module.partition(".")[0] not in self.step_modules:
                module = None  # not imported: only already registered steps run
            call = StepCall(request["name"], request["options"], module)
            storage = state["storage"]
            # One BLAS thread, or this node's own for a round of large
            # products, as a client in memory gets (skfed._numerics._threads): BLAS
            # rounds differently on another number of threads.
            limits = blas_limits(request.get("large_products", False))
            with thread_pools().limit(limits=limits):
                result = run_step(call, client, storage, request["message"])
            state["storage"], answer = kept_after(call, storage, result)
            to_records(state, context.state, prefix=_STATE)
            if isinstance(answer, StepFailure):
                return {"error": _error_record(answer.exc, answer.tb)}
            return {"upload": answer}
        if op == "values":
            client = self._client(context, state["settings"])
            value = collected(
                client, state["storage"], request["namespace"], request["key"]
            )
            return {"value": value}
        raise ValueError(f"Unknown skfed operation {op!r}.")
