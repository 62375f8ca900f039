"""Client steps by name: what a transport may run on a client.

A protocol is client steps, server steps and one ``run_<algorithm>``
function that drives the rounds (see ``federated_coreset_kmeans``). Client
steps are registered here under a dotted name, ``"<namespace>.<step>"``::

    @client_step("kfed.local")
    def _local_step(client, state, message, *, n_local_clusters, ...):
        ...
        return new_state, upload

and a round names the step to run, with keyword options that are plain data
(:class:`~skfed._engine._protocol.StepCall`). Whatever runs the clients (joblib in
this process, dask workers, later Flower nodes) looks the step up by name in
its own copy of skfed: code never travels, only the name and the options do.

The namespace is also the client-state key the step owns: a step receives
the state its namespace kept from earlier rounds (``None`` at first) and
returns the new one; it may read another protocol's state with
``client.read(namespace)`` (that is how FederatedKernelKMeans hands its
spectral embedding to the coreset k-means), never write it.

A step may also be a generator that ``yield`` s *shared work*: an object
whose class has a ``solve_all(items) -> answers`` classmethod (a small
client's k-means, :class:`~skfed.cluster._kmeans.KMeansProblem`),
and receives the answer back from the ``yield``. Run on one client
(:meth:`StepCall.run`), each item is solved alone; a transport that holds
many clients in one process advances their steps side by side and solves
the items they hand over together (:func:`solve_together`), which turns a
thousand small clients' thousand numpy calls into one. The answer must
not depend on which items share a batch: that is the item class's
contract, so a client's upload is the same under every transport.
"""

import functools
import hashlib
import importlib
import inspect
from typing import NamedTuple

from ._mods import call_wrapped

__all__ = [
    "PER_ROW",
    "Raised",
    "StepCall",
    "as_step_call",
    "check_collectable",
    "client_step",
    "collectable",
    "resolve_step",
    "resume",
    "run_alone",
    "run_together",
    "solve_together",
    "stream_key",
]

_REGISTRY = {}

#: What a client may send back of the state it keeps (namespace -> key ->
#: kind); everything else, its keys and mask material first, stays on it.
_COLLECTABLE = {}
#: A per-sample output (labels, an embedding): one value per row.
PER_ROW = "per_row"
#: A statistic of one client's rows, seen alone by the server.
PER_CLIENT = "per_client"
#: What the server already knows from the protocol (which of its rows a
#: client sent, whether its upload was rows).
PUBLIC = "public"


def client_step(
    name,
    *,
    python_bound=False,
    in_processes=True,
    large_products=False,
    sum_only=False,
):
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
        this step over small clients in worker processes, or, over too few
        rows for processes to pay for their start, over many small clients
        in the server's thread (see
        :class:`~skfed._engine._transports._joblib.JoblibTransport`); the state the step
        returns travels back, so it should be O(n_m) at most.
    in_processes : bool, default=True
        Whether a ``python_bound`` step may run in worker processes. False
        runs its rounds over small clients in the server's thread: for a
        step whose result depends on BLAS's thread count, which is one in a
        joblib worker process (the RKHS classifier's local duals: libsvm
        turned the kernels' rounding into another model), or whose round
        is too short for processes to pay for shipping the clients' rows
        (the coreset's local solution over 1,000 clients of 100 rows:
        0.26 s in the server's thread, 0.43 s in two threads, 0.30 s in
        two processes).
    large_products : bool, default=False
        The step's time goes to BLAS products large enough for several
        threads (kernel k-means' Gram matrix: blocks of thousands of rows
        times themselves). Its rounds over clients of at least 4,096 rows
        on average run with the process's BLAS threads; every other round
        with one, whose small products would otherwise wait for cores that
        other processes hold (see ``skfed._numerics._threads``).
    sum_only : bool, default=False
        The step's upload is only ever used summed over clients (it runs in
        ``"sum_only"`` rounds). A client whose own configuration says it
        masks (``secure_aggregation``) then refuses to send its upload
        unmasked, whatever the server asks.

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
        func.in_processes = in_processes
        func.large_products = large_products
        func.sum_only = sum_only
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
            "skfed._engine._protocol.client_step in a module the clients import."
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

    @property
    def sum_only(self):
        """Whether the step is registered as uploading only summed values."""
        return resolve_step(self.name, self.module).sum_only

    def start(self, client, state, message):
        """Call the step under the client's mods (``skfed._engine._mods``):
        its ``(new_state, upload)``, or the generator of a step that hands
        over shared work (see the module)."""
        step = resolve_step(self.name, self.module)
        return call_wrapped(step, self.name, client, state, message, self.options)

    def run(self, client, state, message):
        """Run the step here, alone: ``(new_state, upload)``."""
        return run_alone(self.start(client, state, message))


def collectable(namespace, keys, kind):
    """Declare entries of a protocol's client state that the server may
    collect after the fit (``Federation.local_results`` and ``assemble``).

    A client answers a collection only for declared entries: its keys, its
    mask material and anything else it keeps stay on it.

    Parameters
    ----------
    namespace : str
        The protocol's client-state key.
    keys : str, tuple of str or None
        The entries (None: the whole state).
    kind : {"per_row", "per_client", "public"}
        ``"per_row"``: one value per row (labels, an embedding), refused
        under ``raw_rows="refuse"`` and under differential privacy;
        ``"per_client"``: an exact statistic of the client's rows, refused
        under differential privacy; ``"public"``: what the server already
        knows from the protocol's messages.
    """
    if kind not in (PER_ROW, PER_CLIENT, PUBLIC):
        raise ValueError(
            f"A collectable kind is per_row, per_client or public, got {kind!r}."
        )
    keys = keys if isinstance(keys, tuple) else (keys,)
    table = _COLLECTABLE.setdefault(namespace, {})
    for key in keys:
        table[key] = kind


def collection_kind(namespace, key):
    """The kind of a collection of ``key`` (str, tuple or None) under
    ``namespace``: the most revealing of its entries'; None if an entry is
    not declared."""
    keys = key if isinstance(key, tuple) else (key,)
    table = _COLLECTABLE.get(namespace, {})
    kinds = [table.get(k) for k in keys]
    if None in kinds:
        return None
    for kind in (PER_ROW, PER_CLIENT, PUBLIC):
        if kind in kinds:
            return kind
    return PUBLIC


def check_collectable(namespace, key, config):
    """Refuse a collection that the client's configuration does not allow.

    Parameters
    ----------
    namespace : str
    key : str, tuple of str or None
    config : dict
        The client's own settings: ``raw_rows`` ("allow" or "refuse") and
        ``private`` (whether the fit is differentially private).

    Returns
    -------
    kind : str
        See :func:`collectable`.

    Raises
    ------
    PermissionError
        For an entry no protocol declared (a client's keys, say), a
        per-row output under ``raw_rows="refuse"`` or privacy, or an exact
        per-client statistic under privacy.
    """
    config = config or {}
    kind = collection_kind(namespace, key)
    if kind is None:
        raise PermissionError(
            f"The client sends only what its protocol declares; "
            f"{namespace!r} {key!r} is not declared collectable: refused."
        )
    private = bool(config.get("private", False))
    if kind == PER_ROW and (private or config.get("raw_rows") == "refuse"):
        setting = "privacy" if private else "raw_rows='refuse'"
        raise PermissionError(
            f"{namespace!r} {key!r} is one value per row, which stays on the "
            f"client under {setting}: refused. Label the rows where they "
            "are, with the fitted model's predict."
        )
    if kind == PER_CLIENT and private:
        raise PermissionError(
            f"{namespace!r} {key!r} is an exact statistic of the client's "
            "rows, which differential privacy does not let leave un-noised: "
            "refused."
        )
    return kind


class Raised(NamedTuple):
    """The exception solving a work item raised, for its step to receive."""

    exc: BaseException


def solve_together(items):
    """Answers to the shared work items steps handed over, in order.

    Items of one class are solved by one call of its ``solve_all``; when
    that raises, each item is solved alone, so that one client's bad item
    fails that client only. An item whose solving raised gets a
    :class:`Raised`.
    """
    answers = [None] * len(items)
    by_kind = {}
    for i, item in enumerate(items):
        by_kind.setdefault(type(item), []).append(i)
    for kind, members in by_kind.items():
        try:
            solved = kind.solve_all([items[i] for i in members])
        except Exception:
            solved = []
            for i in members:
                try:
                    solved.append(kind.solve_all([items[i]])[0])
                except Exception as exc:
                    solved.append(Raised(exc))
        for i, answer in zip(members, solved):
            answers[i] = answer
    return answers


def run_alone(started):
    """The result of a called step (see :meth:`StepCall.start`), solving
    the work a generator step hands over item by item; an exception from
    solving is raised inside the step."""
    return run_together([started])[0]


def run_together(started, advance=None):
    """The results of called steps, generator steps advancing side by side
    and the items of each turn solved together (:func:`solve_together`).

    ``advance(step, answer)`` moves a step on (:func:`resume` by default,
    which lets what the step raises propagate; a transport passes one that
    turns it into that client's failure).
    """
    advance = resume if advance is None else advance
    results = list(started)
    waiting = [(i, r) for i, r in enumerate(results) if inspect.isgenerator(r)]
    answers = [None] * len(waiting)
    while waiting:
        asked = []
        for (i, step), answer in zip(waiting, answers):
            done, out = advance(step, answer)
            if done:
                results[i] = out
            else:
                asked.append((i, step, out))
        answers = solve_together([item for _, _, item in asked])
        waiting = [(i, step) for i, step, _ in asked]
    return results


def resume(step, answer):
    """Advance a generator step with the answer to the item it handed over
    last (None at first): ``(True, result)`` once it returns, else
    ``(False, next item)``. A :class:`Raised` answer is thrown into the
    step; what the step raises propagates."""
    try:
        if isinstance(answer, Raised):
            return False, step.throw(answer.exc)
        return False, step.send(answer)
    except StopIteration as stop:
        return True, stop.value


def as_step_call(step):
    """A :class:`~skfed._engine._protocol.StepCall` from a registered step, a
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
            "skfed._engine._protocol.client_step(name). Steps travel by name, never as "
            "code."
        )
    for key, value in options.items():
        if callable(value):
            raise TypeError(
                f"Option {key!r} of step {name!r} is code ({value!r}); options "
                "are data. Register the function as a step, or pass a name."
            )
    return StepCall(name, options, step.__module__)
