"""Weighted k-means restarts on small dense arrays, many problems together.

A client of a few hundred rows runs k-means++ and Lloyd in well under a
millisecond of arithmetic, but one restart after another pays numpy's
per-call overhead for every center drawn and every Lloyd step: a fit over
1,000 such clients cost ten times one over 10 clients of the same rows.
Here the restarts of a problem advance side by side as arrays with a
leading restart axis, and so do the problems of many clients (a
transport that holds them solves their :class:`KMeansProblem` s together,
see :func:`~skfed._engine._protocol.solve_together`): the Python-level loop runs k
times for the seeding and at most ``max_iter`` times for Lloyd, whatever
``n_init`` and however many clients.

Each restart is the same algorithm as the one-at-a-time functions of
:mod:`skfed.cluster._kmeans` (greedy weighted k-means++, then weighted
Lloyd that stops on unchanged labels, a small center shift, or an update
that would raise the cost); only the random draws are taken in another
order. A problem's rows are padded with rows of weight zero to a length
that depends on its own row count only (:func:`_padded_rows`), so its
arithmetic is the same alone as beside any other problems: a client's
answer does not depend on which clients share its batch, its worker, or
its transport. Memory is O(n_init · n · max(k, d)) per problem and about
``_BATCH_ELEMENTS`` floats per batch: meant for clients' arrays of at most
a few thousand rows (see ``skfed.cluster._kmeans.SMALL_ROWS``), and for
the server's restarts on points whose arrays stay within a bound (see
:func:`~skfed.cluster._kmeans.weighted_kmeans`).
"""

from typing import NamedTuple

import numpy as np

from ._assign import WEIGHT_EPS

__all__ = [
    "KMeansProblem",
    "kmeans_restarts",
    "solve_kmeans_problems",
]

# Largest intermediate array of one batch, in floats (2 MB): about 70
# clients of 100 rows with 3 restarts of k = 10. Batches of 32 MB arrays
# were 15% slower: glibc maps arrays that large afresh on every call (page
# faults), and they leave the caches.
_BATCH_ELEMENTS = 2**18
# Padding granule of a problem's rows: 32 rows, or from 1/16 to 1/8 of
# them from 512 rows on (see _padded_rows).
_ROW_GRANULE = 32


class KMeansProblem(NamedTuple):
    """One weighted k-means on dense rows, as a client step hands it over.

    A client step ``yield`` s it and receives ``(centers, labels, d2,
    n_iter)`` (see :func:`kmeans_restarts`, whose parameters these are);
    whoever runs the step may solve it together with other clients'.
    """

    X: np.ndarray
    w: np.ndarray
    n_clusters: int
    n_init: int
    max_iter: int
    tol_abs: float
    random_state: np.random.RandomState
    tie: float = 0.0
    same_cost: float = 0.0
    init: np.ndarray = None

    @classmethod
    def solve_all(cls, problems):
        """Answers to ``problems``, in order (see :mod:`skfed._engine._protocol`)."""
        return solve_kmeans_problems(problems)


def kmeans_restarts(
    X,
    w,
    n_clusters,
    *,
    n_init,
    max_iter,
    tol_abs,
    random_state,
    tie=0.0,
    same_cost=0.0,
    init=None,
    return_runs=False,
):
    """Best of ``n_init`` weighted k-means runs on dense rows.

    Parameters
    ----------
    X : ndarray of shape (n, d), float64
        Dense rows, best centered (squared distances are expanded).
    w : ndarray of shape (n,)
        Weights; k-means++ draws only rows of positive weight, some of
        which must exist.
    n_clusters : int
    n_init : int
        Restarts, ignored when ``init`` is given.
    max_iter : int
    tol_abs : float
        Lloyd stops when the centers move by at most this squared distance
        in total (or the labels do not change).
    random_state : RandomState
    tie : float, default=0.0
        Squared distance within which two centers count as equally close
        (the lower index wins); rounding noise of the data's magnitude.
    same_cost : float, default=0.0
        Relative difference of cost within which runs count as equally
        good; the first of them wins. Runs that reach one solution differ
        in cost by rounding only, which depends on how the arrays lie in
        memory: a tolerance keeps that from choosing the model.
    init : ndarray of shape (n_clusters, d), default=None
        Start Lloyd from these centers instead of k-means++.
    return_runs : bool, default=False
        Also return every run's weighted cost, Lloyd iterations and
        centers.

    Returns
    -------
    centers : ndarray of shape (n_clusters, d)
    labels : ndarray of shape (n,)
    d2 : ndarray of shape (n,)
        Squared distance of each row to its center, computed exactly.
    n_iter : int
        Lloyd iterations of the returned run.
    runs : tuple of ndarray
        With ``return_runs``: each run's weighted cost (from exact squared
        distances), Lloyd iterations and centers (n_init, n_clusters, d),
        in the order of the runs.
    """
    problem = KMeansProblem(
        X, w, n_clusters, n_init, max_iter, tol_abs, random_state, tie, same_cost, init
    )
    group = _group_key(problem)
    [(answer, runs)] = _solve_batch(
        [problem], group.n_runs, group.n_rows, with_runs=True
    )
    return (*answer, runs) if return_runs else answer


def solve_kmeans_problems(problems):
    """:func:`kmeans_restarts` on each problem, batched where shapes allow.

    Problems with the same k, d, number of runs, start (k-means++ or given)
    and ``max_iter`` whose padded row counts are equal share arrays, in
    batches of about ``_BATCH_ELEMENTS`` floats. Each problem's random
    draws come from its own ``random_state``, in the order they would be
    taken alone.
    """
    groups = {}
    for i, p in enumerate(problems):
        groups.setdefault(_group_key(p), []).append(i)
    results = [None] * len(problems)
    for (k, d, n_runs, _, _, n_rows), members in groups.items():
        widest = n_runs * n_rows * max(k, d, _n_trials(k))
        per_batch = max(1, _BATCH_ELEMENTS // widest)
        for start in range(0, len(members), per_batch):
            batch = members[start : start + per_batch]
            answers = _solve_batch([problems[i] for i in batch], n_runs, n_rows)
            for i, answer in zip(batch, answers):
                results[i] = answer
    return results


class _Group(NamedTuple):
    """What problems that share arrays have in common."""

    n_clusters: int
    n_features: int
    n_runs: int
    seeded: bool  # k-means++ starts (else a given init)
    max_iter: int
    n_rows: int  # padded


def _group_key(problem):
    return _Group(
        int(problem.n_clusters),
        problem.X.shape[1],
        1 if problem.init is not None else int(problem.n_init),
        problem.init is None,
        int(problem.max_iter),
        _padded_rows(problem.X.shape[0]),
    )


def _padded_rows(n):
    """Rows a problem of ``n`` rows is padded to: a function of ``n``
    alone, so that its arithmetic does not depend on its batch."""
    granule = max(_ROW_GRANULE, 1 << max(n.bit_length() - 4, 0))
    return -(-max(n, 1) // granule) * granule


def _n_trials(n_clusters):
    """k-means++ candidates per new center, 2 + log(k) (as scikit-learn)."""
    return 2 + int(np.log(n_clusters))


def _solve_batch(problems, n_runs, n_rows, with_runs=False):
    """Problems of one group: arrays of shape (problems, runs, rows, ...).

    With ``with_runs`` each answer is paired with its runs' costs,
    iterations and centers (see :func:`kmeans_restarts`)."""
    n_problems = len(problems)
    n_clusters, d = int(problems[0].n_clusters), problems[0].X.shape[1]
    X = np.zeros((n_problems, n_rows, d))
    w = np.zeros((n_problems, n_rows))
    sizes = np.array([p.X.shape[0] for p in problems])
    for j, p in enumerate(problems):
        X[j, : sizes[j]] = p.X
        w[j, : sizes[j]] = p.w
    padding = np.arange(n_rows)[None, :] >= sizes[:, None]
    tie = np.array([float(p.tie) for p in problems])
    x_sq = np.einsum("pij,pij->pi", X, X)
    if problems[0].init is not None:
        starts = np.stack([np.asarray(p.init, dtype=np.float64) for p in problems])
        starts = starts[:, None]
    else:
        rngs = [p.random_state for p in problems]
        starts = _seed(X, w, n_clusters, n_runs, rngs, tie)
    tol_abs = np.array([float(p.tol_abs) for p in problems])
    centers, labels, n_iter = _lloyd(
        X, w, x_sq, padding, starts, int(problems[0].max_iter), tol_abs, tie
    )
    # Exact squared distances (the expanded ones leave rounding noise, so
    # a point on its center would not cost exactly 0), and the cheapest run.
    runs = np.arange(n_runs)[None, :, None]
    diff = centers[np.arange(n_problems)[:, None, None], runs, labels]
    diff -= X[:, None]
    d2 = np.einsum("prij,prij->pri", diff, diff)
    cost = np.einsum("pri,pi->pr", d2, w)
    answers = []
    for j, p in enumerate(problems):
        lowest = cost[j].min()
        best = int(np.argmax(cost[j] <= lowest + p.same_cost * abs(lowest)))
        n = sizes[j]
        # Copies: a client keeps its labels, not the batch's arrays.
        answer = (
            centers[j, best].copy(),
            labels[j, best, :n].copy(),
            d2[j, best, :n].copy(),
            int(n_iter[j, best]),
        )
        if with_runs:
            answer = (answer, (cost[j], n_iter[j], centers[j].copy()))
        answers.append(answer)
    return answers


def _sq_dist(X, x_sq, centers, c_sq=None):
    """‖x − c‖² of every row to every center of every run.

    ``X`` (p, n, d), ``x_sq`` (p, n), ``centers`` (p, r, m, d) -> (p, r, m, n);
    ``c_sq`` (p, r, m), the centers' squared norms, if known. All runs'
    centers of a problem meet its rows in one matrix product.
    """
    n_problems, n_runs, m, d = centers.shape
    if c_sq is None:
        c_sq = np.einsum("prmj,prmj->prm", centers, centers)
    flat = centers.reshape(n_problems, n_runs * m, d)
    dist = np.matmul(flat, X.transpose(0, 2, 1)).reshape(n_problems, n_runs, m, -1)
    dist *= -2.0
    dist += x_sq[:, None, None, :]
    dist += c_sq[..., None]
    return np.maximum(dist, 0.0, out=dist)


def _seed(X, w, n_clusters, n_runs, rngs, noise):
    """Greedy weighted k-means++ for ``n_runs`` runs of every problem.

    Each new center is the best of 2 + log(k) candidates drawn ∝ w D(x)²;
    when every positive-weight row already sits on a center (within
    ``noise``), the run repeats one of its centers instead. Only rows of
    positive weight are drawn: they are moved to the front of each
    problem's rows (in their order), the others weigh zero.

    A problem's uniform draws are taken from its generator in one call
    before the seeding starts (the first centers', then each later
    center's candidates): the numbers that drawing them center by center
    would give, without a generator call per problem and center (18,000
    calls over 1,000 clients, a sixth of the seeding). Repeats of spent
    runs are drawn after them. The first centers are drawn by inverting
    the cumulative distribution of w, as ``RandomState.choice`` does.
    """
    n_problems, n_rows, d = X.shape
    n_trials = _n_trials(n_clusters)
    positive = w > 0
    n_pos = positive.sum(axis=1)
    # Rows of positive weight first, in their order; the others weigh 0.
    front = np.argsort(~positive, axis=1, kind="stable")
    drawable = np.take_along_axis(positive, front, axis=1)
    wp = np.where(drawable, np.take_along_axis(w, front, axis=1), 0.0)
    Xp = np.take_along_axis(X, front[..., None], axis=1)
    Xp[~drawable] = 0.0
    n_draws = n_runs * (1 + (n_clusters - 1) * n_trials)
    uniform = np.stack([rng.random_sample(n_draws) for rng in rngs])
    # The first centers ∝ w, by the cumulative distribution that
    # RandomState.choice(m, p=w / w.sum()) uses (searchsorted, side right).
    cdf = np.cumsum(wp / wp.sum(axis=1, keepdims=True), axis=1)
    cdf /= cdf[:, -1:]
    first = np.count_nonzero(cdf[:, None, :] <= uniform[:, :n_runs, None], axis=2)
    draws = uniform[:, n_runs:].reshape(n_problems, n_clusters - 1, n_runs, n_trials)
    xp_sq = np.einsum("pij,pij->pi", Xp, Xp)
    problems = np.arange(n_problems)[:, None]
    runs = np.arange(n_runs)[None, :]
    centers = np.empty((n_problems, n_runs, n_clusters, d))
    centers[:, :, 0] = Xp[problems, first]
    d2 = _sq_dist(Xp, xp_sq, centers[:, :, :1])[:, :, 0]
    for c in range(1, n_clusters):
        cumulative = np.cumsum(
            wp[:, None, :] * np.where(d2 > noise[:, None, None], d2, 0.0), axis=2
        )
        potential = cumulative[..., -1]
        targets = draws[:, c - 1] * potential[..., None]
        # searchsorted row by row: how many cumulative values lie below.
        picks = np.count_nonzero(cumulative[:, :, None, :] < targets[..., None], axis=3)
        np.minimum(picks, (n_pos - 1)[:, None, None], out=picks)
        # (problems, runs, trials, rows): squared distances to each
        # candidate, capped by the distance to the centers drawn so far.
        cand_d2 = _sq_dist(
            Xp, xp_sq, Xp[problems[..., None], picks], xp_sq[problems[..., None], picks]
        )
        np.minimum(cand_d2, d2[:, :, None, :], out=cand_d2)
        best = np.argmin(np.einsum("prtn,pn->prt", cand_d2, wp), axis=2)
        centers[:, :, c] = Xp[problems, picks[problems, runs, best]]
        new_d2 = cand_d2[problems, runs, best]
        spent = ~(potential > 0)
        for j in np.flatnonzero(spent.any(axis=1)):
            repeat = rngs[j].randint(c, size=spent[j].sum())
            centers[j, spent[j], c] = centers[j, spent[j], repeat]
            new_d2[j, spent[j]] = d2[j, spent[j]]
        d2 = new_d2
    return centers


def _assign(X, x_sq, centers, tie):
    """Labels of the closest center per run (ties within ``tie`` to the
    lowest index; with ``tie`` 0 the first closest) and the expanded
    squared distance to the closest center (within ``tie`` of the
    labelled one's)."""
    dist = _sq_dist(X, x_sq, centers)
    d2 = dist.min(axis=2)
    labels = np.argmax(dist <= (d2 + tie[:, None, None])[:, :, None], axis=2)
    return labels, d2


def _lloyd(X, w, x_sq, padding, centers, max_iter, tol_abs, tie):
    """Weighted Lloyd on every run until each stops (see the module).

    The arrays hold the problems that still have a running run; a stopped
    run of such a problem is computed along and not updated. ``padding``
    marks the rows that only fill the arrays.
    """
    n_problems, n_runs, n_clusters, _ = centers.shape
    centers = centers.copy()
    labels, d2 = _assign(X, x_sq, centers, tie)
    cost = np.einsum("pri,pi->pr", d2, w)
    n_iter = np.zeros((n_problems, n_runs), dtype=int)
    active = np.ones((n_problems, n_runs), dtype=bool)
    clusters = np.arange(n_clusters)[None, None, :, None]
    work = np.arange(n_problems)
    inputs = (X, w, x_sq, padding, tol_abs, tie)
    for iteration in range(1, max_iter + 1):
        live = active[work].any(axis=1)
        if not live.any():
            break
        if live.sum() < 0.75 * len(work):
            # Drop the finished problems from the arrays.
            work = work[live]
            inputs = tuple(a[work] for a in (X, w, x_sq, padding, tol_abs, tie))
        Xw, ww, xw_sq, pad, tol, tw = inputs
        running = active[work]
        n_iter[work] = np.where(running, iteration, n_iter[work])
        old, old_labels = centers[work], labels[work]
        # Weighted one-hot memberships: (k, n) @ (n, d) gives the sums.
        member = (old_labels[:, :, None, :] == clusters) * ww[:, None, None, :]
        totals = member.sum(axis=3)
        sums = np.matmul(member.reshape(len(work), -1, Xw.shape[1]), Xw)
        sums = sums.reshape(old.shape)
        movable = totals > WEIGHT_EPS * np.abs(ww).sum(axis=1)[:, None, None]
        new = np.where(
            movable[..., None], sums / np.where(movable, totals, 1.0)[..., None], old
        )
        new_labels, new_d2 = _assign(Xw, xw_sq, new, tw)
        new_cost = np.einsum("pri,pi->pr", new_d2, ww)
        # An update that raises the cost (possible only with negative
        # weights) is rejected and the run stops where it was.
        accepted = ~(new_cost > cost[work])
        shift = ((new - old) ** 2).sum(axis=(2, 3))
        same = ((new_labels == old_labels) | pad[:, None, :]).all(axis=2)
        update = running & accepted
        p, r = np.nonzero(update)
        centers[work[p], r] = new[p, r]
        labels[work[p], r] = new_labels[p, r]
        cost[work[p], r] = new_cost[p, r]
        active[work] = running & accepted & (shift > tol[:, None]) & ~same
    # Every run's labels are those of its centers already (each accepted
    # update stores the centers with their assignment), so no final
    # assignment step, which cost a fifth of the batched solve.
    return centers, labels, n_iter
