"""Differentially private k-means on the one-shot kernel k-means' embedding.

Under ``privacy`` the coreset k-means, whose clients upload rows of the
embedding, is replaced by Lloyd rounds whose uploads are noised sums. A row
of the embedding is H(x) = (z(x) − z̄) V with V's columns orthonormal, so
G(x) = H(x) + z̄ᵀV = z(x) V has norm at most ‖z(x)‖ ≤ R, the random
features' bound: the clients sum G, not H, and one row replaced by another
moves a client's per-cluster sums and counts [Σ G, n] by at most
max(2R, √(2(R² + 1))), from D alone
(:func:`~skfed.kernel._private_features.count_sum_sensitivity`).

Rounds, each one Gaussian release per client (sum-only):

1. ``"private cells"``: the server draws seeds (:func:`cell_count` of
   them) from a Gaussian with the embedding's noised mean and spread (post-
   processing of the statistics round) and sends them; each client uploads
   its noised per-cell sums and counts. The noised cell means, weighted by
   their noised counts, are a private summary of the embedding (a coreset
   whose every point is a mean); the server's weighted k-means on them
   gives the k starting centers. Many cells cost no more privacy than k:
   each row is in one cell.
2. ``"private lloyd"``, exactly ``refine_iter`` times (no early stop: when
   to stop would depend on the data): the server sends the centers, the
   clients their noised per-cluster sums and counts, and the server moves
   each center to its noised mean.
3. ``"coreset labels"``: the clients label their rows against the final
   centers and upload nothing.

:func:`private_kmeans` drives them; the client step and the server steps
follow it.
"""

from functools import partial
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from ..._engine._protocol import client_step
from ..._engine._rounds import sum_only
from ...kernel._private_features import clip_rows, count_sum_sensitivity
from ...privacy import clip_to_box, gaussian_noise, summed_noise_std
from .._kmeans import assign_around_centers, cluster_sums, weighted_kmeans
from ._coreset import LABELS_ONLY, label_step

__all__ = ["PrivateKMeansResult", "private_kmeans"]

# Cells of the first round: as many as keep each cell's rows, on average,
# _ROWS_PER_NOISE times the summed noise's standard deviation, at least
# 3k and at most _MAX_CELLS (or 3k). More cells cost no privacy (each row
# is in one) and describe the embedding more finely: on two rings (20,000
# rows, ten clients) 6 and 20 cells ended at NMI 0.02-0.4 where 60 cells
# found the rings at epsilon 1, 10 and inf; on ten blobs 30 cells reached
# NMI 0.85 at epsilon 1 and 100 cells 1.0. Fewer rows per cell than a few
# noise deviations leave means that are mostly noise.
_ROWS_PER_NOISE = 5.0
# Rounds of cells.
CELL_ROUNDS = 1
# Least restarts of the server's weighted k-means on the cells, which are
# few: restarts cost the clients nothing and no privacy.
_SERVER_RESTARTS = 100
_MAX_CELLS = 256
# A cell or cluster whose noised count is below this many standard
# deviations of the summed count's noise is left out (its mean is noise).
_COUNT_FLOOR = 3.0


# The rounds (see the module's docstring), each one noised release of the
# per-center sums and counts, of sensitivity count_sum_sensitivity(R).
PRIVATE_CELLS = sum_only("private cells", sensitivity=count_sum_sensitivity, noised=1)
PRIVATE_LLOYD = sum_only("private lloyd", sensitivity=count_sum_sensitivity, noised=1)


def private_rounds(n_iter, box=False):
    """The rounds :func:`private_kmeans` runs, a repeated round once per
    run (``box``: on rows of X, whose first cell is the rows' mean)."""
    return (
        ((PRIVATE_CELLS,) * (CELL_ROUNDS + bool(box)))
        + (PRIVATE_LLOYD,) * int(n_iter)
        + (LABELS_ONLY,)
    )


class PrivateKMeansResult(NamedTuple):
    """What :func:`private_kmeans` returns (the fields the estimator reads of
    a coreset k-means' result).

    Attributes
    ----------
    cluster_centers : ndarray of shape (k, s)
        In the coordinates of the embedding H.
    inertia : float
        NaN: measuring it would be one more release.
    n_refine_iter : int
        The Lloyd rounds run (all of them).
    """

    cluster_centers: np.ndarray
    inertia: float
    n_refine_iter: int


def private_kmeans(
    fed,
    *,
    n_clusters,
    eigenvalues,
    shift,
    n_samples,
    radius,
    n_iter,
    n_init,
    random_state,
    box=None,
):
    """Differentially private k-means on the clients' embedding H, or on
    their rows of X clipped into a box.

    Parameters
    ----------
    fed : Federation
        Open federation with an accountant; every client keeps H under
        ``("kernel_kmeans", "H")`` (unless ``box``).
    n_clusters : int
        k.
    eigenvalues : ndarray of shape (s,) or None
        The noised covariance's eigenvalues, N times the spread of H along
        each column: the cells' seeds are drawn with it. Unused with
        ``box``, whose cells are cones around the rows' noised mean.
    shift : ndarray of shape (s,)
        z̄ᵀV: G = H + shift is what the clients sum (zeros with ``box``).
    n_samples : float
        N (public).
    radius : float
        R, the bound on ‖G(x)‖.
    n_iter : int
        Lloyd rounds after the cells' round.
    n_init : int
        Restarts of the server's weighted k-means on the cells.
    random_state : RandomState
        The server's generator.
    box : tuple (lower, upper) or None, default=None
        Cluster the clients' rows of X clipped into this box, centred on it
        (:func:`~skfed.privacy.clip_to_box`: norm at most ``radius``, the
        box's), instead of H. The counts are then sent scaled by R, so that
        one release of sensitivity 2R noises them R times less than the
        sums (:func:`~skfed.kernel._private_features.count_sum_sensitivity`);
        the centers come back in X's coordinates.

    Returns
    -------
    result : PrivateKMeansResult
    """
    count_scale = 1.0 if box is None else float(radius)
    std = PRIVATE_CELLS.noise_std(fed.accountant, radius, count_scale)
    # The summed counts' noise: each client's, or its shares of one.
    summed = summed_noise_std(std, len(fed.client_ids)) / count_scale
    floor = _COUNT_FLOOR * summed
    # Rows of X: the cells' and the Lloyd rounds' means shrink towards
    # their seeds and centers by the share of the move the sums' noise
    # explains (many features, few rows per cluster: the noise then
    # dominates a move).
    shrink = summed * count_scale
    n_cells = cell_count(n_clusters, n_samples, summed)
    rounds = partial(_noised_sums, fed, shift=shift, radius=radius, std=std, box=box)
    if box is None:
        spread = np.sqrt(np.maximum(eigenvalues, 0.0) / n_samples)
        seeds = shift + random_state.standard_normal((n_cells, len(shift))) * spread
    else:
        seeds = _cones(rounds, n_cells, shift, radius, floor, random_state)
    for r in range(CELL_ROUNDS):
        stats = rounds(PRIVATE_CELLS, seeds)
        means, counts = noised_means(
            seeds, stats, radius, floor, count_scale, shrink=shrink
        )
        kept = counts > 0
        if r + 1 < CELL_ROUNDS and kept.any():
            # The next round's cells around the means: on the data.
            seeds = means[kept]
    if kept.sum() > n_clusters:
        centers, _, _ = weighted_kmeans(
            means[kept],
            counts[kept],
            n_clusters,
            random_state=random_state,
            n_init=max(n_init, _SERVER_RESTARTS),
        )
    else:
        # Too few cells above the noise: every one of them, and seeds.
        centers = np.vstack([means[kept], seeds[~kept]])[:n_clusters]
    for _ in range(n_iter):
        stats = rounds(PRIVATE_LLOYD, centers)
        centers, _ = noised_means(
            centers, stats, radius, floor, count_scale, shrink=shrink
        )
    if box is None:
        centers = centers - shift
        rows = ("kernel_kmeans", "H")
    else:
        centers = centers + (box[0] + box[1]) / 2
        rows = None
    fed.run_round(
        LABELS_ONLY,
        partial(label_step, rows=rows, weighted=False, exact_inertia=False),
        centers,
    )
    return PrivateKMeansResult(centers, float("nan"), int(n_iter))


def _cones(rounds, n_cells, shift, radius, floor, random_state):
    """Seeds of cells that cut the rows by direction around their noised
    mean (one cell round).

    Around a point m, the nearest of m + r u_j (unit u_j) is the one of
    largest (x − m)·u_j, whatever r: the cells are cones of directions, as
    balanced as the rows' directions are. Seeds drawn over a box instead
    leave the rows of wide data (digits: 64 features) in the few cells
    whose seeds lie nearest their centre, most of the others empty.
    """
    origin = shift[None, :]
    stats = rounds(PRIVATE_CELLS, origin)
    mean, _ = noised_means(origin, stats, radius, floor, radius)
    directions = random_state.standard_normal((n_cells, len(shift)))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    return mean + 1e-3 * radius * directions


def _noised_sums(fed, declared, centers, *, shift, radius, std, box):
    """One sum-only round of noised per-center sums and counts (one
    release per client)."""
    return fed.run_round(
        declared,
        partial(private_sums_step, radius=radius, std=std, box=box),
        (centers, shift),
    )


# --------------------------------------------------------------------------
# Client step


@client_step("kernel_kmeans.private_sums", sum_only=True)
def private_sums_step(client, state, message, *, radius, std, box=None):
    """Client: noised per-center sums of its rows G and counts.

    The message: the centers (in G's coordinates) and z̄ᵀV. G is
    H + z̄ᵀV, each row clipped to R (a no-op but for rounding:
    ‖G(x)‖ ≤ ‖z(x)‖), or, with ``box``, the client's rows of X clipped
    into the box and centred on it, with the counts scaled by R. Each row
    is assigned to its nearest center, and the client adds N(0, std²) to
    each of the k s sums and k counts: k (s + 1) floats up, one release.
    """
    centers, shift = message
    if box is None:
        G, count_scale = clip_rows(state["H"] + shift, radius), 1.0
    else:
        X = client.X.toarray() if sp.issparse(client.X) else client.X
        G, count_scale = clip_to_box(np.asarray(X, dtype=np.float64), *box), radius
    labels, _ = assign_around_centers(G, centers, d2=None)
    sums, counts = cluster_sums(G, np.ones(G.shape[0]), labels, centers.shape[0])
    return state, gaussian_noise(np.append(sums.ravel(), count_scale * counts), std)


# --------------------------------------------------------------------------
# Server step


def cell_count(n_clusters, n_samples, noise_std):
    """Server: how many cells the first round uses (see ``_ROWS_PER_NOISE``),
    from public figures: k, N and the summed noise's deviation."""
    low = 3 * n_clusters
    high = max(_MAX_CELLS, low)
    if noise_std == 0:
        return high
    return int(np.clip(n_samples / (_ROWS_PER_NOISE * noise_std), low, high))


def noised_means(centers, stats, radius, floor, count_scale=1.0, shrink=None):
    """Server: each center's noised mean, where its noised count (sent
    times ``count_scale``) is above ``floor``; the center itself
    elsewhere.

    A mean of rows of norm at most R lies in the ball of radius R, so a
    noised mean outside it is brought back to its surface (post-processing:
    no privacy spent, and never farther from the true mean).

    Returns
    -------
    means : ndarray of shape (k, s)
    counts : ndarray of shape (k,)
        The noised counts, 0 where at most ``floor``.
    """
    k, s = centers.shape
    sums = stats[: k * s].reshape(k, s)
    counts = stats[k * s :] / count_scale
    counts = np.where(counts > max(floor, 0.0), counts, 0.0)
    means = centers.copy()
    kept = counts > 0
    means[kept] = sums[kept] / counts[kept, None]
    if shrink is not None:
        # James-Stein: each move from its center shrunk by the share of
        # its length the noise explains, s (σ / n)² of it for the sums'
        # summed noise σ (post-processing, from public figures).
        moves = means[kept] - centers[kept]
        noise = s * (shrink / counts[kept]) ** 2
        length = np.maximum(np.einsum("ij,ij->i", moves, moves), 1e-300)
        kept_share = np.maximum(1.0 - noise / length, 0.0)
        means[kept] = centers[kept] + kept_share[:, None] * moves
    norms = np.linalg.norm(means, axis=1)
    far = norms > radius
    means[far] *= (radius / norms[far])[:, None]
    return means, counts
