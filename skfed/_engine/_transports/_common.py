"""Where client steps run: the transports under a Federation.

A :class:`~skfed._engine._federation.Federation` keeps the ledger, the order of the
clients and the failure policy; a transport holds the clients' data and the
state they keep between rounds, and runs registered client steps on them.
Its interface is small:

``client_ids``, ``client_sizes``, ``data_info``
    The clients, in canonical order, their n_m, and the number of features
    and dtype of their rows (protocol metadata).
``with transport:``
    Opens whatever serves every round of one fit (a worker pool, a dask
    client) and releases it.
``run(call, client_ids, messages) -> results``
    Runs the :class:`~skfed._engine._protocol.StepCall` on each named client with its
    message, keeps the state the step returns under the step's namespace,
    and returns per client the upload or a ``StepFailure``; it never
    raises for one client's error.
``local_values(namespace, key, client_ids)`` and ``assemble(...)``
    What clients keep (their labels, say), for the fitted attributes.
``pending_wire()`` (optional)
    For a transport that measures what it really sends (Flower): the
    bytes per direction and client since the last call, which the
    federation moves into the ledger's ``wire_records``.

``JoblibTransport`` runs the clients in this process's joblib pool (the
default: threads, or processes with ``parallel_config(backend="loky")``);
``ProcessTransport`` keeps many small clients in worker processes for the
whole fit (with ``n_jobs`` > 1); ``DaskTransport`` keeps them on dask
workers (used for dask collections and under joblib's dask backend);
``skfed.flower.FlowerTransport`` reaches them as Flower nodes. The
transports live beside this module; the package chooses one for a fit
(``make_transport``, ``remote_transport``).

This module holds what every transport shares: running steps on the
clients a process holds, keeping their states, and sending back what a
collection asks for.
"""

import traceback
from functools import partial

import numpy as np
from joblib import effective_n_jobs, parallel_config
from sklearn import config_context, get_config

from .._protocol import check_collectable, resume, run_together

__all__ = [
    "StepFailure",
    "assembled",
    "collected",
    "kept_after",
    "run_sequential_steps",
    "run_step",
    "run_steps",
    "server_thread_map",
    "thread_map",
    "worker_count",
]

# Rows of the clients whose steps advance together in one thread (see
# run_sequential_steps): 650 clients of 100 rows, whose k-means problems
# already fill the batched solver's arrays.
_WAVE_ROWS = 2**16


def worker_count(n_jobs, n_tasks):
    """The workers to start for ``n_jobs`` over ``n_tasks`` independent
    pieces of work: ``joblib.effective_n_jobs(n_jobs)``, never more than
    the pieces, at least one.

    Every transport and set-up pool turns ``n_jobs`` into workers here. A
    worker with nothing to do still costs its start: ``n_jobs=32`` over 3
    clients started 32 processes (22-27 s for a fit of 0.02 s), and
    ``n_jobs=10000`` did not return.
    """
    return max(1, min(effective_n_jobs(n_jobs), int(n_tasks)))


class StepFailure:
    """A client step that raised: the exception and its formatted traceback."""

    def __init__(self, exc, tb):
        self.exc = exc
        self.tb = tb


def run_step(call, client, storage, message):
    """Run one client step with the client's kept state; never raise.

    Returns ``(new_state, upload)`` or a ``StepFailure``.
    """
    # The clients are the unit of parallelism. Without this, scikit-learn
    # helpers called by a step (n_jobs=None) would inherit the enclosing
    # joblib configuration, split their work differently per backend and
    # round differently, breaking "same seed, same model".
    with parallel_config(backend="sequential"):
        return run_sequential_steps([(call, client, storage, message)])[0]


def _run_sequential_step(call, client, storage, message):
    """Start one client step where joblib is already configured as
    sequential (entering the configuration costs about 6 us, which a
    Lanczos fit over 1,000 clients paid three million times): its result,
    a ``StepFailure``, or the generator of a step that hands over shared
    work (see :mod:`skfed._engine._protocol`)."""
    try:
        view = client.with_storage(storage)
        return call.start(view, storage.get(call.namespace), message)
    except Exception as exc:  # surfaced by Federation.run_round
        return StepFailure(exc, traceback.format_exc())


def _resumed(step, answer):
    """:func:`~skfed._engine._protocol.resume` that turns what the step raises
    into its ``(True, StepFailure)``."""
    try:
        return resume(step, answer)
    except Exception as exc:
        return True, StepFailure(exc, traceback.format_exc())


def run_sequential_steps(calls):
    """Several clients' steps in this thread, joblib configured sequential.

    Steps that hand over shared work advance side by side, and the items
    of each turn are solved together (:func:`~skfed._engine._protocol.run_together`):
    a small client's k-means is then one slice of a few large numpy calls
    instead of a few hundred small ones of its own. A suspended step holds
    its intermediate arrays, so clients advance together in waves of about
    ``_WAVE_ROWS`` rows: memory stays a bounded multiple of one wave's
    data, not of all the clients'.
    """
    results = []
    wave, rows = [], 0
    for args in calls:
        wave.append(args)
        rows += args[1].n_samples
        if rows >= _WAVE_ROWS:
            results += _run_wave(wave)
            wave, rows = [], 0
    return results + _run_wave(wave)


def _run_wave(calls):
    """:func:`run_sequential_steps` on clients that advance together."""
    started = [_run_sequential_step(*args) for args in calls]
    return run_together(started, advance=_resumed)


def kept_after(call, storage, result):
    """What a client keeps after a step, and what it answers.

    Parameters
    ----------
    call : StepCall
    storage : dict
        The client's state before the step (namespace -> state).
    result : tuple or StepFailure
        What :func:`run_step` returned.

    Returns
    -------
    storage : dict
        A new dict with the step's namespace replaced (the same dict after
        a failure, or when the step returned the state it was given).
    answer : object
        The upload, or the :class:`StepFailure`.
    """
    if isinstance(result, StepFailure):
        return storage, result
    state, upload = result
    namespace = call.namespace
    if namespace in storage and storage[namespace] is state:
        return storage, upload  # unchanged (a Lanczos product, say)
    return {**storage, namespace: state}, upload


def placed_rows(parts, offset, length, *, fill, dtype, tail_shape):
    """Rows [offset, offset + length) of a per-sample output assembled from
    the clients' parts, ``(sample positions, values)`` each; rows no part
    covers (failed clients) get ``fill``."""
    out = np.full((length, *tail_shape), fill, dtype=dtype)
    for idx, values in parts:
        inside = (idx >= offset) & (idx < offset + length)
        out[idx[inside] - offset] = values[inside]
    return out


def assembled(parts, n_samples, *, fill, dtype):
    """A whole per-sample output from the clients' ``(positions, values)``
    parts; ``dtype=None`` keeps the values' dtype."""
    first = parts[0][1]
    return placed_rows(
        parts,
        0,
        n_samples,
        fill=fill,
        dtype=first.dtype if dtype is None else dtype,
        tail_shape=first.shape[1:],
    )


def picked(state, key):
    """What a client keeps under ``key`` of a namespace's ``state``: the
    whole state for None, a tuple of entries for a tuple of keys."""
    if key is None:
        return state
    if isinstance(key, tuple):
        return tuple(state[k] for k in key)
    return state[key]


def collected(client, storage, namespace, key):
    """What a client sends back of its kept state when the server collects
    ``key`` of ``namespace``: checked against the entries protocols declare
    and the client's own configuration (``client.config``), on the client,
    in every transport (``skfed._engine._protocol.check_collectable``)."""
    check_collectable(namespace, key, getattr(client, "config", None))
    return picked(storage[namespace], key)


def run_steps(calls):
    """Several clients' steps in one pool task (see
    :func:`run_sequential_steps`)."""
    with parallel_config(backend="sequential"):
        return run_sequential_steps(calls)


def _call_configured(config, func, item):
    """``func(item)`` in a thread of the transport's own executor, under
    the server's scikit-learn configuration (what sklearn.utils.parallel's
    ``delayed`` does for joblib's workers: the configuration is per
    thread)."""
    with config_context(**config):
        return func(item)


def thread_map(threads, func, items):
    """``[func(item) for item in items]`` in ``threads`` (a transport's own
    executor), one item per task, under the server's scikit-learn
    configuration."""
    config = get_config()
    return list(threads.map(partial(_call_configured, config, func), items))


def server_thread_map(threads, func, items):
    """A transport's ``server_map``: ``thread_map`` for server work
    between rounds that releases the GIL (the RKHS server's chunked duals:
    libsvm and BLAS); in this thread when the fit has no threads of its own
    (``threads`` is None) or there is one item."""
    if threads is None or len(items) < 2:
        return [func(item) for item in items]
    return thread_map(threads, func, items)
