"""The row-free path of :class:`~skfed.FederatedRKHSClassifier`
(``method="random_features"``): regularised least squares on shared
random Fourier features of the multi-width Gaussian kernel, from one
summed statistic per client.

The server draws a seed; every client builds the same map z(x) from it: D
paired random Fourier features (see
:func:`~skfed.kernel._private_features.paired_fourier_map`), an equal
share of them for each kernel width w (γ = 1 / (2w²)), all scaled by
√(2/D), so that z(x)ᵀz(x') estimates the mean of the Gaussian kernels of
the dictionary's widths and ‖z(x)‖ = 1 for every x. Each client uploads,
once, the upper triangle of Z[m]ᵀZ[m], Z[m]ᵀE[m] (E the one-hot class
indicators of its rows) and its class counts. From the sums the server
solves one-vs-rest ridge regression, its penalty chosen by generalized
cross-validation on the same sums
(:mod:`skfed.classification._solvers._feature_ridge`). No row of X and no
label leaves a client; the round is ``sum_only``, so secure aggregation masks it.

Under ``raw_rows="refuse"`` a client leaves out the rows of a class it
holds fewer than two distinct rows of (that class's feature sum would be
the row's features, which the server, knowing the map, solves for the row)
and refuses to upload when fewer distinct rows than D remain (a Gram
matrix of fewer rows than features spans only their features, which
determine them; see :func:`~skfed.kernel._random_features.feature_min_rows`).

Under differential privacy each client clips its feature rows to their
norm bound (a no-op but for rounding), adds Gaussian noise to the
triangle and to [Z[m]ᵀE[m], class counts] (two releases, replace-one
sensitivities from D alone, as the random-feature kernel PCA's) and
appends its row count n_m, which is public; the server floors λ at the
noise's spectral scale. The rest is post-processing.
"""

import math
import numbers
from functools import partial
from typing import NamedTuple

import numpy as np

from ..._engine._protocol import client_step
from ..._engine._rounds import sum_only
from ..._numerics._seeds import SEED_MAX
from ...kernel._multiwidth import features_per_width, multiwidth_map
from ...kernel._private_features import (
    clip_rows,
    count_sum_sensitivity,
    feature_blocks,
    feature_norm_bound,
    gram_sensitivity,
    statistics_noise,
)
from ...kernel._random_features import feature_min_rows
from ...privacy import concatenate_releases, gaussian_noise, summed_noise_std
from ...privacy._refusal import MIN_ROWS, n_distinct_rows, require_distinct_rows
from .._solvers._feature_ridge import solve_from_statistics
from ._data_scale import data_scale, server_widths

__all__ = [
    "FEATURE_STATISTICS",
    "FeatureRidgeResult",
    "PRIVATE_FEATURE_STATISTICS",
    "block_scores",
    "class_statistics",
    "class_statistics_sensitivity",
    "feature_scores",
    "kept_rows",
    "run_feature_ridge",
    "statistics_raw_rows",
    "statistics_step",
]


def class_statistics_sensitivity(n_random_features):
    """The L2 sensitivities of the two releases of a client's statistics:
    the Gram triangle (:func:`~skfed.kernel._private_features.gram_sensitivity`)
    and [Z[m]ᵀE[m], class counts], which one row replaced moves as a
    per-center sum and count
    (:func:`~skfed.kernel._private_features.count_sum_sensitivity`); both
    at the norm bound of D features."""
    radius = feature_norm_bound(n_random_features)
    return gram_sensitivity(radius, n_random_features), count_sum_sensitivity(radius)


# The clients' summed statistics (the rows a single-row class gives away
# are counted by the fit's ``statistics_raw_rows``).
FEATURE_STATISTICS = sum_only("random feature statistics")
# Under differential privacy: two releases per client, the row count
# (public) unnoised.
PRIVATE_FEATURE_STATISTICS = FEATURE_STATISTICS.noised(2)._replace(
    sensitivity=class_statistics_sensitivity
)

# What a refusing client's error advises.
_REMEDY = (
    "Use n_random_features at most the distinct rows of the smallest client "
    "(the default does so under raw_rows='refuse'), leave the client out, "
    "or fit with privacy=DifferentialPrivacy(...)."
)


class FeatureRidgeResult(NamedTuple):
    """What :func:`run_feature_ridge` returns.

    Attributes
    ----------
    coef : ndarray of shape (D, n_problems)
        W.
    intercept : ndarray of shape (n_problems,)
        b.
    alpha : float
        The penalty λ chosen by generalized cross-validation.
    gcv : float
        GCV(λ) at that penalty (mean squared leave-one-out error estimate
        per target column summed).
    seed : int
        The seed of the shared map.
    widths : ndarray
        The kernel widths of the map.
    n_features : int
        D, the features of the map (a multiple of twice the widths).
    client_ids : list
    failed_clients : dict
    """

    coef: np.ndarray
    intercept: np.ndarray
    alpha: float
    gcv: float
    seed: int
    widths: np.ndarray
    n_features: int
    client_ids: list
    failed_clients: dict


def run_feature_ridge(fed, *, n_classes, widths, n_random_features, random_state):
    """Random-feature least-squares classification on an open federation.

    Rounds: :data:`~._data_scale.DATA_SCALE` (only for an int ``widths``,
    as the critical samples'), then :data:`FEATURE_STATISTICS`
    (:data:`PRIVATE_FEATURE_STATISTICS` under privacy): down the seed and the
    widths, up D(D+1)/2 + D·n_classes + n_classes floats per client
    (one more, the public row count, under privacy), sum-only (noised under
    privacy).

    Parameters
    ----------
    fed : Federation
        Open federation whose clients hold class codes 0 .. n_classes − 1.
    n_classes : int
    widths : int or ndarray
        The kernel widths, or how many to derive from the federated data
        scale.
    n_random_features : int
        D asked for (rounded up to a multiple of 2 · len(widths)).
    random_state : RandomState
        The server's generator.

    Returns
    -------
    result : FeatureRidgeResult
    """
    if isinstance(widths, numbers.Integral):
        widths = server_widths(data_scale(fed), widths)
    widths = tuple(float(w) for w in widths)
    D = len(widths) * features_per_width(n_random_features, len(widths))
    seed = int(random_state.randint(SEED_MAX))
    message = (seed, widths)
    step = partial(statistics_step, n_random_features=D, n_classes=n_classes)
    floor = 0.0
    if fed.accountant is None:
        refuse = {}
        if fed.raw_rows == "refuse":
            refuse = {"min_rows": feature_min_rows(D)}
        rows = partial(statistics_raw_rows, n_random_features=D, n_classes=n_classes)
        total = fed.run_round(
            FEATURE_STATISTICS._replace(
                disclosure=FEATURE_STATISTICS.disclosure._replace(rows=rows)
            ),
            partial(step, **refuse),
            message,
        )
    else:
        noise = statistics_noise(PRIVATE_FEATURE_STATISTICS, fed.accountant, D)
        total = fed.run_round(
            PRIVATE_FEATURE_STATISTICS, partial(step, noise=noise), message
        )
        # N is public (replace-one adjacency): the clients' exact sizes.
        total, n_public = total[:-1], float(total[-1])
        # The mirrored noise of the summed triangle is a symmetric Gaussian
        # matrix of entry standard deviation s, the summed noise: its
        # spectral norm is about 2 √D s, which λ must exceed for C + λI
        # to stay positive definite.
        floor = 2.0 * math.sqrt(D) * summed_noise_std(noise[1], fed.n_clients)
    coef, intercept, alpha, gcv = solve_from_statistics(
        total,
        D,
        n_classes,
        alpha_floor=floor,
        n_samples=None if fed.accountant is None else n_public,
    )
    return FeatureRidgeResult(
        coef=coef,
        intercept=intercept,
        alpha=alpha,
        gcv=gcv,
        seed=seed,
        widths=np.array(widths),
        n_features=D,
        client_ids=list(fed.client_ids),
        failed_clients=dict(fed.failed_clients),
    )


def statistics_raw_rows(upload, n_random_features, n_classes):
    """Rows of X a statistics upload gives away: one per class of which the
    client holds a single row, whose class sum is that row's features
    (the server, which knows the map, solves them for the row)."""
    D = n_random_features
    counts = upload[D * (D + 1) // 2 + D * n_classes :][:n_classes]
    return int(np.sum(counts == 1))


def feature_scores(X, seed, n_random_features, widths, coef, intercept):
    """z(x)ᵀW + b for the rows X, a block of rows at a time."""
    omega, offset = multiwidth_map(
        seed, X.shape[1], n_random_features, tuple(float(w) for w in widths)
    )
    return block_scores(feature_blocks(X, omega, offset), X.shape[0], coef, intercept)


def block_scores(blocks, n_rows, coef, intercept):
    """Z W + b for the feature rows ``blocks`` yields ((slice, rows of Z)
    pairs, ``n_rows`` in all), whichever map made them."""
    scores = np.empty((n_rows, coef.shape[1]))
    for block, rows in blocks:
        scores[block] = rows @ coef
    scores += intercept
    return scores


# --------------------------------------------------------------------------
# Client side


def kept_rows(client, min_rows, what, remedy):
    """The client's rows and class codes that its statistics may use. With
    ``min_rows`` (``raw_rows="refuse"``) the rows of a class it holds fewer
    than two distinct rows of are left out (that class's feature sum would
    be the row's features), and fewer than ``min_rows`` distinct rows left
    raise ``RawRowsRefused`` (a ``ValueError``)."""
    X = client.X
    codes = np.asarray(client.y).astype(np.intp, copy=False)
    if min_rows:
        keep = np.ones(len(codes), dtype=bool)
        for label in np.unique(codes):
            members = codes == label
            if n_distinct_rows(X[members]) < MIN_ROWS:
                keep &= ~members
        if not keep.all():
            X, codes = X[keep], codes[keep]
        require_distinct_rows(X, min_rows, what, remedy)
    return X, codes


def class_statistics(blocks, codes, n_features, n_classes, radius=None):
    """The upper triangle of ZᵀZ (row by row), and Zᵀ E (row by row, E the
    one-hot class indicators) followed by the class counts, from the
    feature rows ``blocks`` yields ((slice, rows of Z) pairs); rows
    clipped to norm ``radius`` first when it is given."""
    D = n_features
    gram = np.zeros((D, D))
    cross = np.zeros((D, n_classes))
    for block, rows in blocks:
        if radius is not None:
            clip_rows(rows, radius)
        # numpy's Zᵀ Z is BLAS syrk and releases the GIL (clients in threads).
        gram += rows.T @ rows
        indicators = np.zeros((rows.shape[0], n_classes))
        indicators[np.arange(rows.shape[0]), codes[block]] = 1.0
        cross += rows.T @ indicators
    counts = np.bincount(codes, minlength=n_classes).astype(np.float64)
    return gram[np.triu_indices(D)], np.concatenate([cross.ravel(), counts])


@client_step("rkhs.feature_statistics", sum_only=True)
def statistics_step(
    client, state, message, *, n_random_features, n_classes, noise=None, min_rows=None
):
    """Client: the upper triangle of Z[m]ᵀZ[m] (row by row), Z[m]ᵀE[m]
    (row by row, E the one-hot class indicators) and the class counts:
    D(D+1)/2 + D·n_classes + n_classes floats.

    Under differential privacy ``noise`` is ``(radius, gram_std,
    sum_std)``: rows of Z[m] clipped to the norm bound, Gaussian noise
    added to the triangle and to [Z[m]ᵀE[m], counts] (two releases, drawn
    from fresh entropy; one row replaced moves the second as a per-center
    sum and count, see
    :func:`~skfed.kernel._private_features.count_sum_sensitivity`), and the
    public row count n_m appended without noise.

    With ``min_rows`` (``raw_rows="refuse"``) the rows of a class the client
    holds fewer than two distinct rows of are left out, and a client of
    fewer than ``min_rows`` distinct rows left raises
    ``RawRowsRefused`` (a ``ValueError``) and uploads nothing.
    """
    seed, widths = message
    X, codes = kept_rows(client, min_rows, "random-feature statistics", _REMEDY)
    omega, offset = multiwidth_map(seed, X.shape[1], n_random_features, widths)
    radius = None if noise is None else noise[0]
    upper, rest = class_statistics(
        feature_blocks(X, omega, offset),
        codes,
        n_random_features,
        n_classes,
        radius=radius,
    )
    if noise is None:
        return state, np.concatenate([upper, rest])
    _, gram_std, sum_std = noise
    # n_m is public (replace-one adjacency): it follows the sums unnoised.
    return state, concatenate_releases(
        [
            gaussian_noise(upper, gram_std),
            gaussian_noise(rest, sum_std),
            [float(X.shape[0])],
        ]
    )
