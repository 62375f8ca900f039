"""The row-free path of :class:`~skfed.FederatedRKHSClassifier` on
Nyström features (``method="random_features"``, ``features="landmarks"``):
regularised least squares on features of the multi-width Gaussian kernel
at landmarks made of the clients' local k-means centers.

Random Fourier features estimate the kernel uniformly over the input
space and need thousands of features where the classes meet in noise
(``make_classification(10_000, flip_y=0.1)``: 2,000 of them 2.5 points
below SVC). Nyström features follow the data instead: with landmarks L
(n_L points) and the dictionary's mean kernel k (a mean of Gaussian
kernels is a kernel),

    z(x) = k(x, L) W,   W = U Λ^{-½}   (K_LL = U Λ Uᵀ, the kept pairs),

gives z(x)ᵀz(y) = k(x, L) K_LL⁺ k(L, y), the kernel projected on the
landmarks' span. The landmarks are the clients' local k-means centers, as
kernel k-means' (``landmark_map`` of
:mod:`skfed.cluster._protocols._kernel_kmeans_landmarks`): means of two
distinct rows or more, computed without labels, never a row.

Rounds: :data:`~._data_scale.DATA_SCALE` (only for an int ``widths``),
``"landmark centers"`` (per client: its k_m local centers, k_m d floats up;
the server learns each client's local cluster means), then
:data:`LANDMARK_CLASS_STATISTICS` (down L − c, c, W and the widths; up the
triangle of Z[m]ᵀZ[m], Z[m]ᵀE[m] and the class counts, D(D+1)/2 +
D·n_classes + n_classes floats, ``sum_only``). From the sums the server
solves one-vs-rest ridge regression, its penalty chosen by generalized
cross-validation (:mod:`skfed.classification._solvers._feature_ridge`),
as for random features. No row of X and no label leaves a client.

Under ``raw_rows="refuse"`` a client's statistics follow the random
features' rules (:func:`~._random_features.kept_rows`): the rows of a
class it holds fewer than two distinct rows of are left out, and fewer
distinct rows than D features refuse. The landmark centers are noised by
nothing, so differential privacy keeps the random features.
"""

from functools import partial
from typing import NamedTuple

import numpy as np

from ..._engine._protocol import client_step
from ..._engine._rounds import sum_only
from ...cluster._protocols._kernel_kmeans_landmarks import (
    LANDMARK_CENTERS,
    landmark_features,
    landmark_map,
)
from ...kernel._random_features import feature_min_rows
from .._solvers._feature_ridge import solve_from_statistics
from ._data_scale import data_scale, server_widths
from ._random_features import (
    block_scores,
    class_statistics,
    kept_rows,
    statistics_raw_rows,
)

__all__ = [
    "LANDMARK_CENTERS",
    "LANDMARK_CLASS_STATISTICS",
    "LandmarkRidgeResult",
    "landmark_scores",
    "run_landmark_ridge",
]

# The clients' summed statistics of the Nyström features (the rows a
# single-row class gives away are counted as for random features).
LANDMARK_CLASS_STATISTICS = sum_only("landmark class statistics")

# What a refusing client's error advises.
_REMEDY = (
    "Use n_landmarks at most the distinct rows of the smallest client (the "
    "default does so under raw_rows='refuse'), or leave the client out."
)


class LandmarkRidgeResult(NamedTuple):
    """What :func:`run_landmark_ridge` returns.

    Attributes
    ----------
    coef : ndarray of shape (D, n_problems)
        W, the weights of the features.
    intercept : ndarray of shape (n_problems,)
    alpha : float
        The penalty λ chosen by generalized cross-validation.
    widths : ndarray
        The kernel widths of the dictionary.
    landmarks : ndarray of shape (n_landmarks, n_features)
        L − c, the pooled local centers around their mean, in the order of
        their values.
    center : ndarray of shape (n_features,)
        c.
    whitening : ndarray of shape (n_landmarks, D)
        K_LL's kept pairs, U Λ^{-½}.
    client_ids : list
    failed_clients : dict
    """

    coef: np.ndarray
    intercept: np.ndarray
    alpha: float
    widths: np.ndarray
    landmarks: np.ndarray
    center: np.ndarray
    whitening: np.ndarray
    client_ids: list
    failed_clients: dict


def _gammas(widths):
    """The Gaussian kernels' γ = 1 / (2 w²) of the widths w."""
    return tuple(0.5 / float(w) ** 2 for w in widths)


def run_landmark_ridge(fed, *, n_classes, widths, n_landmarks):
    """Nyström-feature least-squares classification on an open federation.

    Parameters
    ----------
    fed : Federation
        Open federation whose clients hold class codes 0 .. n_classes − 1.
    n_classes : int
    widths : int or ndarray
        The kernel widths, or how many to derive from the federated data
        scale.
    n_landmarks : int
        n_L, the landmarks asked for over all clients (each client
        computes ⌈n_L / M⌉ local centers, at most half its rows).

    Returns
    -------
    result : LandmarkRidgeResult
    """
    if isinstance(widths, (int, np.integer)):
        widths = server_widths(data_scale(fed), widths)
    widths = np.asarray(widths, dtype=np.float64)
    gammas = _gammas(widths)
    landmarks, center, whitening = landmark_map(fed, n_landmarks, gammas)
    D = whitening.shape[1]
    refuse = {"min_rows": feature_min_rows(D)} if fed.raw_rows == "refuse" else {}
    rows = partial(statistics_raw_rows, n_random_features=D, n_classes=n_classes)
    total = fed.run_round(
        LANDMARK_CLASS_STATISTICS._replace(
            disclosure=LANDMARK_CLASS_STATISTICS.disclosure._replace(rows=rows)
        ),
        partial(landmark_statistics_step, n_classes=n_classes, **refuse),
        (landmarks, center, whitening, gammas),
    )
    coef, intercept, alpha, _ = solve_from_statistics(total, D, n_classes)
    return LandmarkRidgeResult(
        coef=coef,
        intercept=intercept,
        alpha=alpha,
        widths=widths,
        landmarks=landmarks,
        center=center,
        whitening=whitening,
        client_ids=list(fed.client_ids),
        failed_clients=dict(fed.failed_clients),
    )


def landmark_scores(X, landmarks, center, whitening, widths, coef, intercept):
    """z(x)ᵀW + b for the rows X, a block of rows at a time (the clients'
    arithmetic: new points are mapped as the training rows were)."""
    blocks = landmark_features(X, landmarks, center, whitening, _gammas(widths))
    return block_scores(blocks, X.shape[0], coef, intercept)


# --------------------------------------------------------------------------
# Client step


@client_step("rkhs.landmark_statistics", sum_only=True)
def landmark_statistics_step(client, state, message, *, n_classes, min_rows=None):
    """Client: the upper triangle of Z[m]ᵀZ[m] (row by row), Z[m]ᵀE[m] (row
    by row, E the one-hot class indicators) and the class counts, Z[m] =
    k(X[m] − c, L − c) W: D(D+1)/2 + D·n_classes + n_classes floats.

    The message: L − c, c, W and the kernels' γ. With ``min_rows``
    (``raw_rows="refuse"``), the rows the random features' statistics
    would leave out are left out, and too few distinct rows refuse
    (:func:`~._random_features.kept_rows`).
    """
    landmarks, center, whitening, gammas = message
    X, codes = kept_rows(client, min_rows, "landmark-feature statistics", _REMEDY)
    blocks = landmark_features(X, landmarks, center, whitening, gammas)
    upper, rest = class_statistics(blocks, codes, whitening.shape[1], n_classes)
    return state, np.concatenate([upper, rest])
