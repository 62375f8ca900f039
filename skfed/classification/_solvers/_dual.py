"""Pieces of the sparse dual D(λ) shared by its solvers: the primal's hard
threshold, D itself, the projection onto the feasible box, and the best
scalar start (see :mod:`skfed.classification._solvers`)."""

import numpy as np

__all__ = [
    "best_scalar_start",
    "class_balanced_direction",
    "dual_value",
    "project",
    "start_point",
    "threshold",
]


def threshold(c, gamma, beta):
    """α*(λ): hard thresholding of c at τ = √(2γβ), scaled by 1/β."""
    tau = np.sqrt(2 * gamma * beta)
    return np.where(np.abs(c) > tau, c / beta, 0.0)


def dual_value(lam, c, *, gamma, beta, epsilon):
    """D(λ) = (1 − ε) Σ λ − Σ_a max(0, c_a² / (2β) − γ)."""
    return (1 - epsilon) * lam.sum() - np.maximum(c * c / (2 * beta) - gamma, 0).sum()


def project(v, y, upper, bias):
    """Euclidean projection onto {0 ≤ λ ≤ C} (∩ {yᵀλ = 0} with a bias).

    The projection is clip(v − θ y, 0, C) with θ the root of the
    non-increasing piecewise-linear φ(θ) = yᵀ clip(v − θ y, 0, C), found by
    bisection to machine precision (60 halvings; cheap next to a product
    with Φ).
    """
    if not bias:
        return np.clip(v, 0, upper)
    hi = max(float(np.abs(v).max(initial=0.0)), 1e-300)
    lo = -hi
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if y @ np.clip(v - mid * y, 0, upper) > 0:
            lo = mid
        else:
            hi = mid
    return np.clip(v - 0.5 * (lo + hi) * y, 0, upper)


def class_balanced_direction(y, bias):
    """w ≥ 0 with yᵀw = 0 (with a bias) and Σ w = n: the scalar-start ray."""
    w = np.ones_like(y, dtype=np.float64)
    if bias:
        n = len(y)
        for label in (-1.0, 1.0):
            mask = y == label
            w[mask] = n / (2 * mask.sum())
    return w


def best_scalar_start(d, w_sum, w_max, *, gamma, beta, epsilon, upper):
    """μ maximising D(μ·w) exactly (the scalar start).

    Along λ = μ w, c = μ d and D(μ) = (1 − ε) μ Σw − Σ_a max(0, μ² d_a² /
    (2β) − γ). Atom a enters at μ = τ / |d_a|; between consecutive entry
    points D is a concave quadratic, maximised in closed form.

    Parameters
    ----------
    d : ndarray of shape (n_atoms,)
        Φᵀ (y ∘ w).
    w_sum, w_max : float
        Σ w and max w (μ ≤ C / max w keeps λ in the box).
    gamma, beta, epsilon, upper : float
        γ, β = 1 − γ, ε, C.

    Returns
    -------
    mu : float
    """
    mu_max = upper / w_max
    tau = np.sqrt(2 * gamma * beta)
    d2 = np.sort(d * d)[::-1]  # atoms in order of entry
    d2 = d2[d2 > 0]
    if d2.size == 0:
        return mu_max if np.isfinite(mu_max) else 0.0
    q = np.cumsum(d2)  # Q_k, sum of d² over the first k atoms
    entry = tau / np.sqrt(d2)  # entry point of atom k
    ends = np.append(entry[1:], np.inf)
    slope = (1 - epsilon) * w_sum
    mu = np.clip(beta * slope / q, entry, ends)
    # Before the first atom enters D rises linearly: its end point counts.
    mu = np.append(mu, entry[0])
    mu = np.minimum(mu, mu_max)
    # D(μ) exactly at every candidate: k(μ) atoms have entered.
    k = np.searchsorted(entry, mu, side="left")
    q0 = np.append(0.0, q)
    values = slope * mu - (mu * mu * q0[k] / (2 * beta) - gamma * k)
    return float(mu[int(np.argmax(values))])


def start_point(dictionary, y, lam0, *, gamma, epsilon, upper, bias=True):
    """The best scalar start λ = μ·w, or ``lam0`` if its dual value is higher."""
    beta = 1.0 - gamma
    w = class_balanced_direction(y, bias)
    d = dictionary.rmatvec(y * w)
    mu = best_scalar_start(
        d,
        w.sum(),
        w.max(),
        gamma=gamma,
        beta=beta,
        epsilon=epsilon,
        upper=upper,
    )
    lam, c = mu * w, mu * d
    if lam0 is not None:
        lam_warm = project(np.asarray(lam0, dtype=np.float64), y, upper, bias)
        c_warm = dictionary.rmatvec(y * lam_warm)
        if dual_value(
            lam_warm, c_warm, gamma=gamma, beta=beta, epsilon=epsilon
        ) > dual_value(lam, c, gamma=gamma, beta=beta, epsilon=epsilon):
            lam, c = lam_warm, c_warm
    return lam, c
