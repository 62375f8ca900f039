"""Distributed k-means on a coreset (Balcan, Ehrlich & Liang, NeurIPS 2013):
the protocol's driver, its client steps and its server steps.

Each client summarises its rows by a small weighted set — its own k local
centers plus points drawn in proportion to their squared distance to those
centers — and the server clusters the union of the summaries with weighted
k-means. The weights on one client add up to that client's total weight (its
n_m), so the union is an unbiased stand-in for the whole data set whatever
the split; a local center's weight may be negative (it corrects for the
points drawn from its cluster), which the server's weighted k-means handles.

:func:`federated_coreset_kmeans` runs the protocol on any open
:class:`~skfed._engine._federation.Federation` and any per-client rows
(``FederatedKernelKMeans`` runs it on its spectral embedding);
:class:`~skfed.cluster.DistributedKMeans` is the estimator around it.
"""

import math
import sys
from functools import partial
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from ..._engine._ledger import PER_CLIENT, Disclosure
from ..._engine._protocol import PER_ROW, client_step, collectable
from ..._engine._rounds import Round, download, per_client, raw_rows, sum_only
from ..._numerics._rows import canonical_row_order, row_hashes, rows_equal
from ...privacy._refusal import MIN_ROWS, n_distinct_rows
from .._kmeans import (
    SAME_COST,
    SMALL_ROWS,
    KMeansProblem,
    around_centers,
    assign,
    assign_around_centers,
    centered,
    cluster_sums,
    dense_rows,
    draw,
    rounding_noise,
    sq_norms,
    swap_centers,
    tolerance,
    weighted_kmeans,
    weighted_kmeans_plusplus,
    weighted_lloyd,
)

# The clients' labels from the final centers: one value per row.
collectable("coreset", "labels", PER_ROW)

__all__ = [
    "CANDIDATE_COSTS",
    "EMBEDDED_SAMPLING",
    "LABELS",
    "LABELS_ONLY",
    "LOCAL_COST",
    "REFINEMENT",
    "SAMPLING",
    "CoresetKMeansResult",
    "allocate_samples",
    "auto_coreset_size",
    "candidate_costs_step",
    "client_rows",
    "cluster_sums_step",
    "coreset_rounds",
    "embedded_min_rows",
    "embedded_sampling",
    "federated_coreset_kmeans",
    "label_step",
    "lloyd_update",
    "merge_coresets",
]


def _coreset_rows(upload):
    """Rows of X in a coreset upload (local centers, sample, weights)."""
    return int(upload[1].shape[0])


def _embedded_rows(upload, n_features):
    """Rows of X determined by a coreset upload of embedded rows: the drawn
    rows, when they have at least as many columns as X (see
    :func:`federated_coreset_kmeans`)."""
    drawn = upload[1]
    return int(drawn.shape[0]) if drawn.shape[1] >= n_features else 0


def embedded_min_rows(n_components, n_features):
    """Distinct rows a client needs behind a sum or mean of its embedded
    rows (s columns, X of d) under ``raw_rows="refuse"``: more than s / d,
    and at least ``MIN_ROWS``. The embedding is not linear in x: the sum
    of n embedded rows, n known, is s equations in the n d unknowns of
    the rows, which fix them (up to their order) once n d <= s, as one
    embedded row of at least d columns fixes its row. Two rows moved by
    opposite vectors keep their raw sum, not their embedded one."""
    return max(MIN_ROWS, int(n_components) // max(int(n_features), 1) + 1)


# The rounds, in the order they run (see federated_coreset_kmeans).
LOCAL_COST = per_client("coreset local cost")
# The drawn rows are rows of X...
SAMPLING = raw_rows("coreset sampling", rows=_coreset_rows)
# ... or per-sample rows of another protocol's output (kernel k-means'
# spectral embedding: not X, but one row per sample, so a statistic of one
# client seen alone). Embedded rows of at least d columns determine their
# rows of X for a server that made the embedding (it solves z(x)ᵀV = h for
# x): counted in the ledger (see embedded_sampling), and refused with raw
# rows.
EMBEDDED_SAMPLING = Round(
    "coreset sampling", Disclosure(PER_CLIENT), determines_rows=True
)
# Each client's cost under each of the server's candidate solutions.
CANDIDATE_COSTS = sum_only("coreset candidate costs")
# Distributed Lloyd (k-FED's refinement runs it too).
REFINEMENT = sum_only("lloyd refinement")
# The labels, with each client's cost against the final centers...
LABELS = sum_only("coreset labels")
# ... or without (nothing uploaded).
LABELS_ONLY = download("coreset labels")


def embedded_sampling(n_features):
    """:data:`EMBEDDED_SAMPLING` counting, in the ledger, the uploads whose
    embedded rows determine rows of X (of ``n_features`` columns)."""
    disclosure = EMBEDDED_SAMPLING.disclosure._replace(
        rows=partial(_embedded_rows, n_features=n_features)
    )
    return EMBEDDED_SAMPLING._replace(disclosure=disclosure)


def coreset_rounds(
    refine_iter=0, *, embedded=False, exact_inertia=True, candidates=False
):
    """The rounds :func:`federated_coreset_kmeans` runs with these options,
    the refinement once per run (``"auto"``: at most
    ``_AUTO_REFINE_ITER``); ``candidates`` with ``n_candidates > 1``."""
    if refine_iter == "auto":
        refine_iter = _AUTO_REFINE_ITER
    return (
        LOCAL_COST,
        EMBEDDED_SAMPLING if embedded else SAMPLING,
        *((CANDIDATE_COSTS,) if candidates else ()),
        *(REFINEMENT,) * int(refine_iter),
        LABELS if exact_inertia else LABELS_ONLY,
    )


class CoresetKMeansResult(NamedTuple):
    """What :func:`federated_coreset_kmeans` returns (server-side results).

    Attributes
    ----------
    cluster_centers : ndarray of shape (k, s)
        The final centers (float64).
    inertia : float
        Exact weighted cost of the clients' rows against the final centers
        (summed from one float per client) when ``exact_inertia=True``;
        otherwise equal to ``coreset_inertia``.
    coreset_inertia : float
        Weighted cost of the coreset solution on the coreset (before any
        refinement).
    n_iter : int
        Weighted Lloyd iterations of the winning server restart.
    n_refine_iter : int
        Rounds of distributed Lloyd run after the coreset solution.
    coreset_size : int
        Number of weighted points the server clustered (Σ t_m + Σ k_m).
    sample_counts : ndarray of int
        t_m per client, aligned with ``fed.client_ids`` after the protocol.
    weight_sums : ndarray
        Sum of the coreset weights uploaded by each client (its n_m, or its
        total sample weight), aligned like ``sample_counts``.
    coreset_weights : ndarray of shape (coreset_size,)
        The weights of the coreset points.
    """

    cluster_centers: np.ndarray
    inertia: float
    coreset_inertia: float
    n_iter: int
    n_refine_iter: int
    coreset_size: int
    sample_counts: np.ndarray
    weight_sums: np.ndarray
    coreset_weights: np.ndarray


def federated_coreset_kmeans(
    fed,
    *,
    n_clusters,
    coreset_size,
    random_state,
    n_init=10,
    max_iter=300,
    tol=1e-4,
    rows=None,
    weighted=False,
    local_max_iter=20,
    refine_iter=0,
    n_swaps=0,
    exact_inertia=True,
    n_candidates=1,
    verbose=0,
):
    """Distributed coreset k-means (Balcan–Ehrlich–Liang 2013) on a federation.

    Three rounds on an open federation (call it inside ``with fed:``), plus
    optional refinement rounds:

    1. ``"coreset local cost"`` — client m computes a local solution B_m
       (k-means++ then Lloyd, k_m = min(k, n_m) centers) on its rows and
       uploads cost_m = Σ_p w_p d(p, B_m)²: 1 float up.
    2. ``"coreset sampling"`` — the server splits t = ``coreset_size``
       between clients ∝ cost_m (largest remainder) and sends t_m: 1 float
       down. Client m draws t_m rows with replacement with probability
       w_p d(p, B_m)² / cost_m and uploads them, its k_m centers and their
       weights: (t_m + k_m)(s + 1) floats up for dense rows (CSR rows are
       uploaded as CSR and counted as data + indices + indptr); a client
       with t_m ≥ n⁺_m (its rows of positive weight) uploads those rows and
       their weights instead, n⁺_m (s + 1) floats, exact. The server runs
       weighted k-means on the union, then up to ``n_swaps`` swap trials.
    3. ``"lloyd refinement"`` (only with ``refine_iter > 0``, at most that
       many times) — the server broadcasts the centers (k·s floats down);
       each client uploads, per cluster, the weighted sum of its rows'
       displacements from the center and their weight (k(s + 1) floats up,
       sum-only); the server moves the centers to the means.
    4. ``"coreset labels"`` — the server broadcasts the k final centers:
       k·s floats down. Each client labels its rows and keeps the labels in
       its ``"coreset"`` state as ``"labels"``; with ``exact_inertia`` it uploads its
       cost against the centers: 1 float up.

    Parameters
    ----------
    fed : Federation
        Open federation (inside its ``with`` block).
    n_clusters : int
        k, the number of clusters.
    coreset_size : int
        t, points drawn over all clients.
    random_state : RandomState
        The server's generator (the fit's ``rng``); seeds the restarts.
    n_init : int, default=10
        Restarts of the server's weighted k-means.
    max_iter : int, default=300
        Weighted Lloyd iterations per restart.
    tol : float, default=1e-4
        Relative center-shift tolerance (times the mean weighted variance).
    rows : (str, str), default=None
        Where each client finds the rows it clusters: ``(namespace, key)``
        of another protocol's client state (an (n_m, s) array or CSR
        matrix, e.g. FederatedKernelKMeans' spectral embedding); ``None``
        means the client's own ``X``.
    weighted : bool, default=False
        Whether the clients weigh their rows by their own sample weights
        (``client.sample_weight``); unit weights otherwise.
    local_max_iter : int, default=20
        Lloyd iterations of the local solutions B_m.
    refine_iter : int or "auto", default=0
        Largest number of distributed Lloyd rounds after the coreset
        solution; ``"auto"``: 3, or none when every client's upload was its
        data itself.
    n_swaps : int, default=0
        Largest number of the server's swap trials (``swap_centers``)
        after its restarts.
    exact_inertia : bool, default=True
        Whether clients upload their exact cost against the final centers in
        round 3 (1 float each).
    n_candidates : int, default=1
        Distinct solutions of the server's restarts (the cheapest on the
        coreset first) whose cost on the clients' rows decides between
        them; 1 keeps the coreset's choice, with no round.
    verbose : int, default=0
        At 2 and above, a summary of the server's restarts and the center
        shift of each refinement round (the federation prints one line per
        round when its own ``verbose`` is positive).

    Returns
    -------
    result : CoresetKMeansResult
        Centers, inertia, Lloyd iterations and coreset diagnostics. Labels
        stay on the clients: ``fed.assemble("coreset", "labels", n_samples)``.
    """
    common = {"rows": None if rows is None else tuple(rows), "weighted": weighted}
    sampling = SAMPLING if rows is None else embedded_sampling(fed.n_features)

    # The allocation t_m ∝ cost_m needs each client's cost.
    costs = fed.run_round(
        LOCAL_COST,
        partial(
            _local_solution_step,
            n_clusters=n_clusters,
            max_iter=local_max_iter,
            tol=tol,
            **common,
        ),
    )
    sample_counts = allocate_samples(np.asarray(costs, dtype=np.float64), coreset_size)
    asked = list(fed.client_ids)
    coresets = fed.run_round(
        sampling,
        partial(_coreset_step, **common),
        messages=[int(t) for t in sample_counts],
    )
    # A client dropped in this round (on_client_error="drop") sent nothing.
    answered = [c in fed.client_ids for c in asked]
    sample_counts = np.array(
        [t for t, kept in zip(sample_counts, answered) if kept], dtype=int
    )
    costs = [cost for cost, kept in zip(costs, answered) if kept]
    points, coreset_weights = merge_coresets(coresets)
    weight_sums = np.array([math.fsum(c[2]) for c in coresets])
    distinct, distinct_weights = _distinct_points(
        points, coreset_weights, by_value=rows is not None
    )
    centers, coreset_inertia, n_iter, candidates = weighted_kmeans(
        distinct,
        distinct_weights,
        n_clusters,
        random_state=random_state,
        n_init=n_init,
        max_iter=max_iter,
        tol=tol,
        verbose=verbose > 1,
        n_candidates=n_candidates,
    )
    # The clients' costs scaled by the coreset's mean cost per row, a scale
    # the server already holds: about their row counts, whatever the data's
    # units, so that a masked sum fits the fixed point (a sum of squares of
    # unscaled data did not) and keeps its precision relative to the cost.
    scale = float(coreset_inertia) / max(fed.n_samples, 1)
    scale = scale if np.isfinite(scale) and scale > 0 else 1.0
    if n_candidates > 1:
        totals = fed.run_round(
            CANDIDATE_COSTS,
            partial(candidate_costs_step, cost_scale=scale, **common),
            candidates,
        )
        # The coreset's choice unless another is cheaper beyond rounding.
        totals = np.asarray(totals, dtype=np.float64)
        cheapest = totals.min()
        chosen = int(np.argmax(totals <= cheapest + SAME_COST * abs(cheapest)))
        if chosen:
            centers = candidates[chosen]
            d2 = assign_around_centers(distinct, centers)[1]
            coreset_inertia = float(distinct_weights @ d2)
    if n_swaps > 0:
        centers, coreset_inertia = swap_centers(
            distinct,
            distinct_weights,
            centers,
            coreset_inertia,
            n_swaps=n_swaps,
            random_state=random_state,
            max_iter=max_iter,
            tol=tol,
            verbose=verbose > 1,
        )
    if refine_iter == "auto":
        refine_iter = 0 if _coreset_is_exact(costs, coresets) else _AUTO_REFINE_ITER
    # A move of the centers' rounding noise is none: the displacement sums
    # of a fixed point are rounding, not 0 (without this, tol=0 would never
    # stop).
    tol_abs = max(
        tolerance(points, coreset_weights, tol),
        n_clusters * rounding_noise(centers),
    )
    n_refine_iter = 0
    for _ in range(refine_iter):
        stats = fed.run_round(REFINEMENT, partial(cluster_sums_step, **common), centers)
        centers, shift = lloyd_update(centers, stats)
        n_refine_iter += 1
        if verbose > 1:
            print(
                f"[skfed] lloyd refinement {n_refine_iter}: center shift {shift:.3g}",
                file=sys.stderr,
            )
        if shift <= tol_abs:
            break
    # The total cost is a sum (of exact floats, fsum'd: order-free), each
    # client's scaled as the candidates' costs above.
    inertia = fed.run_round(
        LABELS if exact_inertia else LABELS_ONLY,
        partial(label_step, exact_inertia=exact_inertia, cost_scale=scale, **common),
        centers,
    )
    inertia = inertia * scale if exact_inertia else coreset_inertia
    return CoresetKMeansResult(
        cluster_centers=centers,
        inertia=inertia,
        coreset_inertia=coreset_inertia,
        n_iter=n_iter,
        n_refine_iter=n_refine_iter,
        coreset_size=int(points.shape[0]),
        sample_counts=sample_counts,
        weight_sums=weight_sums,
        coreset_weights=coreset_weights,
    )


def client_rows(client, rows):
    """The rows a client clusters: its X (``rows`` None), or another
    protocol's output kept under ``rows = (namespace, key)``."""
    return client.X if rows is None else client.read(*rows)


def _client_weights(client, weighted, n_rows):
    if not weighted:
        return np.ones(n_rows)
    return np.asarray(client.sample_weight, dtype=np.float64)


# Over small clients in the server's thread: 1,000 clients of 100 rows took
# 0.26 s there, 0.43 s on two threads (the interpreter's work around the
# batched k-means) and 0.30 s in two processes, which receive the rows first.
@client_step("coreset.local_solution", python_bound=True, in_processes=False)
def _local_solution_step(
    client, state, message, *, rows, weighted, n_clusters, max_iter, tol
):
    """Client: local solution B_m and its cost (step 1 of §5).

    Upload: cost_m = Σ_p w_p d(p, B_m)², 1 float. A small dense client's
    k-means is handed over to be solved with other clients' (a generator
    step, see :mod:`skfed._engine._protocol`).
    """
    X = client_rows(client, rows)
    n = X.shape[0]
    w = _client_weights(client, weighted, n)
    # Work on the rows in an order fixed by their values alone, so that
    # neither the client's random choices nor the rounding of its sums (and
    # hence its upload, bit for bit) depend on how its samples are stored.
    # Rows another protocol computed from X (kernel k-means' embedding)
    # carry the rounding of the sums they came from (and a noised fit's
    # noise), which moves their hashes: X's own rows order them.
    order = canonical_row_order(X if rows is None else client.X, w)
    X, w = X[order], w[order]
    # Around the client's own mean: expanded squared distances on raw
    # coordinates cancel on data far from the origin.
    X, shift = centered(X, w)
    noise = rounding_noise(X)
    x_sq = sq_norms(X)
    if n <= n_clusters:
        centers = dense_rows(X, np.arange(n)).astype(np.float64)
        labels = np.arange(n)
        d2 = np.zeros(n)
    elif not np.any(w > 0):
        # Nothing of positive weight: any centers will do, the cost is 0.
        centers = dense_rows(X, np.arange(n_clusters)).astype(np.float64)
        labels, d2 = assign(X, x_sq, centers)
    else:
        rng = client.random_state("coreset.local_solution")
        if sp.issparse(X) or n > SMALL_ROWS:
            seeds = weighted_kmeans_plusplus(
                X, w, n_clusters, rng, x_sq=x_sq, noise=noise
            )
            centers = dense_rows(X, seeds).astype(np.float64)
            centers, labels, d2, _ = weighted_lloyd(
                X, w, centers, x_sq, max_iter, tolerance(X, w, tol), tie=noise
            )
        else:
            # Handed over: the transport solves many small clients' k-means
            # together (see skfed._engine._protocol).
            centers, labels, d2, _ = yield KMeansProblem(
                X,
                w,
                n_clusters,
                n_init=1,
                max_iter=max_iter,
                tol_abs=tolerance(X, w, tol),
                random_state=rng,
                tie=noise,
            )
    cost = float(w @ d2)
    # Everything below is in canonical row order; the centers are kept (and
    # later uploaded) in the data's own coordinates.
    state = {
        "order": order,
        "centers": centers + shift,
        "labels": labels,
        "d2": d2,
        "cost": cost,
    }
    return state, cost


@client_step("coreset.sample")
def _coreset_step(client, state, message, *, rows, weighted):
    """Client: D² sampling of t_m rows and the weights (step 3 of §5).

    Upload: (local centers, drawn rows, weights) — (t_m + k_m)(s + 1) floats
    for dense rows. Weights sum to Σ_p w_p (n_m for unit weights). When
    t_m is at least the number of rows of positive weight n⁺_m, those rows
    and their weights are uploaded instead (n⁺_m (s + 1) floats): the exact
    data, no larger than a coreset.
    """
    X = client_rows(client, rows)
    order, centers, labels = state["order"], state["centers"], state["labels"]
    d2, cost = state["d2"], state["cost"]
    w = _client_weights(client, weighted, X.shape[0])[order]
    t = int(message)
    kept = order[w > 0]
    if t >= kept.shape[0]:
        # A budget that covers the client's rows: the rows themselves, each
        # with its own weight, are an exact summary and no larger.
        sample = X[kept]
        return {}, (centers[:0].astype(X.dtype), sample, w[w > 0])
    k_m = centers.shape[0]
    center_weights = np.bincount(labels, weights=w, minlength=k_m)
    if t > 0 and cost > 0:
        p = w * d2
        rng = client.random_state("coreset.sample")
        drawn = draw(rng, p, t)
        sample_weights = cost / (t * d2[drawn])
        # Each drawn point stands for part of its local cluster; the center
        # keeps the rest, negative when the draws over-represent the cluster.
        center_weights = center_weights - np.bincount(
            labels[drawn], weights=sample_weights, minlength=k_m
        )
        sample = X[order[drawn]]
    else:
        sample_weights = np.zeros(0)
        sample = X[:0]
    upload = (
        centers.astype(X.dtype, copy=False),
        sample,
        np.concatenate([center_weights, sample_weights]),
    )
    return {}, upload


# Over small clients in the server's thread: a few passes over a client's
# rows, mostly interpreter work at 100 rows (1,000 clients: 0.028 s a
# round there, 0.040 s on two threads), repeated for a few Lloyd rounds,
# too few for the transport's timings to pay for their trials.
@client_step(
    "coreset.cluster_sums", sum_only=True, python_bound=True, in_processes=False
)
def cluster_sums_step(client, state, message, *, rows, weighted, min_rows=None):
    """Client: per-cluster weighted sums and weights (distributed Lloyd).

    Upload: Σ_p w_p (p − c_j) over the rows p closest to each center c_j,
    and Σ_p w_p: k(s + 1) floats. Sums of the rows' displacements from
    their centers, not of the rows: they do not grow with the data's
    distance from the origin, which keeps them exact far from it and
    within the range of secure aggregation's fixed point (2^31 / M).

    With ``min_rows`` (``raw_rows="refuse"``) a cluster this client holds
    fewer distinct rows of is left out of its upload (zero sum and
    weight): its sum and weight would give its rows away. The server's
    update then moves that center with the other clients' rows only.
    """
    X = client_rows(client, rows)
    centers = np.asarray(message, dtype=np.float64)
    tie = rounding_noise(centers)
    X, centers = around_centers(X, centers)
    labels, _ = assign(X, sq_norms(X), centers, d2=None, tie=tie)
    w = _client_weights(client, weighted, X.shape[0])
    sums, totals = cluster_sums(X, w, labels, centers.shape[0])
    if min_rows:
        for j in np.flatnonzero(totals > 0):
            held = labels == j
            if n_distinct_rows(X[held], w[held]) < min_rows:
                sums[j], totals[j] = 0.0, 0.0
    return state, (sums - totals[:, None] * centers, totals)


@client_step("coreset.candidate_costs", sum_only=True)
def candidate_costs_step(client, state, message, *, rows, weighted, cost_scale):
    """Client: its weighted cost under each of the server's candidate
    solutions, divided by ``cost_scale``.

    Upload: c floats, one per candidate (``message``, c sets of k centers).
    """
    X = client_rows(client, rows)
    w = _client_weights(client, weighted, X.shape[0])
    costs = [
        float(w @ assign_around_centers(X, np.asarray(c, dtype=X.dtype))[1])
        for c in message
    ]
    return state, np.array(costs) / cost_scale


@client_step("coreset.labels", sum_only=True)
def label_step(
    client, state, message, *, rows, weighted, exact_inertia, cost_scale=1.0
):
    """Client: label own rows against the server's centers (step 4 of §5).

    Upload: the client's weighted cost against the centers divided by
    ``cost_scale`` (1 float) when ``exact_inertia``, else nothing.
    """
    X = client_rows(client, rows)
    # Label with the centers in the rows' precision, as the estimator stores
    # them, so that predict on the training rows reproduces these labels.
    centers = np.asarray(message, dtype=X.dtype)
    labels, d2 = assign_around_centers(X, centers)
    state = {"labels": labels.astype(np.int32, copy=False)}
    if not exact_inertia:
        return state, None
    w = _client_weights(client, weighted, X.shape[0])
    return state, float(w @ d2) / cost_scale


# Distributed Lloyd rounds of refine_iter="auto" (none when the coreset is
# the data itself).
_AUTO_REFINE_ITER = 3


# t = max(_AUTO_CORESET_MIN, _AUTO_CORESET_PER_CLUSTER * k) for
# coreset_size="auto" (DistributedKMeans).
_AUTO_CORESET_MIN = 1000


_AUTO_CORESET_PER_CLUSTER = 125


def auto_coreset_size(n_clusters):
    """t for ``coreset_size="auto"``: max(1000, 125 k).

    Balcan, Ehrlich & Liang's sample size is O(ε⁻⁴ (k d + log 1/δ) + m k
    log(m k / δ)), linear in k. The constant keeps t = 1000 up to k = 8
    and, at k = 64 (t = 8,000), a cost close to KMeans'
    (``benchmarks/bench_coreset.py``).
    """
    return max(_AUTO_CORESET_MIN, _AUTO_CORESET_PER_CLUSTER * int(n_clusters))


def allocate_samples(costs, coreset_size):
    """Server: split the sample budget t ∝ cost_m (step 2 of §5).

    Largest-remainder rounding so that Σ t_m = t, with one exception that
    keeps the split independent of the order and names of the clients:
    clients with exactly equal costs are indistinguishable to the server, so
    they get one leftover sample each or none; a group that does not fit
    in what is left gets none, and Σ t_m may then fall short of t by less
    than the size of that group. A client with cost 0 gets no samples; if
    every cost is 0 nobody samples (the local centers with their counts are
    then exact).

    Parameters
    ----------
    costs : ndarray of shape (n_clients,)
        cost_m.
    coreset_size : int
        t.

    Returns
    -------
    t_m : ndarray of int of shape (n_clients,)
    """
    costs = np.maximum(np.asarray(costs, dtype=np.float64), 0.0)
    total = costs.sum()
    if not total > 0:
        return np.zeros(len(costs), dtype=np.intp)
    raw = costs / total * coreset_size
    counts = np.floor(raw).astype(np.intp)
    short = int(coreset_size - counts.sum())
    remainder = raw - counts
    # Only clients with a positive cost may receive the leftover samples:
    # largest remainder first, a group of equal costs all at once.
    candidates = np.unique(costs[costs > 0])[::-1]
    for cost in sorted(candidates, key=lambda c: -remainder[costs == c][0]):
        group = costs == cost
        size = int(group.sum())
        if size <= short:
            counts[group] += 1
            short -= size
    return counts


def _coreset_is_exact(costs, coresets):
    """Whether every client's upload is its data itself: its rows (a budget
    that covered them) or its centers with local cost 0. The server's
    weighted Lloyd then already ran on the data, and a distributed Lloyd
    round would repeat it."""
    return all(
        cost == 0 or centers.shape[0] == 0
        for cost, (centers, _, _) in zip(costs, coresets)
    )


def merge_coresets(coresets):
    """Server: the union of the clients' coresets, in a canonical order.

    Clients are taken in an order fixed by the content of their uploads, so
    that renaming or reordering clients does not change the server's random
    restarts.

    Parameters
    ----------
    coresets : list of (centers, sample, weights)
        The uploads of the ``"coreset sampling"`` round.

    Returns
    -------
    points : ndarray or CSR matrix of shape (n_points, s)
        Float64; CSR when any client uploaded CSR rows.
    weights : ndarray of shape (n_points,)
    """
    blocks = [block for centers, sample, _ in coresets for block in (centers, sample)]
    if any(sp.issparse(b) for b in blocks):
        points = sp.vstack([sp.csr_matrix(b) for b in blocks], format="csr")
        points = points.astype(np.float64)
    else:
        points = np.vstack(blocks).astype(np.float64)
    weights = [np.asarray(w, dtype=np.float64) for _, _, w in coresets]
    # Every uploaded row hashed in one call (a call per client cost 40 us
    # of a 1,000-client fit's server time), then cut by client.
    stops = np.cumsum([len(w) for w in weights])
    hashes = np.split(row_hashes(points, np.concatenate(weights)), stops[:-1])
    keys = [_content_key(w, h) for w, h in zip(weights, hashes)]
    order = sorted(range(len(keys)), key=keys.__getitem__)
    rows = np.concatenate(
        [np.arange(stops[i] - len(weights[i]), stops[i]) for i in order]
    )
    return points[rows], np.concatenate([weights[i] for i in order])


def _distinct_points(points, weights, *, by_value=False):
    """Equal points as one point with their total weight, in an order set
    by the points' values.

    Weighted k-means is the same problem either way. The server's input,
    and hence its draws, are then the same for a weighted sample as for
    the sample repeated (a coreset that is the whole data), as scikit-learn
    asks of ``sample_weight``. The order is that of the points rounded to
    float32 (:func:`~skfed._numerics._rows.canonical_row_order`), so that points that
    differ by rounding only (centers summed in another order, dense or CSR
    rows) keep their places. With ``by_value`` (dense points computed from
    sums, kernel k-means' embedding) it is the lexicographic order of the
    values themselves: the rounding of the sums they came from moves a value
    across a float32 rounding boundary often enough to reorder hashes, and
    the values' order only where two points' coordinates nearly tie.
    """
    hashes = row_hashes(points)
    _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    # Equal hashes almost surely mean equal rows; if not, keep every point.
    if rows_equal(points[first[inverse]], points):
        points = points[first]
        weights = np.bincount(inverse, weights=weights, minlength=len(first))
    if by_value and not sp.issparse(points):
        order = np.lexsort(points.T[::-1])
    else:
        order = canonical_row_order(points)
    return points[order], weights[order]


def lloyd_update(centers, stats):
    """Server: one distributed Lloyd update from the clients' cluster sums.

    Parameters
    ----------
    centers : ndarray of shape (k, s)
        The centers the clients assigned against.
    stats : (displacements, totals)
        The ``(k, s)`` weighted sums of the rows' displacements from their
        centers, Σ_p w_p (p − c_j), and the ``(k,)`` weights, summed over
        clients (a sum-only round).

    Returns
    -------
    centers : ndarray of shape (k, s)
        Weighted means; a cluster with no weight keeps its center.
    shift : float
        Squared distance moved, summed over centers.
    """
    displacements, totals = stats
    movable = totals > 0
    step = np.zeros_like(centers)
    step[movable] = displacements[movable] / totals[movable, None]
    return centers + step, float((step**2).sum())


def _content_key(weights, hashes):
    """Order-free sort key of one client's upload: its weights and the
    exact hashes of its weighted rows.

    The weights' summaries come first, rounded to 10 significant digits so
    that uploads equal up to rounding (e.g. the same rows held dense or
    sparse) sort alike. They tie for clients whose weights are all alike
    (e.g. clients of at most k rows with unit weights); the hashes then
    decide, never the clients' order.
    """
    return (
        len(weights),
        float(f"{float(weights @ weights):.10g}"),
        float(f"{float(weights.sum()):.10g}"),
        np.sort(hashes).tobytes(),
    )
