"""The protocol of federated classification with parsimonious RKHS
functions: client steps, server steps, and :func:`run_rkhs`, which drives
them on a federation.

Clients solve a sparse multi-width kernel dual on their own data and send
only their critical samples (λ > 0); the server solves the same problem on
the pooled critical samples (after Peifer, Chamon, Paternain & Ribeiro's
sparse RKHS representations), and optional refinement rounds send the
samples the global model violates.
"""

# Long module: the client's and the server's steps of one protocol, whose
# sizes (_LOCAL_ROWS, _SERVER_ROWS, _SELECTION_ROWS) are tuned against each
# other: the server's reduction reruns the clients' chunked dual, and the
# refinement rounds check the clients' violations on the server's reserve.

import numbers
import zlib
from functools import partial
from typing import NamedTuple

import numpy as np

from ..._engine._ledger import RAW_ROWS, Disclosure, raw_rows_of
from ..._engine._protocol import PER_CLIENT, PUBLIC, client_step, collectable
from ..._engine._rounds import Round
from ..._numerics._rows import canonical_row_order
from ...kernel._multiwidth import AtomDictionary, gaussian_atoms
from .._solvers._active_set import active_set_dual
from .._solvers._fista import solve_sparse_dual
from .._solvers._svm import dense_dual, dense_gram
from ._data_scale import data_scale, server_widths

# Which of its rows a client sent (the server received them) and whether
# its own solve converged.
collectable("rkhs", ("sent", "new"), PUBLIC)
collectable("rkhs", "local_converged", PER_CLIENT)

__all__ = [
    "ALL_SAMPLES",
    "CRITICAL_SAMPLES",
    "RKHSResult",
    "VIOLATING_SAMPLES",
    "run_rkhs",
]


def _rows_of_first(payload):
    """Rows of X in an upload or message whose first item is rows of X."""
    return int(payload[0].shape[0])


# A single client sends its rows: the server's solve is the model.
ALL_SAMPLES = Round("all samples", raw_rows_of(0))
# The rows with λ > 0 of each client's local duals, with their labels.
CRITICAL_SAMPLES = Round("critical samples", raw_rows_of(0))
# The rows the model violates; the model's centers are rows of X,
# forwarded to every client.
VIOLATING_SAMPLES = Round(
    "violating samples",
    Disclosure(RAW_ROWS, rows=_rows_of_first, forwarded=_rows_of_first),
)

# Rows per local dual (see _local_dual_step): a dual over 1,000 rows took
# 0.06 s and 40 MB on blobs, over 2,000 rows 0.56 s; the critical samples
# per chunk stayed at 11-16 for either.
_LOCAL_ROWS = 1000
# Largest pool the server solves whole; a larger one (many small clients,
# or clients of many chunks) is first reduced as a client reduces its rows
# (see _server_reduce). The server's sparse solve prices every atom of the
# pool at every step, O(pool²) per step: at N = 100k, 1,000 clients of 100
# rows pooled 14,400 samples and the solve took 53 of 55 s.
_SERVER_ROWS = 2 * _LOCAL_ROWS
# The reduction is used only when it at least halves the pool.
_SERVER_KEEP = 0.5
# Most pooled samples the server's sparse solve selects its kernels on; a
# larger pool (noisy data, where the reduction keeps most samples) has its
# selected kernels refitted on every pooled sample (see _server_solve).
# Each step of the sparse solve is an SVM over the pool, and the solve
# takes tens of steps whose number grows with the pool: on 10,000 rows of
# a 10%-label-noise set (5,500 pooled samples) the solve was nearly all of
# a fit 300 times SVC's, growing as N^3.3.
_SELECTION_ROWS = _LOCAL_ROWS


class RKHSResult(NamedTuple):
    """What :func:`run_rkhs` returns.

    Attributes
    ----------
    model : dict
        The server's solution: ``centers``, ``widths``, ``coef``,
        ``intercept``, ``support`` (positions in the final pool), the dual
        and primal objective ``traces``/``primal_traces``, ``n_iter``,
        ``converged`` and ``refit_converged`` per problem.
    widths : ndarray
        The kernel widths of the dictionary.
    pool_index : ndarray of int
        Training-sample position of every pooled sample, in pool order.
    critical_samples : dict
        Client id -> positions of the critical samples it sent first.
    sent_samples : dict
        Client id -> positions of every sample it sent.
    local_converged : dict
        Client id -> whether its local dual converged (known to the client).
    n_refinement_rounds : int
    client_ids : list
    failed_clients : dict
    """

    model: dict
    widths: np.ndarray
    pool_index: np.ndarray
    critical_samples: dict
    sent_samples: dict
    local_converged: dict
    n_refinement_rounds: int
    client_ids: list
    failed_clients: dict


def run_rkhs(
    fed,
    *,
    n_problems,
    widths,
    C=1.0,
    epsilon,
    sparsity,
    solver,
    step_size,
    refinement_rounds,
    refinement_margin,
    max_iter,
    tol,
):
    """Federated RKHS classification on an open federation.

    Rounds: ``"data scale"`` (only for an int ``widths``: d + 2 floats up
    per client), ``"critical samples"`` (``"all samples"`` with one
    client), and up to ``refinement_rounds`` ``"violating samples"``.
    The clients' ``y`` are class codes 0 .. n_classes − 1.

    Parameters
    ----------
    fed : Federation
        Open federation (inside its ``with`` block) whose clients hold y.
    n_problems : int
        1 for two classes, else the number of classes (one-vs-rest).
    widths : int or ndarray
        An int asks for that many widths around the federated data scale;
        an array gives them (already checked).
    C, epsilon, sparsity, solver, step_size, refinement_rounds, \
refinement_margin, max_iter, tol
        As in :class:`~skfed.FederatedRKHSClassifier` (``sparsity`` is γ).

    Returns
    -------
    result : RKHSResult
    """
    options = {
        "epsilon": float(epsilon),
        "upper": float(C),
        "max_iter": int(max_iter),
        "tol": float(tol),
    }
    dtype = fed.dtype
    message = None
    if isinstance(widths, numbers.Integral):
        # Each client's mean and spread, or their sums when masked.
        widths = server_widths(data_scale(fed), widths)
        message = widths
    if fed.n_clients == 1:
        uploads = fed.run_round(ALL_SAMPLES, _send_all_step)
    else:
        uploads = fed.run_round(
            CRITICAL_SAMPLES,
            partial(
                _local_dual_step,
                widths=None if message is not None else widths,
                n_problems=n_problems,
                **options,
            ),
            message,
        )
    sent = fed.local_results("rkhs", "sent")
    critical = {c: np.sort(idx) for c, idx in sent.items()}
    # What each client knows of its own solve (not sent).
    local_converged = fed.local_results("rkhs", "local_converged")
    X_pool, y_pool, lam_pool, order = _server_pool(uploads, n_problems, dtype)
    pool_index = np.concatenate([sent[c] for c in fed.client_ids])[order]
    pool, reserve = _server_reduce(
        X_pool,
        y_pool,
        lam_pool,
        pool_index,
        widths=widths,
        n_problems=n_problems,
        # Its chunks take libsvm and BLAS, which release the GIL: with
        # n_jobs=2 the simulation's threads share them (a pool of 1,000
        # clients of 100 rows: 0.92 s alone, 0.53 s on two threads).
        map_chunks=fed.server_map,
        **options,
    )
    margin = float(refinement_margin) * (1 - options["epsilon"])
    solve = partial(
        _solve_with_reserve,
        partial(
            _server_solve,
            widths=widths,
            n_problems=n_problems,
            gamma=float(sparsity),
            solver=solver,
            step=None if step_size == "auto" else float(step_size),
            **options,
        ),
        margin=margin,
        max_checks=refinement_rounds,
        n_problems=n_problems,
    )
    model, pool, reserve = solve(pool, reserve)
    n_rounds = 0
    while fed.n_clients > 1 and n_rounds < refinement_rounds:
        n_rounds += 1
        uploads = fed.run_round(
            VIOLATING_SAMPLES,
            partial(_violations_step, threshold=margin),
            _model_message(model),
        )
        if sum(len(u[1]) for u in uploads) == 0:
            break
        new = fed.local_results("rkhs", "new")
        sent = {c: np.concatenate([sent[c], new[c]]) for c in fed.client_ids}
        pool, carried = _grown_pool(
            pool, model, uploads, [new[c] for c in fed.client_ids], n_problems
        )
        model, pool, reserve = solve(pool, reserve, previous=carried)
    # The positions of the samples each client sent are its own
    # bookkeeping (for sent_samples_), gathered once per round above.
    ids = list(fed.client_ids)
    return RKHSResult(
        model=model,
        widths=widths,
        pool_index=pool[3],
        critical_samples={c: critical[c] for c in ids},
        sent_samples={c: np.sort(sent[c]) for c in ids},
        local_converged=local_converged,
        n_refinement_rounds=n_rounds,
        client_ids=ids,
        failed_clients=dict(fed.failed_clients),
    )


def _binary_labels(y_code, problem, n_problems):
    """±1 labels of one-vs-rest problem ``problem`` (class 1 for two classes)."""
    positive = 1 if n_problems == 1 else problem
    return np.where(y_code == positive, 1.0, -1.0)


# --------------------------------------------------------------------------
# Client steps


@client_step("rkhs.send_all")
def _send_all_step(client, state, message):
    """Client step of the centralized learner: send every sample (x, y)."""
    state = {"sent": client.sample_indices, "local_converged": True}
    return state, (client.X, client.y.astype(np.float64))


@client_step("rkhs.critical_samples", python_bound=True, in_processes=False)
def _local_dual_step(
    client,
    state,
    message,
    *,
    widths,
    n_problems,
    epsilon,
    upper,
    max_iter,
    tol,
):
    """Client step (Pi): solve the local dual at γ = 0, send critical samples.

    γ = 0 (the dense problem) keeps far fewer samples critical than the
    server's γ would: a sparse local model must bend few kernels around its
    samples and leaves most of them on the margin.

    A client of more than ``_LOCAL_ROWS`` rows solves one local dual per
    chunk of its rows (:func:`_local_chunks`), each over the atoms at its
    own samples: the dense problem costs O(n_m³) time and O(n_m²) memory
    (a client of 100,000 rows would need 40 GB), a chunk O(c³) and O(c²).

    Upload: (x_n, class_n, λ_n) for every n with λ_n > 0 in some problem:
    n_critical · (d + 1 + n_problems) floats.
    """
    state = dict(state or {})
    widths = message if widths is None else widths
    X, y_code = client.X, client.y
    lam, converged = _chunked_local_duals(
        X,
        y_code,
        widths=widths,
        n_problems=n_problems,
        epsilon=epsilon,
        upper=upper,
        max_iter=max_iter,
        tol=tol,
    )
    critical = np.flatnonzero(np.any(lam > 0, axis=1))
    state["sent"] = client.sample_indices[critical]
    state["local_dual"] = lam
    state["local_converged"] = converged
    return state, (
        X[critical],
        y_code[critical].astype(np.float64),
        lam[critical],
    )


def _chunked_local_duals(
    X, y_code, *, widths, n_problems, epsilon, upper, max_iter, tol, map_chunks=None
):
    """λ of the dense (γ = 0) dual solved per chunk of rows (see
    :func:`_local_chunks`), each over the atoms at its own samples, and
    whether every solve converged. A client runs it on its rows, the server
    on a pool too large to solve whole (:func:`_server_reduce`), whose
    chunks ``map_chunks`` may spread over threads (each chunk is solved
    alone, so the result is the same)."""

    def solve(chunk):
        Phi = AtomDictionary(X[chunk], X[chunk], widths).columns()
        # The one-vs-rest problems share the atoms, hence libsvm's Gram
        # matrix (when it reads one): formed once, not per problem (it was
        # nearly all of a ten-class chunk's time: 38 ms a problem).
        gram = None
        lam = np.zeros((len(chunk), n_problems))
        converged = True
        for p in range(n_problems):
            y = _binary_labels(y_code[chunk], p, n_problems)
            bias = bool(np.any(y > 0) and np.any(y < 0))
            if bias and gram is None and Phi.shape[1] > len(chunk):
                gram = dense_gram(Phi)
            fit = dense_dual(
                Phi,
                y,
                beta=1.0,
                epsilon=epsilon,
                upper=upper,
                bias=bias,
                max_iter=max_iter,
                tol=tol,
                gram=gram,
            )
            lam[:, p] = fit["lam"]
            converged &= fit["converged"]
        return lam, converged

    chunks = _local_chunks(X)
    solved = map(solve, chunks) if map_chunks is None else map_chunks(solve, chunks)
    lam = np.zeros((X.shape[0], n_problems))
    converged = True
    for chunk, (part, chunk_converged) in zip(chunks, solved):
        lam[chunk] = part
        converged &= chunk_converged
    return lam, converged


def _local_chunks(X):
    """Row indices of the chunks a client solves its local dual on: its rows
    in an order fixed by their values (not by how they are stored), cut
    into near-equal chunks of at most ``_LOCAL_ROWS``."""
    n = X.shape[0]
    if n <= _LOCAL_ROWS:
        return [np.arange(n)]
    order = canonical_row_order(X)
    return [np.sort(c) for c in np.array_split(order, -(-n // _LOCAL_ROWS))]


@client_step("rkhs.violations")
def _violations_step(client, state, message, *, threshold):
    """Client step (refinement): send the samples the global model violates.

    A sample that meets the global model's constraint y f(x) ≥ 1 − ε has
    λ = 0 in the refit of the model's kernels and leaves that refit
    unchanged (Proposition 2); one that does not may be critical globally
    although it was not locally.
    Samples with y f(x) < ``threshold`` (ρ (1 − ε), ρ = refinement_margin)
    in any problem are sent.

    Upload: (x_n, class_n) for every such sample not sent before:
    n_new · (d + 1) floats.
    """
    state = dict(state or {})
    unsent = np.ones(client.n_samples, dtype=bool)
    unsent[np.searchsorted(client.sample_indices, state["sent"])] = False
    violating = _violating(client.X, client.y, message, threshold) & unsent
    new = np.flatnonzero(violating)
    state["new"] = client.sample_indices[new]
    state["sent"] = np.concatenate([state["sent"], state["new"]])
    return state, (client.X[new], client.y[new].astype(np.float64))


def _violating(X, y_code, model_message, threshold):
    """Rows with y f(x) < ``threshold`` in some problem of the model."""
    centers, widths, coef, intercept = model_message
    scores = gaussian_atoms(X, centers, widths, dtype=X.dtype)
    scores = scores @ coef.T.astype(X.dtype) + intercept
    n_problems = coef.shape[0]
    margins = np.column_stack(
        [
            _binary_labels(y_code, p, n_problems) * scores[:, p]
            for p in range(n_problems)
        ]
    )
    # A relative slack keeps samples sitting on the margin (λ undetermined)
    # from being sent over round-off.
    return np.any(margins < threshold * (1 - 1e-6), axis=1)


# --------------------------------------------------------------------------
# Server steps


def _server_reduce(
    X, y_code, lam, index, *, widths, n_problems, map_chunks=None, **options
):
    """Server: a pool of more than ``_SERVER_ROWS`` samples is reduced as a
    client reduces its rows, to the samples critical in the dense dual of
    some chunk of it (:func:`_chunked_local_duals`).

    The clients' step makes a client of 100 rows send about as many
    samples as a 1,000-row chunk of a larger client (12-17 on blobs), so
    the pool grows with the number of clients, and the server's solve
    with its square. Reducing it again is the rule the clients apply,
    one level up: the pool of 1,000 clients of 100 rows shrinks to about
    what 10 clients of 10,000 rows send. The dropped samples stay with the
    server (they were sent) as a reserve that the server checks against
    each model before the clients see it (:func:`_solve_with_reserve`).
    A reduction that keeps more than ``_SERVER_KEEP`` of the pool is not
    used: the pool is solved whole.

    Returns
    -------
    pool : tuple
        X, y_code, λ (the clients', as a warm start) and training positions
        of the kept samples.
    reserve : tuple
        X, y_code and training positions of the dropped ones.
    """
    whole = (X, y_code, lam, index), (X[:0], y_code[:0], index[:0])
    if X.shape[0] <= _SERVER_ROWS:
        return whole
    chunk_lam, _ = _chunked_local_duals(
        X,
        y_code,
        widths=widths,
        n_problems=n_problems,
        map_chunks=map_chunks,
        **options,
    )
    keep = np.any(chunk_lam > 0, axis=1)
    # Little to gain when most of the pool is critical again (noisy data),
    # and the reserve checks cost extra solves (20,000 rows over 10
    # clients: two moons 87% kept, 48.7 s reduced against 20.6 s whole; a
    # 3%-noise classification set 61% kept, 132 s against 100 s). A class
    # the chunks left without a critical sample (or no sample at all) would
    # leave the server a problem it cannot pose.
    if keep.sum() > _SERVER_KEEP * len(keep) or len(np.unique(y_code[keep])) < len(
        np.unique(y_code)
    ):
        return whole
    drop = ~keep
    return (X[keep], y_code[keep], lam[keep], index[keep]), (
        X[drop],
        y_code[drop],
        index[drop],
    )


def _solve_with_reserve(
    solve, pool, reserve, *, margin, max_checks, n_problems, previous=None
):
    """Server: ``solve`` on the pool, then move the reserve's samples that
    the model violates into the pool and solve again, at most
    ``max_checks`` times, before the model goes to the clients.

    The reserve (see :func:`_server_reduce`) is checked by the clients'
    refinement rule on the server, which holds its samples already: no
    communication. Every model the clients check has passed it, unless
    ``max_checks`` ran out first.

    ``previous`` is the last model carried onto ``pool`` (see
    :func:`_grown_pool`), whose problems the new samples leave optimal are
    kept rather than solved again (see :func:`_server_solve`).

    Returns the model, the pool (X, y_code, λ, training positions) and what
    is left of the reserve.
    """
    model = solve(*pool[:3], previous=previous)
    for _ in range(max_checks):
        back, reserve = _reserve_violations(reserve, model, margin)
        if not len(back[1]):
            break
        pool, carried = _grown_pool(pool, model, [back[:2]], [back[2]], n_problems)
        model = solve(*pool[:3], previous=carried)
    return model, pool, reserve


def _grown_pool(pool, model, uploads, positions, n_problems):
    """Server: the pool with the samples of ``uploads`` added (their
    training positions in ``positions``), λ from ``model`` as the warm
    start, in the canonical order of :func:`_server_pool`.

    Returns the grown pool and ``model``'s problems carried onto it
    (:func:`_carried_problems`)."""
    X, y_code, _, index = pool
    n_old = len(y_code)
    X, y_code, lam, order = _server_pool(
        [(X, y_code, model["lam"]), *uploads], n_problems, X.dtype
    )
    # Where each sample of the old pool sits in the new one.
    moved = np.empty(len(order), dtype=np.intp)
    moved[order] = np.arange(len(order))
    carried = _carried_problems(model, moved[:n_old], len(order))
    return (X, y_code, lam, np.concatenate([index, *positions])[order]), carried


def _carried_problems(model, moved, n_new):
    """Server: ``model``'s per-problem solutions re-indexed onto a grown
    pool in which old sample i sits at ``moved[i]`` (the new samples get
    λ = 0), and which samples are new."""
    n_old = len(moved)
    problems = []
    for problem in model["problems"]:
        atoms = problem["atoms"]
        width, center = np.divmod(atoms, n_old)
        carried = dict(problem, atoms=width * n_new + moved[center])
        for key in ("lam", "support_lam"):
            values = np.zeros(n_new)
            values[moved] = problem[key]
            carried[key] = values
        problems.append(carried)
    new = np.ones(n_new, dtype=bool)
    new[moved] = False
    return {"problems": problems, "new": new}


def _reserve_violations(reserve, model, threshold):
    """Server: the reserve's samples that ``model`` violates (by the rule of
    :func:`_violations_step`), and the reserve without them."""
    X, y_code, index = reserve
    if not len(y_code):
        return reserve, reserve
    out = _violating(X, y_code, _model_message(model), threshold)
    stay = ~out
    return (X[out], y_code[out], index[out]), (X[stay], y_code[stay], index[stay])


def _model_message(model):
    """Server: the model the clients check their samples against."""
    return (model["centers"], model["widths"], model["coef"], model["intercept"])


def _server_pool(uploads, n_problems, dtype):
    """Server: stack the received samples, classes and λ (zeros if none).

    The pool is put in a canonical order (by class, then by the rows'
    values, then by λ: a row several clients hold comes with one λ from
    each) so that the server's solve does not depend on the order or the
    names of the clients.

    Returns
    -------
    X, y, lam : the pool
    order : ndarray of int
        Position of each pooled sample in the concatenated uploads.
    """
    X = np.concatenate([u[0] for u in uploads]).astype(dtype, copy=False)
    y = np.concatenate([u[1] for u in uploads]).astype(np.intp)
    lam = [u[2] if len(u) > 2 else np.zeros((len(u[1]), n_problems)) for u in uploads]
    lam = np.concatenate(lam)
    order = np.lexsort((*lam.T[::-1], *X.T[::-1], y))
    return X[order], y[order], lam[order], order


def _server_solve(
    X,
    y_code,
    lam0,
    *,
    widths,
    n_problems,
    gamma,
    epsilon,
    upper,
    max_iter,
    tol,
    solver,
    step,
    previous=None,
):
    """Server (PF, or PC with one client): sparse dual on the pool + refit.

    Returns the union of the selected atoms over the one-vs-rest problems
    with their coefficients, and the pooled samples with λ > 0 after the
    refit.

    ``previous`` (the last model carried onto this pool by
    :func:`_grown_pool`) spares the problems that the pool's new samples
    leave optimal: when every new sample meets a problem's constraint
    y f(x) ≥ 1 − ε, λ = 0 on it keeps the refit of that problem's kernels
    optimal on the grown pool (Proposition 2), and the problem keeps its
    solution. A refinement round of a ten-class fit adds a few samples
    near one or two boundaries; every class was solved again (digits,
    3 clients: 40 sparse solves, 30 of them for 1-7 new samples).

    A pool of more than ``_SELECTION_ROWS`` samples has its kernels
    selected on a subsample of them (:func:`_selection_rows`): the sparse
    dual is posed on the subsample, with the atoms at its samples, and the
    selected atoms are then refitted (the γ = 0 problem on them, as every
    selected support is) on every pooled sample. The model stays sparse
    and built from critical samples only; what the subsample changes is
    which samples' atoms the kernels can sit on and which constraints the
    selection sees, not the constraints the final coefficients meet.
    """
    n = len(y_code)
    subsample = _selection_rows(X)
    subsample_dictionary = AtomDictionary(X[subsample], X[subsample], widths)
    problems = []
    for p in range(n_problems):
        y = _binary_labels(y_code, p, n_problems)
        rows, dictionary = subsample, subsample_dictionary
        missed = np.setdiff1d(np.unique(y), y[rows])
        if missed.size:
            # A label of this problem (a class of a few samples) that the
            # subsample missed: its samples join this problem's selection.
            rows = np.union1d(rows, np.flatnonzero(np.isin(y, missed)))
            dictionary = AtomDictionary(X[rows], X[rows], widths)
        if previous is not None and _still_optimal(
            X,
            widths,
            X[previous["new"]],
            y[previous["new"]],
            previous["problems"][p],
            epsilon,
        ):
            problems.append(previous["problems"][p])
            continue
        warm = lam0[rows, p] if np.any(lam0[rows, p] > 0) else None
        problem = _solve_problem(
            dictionary,
            y[rows],
            warm,
            gamma=gamma,
            epsilon=epsilon,
            upper=upper,
            max_iter=max_iter,
            tol=tol,
            solver=solver,
            step=step,
        )
        if len(rows) < n:
            problem = _refit_on_pool(
                problem,
                X,
                y,
                rows,
                widths=widths,
                gamma=gamma,
                epsilon=epsilon,
                upper=upper,
                max_iter=max_iter,
                tol=tol,
            )
        problems.append(problem)
    # Drop atoms the refit left at zero, then merge the problems' atoms.
    selected = [problem["atoms"] for problem in problems]
    atoms = np.unique(np.concatenate(selected)) if selected else np.array([], int)
    coef = np.zeros((n_problems, len(atoms)))
    for p, problem in enumerate(problems):
        coef[p, np.searchsorted(atoms, problem["atoms"])] = problem["coef"]
    keep = np.any(coef != 0, axis=0)
    atoms, coef = atoms[keep], coef[:, keep]
    support = np.any([problem["support_lam"] > 0 for problem in problems], axis=0)
    return {
        "centers": X[atoms % n],
        "widths": np.asarray(widths, dtype=np.float64)[atoms // n],
        "coef": coef,
        "intercept": np.array([problem["intercept"] for problem in problems]),
        "support": np.flatnonzero(support),
        "lam": np.column_stack([problem["lam"] for problem in problems]),
        "traces": [problem["trace"] for problem in problems],
        "primal_traces": [problem["primal_trace"] for problem in problems],
        "n_iter": [problem["n_iter"] for problem in problems],
        "converged": [problem["converged"] for problem in problems],
        "refit_converged": [problem["refit_converged"] for problem in problems],
        "problems": problems,
    }


def _selection_rows(X):
    """Server: the pooled samples the sparse solve selects kernels on
    (see :func:`_server_solve`), sorted.

    Every sample of a pool of at most ``_SELECTION_ROWS``; else the
    ``_SELECTION_ROWS`` samples of smallest hash of their values: a
    subsample that does not depend on the pool's order or on which client
    sent what, and that keeps its samples when a refinement round adds
    others (each new sample displaces at most one). A refinement round's
    new samples are not forced into it: on the paper's synthetic set at
    N = 10,000 a selection biased towards the last model's violators
    changed the model more from round to round, and the clients sent 33%
    of their rows instead of 23%.
    """
    n = X.shape[0]
    if n <= _SELECTION_ROWS:
        return np.arange(n)
    X = np.ascontiguousarray(X)
    digest = np.array([zlib.crc32(row.tobytes()) for row in X], dtype=np.int64)
    return np.sort(np.argsort(digest, kind="stable")[:_SELECTION_ROWS])


def _refit_on_pool(
    problem, X, y, rows, *, widths, gamma, epsilon, upper, max_iter, tol
):
    """Server: a problem solved on the pooled samples ``rows`` (its atoms
    indexed in their dictionary), with its selected atoms refitted on every
    pooled sample and reindexed in the pool's dictionary.

    libsvm starts from the margins of the subsample's model on every
    sample (:func:`~skfed.classification._solvers._svm.dense_dual`'s
    working set): most samples already sit where the refit leaves them.
    """
    n, n_rows = X.shape[0], len(rows)
    width, center = np.divmod(problem["atoms"], n_rows)
    atoms = width * n + rows[center]
    centers = X[rows[center]]
    atom_widths = np.asarray(widths, dtype=np.float64)[width]
    Phi = gaussian_atoms(X, centers, atom_widths, dtype=np.float32)
    margin = 1.0 - epsilon
    margins = None
    if len(atoms) and np.any(y > 0) and np.any(y < 0):
        f = Phi.astype(np.float64) @ problem["coef"] + problem["intercept"]
        margins = y * f / margin
    fit = dense_dual(
        Phi,
        y,
        beta=1.0 - gamma,
        epsilon=epsilon,
        upper=upper,
        bias=True,
        max_iter=max_iter,
        tol=tol,
        margins=margins,
    )
    lam = np.zeros(n)
    lam[rows] = problem["lam"]
    return dict(
        problem,
        atoms=atoms,
        coef=np.asarray(fit["coef"], dtype=np.float64),
        intercept=fit["intercept"],
        support_lam=fit["lam"],
        lam=lam,
        refit_converged=fit["converged"],
    )


def _still_optimal(X, widths, X_new, y_new, problem, epsilon):
    """Server: whether the samples ``X_new`` (±1 labels ``y_new``) meet the
    constraint y f(x) ≥ 1 − ε of one problem's solution (with the relative
    slack of :func:`_violating`); its atoms index the dictionary of the
    pool ``X`` with ``widths``."""
    atoms = problem["atoms"]
    n = X.shape[0]
    f = gaussian_atoms(
        X_new,
        X[atoms % n],
        np.asarray(widths, dtype=np.float64)[atoms // n],
        dtype=X_new.dtype,
    )
    f = f @ problem["coef"].astype(X_new.dtype) + problem["intercept"]
    return bool(np.all(y_new * f >= (1 - epsilon) * (1 - 1e-6)))


def _solve_problem(
    dictionary, y, warm, *, gamma, epsilon, upper, max_iter, tol, solver, step
):
    """Server: the sparse dual of one (one-vs-rest) problem and the refit of
    its support.

    Returns ``atoms`` (indices in ``dictionary``), their refitted ``coef``
    and the ``intercept``, ``support_lam`` (λ of the refit), ``lam`` (the
    sparse dual's λ), ``trace``, ``primal_trace``, ``n_iter``,
    ``converged`` and ``refit_converged``.
    """
    if solver == "active-set":
        sparse = active_set_dual(
            dictionary,
            y,
            warm,
            gamma=gamma,
            epsilon=epsilon,
            upper=upper,
            max_iter=max_iter,
            tol=tol,
        )
        # The active-set solver returns its best support already refitted.
        fit = {
            "lam": sparse["support_lam"],
            "coef": sparse["coef"],
            "intercept": sparse["intercept"],
            "converged": sparse["support_converged"],
        }
    else:
        sparse = solve_sparse_dual(
            dictionary,
            y,
            warm,
            gamma=gamma,
            epsilon=epsilon,
            upper=upper,
            bias=True,
            max_iter=max_iter,
            tol=tol,
            accelerate=solver == "fista",
            step=step,
        )
        fit = dense_dual(
            dictionary.columns(sparse["atoms"]),
            y,
            beta=1.0 - gamma,
            epsilon=epsilon,
            upper=upper,
            bias=True,
            max_iter=max_iter,
            tol=tol,
        )
    return {
        "atoms": sparse["atoms"],
        "coef": np.asarray(fit["coef"], dtype=np.float64),
        "intercept": fit["intercept"],
        "support_lam": fit["lam"],
        "lam": sparse["lam"],
        "trace": sparse["trace"],
        "primal_trace": sparse.get("primal_trace", np.empty(0)),
        "n_iter": sparse["n_iter"],
        "converged": sparse["converged"],
        "refit_converged": fit["converged"],
    }
