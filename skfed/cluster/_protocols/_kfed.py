"""k-FED's protocol (Dennis, Li & Smith, ICML 2021): :func:`run_kfed`,
which drives it on a federation, and the server's steps.

One upload round: every client clusters its own data (its step is in
:mod:`skfed.cluster._protocols._kfed_local`) and sends its k(z) local
centers; the server merges the pooled centers into k and sends each client
the global cluster of each of its local centers (Definition 3.3, the
induced clustering). :func:`run_kfed_update` is the paper's Theorem 3.2:
new clients join a fitted model without contacting earlier ones.

The module reads top-down: the drivers, then the server steps.
"""

import functools
import warnings
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np
from sklearn.metrics import euclidean_distances

from ..._engine._federation import ClientStepError, ClientValueError
from ..._engine._ledger import PER_CLIENT, Disclosure
from ..._engine._rounds import Round, download, per_client
from ..._engine._validation import clip_to_data
from ...privacy._refusal import MIN_ROWS
from .._kmeans import (
    SMALL_ROWS,
    nearest,
    rounding_noise,
    tolerance,
    weighted_kmeans,
)
from ._coreset import REFINEMENT, cluster_sums_step, lloyd_update
from ._kfed_local import (
    RawUploadRefused,
    SimulatedDropout,
    induce_labels_step,
    local_step,
)
from ._kfed_private import dp_lloyd_step, release_sensitivity

__all__ = [
    "CLUSTER_MAP",
    "LOCAL_CENTERS",
    "NEW_LOCAL_CENTERS",
    "PRIVATE_LOCAL_CENTERS",
    "PRIVATE_NEW_LOCAL_CENTERS",
    "REFINEMENT",
    "KFedLocalOptions",
    "KFedPrivateOptions",
    "KFedResult",
    "kfed_rounds",
    "run_kfed",
    "run_kfed_update",
]


def _raw_rows_uploaded(upload):
    """Rows of X in a local-centers upload (a client's distinct rows, or
    the centers of its clusters of fewer than ``MIN_ROWS`` distinct rows)."""
    return int(upload["rows"].shape[0]) if "rows" in upload else 0


# The rounds, in the order they run (see run_kfed). Local centers are a
# per-client statistic, except on a client with at most k(z) distinct rows,
# which uploads those rows (under "rows"): the ledger counts them as raw
# rows (and the client refuses to under raw_rows="refuse").
LOCAL_CENTERS = per_client("local centers", rows=_raw_rows_uploaded)
NEW_LOCAL_CENTERS = per_client("local centers (new)", rows=_raw_rows_uploaded)
# Under differential privacy the local step is DP Lloyd: private_iter noised
# releases per client (``.noised(n_iter)`` at fit time), never a raw row.
PRIVATE_LOCAL_CENTERS = Round(
    "local centers", Disclosure(PER_CLIENT), sensitivity=release_sensitivity
)
PRIVATE_NEW_LOCAL_CENTERS = PRIVATE_LOCAL_CENTERS._replace(name=NEW_LOCAL_CENTERS.name)
# Distributed Lloyd after the merge is the coreset protocol's REFINEMENT.
CLUSTER_MAP = download("cluster map")


def kfed_rounds(*, refine_iter=0, private_iter=None, new=False):
    """The rounds :func:`run_kfed` (``new``: :func:`run_kfed_update`) runs,
    the refinement once per run (at most ``refine_iter``); under
    differential privacy (``private_iter`` given) the local step's noised
    releases."""
    if private_iter is None:
        local = NEW_LOCAL_CENTERS if new else LOCAL_CENTERS
    else:
        private = PRIVATE_NEW_LOCAL_CENTERS if new else PRIVATE_LOCAL_CENTERS
        local = private.noised(int(private_iter))
    refinement = () if new else (REFINEMENT,) * int(refine_iter)
    return (local, *refinement, CLUSTER_MAP)


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
    rows=None,
    min_rows=MIN_ROWS,
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
       sum-only, as in
       :func:`~skfed.cluster._protocols._coreset.federated_coreset_kmeans`);
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
        ``skfed.cluster._protocols._kfed_private``) replaces the local step, and
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
    rows : (str, str), default=None
        Where each client finds the rows it clusters, as in
        :func:`~skfed.cluster._protocols._coreset.federated_coreset_kmeans`
        (None: its X).
    min_rows : int, default=MIN_ROWS
        Under ``raw_rows="refuse"``, the distinct rows of X behind every
        local center and every cluster sum a client sends.

    Returns
    -------
    result : KFedResult
    """
    n_clusters = local.n_clusters
    n_samples = fed.n_samples
    located = {"rows": None if rows is None else tuple(rows)}
    ids, centers, weights, n_requested = _local_round(
        fed, local, private, min_rows=min_rows, **located
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
                tolerance(offsets, pooled_weights, tol),
                n_clusters * rounding_noise(cluster_centers),
            ),
            weighted,
            min_rows=min_rows,
            **located,
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
        **located,
    )
    return result._replace(n_refine_iter=n_refine_iter)


def _refine(fed, centers, refine_iter, tol_abs, weighted, *, rows, min_rows):
    """Distributed Lloyd steps from the merged centers: rounds
    ``"lloyd refinement"``, each a sum of the clients' per-cluster
    displacement sums and weights (a sum-only round, which secure
    aggregation masks), stopping once the centers move by ``tol_abs`` or
    less. Returns the centers and the number of rounds run."""
    # Under raw_rows="refuse" a client leaves out the clusters it holds
    # fewer than min_rows distinct rows of: their sums would determine
    # those rows.
    min_rows = min_rows if fed.raw_rows == "refuse" else None
    step = functools.partial(
        cluster_sums_step, rows=rows, weighted=weighted, min_rows=min_rows
    )
    n_rounds = 0
    for _ in range(refine_iter):
        stats = fed.run_round(REFINEMENT, step, centers)
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
    ids, centers, weights, _ = _local_round(fed, local, private, new=True)
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


def _finish(
    fed, ids, centers, center_labels, cluster_centers, weights, n_samples, rows=None
):
    """The cluster map round, and what the clients keep, as a result.

    ``n_samples`` None leaves the per-sample labels on the clients (the
    result's ``labels`` is None): the round still runs, since it is how the
    clients receive the model and compute their shares of the cost.
    """
    messages = [
        {"center_labels": labels, "cluster_centers": cluster_centers}
        for labels in center_labels
    ]
    step = (
        induce_labels_step
        if rows is None
        else functools.partial(induce_labels_step, rows=rows)
    )
    fed.run_round(CLUSTER_MAP, step, messages=messages)
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


def _local_round(
    fed, options, private=None, *, new=False, rows=None, min_rows=MIN_ROWS
):
    """Run the local step on every client of ``fed`` (``new``: clients that
    join a fitted model) on its ``rows``; gather its centers."""
    local = options.n_local_clusters
    row_centers_from = None
    if local is None:
        local = default_local_clusters(
            options.n_clusters, dict(zip(fed.client_ids, fed.client_sizes))
        )
        # The default's centers beyond k summarise rows, never are one:
        # over-clustering may not add raw rows to the upload.
        row_centers_from = options.n_clusters
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
        local_step,
        n_local_clusters=local,
        n_init=options.n_init,
        max_iter=options.max_iter,
        tol=options.tol,
        allow_raw_upload=options.allow_raw_upload,
        send_sizes=options.center_weighting == "size",
        dropout=float(options.client_dropout),
        single_threaded=fed.n_clients > 1,
        local_step=options.local_step,
        rows=rows,
        min_rows=min_rows,
        row_centers_from=row_centers_from,
    )
    # Simulated dropout must pass whatever on_client_error says, so the
    # round tolerates every failure and the exceptions' types decide.
    declared = NEW_LOCAL_CENTERS if new else LOCAL_CENTERS
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
        declared = PRIVATE_NEW_LOCAL_CENTERS if new else PRIVATE_LOCAL_CENTERS
        declared = declared.noised(private.n_iter)
    uploads = fed.run_round(declared, step, tolerate=True)
    errors = fed.client_errors
    refused = [c for c, e in errors.items() if isinstance(e, RawUploadRefused)]
    if refused:
        shown = ", ".join(repr(c) for c in refused[:5])
        raise ValueError(
            f"Client(s) {shown} hold at most k(z) distinct samples, so "
            "their local centers would be their raw rows, which "
            "raw_rows='refuse' (or the deprecated allow_raw_upload=False) "
            "forbids. Merge "
            "these clients with others, leave them out, or allow raw rows."
        )
    if fed.on_client_error == "raise":
        for cid, exc in errors.items():  # the first in canonical order
            if not isinstance(exc, SimulatedDropout):
                raise _client_step_error(cid, declared.name, exc) from exc
    centers = [_uploaded_centers(u) for u in uploads]
    if options.center_weighting == "size" or private is not None:
        weights = [np.asarray(u["sizes"], dtype=np.float64) for u in uploads]
    else:
        weights = [np.ones(len(c)) for c in centers]
    ids = list(fed.client_ids)
    return ids, centers, weights, sum(k_local[c] for c in ids)


# Rows per local center below which a client does not over-cluster.
_ROWS_PER_LOCAL_CENTER = 4


def default_local_clusters(n_clusters, client_sizes):
    """k(z) of each client for ``n_local_clusters=None``.

    Up to 2k local centers on clients of at most ``SMALL_ROWS`` rows, at
    least four rows behind each on average, and never fewer than k: a
    local cluster's rows share one global cluster in the merge, so finer
    local clusters leave the merged centers closer to those of k-means on
    the pooled rows (the gap in NMI to ``KMeans(n_init=1)`` on IID digits
    closes), and on small clients the extra centers cost little. Larger
    clients keep k: their local Lloyd work, which dominates a fit's time,
    grows with k(z), and their upload is already small next to their rows.
    """
    return {
        cid: int(n_clusters)
        if n > SMALL_ROWS
        else int(min(2 * n_clusters, max(n_clusters, int(n) // _ROWS_PER_LOCAL_CENTER)))
        for cid, n in client_sizes.items()
    }


def _uploaded_centers(upload):
    """A client's local centers in its labels' order: the centers, then the
    centers that are rows."""
    parts = [upload[key] for key in ("centers", "rows") if key in upload]
    return parts[0] if len(parts) == 1 else np.vstack(parts)


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
    assignment = nearest(pooled, centers)
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
    assignment = nearest(pooled, init_centers)
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
    assignment = nearest(offsets, centers)
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
