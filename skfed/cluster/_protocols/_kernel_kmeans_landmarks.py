"""The landmark protocol of federated kernel k-means: Nyström features on
landmarks made of the clients' local k-means centers, their summed
statistics, then the distributed coreset k-means.

Random Fourier features approximate the kernel uniformly over the input
space, and a few hundred of them miss the fine structure a narrow kernel
is chosen for (two concentric rings at γ = 10: NMI 0.26 where exact kernel
k-means separates them). Nyström features follow the data instead: with
landmarks L (n_L points) the map

    z(x) = k(x, L) W,   W = U Λ^{-½}   (K_LL = U Λ Uᵀ, the kept pairs),

gives z(x)ᵀz(y) = k(x, L) K_LL⁺ k(L, y), the kernel projected on the
landmarks' span, exact on the landmarks themselves. A federation has
landmarks at hand that are not rows: every client's local k-means centers
(k-FED's local step, :func:`~skfed.cluster._protocols._kfed_local.local_step`),
which cover where its rows are dense. Whatever ``raw_rows`` says, a local
cluster of fewer than two distinct rows, whose center is a row, is merged
into its nearest cluster before the upload (KFed's rule under
``raw_rows="refuse"``), and a client with too few distinct rows sends no
landmark at all (it still takes part in every other round): a landmark
need not be a row, so none is sent.

Rounds: ``"kernel width"`` (only when ``gamma=None``), ``"landmark
centers"`` (down nothing, up k_m d per client: its k_m local centers),
``"landmark feature statistics"`` (down L − c, c, W and γ, with c the
landmarks' mean, n_L (d + D) + d + 1 floats;
up the triangle of Z[m]ᵀZ[m] and Z[m]ᵀ1, D(D+1)/2 + D, sum-only), then the
one-shot's ``"embedding"`` (down D s + s) and the coreset k-means: the same
downstream as the random-feature one-shot
(:mod:`skfed.cluster._protocols._kernel_kmeans_one_shot`), only the map
differs. The random-feature path stays the private one: the landmark
centers are per-client statistics without noise.
"""

import math
import warnings
from functools import partial
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from scipy.linalg import eigh
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics.pairwise import euclidean_distances, rbf_kernel

from ..._engine._protocol import client_step
from ..._engine._rounds import per_client, sum_only
from ...kernel import federated_gamma
from ...kernel._embedding import feature_covariance_basis
from ...kernel._random_features import (
    feature_min_rows,
    feature_statistics_raw_rows,
)
from ...privacy._refusal import require_distinct_rows
from ._kernel_kmeans import (
    CHUNK,
    EMBEDDING,
    KERNEL_WIDTH,
    cluster_embedding,
    embedding_kmeans_rounds,
)
from ._kfed import _raw_rows_uploaded, _uploaded_centers
from ._kfed_local import RawUploadRefused, local_step

__all__ = [
    "LANDMARK_CENTERS",
    "LANDMARK_STATISTICS",
    "LandmarkResult",
    "landmark_centers",
    "landmark_embedding",
    "landmark_features",
    "landmark_kernel",
    "landmark_map",
    "landmark_rounds",
    "landmark_whitening",
    "local_landmarks",
    "run_landmarks",
]

# The rounds (see run_landmarks). The local centers are a per-client
# statistic; a client's few-row clusters (allowed rows only) travel under
# "rows", which the ledger counts as raw rows, as KFed's do.
LANDMARK_CENTERS = per_client("landmark centers", rows=_raw_rows_uploaded)
# The triangle of Σ_m Z[m]ᵀZ[m] and Σ_m Z[m]ᵀ1 of the Nyström features.
LANDMARK_STATISTICS = sum_only("landmark feature statistics")

# What a client of too few rows for the landmark statistics can do: the
# map has at most n_landmarks features.
_LANDMARK_REMEDY = (
    "Use n_landmarks at most the distinct rows of the smallest client, "
    "features='random' with fewer n_random_features, or leave the client out."
)
# Pairs of K_LL below this fraction of its largest eigenvalue are dropped
# (W = U Λ^{-½} would amplify their round-off): near-duplicate landmarks
# add no direction.
_LANDMARK_ROUNDOFF = 1e-8
# s of ``n_components=None``: the fewest leading components that hold this
# share of the Nyström features' variance, at least 3k and at most
# _MAX_COMPONENTS. Kernel k-means clusters in the whole feature space, and
# s = 3k lost the structure a narrow kernel shows (two rings at γ = 10:
# NMI 0.39 at s = 6, 1.0 from s = 10; the share asked for 22); the cap
# bounds the coreset's rows of H, s floats each.
_CAPTURED_SHARE = 0.9
_MAX_COMPONENTS = 100
# The local k-means' restarts and iterations on each client (KFed's
# default tolerance): landmarks need cover, not the best local cost.
_LOCAL_N_INIT = 1
_LOCAL_MAX_ITER = 100
_LOCAL_TOL = 1e-4


def landmark_statistics_uploaded(n_features_out):
    """:data:`LANDMARK_STATISTICS` counting, in the ledger, a client whose
    statistics give its one row away (its z(x) is then the sums, and the
    server, which knows L and W, solves k(x, L) for x)."""
    rows = partial(feature_statistics_raw_rows, n_random_features=n_features_out)
    disclosure = LANDMARK_STATISTICS.disclosure._replace(rows=rows)
    return LANDMARK_STATISTICS._replace(disclosure=disclosure)


def landmark_rounds(*, gamma, secure_aggregation, refine_iter, row_free=False):
    """The rounds :func:`run_landmarks` runs, a repeated round once per run
    (the refinement at most ``refine_iter`` times); ``row_free`` under
    ``raw_rows="refuse"``."""
    return (
        *(KERNEL_WIDTH.run(secure_aggregation) if gamma is None else ()),
        LANDMARK_CENTERS,
        LANDMARK_STATISTICS,
        EMBEDDING,
        *embedding_kmeans_rounds(refine_iter, row_free=row_free),
    )


def local_landmarks(n_landmarks, client_sizes):
    """k_m, the local centers each client computes: an equal share of the
    n_L landmarks, ⌈n_L / M⌉, and at most half the client's rows (a center
    then stands for two rows or more on average, and a client of k_m or
    fewer distinct rows would have to send its rows)."""
    share = math.ceil(n_landmarks / max(len(client_sizes), 1))
    return [max(1, min(share, int(n) // 2)) for n in client_sizes]


class LandmarkResult(NamedTuple):
    """What :func:`run_landmarks` returns: as
    :class:`~skfed.cluster._protocols._kernel_kmeans_one_shot.OneShotResult`,
    with the map's landmarks and their whitening instead of a seed.

    Attributes
    ----------
    gamma : float
    eigenvalues : ndarray of shape (n_components,)
        The top eigenvalues of the Nyström features' covariance.
    labels, embedding : ndarray or None
        Gathered from the clients (None when they keep them).
    coreset : CoresetKMeansResult
    landmarks : ndarray of shape (n_landmarks, n_features)
        L, the pooled local centers in the order of their values.
    center : ndarray of shape (n_features,)
        c, their mean: L − c and c are sent, and kernels are taken between
        x − c and L − c.
    whitening : ndarray of shape (n_landmarks, D)
        W = U Λ^{-½} of K_LL's kept pairs, as sent.
    basis : ndarray of shape (D, n_components)
        V, as sent to the clients.
    shift : ndarray of shape (n_components,)
        z̄ᵀV, as sent.
    client_ids : list
    """

    gamma: float
    eigenvalues: np.ndarray
    labels: np.ndarray
    embedding: np.ndarray
    coreset: tuple
    landmarks: np.ndarray
    center: np.ndarray
    whitening: np.ndarray
    basis: np.ndarray
    shift: np.ndarray
    client_ids: list


def run_landmarks(
    fed,
    *,
    n_clusters,
    n_components,
    random_state,
    coreset_size,
    n_init,
    n_landmarks,
    gamma,
    refine_iter,
):
    """Kernel k-means on Nyström features of the clients' local centers, on
    an open federation (never under differential privacy: the estimator
    takes the random-feature one-shot there).

    Parameters
    ----------
    fed : Federation
        Open federation (inside its ``with`` block).
    n_clusters : int
        k.
    n_components : int or None
        s, the columns of the embedding (at most the map's D); None takes
        those that capture the features' variance
        (:func:`captured_components`).
    random_state : RandomState
        The server's generator.
    coreset_size : int
        Of the coreset k-means, already clipped to the data.
    n_init : int or "auto"
        The server's restarts, already clipped to the data; ``"auto"`` as
        ``auto_restarts`` says.
    n_landmarks : int
        n_L, the landmarks asked for over all clients (each client
        computes its share, :func:`local_landmarks`).
    gamma : float or None
        γ; None estimates it first (``"kernel width"``).
    refine_iter : int
        Of the coreset k-means.

    Returns
    -------
    result : LandmarkResult
    """
    if gamma is None:
        gamma = federated_gamma(fed, KERNEL_WIDTH)
    else:
        gamma = float(gamma)
    refusing = fed.raw_rows == "refuse"
    landmarks, center, whitening = landmark_map(fed, n_landmarks, gamma)
    D = whitening.shape[1]

    refuse = {"min_rows": feature_min_rows(D)} if refusing else {}
    total = fed.run_round(
        landmark_statistics_uploaded(D),
        partial(landmark_statistics_step, **refuse),
        (landmarks, center, whitening, gamma),
    )
    if n_components is None:
        eigenvalues, basis, shift = captured_components(
            *feature_covariance_basis(total, fed.n_samples, D, D), n_clusters
        )
        n_components = eigenvalues.shape[0]
    else:
        eigenvalues, basis, shift = feature_covariance_basis(
            total, fed.n_samples, D, n_components
        )
    if eigenvalues.shape[0] < n_components:
        warnings.warn(
            f"Only {eigenvalues.shape[0]} eigenvalue(s) of the landmark "
            "features' covariance stand above round-off (too few distinct "
            f"landmarks or rows); the embedding has {eigenvalues.shape[0]} "
            f"column(s) instead of n_components={n_components}. Lower "
            "n_components.",
            ConvergenceWarning,
            stacklevel=3,
        )
    basis, shift = _content_signs(landmarks, whitening, gamma, basis, shift)
    fed.run_round(EMBEDDING, _embedding_step, (basis, shift))
    coreset = cluster_embedding(
        fed,
        n_clusters=n_clusters,
        n_components=basis.shape[1],
        coreset_size=coreset_size,
        random_state=random_state,
        n_init=n_init,
        refine_iter=refine_iter,
    )
    gathered = fed.per_row_allowed
    return LandmarkResult(
        gamma=gamma,
        eigenvalues=eigenvalues,
        labels=fed.assemble("coreset", "labels", fed.n_samples) if gathered else None,
        embedding=fed.assemble("kernel_kmeans", "H", fed.n_samples)
        if gathered
        else None,
        coreset=coreset,
        landmarks=landmarks + center,
        center=center,
        whitening=whitening,
        basis=basis,
        shift=shift,
        client_ids=list(fed.client_ids),
    )


def landmark_map(fed, n_landmarks, gamma):
    """Round ``"landmark centers"`` and the map it gives: (L − c, c, W), the
    pooled local centers around their mean c and the whitening of their
    kernel (``gamma`` as in :func:`landmark_kernel`)."""
    landmarks = landmark_centers(fed, n_landmarks)
    # Kernels of rows far from the origin are taken around the landmarks'
    # mean: squared distances expanded on raw coordinates cancel at 1e9.
    center = landmarks.mean(axis=0)
    landmarks = landmarks - center
    return landmarks, center, landmark_whitening(landmarks, gamma)


def landmark_centers(fed, n_landmarks):
    """Round ``"landmark centers"``: every client's k_m local k-means centers
    (:func:`local_landmarks`), pooled in the order of their values.

    Every client merges each local cluster of fewer than two distinct rows
    into its nearest before the upload (KFed's rule under
    ``raw_rows="refuse"``, applied here whatever ``raw_rows`` says: a
    landmark need not be a row), and a client of at most k_m distinct rows
    sends nothing; ``ValueError`` when no client sent a center.
    """
    k_local = dict(zip(fed.client_ids, local_landmarks(n_landmarks, fed.client_sizes)))
    step = partial(
        landmark_centers_step,
        n_local_clusters=k_local,
        single_threaded=fed.n_clients > 1,
    )
    uploads = fed.run_round(LANDMARK_CENTERS, step)
    if not any(len(_uploaded_centers(u)) for u in uploads):
        raise ValueError(
            "No client sent landmark centers: every client held too few "
            "distinct rows for local centers that are not rows. Pass "
            "features='random'."
        )
    landmarks = np.vstack([_uploaded_centers(u) for u in uploads])
    # In an order of their values, not of the clients' names: renamed
    # clients give the same K_LL, hence the same model bit for bit.
    landmarks = landmarks[np.lexsort(landmarks.T[::-1])]
    return landmarks.astype(np.float64)


def landmark_kernel(A, B, gamma):
    """k(A, B) for the Gaussian kernel of width ``gamma``, or, for a tuple
    of widths, the mean of their kernels (the classifier's multi-width
    dictionary; a mean of kernels is a kernel, and Nyström applies to it
    as it is)."""
    if np.ndim(gamma) == 0:
        return rbf_kernel(A, B, gamma=float(gamma))
    squared = euclidean_distances(A, B, squared=True)
    K = np.zeros_like(squared)
    for g in gamma:
        K += np.exp(-float(g) * squared)
    return K / len(gamma)


def landmark_features(X, landmarks, center, whitening, gamma):
    """Z = k(X − c, L − c) W for the rows X (``landmarks`` is L − c), a
    block of ``CHUNK`` rows at a time, dense (yields the block's slice and
    its rows of Z); ``gamma`` as in :func:`landmark_kernel`."""
    for start in range(0, X.shape[0], CHUNK):
        block = slice(start, min(start + CHUNK, X.shape[0]))
        rows = X[block]
        rows = rows.toarray() if sp.issparse(rows) else np.asarray(rows)
        rows = rows.astype(np.float64) - center
        yield block, landmark_kernel(rows, landmarks, gamma) @ whitening


def landmark_embedding(X, landmarks, center, whitening, gamma, basis, shift):
    """H = Z V − z̄ᵀV, Z = k(X, L) W: the clients' embedding step and the
    estimator's ``transform`` share it (new points follow the training
    rows' arithmetic)."""
    H = np.empty((X.shape[0], basis.shape[1]))
    for block, rows in landmark_features(X, landmarks, center, whitening, gamma):
        H[block] = rows @ basis
    H -= shift
    return H


# --------------------------------------------------------------------------
# Client steps


@client_step("kernel_kmeans.landmark_centers", python_bound=True)
def landmark_centers_step(
    client, state, message, *, n_local_clusters, single_threaded, allow_raw_upload=False
):
    """Client step of ``"landmark centers"``: k-FED's local k-means
    (:func:`~skfed.cluster._protocols._kfed_local.local_step`) with its k_m
    centers, few-row clusters merged (``allow_raw_upload=False``). A client
    of at most k_m distinct rows uploads no center (an empty array) and
    takes part in the later rounds as any other."""
    try:
        _, upload = yield from local_step(
            client,
            None,
            message,
            n_local_clusters=n_local_clusters,
            n_init=_LOCAL_N_INIT,
            max_iter=_LOCAL_MAX_ITER,
            tol=_LOCAL_TOL,
            allow_raw_upload=allow_raw_upload,
            send_sizes=False,
            dropout=0.0,
            single_threaded=single_threaded,
        )
    except RawUploadRefused:
        upload = {"centers": np.empty((0, client.X.shape[1]))}
    return state, upload


@client_step("kernel_kmeans.landmark_statistics", sum_only=True)
def landmark_statistics_step(client, state, message, *, min_rows=None):
    """Client step: the upper triangle of Z[m]ᵀZ[m] (row by row) followed by
    Z[m]ᵀ1, Z[m] = k(X[m], L) W, D(D+1)/2 + D floats in one vector (the
    server reads only their sum over the clients).

    The message: L, W and γ, kept for the embedding round. With
    ``min_rows`` (``raw_rows="refuse"``) a client of fewer distinct rows
    than D raises ``RawRowsRefused`` and uploads nothing: the span of its
    feature rows would locate them, as for random features.
    """
    landmarks, center, whitening, gamma = message
    X = client.X
    if min_rows:
        require_distinct_rows(
            X, min_rows, "landmark-feature statistics", _LANDMARK_REMEDY
        )
    D = whitening.shape[1]
    gram = np.zeros((D, D))
    sums = np.zeros(D)
    for _, rows in landmark_features(X, landmarks, center, whitening, gamma):
        gram += rows.T @ rows
        sums += rows.sum(axis=0)
    state = dict(state or {})
    state["landmark_map"] = (landmarks, center, whitening, float(gamma))
    return state, np.concatenate([gram[np.triu_indices(D)], sums])


@client_step("kernel_kmeans.landmark_embedding")
def _embedding_step(client, state, message):
    """Client step: keep H[m] = Z[m] V − z̄ᵀV (read by the coreset k-means
    as ``("kernel_kmeans", "H")``)."""
    basis, shift = message
    state = dict(state)
    landmarks, center, whitening, gamma = state.pop("landmark_map")
    state["H"] = landmark_embedding(
        client.X, landmarks, center, whitening, gamma, basis, shift
    )
    return state, None


# --------------------------------------------------------------------------
# Server steps


def captured_components(eigenvalues, basis, shift, n_clusters):
    """Server: the leading s of the covariance's eigenpairs (all of them
    given, largest first) that hold ``_CAPTURED_SHARE`` of their sum, s at
    least min(3k, D) and at most ``_MAX_COMPONENTS``."""
    share = np.cumsum(eigenvalues) / max(eigenvalues.sum(), np.finfo(float).tiny)
    s = int(np.searchsorted(share, _CAPTURED_SHARE)) + 1
    s = min(max(s, 3 * n_clusters), _MAX_COMPONENTS, eigenvalues.shape[0])
    return eigenvalues[:s], basis[:, :s], shift[:s]


def _content_signs(landmarks, whitening, gamma, basis, shift):
    """Server: V's columns signed so that the landmarks' own embedding
    k(L, L) W V has a positive sum of cubes in each. The usual rule (the
    entry of largest magnitude positive) meets near-ties in the whitened
    coordinates, where the rows' summation order (shuffled rows) flipped
    a small component; the cubes are far from zero on real data."""
    G = landmark_kernel(landmarks, landmarks, gamma) @ whitening @ basis - shift
    signs = np.where((G**3).sum(axis=0) < 0, -1.0, 1.0)
    return basis * signs, shift * signs


def landmark_whitening(landmarks, gamma):
    """Server: W = U Λ^{-½} over the pairs of K_LL = k(L, L) above
    round-off, so that z(x) = k(x, L) W has z(x)ᵀz(y) = k(x, L) K_LL⁺ k(L, y)
    (Williams and Seeger, "Using the Nyström method to speed up kernel
    machines", NIPS 2001). Columns in decreasing eigenvalue order;
    ``gamma`` as in :func:`landmark_kernel`."""
    K = landmark_kernel(landmarks, landmarks, gamma)
    if K.shape[0] > 1 and not np.any(K[~np.eye(K.shape[0], dtype=bool)]):
        if np.ndim(gamma) == 0:
            what = f"gamma={gamma:.3g} is too large"
            remedy = "a smaller gamma, e.g. gamma=None to take it"
        else:
            widths = ", ".join(f"{np.sqrt(0.5 / g):.3g}" for g in gamma)
            what = f"The kernel widths ({widths}) are too narrow"
            remedy = "larger widths, e.g. an int widths to take them"
        raise ValueError(
            f"{what} for these data: the kernel between every two landmarks "
            "(the clients' local centers) underflows to 0, a kernel narrower "
            "than their spacing, under which every row stands alone. Use "
            f"{remedy} from the data's spread, or rescale the data."
        )
    lam, U = eigh(K)
    keep = lam > _LANDMARK_ROUNDOFF * lam[-1]
    lam, U = lam[keep][::-1], U[:, keep][:, ::-1]
    return U / np.sqrt(lam)
