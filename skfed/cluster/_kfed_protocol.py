"""k-FED's protocol (Dennis, Li & Smith, ICML 2021): client steps, server
steps, and :func:`run_kfed`, which drives them on a federation.

One upload round: every client clusters its own data (Algorithm 1, or
plain k-means where that is cheaper) and sends its k(z) local centers; the
server merges the pooled centers into k and sends each client the global
cluster of each of its local centers (Definition 3.3, the induced
clustering). :func:`run_kfed_update` is the paper's Theorem 3.2: new
clients join a fitted model without contacting earlier ones.

The module reads top-down: the drivers, the client steps, the server steps.
"""

# A large dense client's Lloyd iterations run on its rows prepared once
# (skfed.cluster._lloyd); sparse clients' reuse scikit-learn's KMeans and
# kmeans_plusplus; the projection uses randomized_svd.

import contextlib
import functools
import warnings
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from sklearn.cluster import KMeans, kmeans_plusplus
from sklearn.metrics import (
    euclidean_distances,
    pairwise_distances_argmin,
)
from sklearn.utils.extmath import randomized_svd, row_norms

from .._engine._federation import ClientStepError, ClientValueError
from .._engine._ledger import NO_UPLOAD, PER_CLIENT, SUM_ONLY, Disclosure
from .._engine._protocol import PER_ROW, PUBLIC, client_step, collectable
from .._engine._validation import clip_to_data
from .._numerics._rows import row_hashes, rows_equal
from .._numerics._shift import shift_point, shifted_rows
from .._numerics._threads import thread_pools
from ..privacy._refusal import MIN_ROWS
from ._batched_kmeans import SMALL_ROWS, KMeansProblem
from ._coreset import (
    _SAME_COST,
    _assign_around_centers,
    _centered,
    _cluster_sums,
    _cluster_sums_step,
    _rounding_noise,
    _sq_dist,
    _sq_norms,
    _tolerance,
    lloyd_update,
    weighted_kmeans,
)
from ._kfed_moves import improve_by_moves
from ._kfed_private import dp_lloyd_step
from ._lloyd import lloyd, lloyd_rows, weighted_cost

# What the server may collect of a client's k-FED state after the fit:
# whether its upload was its rows (the server saw it), its labels (one per
# row) and its exact cost and local iterations (statistics of its rows).
collectable("kfed", "raw", PUBLIC)
collectable("kfed", ("labels", "induced_labels"), PER_ROW)
collectable("kfed", ("inertia", "n_iter"), PER_CLIENT)

__all__ = [
    "KFedLocalOptions",
    "KFedPrivateOptions",
    "KFedResult",
    "run_kfed",
    "run_kfed_update",
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


class KFedResult(NamedTuple):
    """What :func:`run_kfed` and :func:`run_kfed_update` return.

    Attributes
    ----------
    cluster_centers : ndarray of shape (k, n_features)
        The global centers τ_r, in the data's dtype.
    cluster_weights : ndarray of shape (k,)
        The server's weight of each center (sizes or counts of local
        centers, per ``center_weighting``), for later updates.
    client_ids : list
        The clients that took part, in canonical order.
    local_centers : list of ndarray
        Θ(z) of each of them, as uploaded.
    local_center_labels : list of ndarray
        The global cluster of each local center (what the server sent).
    raw_upload_clients : list
        Clients that uploaded raw rows (at most k(z) distinct samples).
    failed_clients : dict
        Client id -> reason, for clients left out.
    labels : ndarray of shape (n_samples,) or None
        The nearest global center of every training sample (kept on the
        clients; gathered for the fitted attributes; -1 for left-out
        clients); None when not gathered (``gather_labels=False``).
    induced_labels : ndarray of shape (n_samples,) or None
        The induced label of every training sample (the global cluster of
        its local center), gathered and left out as ``labels``.
    inertia : float
        Σ of the clients' k-means costs against the global centers (each
        sample to its nearest one).
    n_iter : int
        Most local Lloyd iterations run by a client.
    n_refine_iter : int
        Refinement rounds run after the merge.
    """

    cluster_centers: np.ndarray
    cluster_weights: np.ndarray
    client_ids: list
    local_centers: list
    local_center_labels: list
    raw_upload_clients: list
    failed_clients: dict
    labels: np.ndarray | None
    induced_labels: np.ndarray | None
    inertia: float
    n_iter: int
    n_refine_iter: int = 0


# KFed's default server_n_init: kept even over fewer pooled centers.
_SERVER_N_INIT = 10


def run_kfed(
    fed,
    *,
    local,
    random_state,
    merge,
    server_n_init,
    dtype=None,
    private=None,
    gather_labels=True,
    refine_iter=0,
    tol=1e-4,
    weighted=False,
):
    """k-FED on an open federation: one upload round and the cluster map.

    1. ``"local centers"`` — client z clusters its rows into k(z) local
       centers and uploads them (k(z)·d floats) and, with
       ``center_weighting="size"``, their sizes (k(z) floats).
    2. The server merges the pooled centers into k (``merge``).
    3. ``"lloyd refinement"`` (only with ``refine_iter > 0``, at most that
       many times) — the server broadcasts the centers (k·d floats down);
       each client uploads, per cluster, the weighted sum of its rows'
       displacements from the center and their weight (k(d + 1) floats up,
       sum-only, as in :func:`~skfed.cluster._coreset.federated_coreset_kmeans`);
       the server moves the centers to the means.
    4. ``"cluster map"`` — the server sends each client the k global centers
       and the cluster of each of its local centers (k·d + k(z) floats
       down); clients label their samples with their nearest global center
       (and keep the induced labels too) and keep their cost.

    Parameters
    ----------
    fed : Federation
        Open federation (inside its ``with`` block); its
        ``on_client_error`` decides whether a failing client raises.
    local : KFedLocalOptions
        k and the clients' options.
    random_state : RandomState
        The server's generator (the fit's ``rng``).
    merge, server_n_init
        As in :class:`~skfed.KFed`.
    dtype : dtype, default=None
        Of the returned centers; None means the clients' (``fed.dtype``).
    private : KFedPrivateOptions or None, default=None
        Under differential privacy, the clients' DP Lloyd (see
        ``skfed.cluster._kfed_private``) replaces the local step, and
        its noisy counts weight the merge.
    gather_labels : bool, default=True
        Whether the clients' labels are gathered into ``result.labels`` and
        ``result.induced_labels``; when False they stay on the clients and
        both are None. The rounds are the same either way.
    refine_iter : int, default=0
        Largest number of ``"lloyd refinement"`` rounds after the merge.
    tol : float, default=1e-4
        The refinement stops when the centers move (squared, summed) by at
        most ``tol`` times the pooled centers' weighted variance.
    weighted : bool, default=False
        Whether the refinement weighs the rows by the clients' sample
        weights.

    Returns
    -------
    result : KFedResult
    """
    n_clusters = local.n_clusters
    n_samples = fed.n_samples
    ids, centers, weights, n_requested = _local_round(
        fed, "local centers", local, private
    )
    # Σ k(z) < k cannot give k clusters whatever the data. Fewer distinct
    # samples than k only duplicates centers, as in KMeans.
    if n_requested < n_clusters:
        raise ValueError(
            f"KFed needs at least n_clusters={n_clusters} local centers, but "
            f"the {len(ids)} participating client(s) ask for only "
            f"{n_requested} (the sum of their k(z))."
            + _failure_note(fed.failed_clients)
            + " Lower n_clusters, raise n_local_clusters, or add clients."
        )
    pooled, pooled_weights, owner = _pool(centers, weights)
    if private is not None:
        pooled_weights = _floor_dropped_weights(pooled_weights)
    # The server works around a point it computes from the uploads, so that
    # data far from the origin keeps its spread.
    reference = _reference_point(pooled)
    offsets = pooled - reference
    if merge == "kmeans":
        # More restarts than pooled centers only repeat seedings (as
        # DistributedKMeans' n_init over its coreset; 1e6 restarts over 9
        # centers ran for minutes). Up to the default's 10 restarts are
        # kept whatever the pool, so that small fits keep their model.
        server_n_init = clip_to_data(
            "server_n_init",
            server_n_init,
            max(len(pooled), _SERVER_N_INIT),
            "pooled local centers (or 10)",
        )
        offset_centers, assignment, cluster_weights = _kmeans_merge(
            offsets, pooled_weights, n_clusters, random_state, server_n_init
        )
    else:
        initial = _farthest_point_initialization(
            offsets, owner, n_clusters, random_state
        )
        offset_centers, assignment, cluster_weights = _one_lloyd_round(
            offsets, pooled_weights, initial
        )
    dtype = fed.dtype if dtype is None else dtype
    cluster_centers = offset_centers + reference
    n_refine_iter = 0
    if refine_iter > 0:
        cluster_centers, n_refine_iter = _refine(
            fed,
            cluster_centers,
            refine_iter,
            max(
                _tolerance(offsets, pooled_weights, tol),
                n_clusters * _rounding_noise(cluster_centers),
            ),
            weighted,
        )
    cluster_centers = cluster_centers.astype(dtype, copy=False)
    center_labels = _split_by_owner(assignment, owner, len(ids))
    result = _finish(
        fed,
        ids,
        centers,
        center_labels,
        cluster_centers,
        cluster_weights,
        n_samples if gather_labels else None,
    )
    return result._replace(n_refine_iter=n_refine_iter)


def _refine(fed, centers, refine_iter, tol_abs, weighted):
    """Distributed Lloyd steps from the merged centers: rounds
    ``"lloyd refinement"``, each a sum of the clients' per-cluster
    displacement sums and weights (a sum-only round, which secure
    aggregation masks), stopping once the centers move by ``tol_abs`` or
    less. Returns the centers and the number of rounds run."""
    # Under raw_rows="refuse" a client leaves out the clusters it holds
    # fewer than MIN_ROWS distinct rows of: their sums would be those rows.
    min_rows = MIN_ROWS if fed.raw_rows == "refuse" else None
    step = functools.partial(
        _cluster_sums_step, rows=None, weighted=weighted, min_rows=min_rows
    )
    n_rounds = 0
    for _ in range(refine_iter):
        stats = fed.run_round("lloyd refinement", step, centers, disclosure=SUM_ONLY)
        centers, shift = lloyd_update(centers, stats)
        n_rounds += 1
        if shift <= tol_abs:
            break
    return centers, n_rounds


def run_kfed_update(
    fed, *, local, cluster_centers, cluster_weights, private=None, gather_labels=True
):
    """New clients join a fitted k-FED model (the paper's Theorem 3.2).

    The new clients run the local step (round ``"local centers (new)"``);
    each uploaded center joins its nearest global center, whose mean and
    weight are updated; the clients get the cluster map as in
    :func:`run_kfed`. Earlier clients are not contacted.

    Parameters
    ----------
    fed : Federation
        Open federation of the new clients.
    local : KFedLocalOptions
        As in :func:`run_kfed` (k as fitted).
    cluster_centers, cluster_weights : ndarray
        The model's τ_r and weights (``KFedResult``).
    private : KFedPrivateOptions or None, default=None
        As in :func:`run_kfed`.
    gather_labels : bool, default=True
        As in :func:`run_kfed`.

    Returns
    -------
    result : KFedResult
        For the new clients only; the centers and weights are the updated
        model's.
    """
    n_samples = fed.n_samples
    ids, centers, weights, _ = _local_round(fed, "local centers (new)", local, private)
    if not ids:
        raise ValueError(
            "No new client took part in partial_fit."
            + _failure_note(fed.failed_clients)
        )
    pooled, pooled_weights, owner = _pool(centers, weights)
    if private is not None:
        pooled_weights = _floor_dropped_weights(pooled_weights)
    new_centers, assignment, new_weights = _assign_new_centers(
        cluster_centers, cluster_weights, pooled, pooled_weights
    )
    # The model keeps the dtype it was fitted with.
    new_centers = new_centers.astype(cluster_centers.dtype, copy=False)
    center_labels = _split_by_owner(assignment, owner, len(ids))
    return _finish(
        fed,
        ids,
        centers,
        center_labels,
        new_centers,
        new_weights,
        n_samples if gather_labels else None,
    )


class KFedLocalOptions(NamedTuple):
    """k and what each client's local step needs (the parameters of
    :class:`~skfed.KFed` of the same names)."""

    n_clusters: int
    n_local_clusters: object
    center_weighting: str
    local_step: str
    n_init: int
    max_iter: int
    tol: float
    allow_raw_upload: bool
    client_dropout: float


class KFedPrivateOptions(NamedTuple):
    """The clients' DP Lloyd under ``privacy``: the clipping box
    ``(lower, upper)`` (arrays of n_features), the number of iterations T
    (``private_iter``, one noisy release each) and the accountant's noise
    multiplier z."""

    lower: np.ndarray
    upper: np.ndarray
    n_iter: int
    noise_multiplier: float


def _finish(fed, ids, centers, center_labels, cluster_centers, weights, n_samples):
    """The cluster map round, and what the clients keep, as a result.

    ``n_samples`` None leaves the per-sample labels on the clients (the
    result's ``labels`` is None): the round still runs, since it is how the
    clients receive the model and compute their shares of the cost.
    """
    messages = [
        {"center_labels": labels, "cluster_centers": cluster_centers}
        for labels in center_labels
    ]
    fed.run_round(
        "cluster map", _induce_labels_step, messages=messages, disclosure=NO_UPLOAD
    )
    # Under differential privacy a client's exact cost and iterations stay
    # on it (un-noised statistics of its rows), and under privacy or
    # raw_rows="refuse" its labels do (one value per row): the estimator
    # then labels rows it holds in memory itself.
    private = fed.accountant is not None
    keys = ("raw",) if private else ("raw", "inertia", "n_iter")
    gathered = fed.local_results("kfed", keys)
    # Unknown to the server under privacy: the estimator sets them.
    kept = {c: v + (np.nan, 0) if private else v for c, v in gathered.items()}
    if not fed.per_row_allowed:
        n_samples = None
    labels = {
        key: None
        if n_samples is None
        else fed.assemble("kfed", key, n_samples, dtype=np.int32)
        for key in ("labels", "induced_labels")
    }
    return KFedResult(
        cluster_centers=cluster_centers,
        cluster_weights=weights,
        client_ids=ids,
        local_centers=centers,
        local_center_labels=center_labels,
        raw_upload_clients=[c for c, (is_raw, _, _) in kept.items() if is_raw],
        failed_clients=dict(fed.failed_clients),
        labels=labels["labels"],
        induced_labels=labels["induced_labels"],
        inertia=float(sum(inertia for _, inertia, _ in kept.values())),
        n_iter=int(max(n_iter for _, _, n_iter in kept.values())),
    )


def _local_round(fed, name, options, private=None):
    """Run the local step on every client of ``fed``; gather its centers."""
    local = options.n_local_clusters
    if local is None:
        local = options.n_clusters
    if isinstance(local, Mapping):
        missing = [c for c in fed.client_ids if c not in local]
        if missing:
            shown = ", ".join(repr(c) for c in missing[:5])
            raise ValueError(
                f"n_local_clusters has no entry for client(s) {shown}; "
                "give every client its k(z), or pass an int."
            )
        local = {c: int(local[c]) for c in fed.client_ids}
    else:
        local = int(local)
    # More seedings than samples cannot be asked of a client (k-means++
    # starts from one of its samples); each client runs at most n_z of
    # them, so n_init=10**7 cannot run for hours on small clients.
    k_local = (
        local if isinstance(local, Mapping) else dict.fromkeys(fed.client_ids, local)
    )
    clipped = [
        n
        for c, n in zip(fed.client_ids, fed.client_sizes)
        if k_local[c] < n < options.n_init and private is None
    ]
    if clipped:
        warnings.warn(
            f"n_init={options.n_init} exceeds the number of samples of "
            f"{len(clipped)} client(s) (the smallest holds {min(clipped)}); "
            "each of them runs as many seedings as it has samples.",
            UserWarning,
            stacklevel=4,
        )
    step = functools.partial(
        _local_step,
        n_local_clusters=local,
        n_init=options.n_init,
        max_iter=options.max_iter,
        tol=options.tol,
        allow_raw_upload=options.allow_raw_upload,
        send_sizes=options.center_weighting == "size",
        dropout=float(options.client_dropout),
        single_threaded=fed.n_clients > 1,
        local_step=options.local_step,
    )
    # Simulated dropout must pass whatever on_client_error says, so the
    # round tolerates every failure and the exceptions' types decide.
    # Local centers are a per-client statistic, except on a client with at
    # most k(z) distinct rows, which uploads those rows (under "rows"): the
    # ledger counts them as raw rows.
    disclosure = Disclosure(PER_CLIENT, rows=_raw_rows_uploaded)
    if private is not None:
        # DP Lloyd: T noisy releases per client, never a raw row.
        step = functools.partial(
            dp_lloyd_step,
            n_local_clusters=local,
            lower=private.lower,
            upper=private.upper,
            n_iter=private.n_iter,
            noise_multiplier=private.noise_multiplier,
            dropout=float(options.client_dropout),
        )
        disclosure = Disclosure(PER_CLIENT, noised=private.n_iter)
    uploads = fed.run_round(name, step, tolerate=True, disclosure=disclosure)
    errors = fed.client_errors
    refused = [c for c, e in errors.items() if isinstance(e, _RawUploadRefused)]
    if refused:
        shown = ", ".join(repr(c) for c in refused[:5])
        raise ValueError(
            f"Client(s) {shown} hold at most k(z) distinct samples, so "
            "their local centers would be their raw rows, which "
            "allow_raw_upload=False (or raw_rows='refuse') forbids. Merge "
            "these clients with others, leave them out, or allow raw rows."
        )
    if fed.on_client_error == "raise":
        for cid, exc in errors.items():  # the first in canonical order
            if not isinstance(exc, _SimulatedDropout):
                raise _client_step_error(cid, name, exc) from exc
    centers = [_uploaded_centers(u) for u in uploads]
    if options.center_weighting == "size" or private is not None:
        weights = [np.asarray(u["sizes"], dtype=np.float64) for u in uploads]
    else:
        weights = [np.ones(len(c)) for c in centers]
    ids = list(fed.client_ids)
    return ids, centers, weights, sum(k_local[c] for c in ids)


def _raw_rows_uploaded(upload):
    """Rows of X in a local-centers upload (a client's distinct rows, or
    the centers of its clusters of fewer than ``MIN_ROWS`` distinct rows)."""
    return int(upload["rows"].shape[0]) if "rows" in upload else 0


def _uploaded_centers(upload):
    """A client's local centers in its labels' order: the centers, then the
    centers that are rows."""
    parts = [upload[key] for key in ("centers", "rows") if key in upload]
    return parts[0] if len(parts) == 1 else np.vstack(parts)


def _few_row_clusters(rows, weights, hashes, centers, offsets, labels, mean, *, merge):
    """Local clusters of fewer than ``MIN_ROWS`` distinct rows, whose
    centers are rows of the client (``hashes``: the rows' hashes, sorted).

    With ``merge`` (rows may not leave the client) each such cluster joins
    the cluster whose center is nearest to its own, whose center becomes
    the weighted mean of the union, until none is left (a client of at
    least ``MIN_ROWS`` distinct rows always gets there); empty clusters are
    dropped. Without, the few-row clusters are moved last, so that the
    upload can send their centers as rows.

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
        # The rows come sorted by hash (see _local_step): a stable sort by
        # label keeps them so within each cluster, where a new distinct row
        # is a change of hash.
        order = np.argsort(labels, kind="stable")
        label, hash_ = labels[order], hashes[order]
        new = np.ones(len(order), dtype=bool)
        new[1:] = (label[1:] != label[:-1]) | (hash_[1:] != hash_[:-1])
        return np.bincount(label[new], minlength=k)

    counts = distinct_per_cluster(labels)
    few = (counts < MIN_ROWS) & (counts > 0)
    if merge:
        if not few.any() and counts.all():
            return centers, offsets, labels, 0
        offsets = offsets.copy()
        labels = labels.copy()
        alive = counts > 0
        while True:
            few = alive & (counts < MIN_ROWS)
            if not few.any() or alive.sum() < 2:
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


def _client_step_error(client_id, round_name, exc):
    """The error ``Federation.run_round`` raises for a failing client; the
    local round builds it itself because it runs with ``tolerate=True``."""
    cls = ClientValueError if isinstance(exc, ValueError) else ClientStepError
    return cls(
        f"Client {client_id!r} failed in round {round_name!r}: "
        f"{type(exc).__name__}: {exc}",
        client_id=client_id,
        round_name=round_name,
    )


def _failure_note(failed):
    if not failed:
        return ""
    shown = "; ".join(f"{c!r}: {r}" for c, r in list(failed.items())[:5])
    more = f" and {len(failed) - 5} more" if len(failed) > 5 else ""
    return f" Left out: {shown}{more}."


# -- client steps -------------------------------------------------------------


class _SimulatedDropout(RuntimeError):
    """Raised by a client that skips the round (``client_dropout``)."""


class _RawUploadRefused(Exception):
    """Raised by a client that would have to upload raw rows but may not
    (``allow_raw_upload=False``)."""


@client_step("kfed.local", python_bound=True)
def _local_step(
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
):
    """Client step of round "local centers": Algorithm 1 (local k(z)-means).

    Upload: the k(z) local centers Θ(z) (k(z)·d floats) and, if
    ``send_sizes``, the k(z) local cluster sizes. A client with at most k(z)
    distinct samples uploads those samples (and their multiplicities)
    instead, or raises :class:`_RawUploadRefused` (uploads nothing) when
    ``allow_raw_upload`` is False. Kept: the local label of each sample.
    With ``single_threaded`` the client's KMeans runs use one OpenMP
    thread: the clients already run in parallel, and OpenMP teams inside
    parallel clients oversubscribe the cores. A small client's k-means
    runs are handed over to be solved with other clients' (see
    :func:`_kmeans`). ``local_step`` as in :class:`~skfed.KFed`; which path
    ``"auto"`` takes is :func:`_moves_client`'s rule.
    """
    if dropout and client.random_state(_DROPOUT_STREAM).random_sample() < dropout:
        raise _SimulatedDropout(f"simulated dropout (client_dropout={dropout})")
    if isinstance(n_local_clusters, Mapping):
        n_local_clusters = n_local_clusters[client.client_id]
    X = client.X
    weights = client.sample_weight
    if weights is None:
        weights = np.ones(X.shape[0], dtype=X.dtype)

    # Work in an order defined by the rows' contents (values, then weights)
    # so that the result does not depend on the order of the samples.
    hashes = row_hashes(X)
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
            raise _RawUploadRefused(
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
        sorted_labels[zero] = pairwise_distances_argmin(X_zero, offsets)
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


def _moves_client(rows, local_step):
    """Whether ``local_step="auto"`` takes the large-client path here:
    Algorithm 1 with one seeding, then split-and-merge moves
    (:func:`~skfed.cluster._kfed_moves.improve_by_moves`), instead of
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
def _induce_labels_step(client, state, message):
    """Client step of round "cluster map": labels from the global model.

    Download: the global cluster of each local center (k(z) ints) and the
    global centers (k·d floats). The client labels each point with its
    nearest global center (as ``predict`` does, so ``labels_`` and
    ``predict`` agree on the training rows) and keeps the induced label
    too (the global cluster of its local center, Definition 3.3), and
    computes its share of the k-means cost against the nearest centers;
    nothing is uploaded.
    """
    state = dict(state)
    centers = np.asarray(message["cluster_centers"])
    # The induced labels were the fitted labels once: the nearest center
    # is never farther, and on IID digits (10 clients) it raised the NMI
    # from 0.644 to 0.732, KMeans' 0.741. Under privacy the local
    # clusters of a few noisy Lloyd iterations straddle blobs, so there
    # the induced labels are the weaker still.
    labels, d2 = _assign_around_centers(client.X, centers.astype(client.X.dtype))
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
    client's weighted mean (see :func:`_local_step`), and the centers are
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
    sq_dist = _sq_dist(projected, _sq_norms(projected), nu)
    nearest = np.argmin(sq_dist, axis=1)
    if n_clusters > 1:
        d1 = sq_dist[np.arange(len(nearest)), nearest]
        sq_dist[np.arange(len(nearest)), nearest] = np.inf
        core = 9.0 * d1 <= sq_dist.min(axis=1)
    else:
        core = np.ones(len(nearest), dtype=bool)
    # θ_r is the mean of the pruned set S_r taken in the projection and
    # mapped back, mean(P[S_r]) Vᵀ, as the authors' code does. The
    # full-space mean of the rows (a literal reading of the paper) turns
    # a one-point S_r into a raw, noisy row that Lloyd then keeps as a
    # cluster of its own, and the server's seeding picks it: 7% accuracy
    # instead of 86% (KMeans) at 6σ on the d=100, k=64 mixtures.
    projected_theta = np.array(nu, dtype=np.float64)
    sums, totals = _cluster_sums(projected, weights * core, nearest, n_clusters)
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
    return _means_of(X, weights, labels, lloyd_centers), labels, int(lloyd_iter)


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
    return _means_of(X, weights, labels, centers), labels, n_iter


def _means_of(X, weights, labels, centers):
    """The weighted means of the clusters ``labels`` defines (a cluster with
    no weight keeps its center), in X's dtype.

    Lloyd stops on a tolerance or ``max_iter`` and reassigns labels
    afterwards, so its centers can be one update behind its labels; the
    uploaded centers must be the means of the clusters the labels induce.
    """
    sums, sizes = _cluster_sums(X, weights, labels, len(centers))
    means = np.array(centers, dtype=X.dtype)
    filled = sizes > 0
    means[filled] = sums[filled] / sizes[filled, None]
    return means


def _kmeans(
    X, weights, n_clusters, *, n_init, max_iter, tol, seed, init=None, prepared=None
):
    """Weighted k-means (k-means++ and Lloyd, or Lloyd from ``init``) on one
    client's rows: a generator returning (centers, labels, n_iter).

    A small dense client hands its k-means over as a
    :class:`~skfed.cluster._batched_kmeans.KMeansProblem` (``yield``), which
    the transport solves together with the other clients' (restarts and
    clients side by side as arrays): a scikit-learn ``KMeans.fit`` costs
    about 8 ms of fixed overhead (validation, thread-pool control), which
    made a client of a hundred rows cost 25 ms and a fit over 1,000 such
    clients 15 times one over 10 clients of the same N. A larger dense
    client runs :func:`~skfed.cluster._lloyd.lloyd` on rows prepared once
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
        same_cost=_SAME_COST,
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
    on a large dense client's rows (a :class:`~skfed.cluster._lloyd.LloydRows`):
    (centers, labels, n_iter).

    ``KMeans(n_init=n_init)`` with its seeding replaced by
    :func:`_greedy_kmeans_plusplus` (the seedings took two thirds of a
    ``KMeans`` fit on a client of 10,000 rows in 50 features with
    k(z) = 64) and its Lloyd by :func:`~skfed.cluster._lloyd.lloyd`. Ties
    keep the earlier restart, as in ``KMeans``.
    """
    rng = _pcg_random_state(seed)
    X, w = rows.X, rows.w
    X_f32 = X.astype(np.float32)
    sq_norms = np.einsum("ij,ij->i", X_f32, X_f32)
    best, best_cost = None, np.inf
    for _ in range(max(n_init, 1)):
        seeds = X[_greedy_kmeans_plusplus(X_f32, sq_norms, w, n_clusters, rng)]
        run = lloyd(rows, seeds, max_iter=max_iter)
        if n_init <= 1:
            return run
        cost = weighted_cost(X, w, run[0], run[1])
        if cost < best_cost:
            best, best_cost = run, cost
    return best


def _greedy_kmeans_plusplus(X_f32, sq_norms, weights, n_clusters, rng):
    """Indices of k rows chosen by weighted greedy k-means++.

    scikit-learn's ``kmeans_plusplus`` algorithm (Arthur & Vassilvitskii's
    D² sampling with 2 + ⌊ln k⌋ candidates per center, the candidate that
    lowers the potential most kept), with the distances to the candidates
    taken in float32: they only decide which row is drawn, and a float32
    product of the candidates with the rows is four times faster than a
    float64 one, the bulk of the seeding. The potentials are summed in
    float64.

    Parameters
    ----------
    X_f32 : ndarray of shape (n_samples, n_features), float32
        The rows (centered on the client's mean by the caller).
    sq_norms : ndarray of shape (n_samples,), float32
        Their squared norms.
    weights : ndarray of shape (n_samples,), float64
    n_clusters : int
    rng : RandomState

    Returns
    -------
    indices : ndarray of int of shape (n_clusters,)
    """
    n_samples = X_f32.shape[0]
    n_trials = 2 + int(np.log(n_clusters))
    indices = np.empty(n_clusters, dtype=np.intp)
    indices[0] = rng.choice(n_samples, p=weights / weights.sum())

    def sq_dist_to(rows):
        dist = X_f32[rows] @ X_f32.T
        dist *= -2.0
        dist += sq_norms
        dist += sq_norms[rows, None]
        return np.maximum(dist, 0.0, out=dist)

    closest = sq_dist_to(indices[:1])[0]
    potential = float(weights @ closest)
    for c in range(1, n_clusters):
        draws = rng.uniform(size=n_trials) * potential
        candidates = np.searchsorted(np.cumsum(weights * closest), draws)
        np.clip(candidates, None, n_samples - 1, out=candidates)
        dist = np.minimum(closest, sq_dist_to(candidates))
        potentials = dist @ weights
        best = int(np.argmin(potentials))
        potential = float(potentials[best])
        closest = dist[best]
        indices[c] = candidates[best]
    return indices


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
    large dense client's :class:`~skfed.cluster._lloyd.LloydRows`, None
    for sparse rows (``KMeans`` runs there).
    """
    if sp.issparse(X):
        return None
    if not _batched(X):
        return lloyd_rows(X, weights, tol)
    w = np.asarray(weights, dtype=np.float64)
    Xc, shift = _centered(np.asarray(X, dtype=np.float64), w)
    return _PreparedRows(Xc, w, shift, _tolerance(Xc, w, tol), _rounding_noise(X))


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
    return second if costs[1] < costs[0] - _SAME_COST * abs(costs[0]) else first


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
        diff = X - centers[labels]
        sq = np.einsum("ij,ij->i", diff, diff)
    sq = sq.astype(np.float64, copy=False)
    return float(sq.sum() if weights is None else np.dot(weights, sq))


# -- server steps -------------------------------------------------------------


def _pool(centers, weights):
    """Pool the uploaded local centers Θ = ∪ Θ(z) (Algorithm 2, step 1).

    Returns the pooled centers, their weights and the position (in
    ``centers``) of the client that sent each.
    """
    pooled = np.concatenate(centers).astype(np.float64, copy=False)
    pooled_weights = np.concatenate(weights)
    owner = np.repeat(np.arange(len(centers)), [len(c) for c in centers])
    return pooled, pooled_weights, owner


def _floor_dropped_weights(weights):
    """Under privacy, local centers of weight 0 (their noisy count was
    too low to trust) keep a weight too small to move a merged center or
    to be drawn as a seed, so that every uploaded center still gets a
    global cluster and k of them exist to seed from."""
    floor = 1e-9 * max(float(weights.max()), 1.0)
    return np.where(weights > 0, weights, floor)


def _reference_point(points):
    """The mean of ``points``, summed in an order defined by their values.

    The server works on the pooled centers minus this point: squared
    distances expanded on coordinates far from the origin cancel. Summing
    in value order keeps it independent of the clients' names and order.
    """
    return points[np.lexsort(points.T[::-1])].mean(axis=0)


def _farthest_point_initialization(pooled, owner, n_clusters, random_state):
    """Algorithm 2, steps 2–6: M from one client, then farthest points.

    M starts as the centers of a client with the most local centers. Among
    several such clients one is drawn with ``random_state`` from an order
    defined by the centers' values (never by client ids or order). Then the
    pooled center farthest from M (distance to a set = distance to its
    nearest member) joins M until |M| = ``n_clusters``.

    Returns
    -------
    initial : ndarray of int of shape (n_clusters,)
        Indices into ``pooled`` of the members of M, in the order chosen.
    """
    # Canonical order of the pooled centers by value: every tie below is
    # broken by this order, so permuting or renaming clients changes nothing.
    canonical = np.lexsort(pooled.T[::-1])
    rank = np.empty_like(canonical)
    rank[canonical] = np.arange(len(canonical))

    counts = np.bincount(owner)
    candidates = np.flatnonzero(counts == counts.max())
    # Order the candidates by the values of all their centers, each client's
    # taken in canonical order: clients that share their smallest center
    # (e.g. a duplicated row) would otherwise be ordered by their position.
    # Clients that tie here hold the same centers, so either gives the same M.
    own = [np.flatnonzero(owner == z) for z in candidates]
    own = [idx[np.argsort(rank[idx])] for idx in own]
    keys = [tuple(pooled[idx].ravel().tolist()) for idx in own]
    by_value = sorted(range(len(own)), key=keys.__getitem__)
    members = own[by_value[random_state.randint(len(own))]][:n_clusters]
    ordered = pooled[canonical]
    min_sq_dist = euclidean_distances(ordered, pooled[members], squared=True).min(
        axis=1
    )
    chosen = list(members)
    while len(chosen) < n_clusters:
        best = int(np.argmax(min_sq_dist))  # first in canonical order on ties
        chosen.append(canonical[best])
        new = euclidean_distances(ordered, ordered[best : best + 1], squared=True)
        np.minimum(min_sq_dist, new[:, 0], out=min_sq_dist)
    return np.asarray(chosen, dtype=np.intp)


def _kmeans_merge(pooled, pooled_weights, n_clusters, random_state, n_init):
    """Server: weighted k-means over the pooled local centers (our merge).

    The pooled centers, weighted by their local cluster sizes (or 1 with
    ``center_weighting="uniform"``), are clustered by weighted k-means++
    and weighted Lloyd, best of ``n_init`` restarts by weighted cost. It
    uses the same upload as the paper's merge; where farthest-point
    selection takes an outlying local center as a global seed, the
    restarts and the weights do not. The centers are taken in an order
    defined by their values and weights, so the clients' names and order
    do not reach the draws.

    Returns
    -------
    cluster_centers, assignment, cluster_weights
        As :func:`_one_lloyd_round`.
    """
    canonical = np.lexsort((pooled_weights, *pooled.T[::-1]))
    centers, _, _ = weighted_kmeans(
        pooled[canonical],
        pooled_weights[canonical].astype(np.float64),
        n_clusters,
        random_state=random_state,
        n_init=n_init,
    )
    assignment = _nearest(pooled, centers)
    return _weighted_means(pooled, pooled_weights, assignment, centers)


def _one_lloyd_round(pooled, pooled_weights, initial):
    """Algorithm 2, step 7: one Lloyd round over the pooled local centers.

    Every pooled center joins its nearest member of M (groups τ_r); the
    global center r is the weighted mean of τ_r (M_r if τ_r is empty, which
    only duplicated centers cause).

    Returns
    -------
    cluster_centers : ndarray of shape (n_clusters, n_features)
    assignment : ndarray of int
        Global cluster of each pooled center.
    cluster_weights : ndarray of shape (n_clusters,)
        Total weight of each τ_r (kept for :meth:`KFed.partial_fit`).
    """
    init_centers = pooled[initial]
    assignment = _nearest(pooled, init_centers)
    return _weighted_means(pooled, pooled_weights, assignment, init_centers)


def _assign_new_centers(cluster_centers, cluster_weights, pooled, pooled_weights):
    """Theorem 3.2: new local centers join their nearest global center.

    The global centers become the weighted means of the enlarged τ_r,
    computed from the old means and weights (the server keeps only those).
    Everything is computed relative to the mean of the current global
    centers, for the same reason as in :func:`_reference_point`.
    """
    centers = cluster_centers.astype(np.float64)
    reference = centers.mean(axis=0)
    centers -= reference
    offsets = pooled - reference
    assignment = _nearest(offsets, centers)
    new_centers, _, new_weights = _weighted_means(
        offsets, pooled_weights, assignment, centers
    )
    total = cluster_weights + new_weights
    has_new = new_weights > 0
    merged = centers.copy()
    merged[has_new] = (
        cluster_weights[has_new, None] * centers[has_new]
        + new_weights[has_new, None] * new_centers[has_new]
    ) / total[has_new, None]
    return merged + reference, assignment, total


def _nearest(points, centers):
    """Index of the nearest center (the first one on ties)."""
    return np.argmin(euclidean_distances(points, centers, squared=True), axis=1)


def _weighted_means(points, weights, assignment, fallback):
    n_clusters = len(fallback)
    # Sum in an order defined by the points' values and weights, not by the
    # clients' order: renaming clients then changes no bit of the result.
    order = np.lexsort((weights, *points.T[::-1]))
    groups, weights = assignment[order], weights[order]
    totals = np.bincount(groups, weights=weights, minlength=n_clusters)
    sums = np.zeros_like(fallback, dtype=np.float64)
    np.add.at(sums, groups, weights[:, None] * points[order])
    centers = np.array(fallback, dtype=np.float64)
    filled = totals > 0
    centers[filled] = sums[filled] / totals[filled, None]
    return centers, assignment, totals


def _split_by_owner(assignment, owner, n_clients):
    """The global cluster of each local center, one array per client."""
    return [assignment[owner == z].astype(np.int64) for z in range(n_clients)]
