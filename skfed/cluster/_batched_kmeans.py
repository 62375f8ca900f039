"""Several restarts of weighted k-means on one small dense array, together.

A client of a few hundred rows runs k-means++ and Lloyd in well under a
millisecond of arithmetic, but one restart after another pays numpy's
per-call overhead for every center drawn and every Lloyd step: a fit over
1,000 such clients cost ten times one over 10 clients of the same rows
(issue 14). Here the restarts advance side by side as arrays with a
leading restart axis, so the Python-level loop runs k times for the
seeding and at most ``max_iter`` times for Lloyd, whatever ``n_init``.

Each restart is the same algorithm as the one-at-a-time functions of
:mod:`skfed.cluster._coreset` (greedy weighted k-means++, then weighted
Lloyd that stops on unchanged labels, a small center shift, or an update
that would raise the cost); only the random draws are taken in another
order. Memory is O(n_init · n · k): meant for arrays of at most a few
thousand rows (see ``SMALL_ROWS``).
"""

import numpy as np

__all__ = ["SMALL_ROWS", "WEIGHT_EPS", "kmeans_restarts"]

# Rows up to which the batched path is used; above, compiled k-means wins
# and the (n_init, n, k) arrays stop being small.
SMALL_ROWS = 2048
# A cluster whose total weight is at most this fraction of the total
# absolute weight counts as empty: dividing by a weight that cancelled down
# to rounding noise would throw its center far away.
WEIGHT_EPS = 1e-10


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

    Returns
    -------
    centers : ndarray of shape (n_clusters, d)
    labels : ndarray of shape (n,)
    d2 : ndarray of shape (n,)
        Squared distance of each row to its center, computed exactly.
    n_iter : int
        Lloyd iterations of the returned run.
    """
    x_sq = np.einsum("ij,ij->i", X, X)
    if init is not None:
        starts = np.asarray(init, dtype=np.float64)[None]
    else:
        starts = _seed(X, w, x_sq, n_clusters, n_init, random_state, tie)
    centers, labels, n_iter = _lloyd(X, w, x_sq, starts, max_iter, tol_abs, tie)
    # Exact squared distances (the expanded ones leave rounding noise, so
    # a point on its center would not cost exactly 0), and the cheapest run.
    diff = X[None] - np.take_along_axis(centers, labels[:, :, None], axis=1)
    d2 = np.einsum("rij,rij->ri", diff, diff)
    cost = d2 @ w
    lowest = cost.min()
    best = int(np.argmax(cost <= lowest + same_cost * abs(lowest)))
    return centers[best], labels[best], d2[best], int(n_iter[best])


def _sq_dist(X, x_sq, centers):
    """‖x − c‖² of every row to every center of every run: (runs, n, m)."""
    c_sq = np.einsum("rmj,rmj->rm", centers, centers)
    dist = np.matmul(centers, X.T).transpose(0, 2, 1)
    dist *= -2.0
    dist += x_sq[None, :, None]
    dist += c_sq[:, None, :]
    return np.maximum(dist, 0.0, out=dist)


def _seed(X, w, x_sq, n_clusters, n_runs, rng, noise):
    """Greedy weighted k-means++ for ``n_runs`` runs at once.

    Each new center is the best of 2 + log(k) candidates drawn ∝ w D(x)²;
    when every positive-weight row already sits on a center (within
    ``noise``), the run repeats one of its centers instead.
    """
    idx = np.flatnonzero(w > 0)
    Xp, wp, xp_sq = X[idx], w[idx], x_sq[idx]
    n, n_trials = len(idx), 2 + int(np.log(n_clusters))
    runs = np.arange(n_runs)
    centers = np.empty((n_runs, n_clusters, X.shape[1]))
    first = rng.choice(n, size=n_runs, p=wp / wp.sum())
    centers[:, 0] = Xp[first]
    d2 = _sq_dist(Xp, xp_sq, centers[:, :1])[:, :, 0]
    for c in range(1, n_clusters):
        cumulative = np.cumsum(wp * np.where(d2 > noise, d2, 0.0), axis=1)
        potential = cumulative[:, -1]
        draws = rng.uniform(size=(n_runs, n_trials)) * potential[:, None]
        # searchsorted row by row: how many cumulative values lie below.
        picks = (cumulative[:, None, :] < draws[:, :, None]).sum(axis=2)
        candidates = Xp[np.minimum(picks, n - 1)]
        # (runs, trials, n): squared distances to each candidate, capped by
        # the distance to the centers drawn so far.
        cand_d2 = candidates @ Xp.T
        cand_d2 *= -2.0
        cand_d2 += xp_sq
        cand_d2 += np.einsum("rtj,rtj->rt", candidates, candidates)[:, :, None]
        np.clip(cand_d2, 0.0, d2[:, None, :], out=cand_d2)
        best = np.argmin(cand_d2 @ wp, axis=1)
        centers[:, c] = candidates[runs, best]
        new_d2 = cand_d2[runs, best]
        if potential.min() <= 0:
            spent = ~(potential > 0)
            repeat = rng.randint(c, size=spent.sum())
            centers[spent, c] = centers[spent, repeat]
            new_d2[spent] = d2[spent]
        d2 = new_d2
    return centers


def _assign(X, x_sq, centers, tie):
    """Labels of the closest center per run (ties within ``tie`` to the
    lowest index) and the expanded squared distance to it."""
    dist = _sq_dist(X, x_sq, centers)
    if tie > 0:
        near = dist <= dist.min(axis=2, keepdims=True) + tie
        labels = np.argmax(near, axis=2)
    else:
        labels = np.argmin(dist, axis=2)
    return labels, np.take_along_axis(dist, labels[:, :, None], axis=2)[:, :, 0]


def _lloyd(X, w, x_sq, centers, max_iter, tol_abs, tie):
    """Weighted Lloyd on every run until each stops (see the module)."""
    n_runs, n_clusters, _ = centers.shape
    centers = centers.copy()
    scale = WEIGHT_EPS * np.abs(w).sum()
    labels, d2 = _assign(X, x_sq, centers, tie)
    cost = d2 @ w
    n_iter = np.zeros(n_runs, dtype=int)
    active = np.arange(n_runs)
    clusters = np.arange(n_clusters)
    for iteration in range(1, max_iter + 1):
        if not len(active):
            break
        n_iter[active] = iteration
        # Weighted one-hot memberships: (runs, k, n) @ (n, d) gives the sums.
        member = (labels[active][:, None, :] == clusters[None, :, None]) * w
        totals = member.sum(axis=2)
        sums = member @ X
        old = centers[active]
        new = old.copy()
        movable = totals > scale
        new[movable] = sums[movable] / totals[movable][:, None]
        new_labels, new_d2 = _assign(X, x_sq, new, tie)
        new_cost = new_d2 @ w
        # An update that raises the cost (possible only with negative
        # weights) is rejected and the run stops where it was.
        accepted = ~(new_cost > cost[active])
        shift = ((new - old) ** 2).sum(axis=(1, 2))
        same = (new_labels == labels[active]).all(axis=1)
        keep = active[accepted]
        centers[keep] = new[accepted]
        labels[keep] = new_labels[accepted]
        cost[keep] = new_cost[accepted]
        done = ~accepted | (shift <= tol_abs) | same
        active = active[~done]
    labels, _ = _assign(X, x_sq, centers, tie)
    return centers, labels, n_iter
