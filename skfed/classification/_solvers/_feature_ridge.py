"""Ridge regression on random features from summed statistics, with the
penalty chosen by generalized cross-validation: the server's solve of the
classifier's row-free path (:mod:`skfed.classification._protocols._random_features`).

From the sums of the clients' statistics the server has the centred Gram
matrix C = ZᵀZ − N z̄ z̄ᵀ and B = ZᵀT − N z̄ t̄ᵀ for the ±1 targets T of
one-vs-rest least squares (as ``RidgeClassifier``: one column for two
classes, one per class otherwise), and solves

    W = (C + λI)⁻¹ B,   b = t̄ − Wᵀz̄,

with λ chosen by generalized cross-validation on the same sums: with
C = V diag(s) Vᵀ and B' = VᵀB,

    RSS(λ) = ‖T − t̄‖² − 2 Σ_i ‖B'_i‖² / (s_i + λ) + Σ_i s_i ‖B'_i‖² / (s_i + λ)²,
    GCV(λ) = N · RSS(λ) / (N − 1 − Σ_i s_i / (s_i + λ))²

(the 1 is the intercept's degree of freedom).
"""

import math

import numpy as np
from scipy.linalg import eigh
from scipy.optimize import minimize_scalar

from ...kernel._private_features import symmetric_from_upper

__all__ = ["gcv_score", "solve_from_statistics", "unpack_statistics"]

# The GCV search: a log grid over λ / s_max, then a bounded refinement
# around its best point (so that the chosen λ moves continuously with the
# sums: masking's rounding cannot flip it between grid points).
_GCV_RANGE = (1e-9, 1e1)
_GCV_GRID = 61


def unpack_statistics(total, n_random_features, n_classes):
    """(ZᵀZ, ZᵀE, class counts) from a summed upload."""
    D = n_random_features
    n_upper = D * (D + 1) // 2
    gram = symmetric_from_upper(total[:n_upper], D)
    cross = total[n_upper : n_upper + D * n_classes].reshape(D, n_classes)
    counts = total[n_upper + D * n_classes :]
    return gram, cross, counts


def solve_from_statistics(
    total, n_random_features, n_classes, *, alpha_floor=0.0, n_samples=None
):
    """Server: W, b and λ (by GCV) from the clients' summed statistics.

    Parameters
    ----------
    total : ndarray
        Σ_m of the clients' uploads (see
        :func:`skfed.classification._protocols._random_features.statistics_step`).
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
