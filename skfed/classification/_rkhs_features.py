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
has the centred Gram matrix C = ZᵀZ − N z̄ z̄ᵀ and B = ZᵀT − N z̄ t̄ᵀ for the
±1 targets T of one-vs-rest least squares (as ``RidgeClassifier``: one
column for two classes, one per class otherwise), and solves

    W = (C + λI)⁻¹ B,   b = t̄ − Wᵀz̄,

with λ chosen by generalized cross-validation on the same sums: with
C = V diag(s) Vᵀ and B' = VᵀB,

    RSS(λ) = ‖T − t̄‖² − 2 Σ_i ‖B'_i‖² / (s_i + λ) + Σ_i s_i ‖B'_i‖² / (s_i + λ)²,
    GCV(λ) = N · RSS(λ) / (N − 1 − Σ_i s_i / (s_i + λ))²

(the 1 is the intercept's degree of freedom). No row of X and no label
leaves a client; the round is ``sum_only``, so secure aggregation masks it.

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
from functools import lru_cache, partial
from typing import NamedTuple

import numpy as np
from scipy.linalg import eigh
from scipy.optimize import minimize_scalar

from .._engine._ledger import SUM_ONLY, Disclosure
from .._engine._protocol import client_step
from .._numerics._seeds import SEED_MAX
from ..kernel._private_features import (
    clip_rows,
    count_sum_sensitivity,
    feature_blocks,
    feature_norm_bound,
    gram_sensitivity,
    paired_fourier_map,
    symmetric_from_upper,
)
from ..kernel._random_features import feature_min_rows
from ..privacy import gaussian_noise
from ..privacy._refusal import MIN_ROWS, n_distinct_rows, require_distinct_rows
from ._rkhs_protocol import _data_scale, _server_widths

__all__ = ["FeatureRidgeResult", "feature_scores", "run_feature_ridge"]

# The GCV search: a log grid over λ / s_max, then a bounded refinement
# around its best point (so that the chosen λ moves continuously with the
# sums: masking's rounding cannot flip it between grid points).
_GCV_RANGE = (1e-9, 1e1)
_GCV_GRID = 61
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


def features_per_width(n_random_features, n_widths):
    """D_w, the features of each width: an even share of D (so that the
    map's norm is exactly 1), at least 2."""
    return 2 * max(1, math.ceil(n_random_features / (2 * n_widths)))


@lru_cache(maxsize=2)
def multiwidth_map(seed, n_features, n_random_features, widths):
    """Ω and b of the shared multi-width map, read-only.

    ``widths`` is a tuple; width i draws its paired features from seed
    ``seed + i`` (independent frequencies per width). Scaled by √(2/D) as a
    whole, z(x)ᵀz(x') estimates the mean of the widths' Gaussian kernels.
    """
    per_width = features_per_width(n_random_features, len(widths))
    omegas, offsets = [], []
    for i, width in enumerate(widths):
        omega, offset = paired_fourier_map(
            (int(seed) + i) % SEED_MAX, n_features, per_width, 0.5 / width**2
        )
        omegas.append(omega)
        offsets.append(offset)
    omega, offset = np.hstack(omegas), np.concatenate(offsets)
    omega.flags.writeable = offset.flags.writeable = False
    return omega, offset


def run_feature_ridge(fed, *, n_classes, widths, n_random_features, random_state):
    """Random-feature least-squares classification on an open federation.

    Rounds: ``"data scale"`` (only for an int ``widths``, as the critical
    samples'), then ``"random feature statistics"``: down the seed and the
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
        widths = _server_widths(_data_scale(fed), widths)
    widths = tuple(float(w) for w in widths)
    D = len(widths) * features_per_width(n_random_features, len(widths))
    seed = int(random_state.randint(SEED_MAX))
    message = (seed, widths)
    step = partial(_statistics_step, n_random_features=D, n_classes=n_classes)
    floor = 0.0
    if fed.accountant is None:
        refuse = {}
        if fed.raw_rows == "refuse":
            refuse = {"min_rows": feature_min_rows(D)}
        total = fed.run_round(
            "random feature statistics",
            partial(step, **refuse),
            message,
            disclosure=Disclosure(
                SUM_ONLY,
                rows=partial(
                    statistics_raw_rows, n_random_features=D, n_classes=n_classes
                ),
            ),
        )
    else:
        accountant = fed.accountant
        radius = feature_norm_bound(D)
        gram_std = accountant.noise_std(gram_sensitivity(radius, D))
        noise = (
            radius,
            gram_std,
            accountant.noise_std(count_sum_sensitivity(radius)),
        )
        total = fed.run_round(
            "random feature statistics",
            partial(step, noise=noise),
            message,
            disclosure=Disclosure(SUM_ONLY, noised=2),
        )
        # N is public (replace-one adjacency): the clients' exact sizes.
        total, n_public = total[:-1], float(total[-1])
        # The mirrored noise of the summed triangle is a symmetric Gaussian
        # matrix of entry variance n_clients · std²: its spectral norm is
        # about 2 √(n_clients · D) std, which λ must exceed for C + λI to
        # stay positive definite.
        floor = 2.0 * math.sqrt(fed.n_clients * D) * gram_std
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


def unpack_statistics(total, n_random_features, n_classes):
    """(ZᵀZ, ZᵀE, class counts) from a summed upload."""
    D = n_random_features
    n_upper = D * (D + 1) // 2
    gram = symmetric_from_upper(total[:n_upper], D)
    cross = total[n_upper : n_upper + D * n_classes].reshape(D, n_classes)
    counts = total[n_upper + D * n_classes :]
    return gram, cross, counts


def statistics_raw_rows(upload, n_random_features, n_classes):
    """Rows of X a statistics upload gives away: one per class of which the
    client holds a single row, whose class sum is that row's features
    (the server, which knows the map, solves them for the row)."""
    D = n_random_features
    counts = upload[D * (D + 1) // 2 + D * n_classes :][:n_classes]
    return int(np.sum(counts == 1))


def solve_from_statistics(
    total, n_random_features, n_classes, *, alpha_floor=0.0, n_samples=None
):
    """Server: W, b and λ (by GCV) from the clients' summed statistics.

    Parameters
    ----------
    total : ndarray
        Σ_m of the clients' uploads (see :func:`_statistics_step`).
    n_random_features : int
        D.
    n_classes : int
    alpha_floor : float, default=0.0
        Smallest λ considered (the noise's scale under privacy).
    n_samples : float, default=None
        N when it is known exactly (the public sizes under privacy, where
        the class counts are noised); the counts' sum otherwise.

    Returns
    -------
    coef : ndarray of shape (D, n_problems)
    intercept : ndarray of shape (n_problems,)
    alpha : float
    gcv : float
    """
    gram, cross, counts = unpack_statistics(total, n_random_features, n_classes)
    # Noised counts may be negative on tiny data; the means divide by N.
    counts = np.maximum(counts, 0.0)
    n = max(float(counts.sum() if n_samples is None else n_samples), 2.0)
    sums = cross.sum(axis=1)  # Zᵀ1: every row has one class
    # ±1 targets: T = 2E − 1, one column for two classes (class 1 positive).
    cross_t = 2.0 * cross - sums[:, None]
    count_t = 2.0 * counts - n
    if n_classes == 2:
        cross_t, count_t = cross_t[:, 1:], count_t[1:]
    mean_z = sums / n
    mean_t = count_t / n
    cov = gram - n * np.outer(mean_z, mean_z)
    B = cross_t - n * np.outer(mean_z, mean_t)
    # ‖T − t̄‖² per column: every entry is ±1, so ‖T‖² = N.
    target_ss = float(np.sum(n - n * mean_t**2))
    s, V = eigh(cov)
    s = np.clip(s, 0.0, None)
    projected = np.sum((V.T @ B) ** 2, axis=1)
    alpha, gcv = _gcv_alpha(s, projected, target_ss, n, floor=alpha_floor)
    coef = V @ ((V.T @ B) / (s + alpha)[:, None])
    intercept = mean_t - mean_z @ coef
    return coef, intercept, alpha, gcv


def gcv_score(alpha, s, projected, target_ss, n):
    """GCV(λ) = N · RSS(λ) / (N − 1 − Σ s_i / (s_i + λ))² (see the module
    docstring); ``projected`` is ‖B'_i‖² per eigenvector."""
    shrink = 1.0 / (s + alpha)
    rss = target_ss - 2.0 * projected @ shrink + (s * projected) @ shrink**2
    dof = 1.0 + float(s @ shrink)
    return n * max(rss, 0.0) / max(n - dof, 1e-12) ** 2


def _gcv_alpha(s, projected, target_ss, n, *, floor=0.0):
    """λ minimising GCV: a log grid relative to the largest eigenvalue,
    then a bounded search between the best point's neighbours."""
    top = max(float(s[-1]), 1e-300)
    low = max(_GCV_RANGE[0] * top, floor, 1e-300)
    high = max(_GCV_RANGE[1] * top, 10.0 * low)
    grid = np.geomspace(low, high, _GCV_GRID)
    scores = np.array([gcv_score(a, s, projected, target_ss, n) for a in grid])
    best = int(np.argmin(scores))
    lo = np.log(grid[max(best - 1, 0)])
    hi = np.log(grid[min(best + 1, len(grid) - 1)])
    found = minimize_scalar(
        lambda t: gcv_score(math.exp(t), s, projected, target_ss, n),
        bounds=(lo, hi),
        method="bounded",
        options={"xatol": 1e-6},
    )
    alpha = math.exp(found.x) if found.fun <= scores[best] else float(grid[best])
    return alpha, float(min(found.fun, scores[best]))


def feature_scores(X, seed, n_random_features, widths, coef, intercept):
    """z(x)ᵀW + b for the rows X, a block of rows at a time."""
    omega, offset = multiwidth_map(
        seed, X.shape[1], n_random_features, tuple(float(w) for w in widths)
    )
    scores = np.empty((X.shape[0], coef.shape[1]))
    for block, rows in feature_blocks(X, omega, offset):
        scores[block] = rows @ coef
    scores += intercept
    return scores


# --------------------------------------------------------------------------
# Client step


@client_step("rkhs.feature_statistics", sum_only=True)
def _statistics_step(
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
        require_distinct_rows(X, min_rows, "random-feature statistics", _REMEDY)
    omega, offset = multiwidth_map(seed, X.shape[1], n_random_features, widths)
    D = n_random_features
    gram = np.zeros((D, D))
    cross = np.zeros((D, n_classes))
    radius = None if noise is None else noise[0]
    for block, rows in feature_blocks(X, omega, offset):
        if radius is not None:
            clip_rows(rows, radius)
        # numpy's Zᵀ Z is BLAS syrk and releases the GIL (clients in threads).
        gram += rows.T @ rows
        indicators = np.zeros((rows.shape[0], n_classes))
        indicators[np.arange(rows.shape[0]), codes[block]] = 1.0
        cross += rows.T @ indicators
    upper = gram[np.triu_indices(D)]
    counts = np.bincount(codes, minlength=n_classes).astype(np.float64)
    rest = np.concatenate([cross.ravel(), counts])
    if noise is None:
        return state, np.concatenate([upper, rest])
    _, gram_std, sum_std = noise
    # n_m is public (replace-one adjacency): it follows the sums unnoised.
    return state, np.concatenate(
        [
            gaussian_noise(upper, gram_std),
            gaussian_noise(rest, sum_std),
            [float(X.shape[0])],
        ]
    )
