"""BLAS threads during a fit: one, except for rounds of large products.

skfed's BLAS calls are small: a client's k-means compares blocks of a few
thousand rows with a few dozen centers, a Lanczos product multiplies a
client's features by a handful of vectors, the server merges a few
thousand points. With BLAS's default of one thread per core, each such
call wakes the other threads and waits for them; when another process
holds a core, the wait is the scheduler's time slice, not the call's
arithmetic (on a 2-core machine running other work, a 2,000 x 20 by
20 x 16 product took 10 ms on two threads and 0.06 ms on one, the best
of 90 calls each, and the demo's coreset k-means fit 35 s against 4.7 s).
scikit-learn bounds BLAS to one thread inside its own Lloyd iterations for
the same reason.

So while a federation is open (``with fed:``, the rounds and the server's
steps between them), BLAS runs one thread in this process, and the
transports run client steps with one BLAS thread wherever they run them.
A step registered with ``large_products=True`` (kernel k-means' Gram
matrix: blocks of up to 4,096 rows times themselves, 300 columns wide)
runs with the BLAS threads the process had when its first fit opened, over
clients of ``LARGE_ROWS`` rows or more on average. Both depend on the step
and the round's clients only, never on ``n_jobs`` or the transport, so a
step computes the same wherever it runs (BLAS can round differently on
another number of threads).

The bound is process-wide (a BLAS library has one setting per process):
fits open at the same time in several threads share it, and the process's
own setting comes back when the last of them closes. Code a fit runs
outside its federation (input checks, ``predict`` on the training rows)
keeps the process's setting.
"""

import threading

import numpy as np
from threadpoolctl import ThreadpoolController

__all__ = [
    "LARGE_ROWS",
    "blas_limits",
    "close_fit",
    "open_fit",
    "round_uses_process_threads",
    "thread_pools",
]

# Mean rows per client from which a round of a step of large products runs
# on the process's BLAS threads: a whole block of rows per product (4,096
# rows by 310 features, 0.4 GFlop a Gram product). Over smaller clients
# one thread: on a 2-core machine running other work, the demo's kernel
# k-means (clients of 2,000 rows) took 102 and 161 s with its Gram
# products on two threads against 46 and 59 s on one.
LARGE_ROWS = 4096

_POOLS = None
_LOCK = threading.Lock()
# How many fits are open in this process, the limiter that gives the BLAS
# threads back when the last closes, and the BLAS threads per library
# prefix before the first opened.
_OPEN = 0
_RESTORE = None
_PROCESS_BLAS = None


def thread_pools():
    """This process's BLAS and OpenMP thread pools (found once: looking
    for them takes about 12 ms, more than a small fit's round)."""
    global _POOLS
    if _POOLS is None:
        _POOLS = ThreadpoolController()
    return _POOLS


def _blas_threads():
    return {
        lib["prefix"]: lib["num_threads"]
        for lib in thread_pools().info()
        if lib["user_api"] == "blas"
    }


def open_fit():
    """Run BLAS on one thread in this process until :func:`close_fit`."""
    global _OPEN, _RESTORE, _PROCESS_BLAS
    with _LOCK:
        if _OPEN == 0:
            _PROCESS_BLAS = _blas_threads()
            _RESTORE = thread_pools().limit(limits=1, user_api="blas")
        _OPEN += 1


def close_fit():
    """Give BLAS its threads back when no fit is open any more."""
    global _OPEN, _RESTORE, _PROCESS_BLAS
    with _LOCK:
        _OPEN -= 1
        if _OPEN == 0:
            restore, _RESTORE, _PROCESS_BLAS = _RESTORE, None, None
            restore.restore_original_limits()


def round_uses_process_threads(step, sizes):
    """Whether a round of ``step`` over clients of ``sizes`` rows runs on
    the process's BLAS threads (a step of large products over clients of
    ``LARGE_ROWS`` rows or more on average) rather than one."""
    if not getattr(step, "large_products", False) or not len(sizes):
        return False
    return float(np.mean(sizes)) >= LARGE_ROWS


def blas_limits(large_products):
    """BLAS threads per library prefix for a round of a client step: one,
    or for a step of ``large_products`` the process's threads before its
    fits opened (its current ones when none is open)."""
    if not large_products:
        return dict.fromkeys(_blas_threads(), 1)
    with _LOCK:
        if _PROCESS_BLAS is not None:
            return dict(_PROCESS_BLAS)
    return _blas_threads()
