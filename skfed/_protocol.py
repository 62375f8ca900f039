"""Client steps by name: what a transport may run on a client.

A protocol is client steps, server steps and one ``run_<algorithm>``
function that drives the rounds (see ``federated_coreset_kmeans``). Client
steps are registered here under a dotted name, ``"<namespace>.<step>"``::

    @client_step("kfed.local")
    def _local_step(client, state, message, *, n_local_clusters, ...):
        ...
        return new_state, upload

and a round names the step to run, with keyword options that are plain data
(:class:`~skfed._protocol.StepCall`). Whatever runs the clients (joblib in
this process, dask workers, later Flower nodes) looks the step up by name in
its own copy of skfed: code never travels, only the name and the options do.

The namespace is also the client-state key the step owns: a step receives
the state its namespace kept from earlier rounds (``None`` at first) and
returns the new one; it may read another protocol's state with
``client.read(namespace)`` (that is how FederatedKernelKMeans hands its
spectral embedding to the coreset k-means), never write it.
"""

import functools
import hashlib
import importlib
from typing import NamedTuple

__all__ = ["StepCall", "as_step_call", "client_step", "resolve_step", "stream_key"]

_REGISTRY = {}


def client_step(name, *, python_bound=False):
    """Register a module-level client step under ``name``.

    Parameters
    ----------
    name : str
        ``"<namespace>.<step>"``; the namespace is the client-state key the
        step owns.
    python_bound : bool, default=False
        On a small client the step's time goes to Python-level work (many
        numpy calls on small arrays), which threads serialise on the GIL:
        with 1,000 small clients two threads ran KFed's local round 1.5
        times slower than one. The joblib transport then runs rounds of
        this step over small clients in worker processes (see
        :class:`~skfed._transport.JoblibTransport`); the state the step
        returns travels back, so it should be O(n_m) at most.

    Returns
    -------
    register : callable
        Decorator returning the function unchanged (with ``step_name`` set).
    """
    namespace, dot, rest = name.partition(".")
    if not (namespace and dot and rest):
        raise ValueError(f"A step name is '<namespace>.<step>', got {name!r}.")

    def register(func):
        known = _REGISTRY.get(name)
        if known is not None and (
            known.__module__,
            known.__qualname__,
        ) != (func.__module__, func.__qualname__):
            raise ValueError(
                f"Client step {name!r} is already registered by "
                f"{known.__module__}.{known.__qualname__}."
            )
        _REGISTRY[name] = func
        func.step_name = name
        func.python_bound = python_bound
        return func

    return register


def resolve_step(name, module=None):
    """The client step registered under ``name``.

    Parameters
    ----------
    name : str
    module : str, default=None
        The module that registers the step, imported when the step is not
        yet known in this process (a worker that has imported skfed knows
        skfed's own steps, not a contributor's).

    Raises
    ------
    KeyError
        If no step has that name.
    """
    if name not in _REGISTRY and module is not None:
        importlib.import_module(module)
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(
            f"No client step is registered as {name!r}; register it with "
            "skfed._protocol.client_step in a module the clients import."
        ) from None


def stream_key(name):
    """A 32-bit key for a named random stream (stable across processes and
    Python versions, unlike ``hash``)."""
    digest = hashlib.blake2b(name.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little")


class StepCall(NamedTuple):
    """What a round sends a transport: a step's registered name, its
    keyword options (plain data: arrays, numbers, strings, containers) and
    the module that registers it."""

    name: str
    options: dict
    module: str = None

    @property
    def namespace(self):
        """The client-state key the step owns."""
        return self.name.partition(".")[0]

    def run(self, client, state, message):
        """Run the step here: ``(new_state, upload)``."""
        step = resolve_step(self.name, self.module)
        return step(client, state, message, **self.options)


def as_step_call(step):
    """A :class:`~skfed._protocol.StepCall` from a registered step, a
    ``functools.partial`` of one with keyword options only, a registered
    name or a StepCall."""
    if isinstance(step, StepCall):
        return step
    if isinstance(step, str):
        return StepCall(step, {}, resolve_step(step).__module__)
    options = {}
    if isinstance(step, functools.partial):
        if step.args:
            raise TypeError(
                "Give a client step's options as keywords (they travel by name)."
            )
        options = dict(step.keywords)
        step = step.func
    name = getattr(step, "step_name", None)
    if name is None or _REGISTRY.get(name) is not step:
        raise TypeError(
            f"{step!r} is not a registered client step: decorate it with "
            "skfed._protocol.client_step(name). Steps travel by name, never as "
            "code."
        )
    for key, value in options.items():
        if callable(value):
            raise TypeError(
                f"Option {key!r} of step {name!r} is code ({value!r}); options "
                "are data. Register the function as a step, or pass a name."
            )
    return StepCall(name, options, step.__module__)
