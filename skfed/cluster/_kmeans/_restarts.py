"""The best of several weighted k-means runs, and swaps after them: the
server's k-means on a coreset or on pooled centers (any sign of weight)."""

import sys

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_random_state

from ..._numerics._seeds import SEED_MAX
from ._assign import (
    assign,
    centered,
    dense_rows,
    draw,
    rounding_noise,
    sq_dist,
    sq_norms,
    tolerance,
)
from ._batched import kmeans_restarts
from ._lloyd import weighted_lloyd
from ._seeding import weighted_kmeans_plusplus

__all__ = ["SAME_COST", "distinct_solutions", "swap_centers", "weighted_kmeans"]


# Relative cost difference below which two restarts count as equally good.
SAME_COST = 1e-12


# The server's k-means runs its restarts side by side (batched k-means)
# on points of at most this many features, if restarts times points times
# max(k, features) is at most _BATCHED_RESTARTS_FLOATS (arrays of about
# that many floats, 32 MB); otherwise one after another. With more features
# the arithmetic outweighs the per-restart overhead that batching saves, and
# CSR points would be densified.
_BATCHED_RESTARTS_FEATURES = 128


_BATCHED_RESTARTS_FLOATS = 2**22


# Swap trials of swap_centers stop after this many rejected in a row.
_SWAP_PATIENCE = 8


def weighted_kmeans(
    X,
    sample_weight,
    n_clusters,
    *,
    random_state,
    n_init=10,
    max_iter=300,
    tol=1e-4,
    verbose=0,
    n_candidates=None,
):
    """Server: weighted k-means on the coreset, weights of any sign (step 4).

    ``n_init`` restarts of weighted k-means++ (drawing only points of
    positive weight) followed by weighted Lloyd; a cluster whose total
    weight is not positive keeps its previous center. The restart with the
    lowest weighted cost wins. On points of few features the restarts run
    side by side (:func:`~skfed.cluster._kmeans.kmeans_restarts`,
    see ``_BATCHED_RESTARTS_FLOATS``), otherwise one after another; which
    depends on the shape alone, not on dense or CSR storage.

    Parameters
    ----------
    X : ndarray or CSR matrix of shape (n_points, s)
    sample_weight : ndarray of shape (n_points,)
        May contain negative values; must have some positive ones.
    n_clusters : int
    random_state : RandomState
    n_init, max_iter, tol, verbose
        As in :class:`DistributedKMeans`.
    n_candidates : int, default=None
        Also return up to this many distinct solutions of the restarts
        (:func:`distinct_solutions`), for a choice on the whole data.

    Returns
    -------
    centers : ndarray of shape (n_clusters, s)
    inertia : float
        Weighted cost Σ_i w_i min_j ‖x_i − c_j‖² (may be negative).
    n_iter : int
    candidates : ndarray of shape (n, n_clusters, s)
        With ``n_candidates``: ``centers`` first, then the other distinct
        solutions by increasing cost.
    """
    if not np.any(sample_weight > 0):
        raise ValueError(
            "The coreset has no point of positive weight; give some samples a "
            "positive sample_weight."
        )
    rng = check_random_state(random_state)
    # Around the points' mean (their order is fixed by their content, so
    # the mean does not depend on the clients' names): see centered.
    noise = rounding_noise(X)
    n_points, n_features = X.shape
    if (
        n_features <= _BATCHED_RESTARTS_FEATURES
        and n_init * n_points * max(n_clusters, n_features) <= _BATCHED_RESTARTS_FLOATS
    ):
        # The restarts side by side, the same algorithm: half the time of
        # one after another on the 10,000 points of 1,000 clients. The
        # choice depends on the shape alone, so CSR points (densified,
        # small by these bounds) get the dense points' model.
        dense = X.toarray() if sp.issparse(X) else X
        X, shift = centered(np.asarray(dense, dtype=np.float64))
        centers, _, d2, n_iter, (costs, iters, solutions) = kmeans_restarts(
            X,
            sample_weight,
            n_clusters,
            n_init=n_init,
            max_iter=max_iter,
            tol_abs=tolerance(X, sample_weight, tol),
            random_state=rng,
            tie=noise,
            same_cost=SAME_COST,
            return_runs=True,
        )
        if verbose:
            _report_restarts(iters, costs)
        best = (centers + shift, float(sample_weight @ d2), n_iter)
        if n_candidates is None:
            return best
        others = distinct_solutions(best, solutions + shift, costs, n_candidates)
        return (*best, others)
    X, shift = centered(X)
    x_sq = sq_norms(X)
    tol_abs = tolerance(X, sample_weight, tol)
    best, runs, solutions = None, [], []
    for seed in rng.randint(SEED_MAX, size=n_init):
        seeds = weighted_kmeans_plusplus(
            X,
            sample_weight,
            n_clusters,
            np.random.RandomState(seed),
            x_sq=x_sq,
            noise=noise,
        )
        init = dense_rows(X, seeds).astype(np.float64)
        centers, _, d2, n_iter = weighted_lloyd(
            X, sample_weight, init, x_sq, max_iter, tol_abs, tie=noise
        )
        inertia = float(sample_weight @ d2)
        runs.append((n_iter, inertia))
        solutions.append(centers + shift)
        # Restarts that reach one solution (its centers in another order)
        # differ in cost by rounding only, which depends on how the arrays
        # lie in memory (a client's rows after transport, say): the first
        # of them is kept, so that the model does not.
        if best is None or inertia < best[1] - SAME_COST * abs(best[1]):
            best = (centers + shift, inertia, n_iter)
    if verbose:
        _report_restarts(*zip(*runs))
    if n_candidates is None:
        return best
    costs = np.array([inertia for _, inertia in runs])
    return (*best, distinct_solutions(best, np.stack(solutions), costs, n_candidates))


# Relative cost difference above which two restarts count as different
# solutions: restarts that reach one solution differ by rounding only.
_DISTINCT_COST = 1e-9


def distinct_solutions(best, solutions, costs, n_candidates):
    """The restarts' ``best`` solution (centers, cost, ...) as
    :func:`weighted_kmeans` picks it, then up to ``n_candidates - 1`` of
    the other ``solutions`` (centers of each restart, with their
    ``costs``), one per distinct cost, by increasing cost.

    On a coreset, two solutions whose costs differ by less than the
    coreset's sampling error are not told apart: of two rings at γ = 10,
    the split across both rings cost 0.3% less than the rings themselves on
    one seed's coreset and 1.0% more on the data. The server asks the
    clients for each candidate's cost (``n_candidates`` of
    :func:`~skfed.cluster._protocols._coreset.federated_coreset_kmeans`).
    """
    kept_costs = [best[1]]
    kept = [best[0]]
    for i in np.argsort(costs, kind="stable"):
        if len(kept) == n_candidates:
            break
        scale = _DISTINCT_COST * max(abs(costs[i]), np.finfo(float).tiny)
        if all(abs(costs[i] - c) > scale for c in kept_costs):
            kept_costs.append(costs[i])
            kept.append(solutions[i])
    return np.stack(kept)


def swap_centers(
    X,
    sample_weight,
    centers,
    inertia,
    *,
    n_swaps,
    random_state,
    max_iter=300,
    tol=1e-4,
    verbose=0,
):
    """Server: swap local search on the coreset after the restarts.

    Lloyd cannot move a center across the data: on a mixture of many
    clusters it leaves two centers in one cluster and one center over two,
    and on a coreset, whose local centers carry large (and negative)
    weights, it settles after a few iterations. Each trial removes the
    center whose points cost least to hand to their second closest center,
    puts it on the best of 2 + log(k) points drawn ∝ w⁺ D² (as in k-means++),
    runs weighted Lloyd from there and keeps the result if it lowers the
    weighted coreset cost. At most ``n_swaps`` trials, and none after
    ``_SWAP_PATIENCE`` rejected ones in a row.

    Parameters
    ----------
    X : ndarray or CSR matrix of shape (n_points, s)
        The coreset's points.
    sample_weight : ndarray of shape (n_points,)
        Their weights (any sign).
    centers : ndarray of shape (k, s)
        The restarts' best centers.
    inertia : float
        Their weighted cost on the coreset.
    n_swaps : int
        Largest number of trials.
    random_state : RandomState
        The server's generator.
    max_iter, tol, verbose
        As in :func:`weighted_kmeans`.

    Returns
    -------
    centers : ndarray of shape (k, s)
    inertia : float
        Their weighted cost on the coreset. Both are the given ones, as
        given, when no trial lowered the cost.
    """
    start = (centers, inertia)
    n_clusters = centers.shape[0]
    noise = rounding_noise(X)
    X, shift = centered(X)
    centers = centers - shift
    x_sq = sq_norms(X)
    tol_abs = tolerance(X, sample_weight, tol)
    positive = np.maximum(sample_weight, 0.0)
    n_trials = 2 + int(np.log(n_clusters))
    rows = np.arange(X.shape[0])
    d2 = sq_dist(X, x_sq, centers)
    cost = float(sample_weight @ d2.min(axis=1))
    rejected = accepted = trials = 0
    while n_clusters > 1 and trials < n_swaps and rejected < _SWAP_PATIENCE:
        trials += 1
        # What removing each center costs: its points go to their second
        # closest center.
        closest = np.argpartition(d2, 1, axis=1)[:, :2]
        first, second = d2[rows, closest[:, 0]], d2[rows, closest[:, 1]]
        loss = np.bincount(
            closest[:, 0],
            weights=sample_weight * (second - first),
            minlength=n_clusters,
        )
        removed = int(np.argmin(loss))
        rest = np.delete(d2, removed, axis=1).min(axis=1)
        potential = positive * np.where(rest > noise, rest, 0.0)
        if not potential.sum() > 0:
            break
        candidates = np.minimum(draw(random_state, potential, n_trials), X.shape[0] - 1)
        candidate_d2 = np.minimum(
            rest[None, :], sq_dist(X, x_sq, dense_rows(X, candidates)).T
        )
        trial = centers.copy()
        trial[removed] = dense_rows(
            X, [candidates[np.argmin(candidate_d2 @ sample_weight)]]
        )[0]
        trial, _, _, _ = weighted_lloyd(
            X, sample_weight, trial, x_sq, max_iter, tol_abs, tie=noise
        )
        trial_d2 = sq_dist(X, x_sq, trial)
        trial_cost = float(sample_weight @ trial_d2.min(axis=1))
        if trial_cost < cost - SAME_COST * abs(cost):
            centers, d2, cost = trial, trial_d2, trial_cost
            accepted += 1
            rejected = 0
        else:
            rejected += 1
    if verbose:
        print(
            f"[skfed] coreset k-means: {trials} swap trials, {accepted} kept, "
            f"weighted cost {cost:.6g}",
            file=sys.stderr,
        )
    if not accepted:
        return start
    # The cost from exact distances, as the restarts report theirs.
    _, d2 = assign(X, x_sq, centers, tie=noise)
    return centers + shift, float(sample_weight @ d2)


def _report_restarts(iters, costs):
    """One line for the server's restarts: restarts that reach one solution
    would otherwise print the same line again and again."""
    costs = np.asarray(costs, dtype=float)
    best = costs.min()
    n_best = int(np.sum(costs <= best + SAME_COST * abs(best)))
    print(
        f"[skfed] coreset k-means: {len(costs)} restarts, "
        f"{min(iters)}-{max(iters)} iterations, best weighted cost "
        f"{best:.6g} (reached by {n_best})",
        file=sys.stderr,
    )
