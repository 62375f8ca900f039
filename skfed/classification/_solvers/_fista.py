"""FISTA on the sparse dual, with column generation over the dictionary
(:func:`solve_sparse_dual`; ``solver="fista"`` and the paper's fixed-step
ascent, ``accelerate=False``)."""

import numpy as np

from ._dual import dual_value, project, start_point, threshold

__all__ = ["fista_dual", "solve_sparse_dual"]

# Atoms whose |c_a| comes within this factor of the threshold join the
# candidate set, so that few extra passes over the dictionary are needed.
_CANDIDATE_MARGIN = 0.5


def _spectral_norm_sq(Phi, n_iter=30, seed=0):
    """σ_max(Φ)² by power iteration on ΦᵀΦ (an upper estimate, padded)."""
    if Phi.shape[1] == 0:
        return 0.0
    v = np.random.RandomState(seed).uniform(0.5, 1.0, Phi.shape[1]).astype(Phi.dtype)
    s = 0.0
    for _ in range(n_iter):
        u = Phi.T @ (Phi @ v)
        s_new = float(np.linalg.norm(u))
        v = u / max(s_new, 1e-300)
        if abs(s_new - s) <= 1e-4 * s_new:
            s = s_new
            break
        s = s_new
    # Power iteration approaches σ² from below; a margin keeps 1/L safe.
    return 1.05 * s


# --------------------------------------------------------------------------
# FISTA on a fixed set of atoms


def fista_dual(
    Phi,
    y,
    lam0,
    *,
    gamma,
    epsilon,
    upper,
    bias,
    max_iter,
    tol,
    accelerate=True,
    step=None,
):
    """Maximise D over λ with the atoms in the columns of ``Phi``.

    Accelerated projected gradient ascent (FISTA, step 1/L) with restart
    whenever the dual value drops. Only products with the active columns
    are needed for the gradient; c(λ) is linear in λ, so the extrapolated
    point's c is combined from the iterates' and costs no product.

    Parameters
    ----------
    Phi : ndarray of shape (n_samples, n_atoms)
    y : ndarray of shape (n_samples,) in {-1, +1}
    lam0 : ndarray of shape (n_samples,)
        Start (projected onto the feasible set first).
    gamma, epsilon, upper : float
        γ, ε, C.
    bias : bool
        Whether the unpenalised bias (yᵀλ = 0) is part of the problem.
    max_iter : int
    tol : float
        Stop when ‖λ_{k+1} − λ_k‖ / (η L) ≤ tol · ‖λ_{k+1}‖, the change of
        an ascent step of length 1/L: with the default η = 1/L that is the
        change itself; with a smaller η the same progress must be made
        (a tiny step changes λ little without being near the optimum).
    accelerate : bool, default=True
        False gives plain projected ascent (the paper's update), kept for
        comparison.
    step : float, default=None
        η; 1/L when omitted.

    Returns
    -------
    lam : ndarray of shape (n_samples,)
        The best iterate.
    c : ndarray of shape (n_atoms,)
        c(λ).
    trace : list of float
        D at every iterate.
    converged : bool
    """
    beta = 1.0 - gamma
    dtype = Phi.dtype
    lipschitz = max(_spectral_norm_sq(Phi) / beta, 1e-12)
    if step is None:
        step = 1.0 / lipschitz
    # Progress is measured per step of length 1/L, so that a small step is
    # not mistaken for convergence (step 1e-12 stopped after one iteration).
    step_scale = step * lipschitz

    def c_of(lam):
        return (Phi.T @ (y * lam).astype(dtype)).astype(np.float64)

    lam = project(np.asarray(lam0, dtype=np.float64), y, upper, bias)
    c = c_of(lam)
    value = dual_value(lam, c, gamma=gamma, beta=beta, epsilon=epsilon)
    best = (value, lam, c)
    trace = [value]
    z, cz, t = lam, c, 1.0
    converged = False
    for _ in range(max_iter):
        alpha = threshold(cz, gamma, beta)
        active = np.flatnonzero(alpha)
        f = Phi[:, active] @ alpha[active].astype(dtype)
        grad = (1 - epsilon) - y * f
        lam_new = project(z + step * grad, y, upper, bias)
        c_new = c_of(lam_new)
        value_new = dual_value(lam_new, c_new, gamma=gamma, beta=beta, epsilon=epsilon)
        trace.append(value_new)
        if value_new > best[0]:
            best = (value_new, lam_new, c_new)
        diff = np.linalg.norm(lam_new - lam)
        if not accelerate:
            t_new, z, cz = 1.0, lam_new, c_new
        elif value_new < value:
            # Momentum overshot a kink or a curved direction: restart.
            t_new, z, cz = 1.0, lam_new, c_new
        else:
            t_new = 0.5 * (1 + np.sqrt(1 + 4 * t * t))
            mom = (t - 1) / t_new
            z = lam_new + mom * (lam_new - lam)
            cz = c_new + mom * (c_new - c)
        lam, c, value, t = lam_new, c_new, value_new, t_new
        if diff <= step_scale * tol * max(np.linalg.norm(lam), 1e-12):
            converged = True
            break
    _, lam, c = best
    return lam, c, trace, converged


# --------------------------------------------------------------------------
# The full solve: column generation around FISTA


def solve_sparse_dual(
    dictionary,
    y,
    lam0=None,
    *,
    gamma,
    epsilon,
    upper,
    bias,
    max_iter,
    tol,
    accelerate=True,
    step=None,
    max_passes=20,
):
    """Maximise D(λ) over the whole dictionary.

    Parameters
    ----------
    dictionary : AtomDictionary
    y : ndarray of shape (n_samples,) in {-1, +1}
    lam0 : ndarray of shape (n_samples,) or None
        A warm start (e.g. the clients' λ). The better of it and the best
        scalar start, by dual value, is used.
    gamma, epsilon, upper, bias, max_iter, tol, accelerate, step
        See :func:`fista_dual`; ``max_iter`` bounds the iterations summed
        over all passes.
    max_passes : int, default=20
        Passes over the whole dictionary to certify the candidate atoms.

    Returns
    -------
    result : dict
        ``lam`` (λ), ``atoms`` (indices of the atoms with α ≠ 0),
        ``coef`` (their α), ``trace`` (D per iteration), ``n_iter``,
        ``converged`` (both the ascent and the certificate).
    """
    y = np.asarray(y, dtype=np.float64)
    beta = 1.0 - gamma
    tau = np.sqrt(2 * gamma * beta)
    lam, c = start_point(
        dictionary, y, lam0, gamma=gamma, epsilon=epsilon, upper=upper, bias=bias
    )
    candidates = np.flatnonzero(np.abs(c) > _CANDIDATE_MARGIN * tau)
    if candidates.size == 0:
        candidates = np.argsort(-np.abs(c))[: max(1, min(len(c), 10))]
    trace, n_iter, converged = [], 0, False
    for _ in range(max_passes):
        Phi = dictionary.columns(candidates)
        lam, _, sub_trace, sub_converged = fista_dual(
            Phi,
            y,
            lam,
            gamma=gamma,
            epsilon=epsilon,
            upper=upper,
            bias=bias,
            max_iter=max(max_iter - n_iter, 1),
            tol=tol,
            accelerate=accelerate,
            step=step,
        )
        trace.extend(sub_trace)
        n_iter += len(sub_trace) - 1
        c = dictionary.rmatvec(y * lam)
        outside = np.ones(len(c), dtype=bool)
        outside[candidates] = False
        if not np.any(outside & (np.abs(c) > tau)):
            converged = sub_converged
            break
        new = np.flatnonzero(outside & (np.abs(c) > _CANDIDATE_MARGIN * tau))
        candidates = np.union1d(candidates, new)
        if n_iter >= max_iter:
            break
    alpha = threshold(c, gamma, beta)
    atoms = np.flatnonzero(alpha)
    return {
        "lam": lam,
        "atoms": atoms,
        "coef": alpha[atoms],
        "trace": np.asarray(trace),
        "n_iter": n_iter,
        "converged": converged,
    }
