"""k-FED's client side (Dennis, Li & Smith, ICML 2021): the local step
(Algorithm 1, or plain k-means where that is cheaper, and the moves that
improve it), the projection and seeding it uses, and the labelling of the
client's rows by the global clusters (the induced clustering).

A large dense client's Lloyd iterations run on its rows prepared once
(:mod:`skfed.cluster._kmeans._sklearn_lloyd`); sparse clients' reuse
scikit-learn's ``KMeans``; the projection uses ``randomized_svd``. Which of
these a client runs depends on its rows (dense or sparse, small or large)
and on the step's options, so the choice stays beside the step (the
arithmetic itself is :mod:`skfed.cluster._kmeans`'s): about 800 lines.
"""

# Long module: which local solver a client runs depends on its rows (dense
# or sparse, small or large) and on the step's options; the choice stays
# beside the step, the arithmetic is skfed.cluster._kmeans'.

import contextlib
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from sklearn.cluster import KMeans, kmeans_plusplus
from sklearn.utils.extmath import randomized_svd, row_norms

from ..._engine._ledger import PER_CLIENT
from ..._engine._protocol import PER_ROW, PUBLIC, client_step, collectable
from ..._numerics._rows import row_hashes, rows_equal
from ..._numerics._shift import shift_point, shifted_rows
from ..._numerics._threads import thread_pools
from ...privacy._refusal import MIN_ROWS, require_distinct_rows
from .._kmeans import (
    SAME_COST,
    SMALL_ROWS,
    KMeansProblem,
    assign_around_centers,
    centered,
    cluster_means,
    cluster_sums,
    labelled_sq_distances,
    lloyd,
    lloyd_rows,
    nearest,
    rounding_noise,
    sq_dist,
    sq_norms,
    tolerance,
    weighted_cost,
    weighted_kmeans_plusplus,
)
from ._coreset import client_rows
from ._kfed_moves import improve_by_moves

# What the server may collect of a client's k-FED state after the fit:
# whether its upload was its rows (the server saw it), its labels (one per
# row) and its exact cost and local iterations (statistics of its rows).
collectable("kfed", "raw", PUBLIC)
collectable("kfed", ("labels", "induced_labels"), PER_ROW)
collectable("kfed", ("inertia", "n_iter"), PER_CLIENT)

__all__ = [
    "RawUploadRefused",
    "SimulatedDropout",
    "induce_labels_step",
    "local_step",
]


# Names of the per-client random streams (``client.random_state(name)``).
_SVD_STREAM = "kfed.svd"


_SEEDING_STREAM = "kfed.seeding"


_DROPOUT_STREAM = "kfed.dropout"


_PLAIN_STREAM = "kfed.plain"


_SEEDING_ROWS_STREAM = "kfed.seeding_rows"


# Features (or rows) up to which a dense client's projection comes from
# its d x d (or n x n) Gram matrix, exactly, rather than randomized_svd.
_GRAM_SVD_SIZE = 256


# Draws of its rows a large client's seeding ν runs on (at least 32 per
# local cluster; see _seeding_sample). Algorithm 1 asks only for a
# constant-factor start there, which Lloyd from θ then refines on every
# row. Seeding and refining ν on all of a 10,000-row client's projection
# took 14 Lloyd passes on average (up to 53); on 4,096 draws the fit at
# N = 1,000,000 over 100 clients (d = 20, k = 16) took about 15% less
# time, at the same NMI and cost (2,048 draws were no faster at k = 64).
SEEDING_ROWS = 4096


class SimulatedDropout(RuntimeError):
    """Raised by a client that skips the round (``client_dropout``)."""


class RawUploadRefused(Exception):
    """Raised by a client that would have to upload raw rows but may not
    (``allow_raw_upload=False``)."""


@client_step("kfed.local", python_bound=True)
def local_step(
    client,
    state,
    message,
    *,
    n_local_clusters,
    n_init,
    max_iter,
    tol,
    allow_raw_upload,
    send_sizes,
    dropout,
    single_threaded,
    local_step="auto",
    rows=None,
    min_rows=MIN_ROWS,
    row_centers_from=None,
):
    """Client step of round "local centers": Algorithm 1 (local k(z)-means).

    Upload: the k(z) local centers Θ(z) (k(z)·d floats) and, if
    ``send_sizes``, the k(z) local cluster sizes. A client with at most k(z)
    distinct samples uploads those samples (and their multiplicities)
    instead, or raises :class:`RawUploadRefused` (uploads nothing) when
    ``allow_raw_upload`` is False. Kept: the local label of each sample.
    With ``single_threaded`` the client's KMeans runs use one OpenMP
    thread: the clients already run in parallel, and OpenMP teams inside
    parallel clients oversubscribe the cores. A small client's k-means
    runs are handed over to be solved with other clients' (see
    :func:`_kmeans`). ``local_step`` as in :class:`~skfed.KFed`; which path
    ``"auto"`` takes is :func:`_moves_client`'s rule.

    ``rows`` names the rows clustered, as in
    :func:`~skfed.cluster._protocols._coreset.client_rows` (None: the
    client's X; kernel k-means clusters its embedding). Without
    ``allow_raw_upload`` a local cluster of fewer than ``min_rows``
    distinct rows of X is merged into its nearest, and a client of fewer
    than ``min_rows`` distinct rows refuses (``RawRowsRefused``). With it,
    ``row_centers_from`` (an int, or None for no limit) merges local
    clusters of fewer than ``MIN_ROWS`` distinct rows likewise while the
    client has more than that many clusters: local centers beyond it are
    never rows.
    """
    if dropout and client.random_state(_DROPOUT_STREAM).random_sample() < dropout:
        raise SimulatedDropout(f"simulated dropout (client_dropout={dropout})")
    if isinstance(n_local_clusters, Mapping):
        n_local_clusters = n_local_clusters[client.client_id]
    X = client_rows(client, rows)
    weights = client.sample_weight
    if weights is None:
        weights = np.ones(X.shape[0], dtype=X.dtype)
    # Never below the floor of a first moment, whatever the server asks.
    min_rows = max(int(min_rows), MIN_ROWS)
    if not allow_raw_upload and min_rows > MIN_ROWS:
        require_distinct_rows(
            client.X,
            min_rows,
            "local centers",
            "Merge the client with others or leave it out.",
            weights=client.sample_weight,
        )

    # Work in an order defined by the rows' contents (values, then weights)
    # so that the result does not depend on the order of the samples. Rows
    # computed from X (an embedding) carry the rounding of the sums they
    # came from (and a noised fit's noise), which moves their hashes:
    # X's own rows order them, and count its distinct rows.
    hashes = row_hashes(client.X)
    order = np.lexsort((weights, hashes))
    X, weights, hashes = X[order], weights[order], hashes[order]
    # Rows of zero weight take no part, as if removed (they could otherwise
    # become local centers, and through them global ones); they join their
    # nearest local center afterwards.
    kept = np.flatnonzero(weights > 0)
    if len(kept) == 0:
        raise ValueError(
            "all sample weights of this client are zero, so it has nothing to "
            "cluster. Give some of its samples a positive weight, remove the "
            "client from the data, or pass on_client_error='drop' to leave "
            "it out."
        )
    if len(kept) < X.shape[0]:
        X_kept, w_kept, h_kept = X[kept], weights[kept], hashes[kept]
    else:
        X_kept, w_kept, h_kept = X, weights, hashes
    distinct = _few_distinct_rows(X_kept, h_kept, n_local_clusters)

    # The data are clustered around the client's own weighted mean:
    # squared distances expanded on coordinates far from the origin (data
    # at 1e9) cancel. The centers are uploaded in global coordinates, so the
    # mean costs nothing on the wire. CSR rows are shifted only on the
    # columns they all store, and stay sparse (see skfed._numerics._shift).
    mean = shift_point(np.asarray(w_kept @ X_kept) / w_kept.sum(), X_kept)
    mean = mean.astype(X.dtype)

    if distinct is not None:
        if not allow_raw_upload:
            raise RawUploadRefused(
                f"it holds at most k(z)={n_local_clusters} distinct samples"
            )
        first, kept_labels = distinct
        centers = X_kept[first]
        centers = centers.toarray() if sp.issparse(centers) else centers.copy()
        offsets = centers - mean
        n_iter, n_few = 0, 0
    else:
        rows = shifted_rows(X_kept, mean)
        # Only scikit-learn's KMeans (large or sparse clients) runs OpenMP;
        # setting the limit costs 50 us, a tenth of a small client's step.
        limit = single_threaded and not _batched(rows)
        with _one_openmp_thread() if limit else contextlib.nullcontext():
            options = {
                "n_init": min(n_init, len(kept)),
                "max_iter": max_iter,
                "tol": tol,
                "client": client,
                # Lloyd from θ and plain k-means cluster the same rows.
                "prepared": _prepare(rows, w_kept, tol),
            }
            large = _moves_client(rows, local_step)
            if large:
                # One seeding, on a sample of the rows; the moves below do
                # what restarts did.
                options["n_init"] = min(options["n_init"], 1)
                options["seeding_rows"] = SEEDING_ROWS
            offsets, kept_labels, n_iter = yield from _awasthi_sheffet(
                rows, w_kept, n_local_clusters, **options
            )
            if large:
                moves = improve_by_moves(
                    options["prepared"], offsets, kept_labels, max_iter=max_iter
                )
                offsets = moves.centers.astype(rows.dtype, copy=False)
                kept_labels, n_iter = moves.labels, n_iter + moves.n_iter
            elif local_step in ("best", "auto"):
                plain = yield from _plain_kmeans(
                    rows, w_kept, n_local_clusters, **options
                )
                offsets, kept_labels, n_iter = _better_of(
                    rows, w_kept, (offsets, kept_labels, n_iter), plain
                )
        centers = offsets + mean
        # A local cluster of fewer than MIN_ROWS distinct rows has a row
        # for its center (an outlier's singleton, or copies of one row):
        # merged away before upload when rows may not leave, otherwise
        # uploaded under "rows", where the ledger counts it.
        centers, offsets, kept_labels, n_few = _few_row_clusters(
            rows,
            w_kept,
            h_kept,
            centers,
            offsets,
            kept_labels,
            mean,
            merge=not allow_raw_upload,
            min_rows=min_rows,
            floor=row_centers_from,
        )
    if X_kept is X:
        sorted_labels = kept_labels
    else:
        sorted_labels = np.empty(X.shape[0], dtype=np.intp)
        sorted_labels[kept] = kept_labels
        zero = np.flatnonzero(weights <= 0)
        # Dense: these rows need not store the columns the mean shifts.
        X_zero = X[zero].toarray() if sp.issparse(X) else X[zero]
        X_zero = X_zero - mean
        sorted_labels[zero] = nearest(X_zero, offsets)
    local_labels = np.empty(X.shape[0], dtype=np.intp)
    local_labels[order] = sorted_labels

    state = {
        "local_labels": local_labels,
        "raw": distinct is not None,
        "n_iter": n_iter,
    }
    # A client's own rows travel under their own name, so that the ledger
    # counts them as raw rows (they are not a statistic of the client); the
    # centers of few-row clusters are the last n_few and travel as rows.
    if distinct is not None:
        upload = {"rows": centers}
    elif n_few:
        upload = {"centers": centers[:-n_few], "rows": centers[-n_few:]}
    else:
        upload = {"centers": centers}
    if send_sizes:
        upload["sizes"] = np.bincount(
            sorted_labels, weights=weights, minlength=len(centers)
        )
    return state, upload


def _few_row_clusters(
    rows,
    weights,
    hashes,
    centers,
    offsets,
    labels,
    mean,
    *,
    merge,
    min_rows=MIN_ROWS,
    floor=None,
    _stop_at=1,
):
    """Local clusters of fewer than ``MIN_ROWS`` distinct rows, whose
    centers are rows of the client (``hashes``: the rows' hashes, sorted).

    With ``merge`` (rows may not leave the client) each cluster of fewer
    than ``min_rows`` distinct rows joins the cluster whose center is
    nearest to its own, whose center becomes the weighted mean of the
    union, until none is left (a client of at least ``min_rows`` distinct
    rows always gets there); empty clusters are dropped. Without, the
    clusters of fewer than ``MIN_ROWS`` are moved last, so that the upload
    can send their centers as rows; with ``floor`` (an int) they are first
    merged as above, smallest first, while more than ``floor`` clusters
    are left. ``floor`` does not stop a ``merge``.

    Returns
    -------
    centers, offsets, labels
        As given, merged or reordered (``rows`` are the client's rows
        shifted by ``mean``, ``offsets = centers - mean``).
    n_few : int
        The centers, last in order, that are rows (0 after a merge).
    """
    k = centers.shape[0]

    def distinct_per_cluster(labels):
        # The rows come sorted by hash (see local_step): a stable sort by
        # label keeps them so within each cluster, where a new distinct row
        # is a change of hash.
        order = np.argsort(labels, kind="stable")
        label, hash_ = labels[order], hashes[order]
        new = np.ones(len(order), dtype=bool)
        new[1:] = (label[1:] != label[:-1]) | (hash_[1:] != hash_[:-1])
        return np.bincount(label[new], minlength=k)

    counts = distinct_per_cluster(labels)
    few = (counts < MIN_ROWS) & (counts > 0)
    if not merge and floor is not None and few.any() and k > floor:
        # Merge down to the floor, then upload what is left as rows.
        centers, offsets, labels, _ = _few_row_clusters(
            rows,
            weights,
            hashes,
            centers,
            offsets,
            labels,
            mean,
            merge=True,
            min_rows=MIN_ROWS,
            _stop_at=floor,
        )
        return _few_row_clusters(
            rows, weights, hashes, centers, offsets, labels, mean, merge=False
        )
    if merge:
        if not (counts < min_rows).any():
            return centers, offsets, labels, 0
        offsets = offsets.copy()
        labels = labels.copy()
        alive = counts > 0
        # Rows may not leave (merge=True from the caller): down to one
        # cluster if need be, whatever the floor.
        stop_at = max(int(_stop_at), 1)
        while True:
            few = alive & (counts < min_rows)
            if not few.any() or alive.sum() <= stop_at:
                break
            # Smallest first, so that an outlier joins a real cluster rather
            # than another outlier when it can.
            c = int(np.flatnonzero(few)[np.argmin(counts[few])])
            others = np.flatnonzero(alive & (np.arange(k) != c))
            gap = ((offsets[others] - offsets[c]) ** 2).sum(axis=1)
            target = int(others[np.argmin(gap)])
            labels[labels == c] = target
            member = labels == target
            w = weights[member]
            offsets[target] = np.asarray(w @ rows[member]).ravel() / w.sum()
            alive[c] = False
            counts = distinct_per_cluster(labels)
        kept = np.flatnonzero(alive)
        renumber = np.full(k, -1, dtype=np.intp)
        renumber[kept] = np.arange(len(kept))
        offsets = offsets[kept].astype(centers.dtype, copy=False)
        return offsets + mean, offsets, renumber[labels], 0
    n_few = int(few.sum())
    if not n_few:
        return centers, offsets, labels, 0
    order = np.r_[np.flatnonzero(~few), np.flatnonzero(few)]
    position = np.empty(k, dtype=np.intp)
    position[order] = np.arange(k)
    return centers[order], offsets[order], position[labels], n_few


def _moves_client(rows, local_step):
    """Whether ``local_step="auto"`` takes the large-client path here:
    Algorithm 1 with one seeding, then split-and-merge moves
    (:func:`~skfed.cluster._protocols._kfed_moves.improve_by_moves`), instead of
    ``"best"``'s restarts.

    Dense clients of more than ``SMALL_ROWS`` (2,048) rows. On 10,000
    rows (d = 50, k(z) = 64) the moves ended 2-3% below the cost of
    ``"best"`` (Algorithm 1 and plain k-means, three restarts each) in a
    fifth to a third of its time; smaller clients keep ``"best"``, whose restarts
    run batched across clients and are cheap there, and sparse ones too
    (the moves work on dense rows).
    """
    return local_step == "auto" and not sp.issparse(rows) and not _batched(rows)


def _one_openmp_thread():
    """Limit OpenMP to one thread in the calling thread only.

    OpenMP's thread count is per calling thread, so unlike a BLAS limit this
    is safe from concurrent client threads.
    """
    return thread_pools().limit(limits=1, user_api="openmp")


@client_step("kfed.cluster_map")
def induce_labels_step(client, state, message, *, rows=None):
    """Client step of round "cluster map": labels from the global model.

    Download: the global cluster of each local center (k(z) ints) and the
    global centers (k·d floats). The client labels each point with its
    nearest global center (as ``predict`` does, so ``labels_`` and
    ``predict`` agree on the training rows) and keeps the induced label
    too (the global cluster of its local center, Definition 3.3), and
    computes its share of the k-means cost against the nearest centers;
    nothing is uploaded. ``rows`` as in :func:`local_step`.
    """
    state = dict(state)
    centers = np.asarray(message["cluster_centers"])
    # The induced labels were the fitted labels once: the nearest center
    # is never farther, and on IID digits (10 clients) it raised the NMI
    # from 0.644 to 0.732, KMeans' 0.741. Under privacy the local
    # clusters of a few noisy Lloyd iterations straddle blobs, so there
    # the induced labels are the weaker still.
    X = client_rows(client, rows)
    labels, d2 = assign_around_centers(X, centers.astype(X.dtype))
    state["labels"] = labels.astype(np.int32, copy=False)
    state["induced_labels"] = np.asarray(message["center_labels"])[
        state["local_labels"]
    ].astype(np.int32, copy=False)
    weights = client.sample_weight
    d2 = np.asarray(d2, dtype=np.float64)
    state["inertia"] = float(d2.sum() if weights is None else np.dot(weights, d2))
    return state, None


def _awasthi_sheffet(
    X,
    weights,
    n_clusters,
    *,
    n_init,
    max_iter,
    tol,
    client,
    prepared=None,
    seeding_rows=None,
):
    """Algorithm 1 (Awasthi & Sheffet, 2012) on one client's (weighted) rows.

    A weight acts as a multiplicity: the SVD is that of the rows scaled by
    √w (the same right singular vectors as repeated rows), and seeding,
    pruning means and Lloyd are weighted. Dense rows arrive centered on the
    client's weighted mean (see :func:`local_step`), and the centers are
    returned in the same coordinates.

    A generator (its k-means runs are handed over, see :func:`_kmeans`)
    returning the local centers Θ(z), the local labels U(z) and the number
    of full-space Lloyd iterations. ``prepared`` is X as :func:`_prepare`
    returns it, if the caller has it. With ``seeding_rows``, ν is seeded
    on that many of the rows (see :func:`_seeding_sample`) when there are
    more.
    """
    n_features = X.shape[1]
    rank = min(n_clusters, n_features)
    if rank < n_features:
        # SVD of the rows as given: centered on the client's mean for dense
        # data (the paper's SVD is uncentered; far from the origin its top
        # singular vector is only the offset's direction), uncentered for
        # sparse data. Either way the projection keeps the span of the
        # cluster means.
        scaled = X
        if np.any(weights != 1):
            root = np.sqrt(weights)
            scaled = sp.diags(root) @ X if sp.issparse(X) else X * root[:, None]
        basis = _top_right_singular_vectors(scaled, rank, client)
        basis = basis.astype(X.dtype, copy=False)
        projected = np.asarray(X @ basis)
    else:
        basis = None  # k(z) >= d: projecting onto all of R^d changes nothing
        projected = X.toarray() if sp.issparse(X) else X

    # Seeding ν on the projection (the paper asks for any constant-factor
    # approximation): the best of n_init k-means++ runs, each refined by
    # Lloyd on the k(z)-dimensional projection, which is cheap next to the
    # SVD and avoids most bad local seedings. Projections with too few
    # distinct rows only get k-means++ (KMeans would warn about them).
    seed_rows, seed_weights = _seeding_sample(
        projected, weights, n_clusters, seeding_rows, client
    )
    if n_init and _projection_distinct_above(seed_rows, n_clusters):
        nu, _, _ = yield from _kmeans(
            seed_rows,
            seed_weights,
            n_clusters,
            n_init=n_init,
            max_iter=max_iter,
            tol=tol,
            seed=client.seed(_SEEDING_STREAM),
            # With k(z) >= d the projection is the rows themselves.
            prepared=prepared if seed_rows is X else None,
        )
    else:
        nu, _ = kmeans_plusplus(
            seed_rows,
            n_clusters,
            sample_weight=seed_weights,
            random_state=client.random_state(_SEEDING_STREAM),
        )

    # Pruning: keep the points at least three times closer to their nearest
    # seed than to any other, so that the first means are not pulled by
    # points between clusters.
    to_seeds = sq_dist(projected, sq_norms(projected), nu)
    closest = np.argmin(to_seeds, axis=1)
    if n_clusters > 1:
        d1 = to_seeds[np.arange(len(closest)), closest]
        to_seeds[np.arange(len(closest)), closest] = np.inf
        core = 9.0 * d1 <= to_seeds.min(axis=1)
    else:
        core = np.ones(len(closest), dtype=bool)
    # θ_r is the mean of the pruned set S_r taken in the projection and
    # mapped back, mean(P[S_r]) Vᵀ, as the authors' code does. The
    # full-space mean of the rows (a literal reading of the paper) turns
    # a one-point S_r into a raw, noisy row that Lloyd then keeps as a
    # cluster of its own, and the server's seeding picks it: 7% accuracy
    # instead of 86% (KMeans) at 6σ on the d=100, k=64 mixtures.
    projected_theta = np.array(nu, dtype=np.float64)
    sums, totals = cluster_sums(projected, weights * core, closest, n_clusters)
    pruned = totals > 0
    projected_theta[pruned] = sums[pruned] / totals[pruned, None]
    theta = projected_theta @ basis.T if basis is not None else projected_theta
    theta = theta.astype(X.dtype, copy=False)

    # Lloyd from an init draws nothing, so any fixed seed will do (a
    # client stream costs 20 us to derive).
    lloyd_centers, labels, lloyd_iter = yield from _kmeans(
        X,
        weights,
        n_clusters,
        init=theta,
        n_init=1,
        max_iter=max_iter,
        tol=tol,
        seed=0,
        prepared=prepared,
    )
    # Algorithm 1 returns the means of the final clusters U_r.
    means = cluster_means(X, weights, labels, lloyd_centers, dtype=X.dtype)
    return means, labels, int(lloyd_iter)


def _top_right_singular_vectors(X, rank, client):
    """An orthonormal basis (d, at most ``rank`` columns) of the span of
    X's top ``rank`` right singular vectors.

    Exact from a Gram matrix when X has few features or few rows, else
    ``randomized_svd`` (on the client's own stream), as sparse rows always
    are. With fewer rows than ``rank`` the basis spans all of X's rows.
    """
    n_samples, n_features = X.shape
    if sp.issparse(X) or min(n_samples, n_features) > _GRAM_SVD_SIZE:
        _, _, Vt = randomized_svd(
            X, rank, random_state=client.random_state(_SVD_STREAM)
        )
        return Vt.T
    if n_features <= _GRAM_SVD_SIZE:
        # With few features the top right singular vectors are exactly
        # the top eigenvectors of the d x d Gram matrix: one BLAS pass
        # over the rows, against randomized_svd's seven power iterations
        # (1.2 of 3.9 s of a fit at N = 1M, 10 clients).
        return _top_eigenvectors(X.T @ X, rank)
    # With few rows, from the n x n Gram matrix: its top eigenvectors u
    # give the right singular vectors Xᵀu / σ (a client of 160 rows in 300
    # features took 0.9 ms here against randomized_svd's 1.4 ms). QR makes
    # the columns orthonormal, also where σ is 0 (the rows span fewer than
    # k(z) directions): any direction there completes the basis.
    top = _top_eigenvectors(X @ X.T, min(rank, n_samples))
    basis, _ = np.linalg.qr(X.T @ top)
    return basis


def _top_eigenvectors(gram, rank):
    """The ``rank`` eigenvectors of largest eigenvalue of a symmetric
    matrix, largest first.

    LAPACK's subset solver where few are asked for (at least 8 times as
    many rows: 0.26 ms against a full ``eigh``'s 0.55 ms for 4 of 100,
    0.82 against 1.76 ms for 4 of 160), the full ``eigh`` otherwise (as
    fast for 16 of 100, faster for 16 of 50; ``benchmarks/bench_vs_lloyd.py
    local-parts``).
    """
    n = gram.shape[0]
    if n >= 8 * rank:
        _, vectors = scipy.linalg.eigh(gram, subset_by_index=[n - rank, n - 1])
    else:
        _, vectors = np.linalg.eigh(gram)
        vectors = vectors[:, n - rank :]
    return vectors[:, ::-1]


def _seeding_sample(projected, weights, n_clusters, seeding_rows, client):
    """The rows (and their weights) the seeding ν runs on.

    All of them, unless ``seeding_rows`` is given and the client holds
    more: then ``max(seeding_rows, 32 k(z))`` draws with replacement, each
    row drawn with probability proportional to its weight, from the
    client's own stream on its rows in the order the caller made
    independent of the order of the samples. Each row drawn carries its
    number of draws (scaled to the client's total weight) as its weight,
    so weighted sums over the sample estimate those over the rows without
    bias, and a row of large weight is seen even when it is one of few.
    The rows drawn are returned in the order of the rows.
    """
    if seeding_rows is None:
        return projected, weights
    size = max(seeding_rows, 32 * n_clusters)
    if projected.shape[0] <= size:
        return projected, weights
    weights = np.asarray(weights, dtype=np.float64)
    total = weights.sum()
    rng = client.random_state(_SEEDING_ROWS_STREAM)
    draws = rng.choice(projected.shape[0], size, p=weights / total)
    picked, counts = np.unique(draws, return_counts=True)
    return projected[picked], counts * (total / size)


def _plain_kmeans(
    X, weights, n_clusters, *, n_init, max_iter, tol, client, prepared=None
):
    """k-means++ and Lloyd on the client's rows (no projection, no pruning).

    A generator returning the same triple as :func:`_awasthi_sheffet`.
    """
    centers, labels, n_iter = yield from _kmeans(
        X,
        weights,
        n_clusters,
        n_init=max(n_init, 1),
        max_iter=max_iter,
        tol=tol,
        seed=client.seed(_PLAIN_STREAM),
        prepared=prepared,
    )
    return cluster_means(X, weights, labels, centers, dtype=X.dtype), labels, n_iter


def _kmeans(
    X, weights, n_clusters, *, n_init, max_iter, tol, seed, init=None, prepared=None
):
    """Weighted k-means (k-means++ and Lloyd, or Lloyd from ``init``) on one
    client's rows: a generator returning (centers, labels, n_iter).

    A small dense client hands its k-means over as a
    :class:`~skfed.cluster._kmeans.KMeansProblem` (``yield``), which
    the transport solves together with the other clients' (restarts and
    clients side by side as arrays): a scikit-learn ``KMeans.fit`` costs
    about 8 ms of fixed overhead (validation, thread-pool control), which
    made a client of a hundred rows cost 25 ms and a fit over 1,000 such
    clients 15 times one over 10 clients of the same N. A larger dense
    client runs :func:`~skfed.cluster._kmeans.lloyd` on rows prepared once
    (the same iterations as ``KMeans`` without its set-up on every call,
    which was half a client's step at d = 20, k(z) = 16), after greedy
    k-means++ seedings (:func:`_restarts`), or ``KMeans``' own restarts
    for several seedings of fewer than ``GREEDY_MIN_CLUSTERS`` clusters.
    Sparse clients keep ``KMeans``. All are k-means++ followed by Lloyd
    with scikit-learn's tolerance. ``seed`` (an int) draws the k-means++
    starts; with ``init`` it is unused. ``prepared`` is
    ``_prepare(X, weights, tol)``, if the caller has it.
    """
    if sp.issparse(X):
        km = KMeans(
            n_clusters,
            init="k-means++" if init is None else init,
            n_init=n_init,
            max_iter=max_iter,
            tol=tol,
            random_state=seed,
        ).fit(X, sample_weight=weights)
        return km.cluster_centers_, km.labels_, int(km.n_iter_)
    if not _batched(X):
        if prepared is None:
            prepared = lloyd_rows(X, weights, tol)
        if init is not None:
            return lloyd(prepared, init, max_iter=max_iter)
        if n_clusters >= GREEDY_MIN_CLUSTERS or n_init == 1:
            return _restarts(
                prepared, n_clusters, n_init=n_init, max_iter=max_iter, seed=seed
            )
        km = KMeans(
            n_clusters, n_init=n_init, max_iter=max_iter, tol=tol, random_state=seed
        ).fit(X, sample_weight=weights)
        return km.cluster_centers_, km.labels_, int(km.n_iter_)
    if prepared is None:
        prepared = _prepare(X, weights, tol)
    if init is not None:
        init = np.asarray(init, dtype=np.float64) - prepared.shift
    centers, labels, _, n_iter = yield KMeansProblem(
        prepared.X,
        prepared.w,
        n_clusters,
        n_init=n_init,
        max_iter=max_iter,
        tol_abs=prepared.tol_abs,
        # PCG64 behind the legacy interface: seeding an MT19937 costs 57 us
        # (a tenth of a small client's step), a PCG64 5 us.
        random_state=None if init is not None else _pcg_random_state(seed),
        tie=prepared.tie,
        same_cost=SAME_COST,
        init=init,
    )
    return centers + prepared.shift, labels, n_iter


# From this many clusters a large client's k-means++ seedings outweigh its
# Lloyd iterations, and its restarts take the float32 greedy seeding below
# (1.6 times faster at k(z) = 64 on clients of 10,000 rows in 50 features).
# Below it the seedings are cheap and ``KMeans``' own restarts, which check
# and copy the rows once rather than once per restart, are faster (15% at
# k = 10 on clients of 100,000 rows in 20 features). A single seeding (as
# ``local_step="auto"`` runs on large clients) has nothing to share, and
# takes the greedy seeding whatever k: 1.14 to 1.9 times faster on the
# 16-dimensional projections of clients of 10,000 rows at k(z) = 16, and
# 1.16 at k(z) = 8, at the same cost.
GREEDY_MIN_CLUSTERS = 32


def _restarts(rows, n_clusters, *, n_init, max_iter, seed):
    """Best of ``n_init`` greedy k-means++ seedings, each refined by Lloyd,
    on a large dense client's rows (a
    :class:`~skfed.cluster._kmeans.LloydRows`): (centers, labels, n_iter).

    ``KMeans(n_init=n_init)`` with its seeding replaced by greedy
    :func:`~skfed.cluster._kmeans.weighted_kmeans_plusplus` on float32
    rows (the seedings took two thirds of a ``KMeans`` fit on a client of
    10,000 rows in 50 features with k(z) = 64) and its Lloyd by
    :func:`~skfed.cluster._kmeans.lloyd`. Ties keep the earlier restart, as
    in ``KMeans``.
    """
    rng = _pcg_random_state(seed)
    X, w = rows.X, rows.w
    # The seedings' distances in float32: they only decide which row is
    # drawn, and a float32 product is four times faster than a float64 one.
    X_f32 = X.astype(np.float32)
    x_sq = sq_norms(X_f32)
    best, best_cost = None, np.inf
    for _ in range(max(n_init, 1)):
        seeds = X[weighted_kmeans_plusplus(X_f32, w, n_clusters, rng, x_sq=x_sq)]
        run = lloyd(rows, seeds, max_iter=max_iter)
        if n_init <= 1:
            return run
        cost = weighted_cost(X, w, run[0], run[1])
        if cost < best_cost:
            best, best_cost = run, cost
    return best


class _PreparedRows(NamedTuple):
    """A small dense client's rows as its batched k-means takes them."""

    X: np.ndarray  # float64, minus ``shift``
    w: np.ndarray  # float64
    shift: np.ndarray
    tol_abs: float
    tie: float


def _batched(X):
    """Whether k-means on X is handed over to be solved with other
    clients' (small dense rows) rather than run by ``KMeans``."""
    return not sp.issparse(X) and X.shape[0] <= SMALL_ROWS


def _prepare(X, weights, tol):
    """X as :func:`_kmeans` clusters it, computed once for rows clustered
    several times (Lloyd from θ, plain k-means, the moves' Lloyd runs): a
    small dense client's rows centered in float64 with their absolute
    tolerance and rounding noise (75 us a client otherwise spent again), a
    large dense client's :class:`~skfed.cluster._kmeans.LloydRows`, None
    for sparse rows (``KMeans`` runs there).
    """
    if sp.issparse(X):
        return None
    if not _batched(X):
        return lloyd_rows(X, weights, tol)
    w = np.asarray(weights, dtype=np.float64)
    Xc, shift = centered(np.asarray(X, dtype=np.float64), w)
    return _PreparedRows(Xc, w, shift, tolerance(Xc, w, tol), rounding_noise(X))


def _pcg_random_state(seed):
    """A ``RandomState`` over a PCG64 bit generator seeded with ``seed``."""
    return np.random.RandomState(np.random.PCG64(seed))


def _better_of(X, weights, first, second):
    """The local solution of lower weighted k-means cost (our local step).

    The paper's step is only guaranteed above its separation condition;
    below it, plain k-means++ and Lloyd often finds a cheaper local
    clustering. Keeping the cheaper of the two is local work only: the
    upload does not change. Ties keep ``first``.
    """
    costs = [_assigned_sq_distance(X, c, lab, weights) for c, lab, _ in (first, second)]
    # A cost lower by rounding only is a tie (see weighted_kmeans).
    return second if costs[1] < costs[0] - SAME_COST * abs(costs[0]) else first


def _few_distinct_rows(X, hashes, n_clusters):
    """Distinct rows of X if there are at most ``n_clusters`` of them.

    Parameters
    ----------
    X : {ndarray, sparse matrix}
        Rows sorted by ``hashes``.
    hashes : ndarray of uint64
        Sorted hashes of the rows.
    n_clusters : int

    Returns
    -------
    None, or (first, inverse)
        Index of the first occurrence of each distinct row and the index of
        each row's distinct row.
    """
    if X.shape[0] > n_clusters:
        # The common answer (more distinct hashes than k) from the sorted
        # hashes alone, without np.unique's index arrays.
        if _distinct_above(hashes, n_clusters):
            return None
        _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
        # Equal hashes almost surely mean equal rows; make sure.
        if rows_equal(X, X[first[inverse]]):
            return first, inverse
    # Few rows, or a hash collision: compare the rows themselves.
    dense = X.toarray() if sp.issparse(X) else X
    _, first, inverse = np.unique(dense, axis=0, return_index=True, return_inverse=True)
    if len(first) > n_clusters:
        return None
    return first, inverse.ravel()


def _projection_distinct_above(projected, n):
    """Whether ``projected`` (dense) holds more than ``n`` distinct rows.

    Rows that differ in their first coordinate are distinct, and that is
    almost always enough to answer: sorting one column costs a tenth of
    hashing the rows (3 ms on a client of 10,000 rows), which only a
    projection with few distinct first coordinates needs.
    """
    if projected.shape[1] and _distinct_above(np.sort(projected[:, 0]), n):
        return True
    return _distinct_above(np.sort(row_hashes(projected)), n)


def _distinct_above(sorted_hashes, n):
    """Whether more than ``n`` distinct values are in ``sorted_hashes``."""
    return np.count_nonzero(sorted_hashes[1:] != sorted_hashes[:-1]) >= n


def _assigned_sq_distance(X, centers, labels, weights=None):
    """Σ_i w_i ‖x_i − c_{labels_i}‖², the client's share of the k-means cost."""
    if sp.issparse(X):
        # Around the centers' mean, as the assignments (see skfed._numerics._shift).
        reference = shift_point(centers.mean(axis=0), X)
        X, centers = shifted_rows(X, reference), centers - reference
        cross = np.asarray(X @ centers.T)[np.arange(X.shape[0]), labels]
        sq = (
            row_norms(X, squared=True)
            - 2.0 * cross
            + row_norms(centers, squared=True)[labels]
        )
        sq = np.maximum(sq, 0.0)
    else:
        sq = labelled_sq_distances(X, centers, labels)
    sq = sq.astype(np.float64, copy=False)
    return float(sq.sum() if weights is None else np.dot(weights, sq))
