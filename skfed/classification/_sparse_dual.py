"""The sparse multi-width kernel dual and its solver.

Model: f(x) = Σ_a α_a k_{w_a}(x, s_a) + b over a dictionary of Gaussian atoms
a = (center s_a, width w_a), k_w(x, s) = exp(−‖x − s‖² / (2 w²)). The primal

    minimise  Σ_a [γ 1(α_a ≠ 0) + (β/2) α_a²]   (β = 1 − γ)
    s.t.      y_n (f(x_n) + b) ≥ 1 − ε − ξ_n,  penalty C Σ ξ_n

has the concave dual

    D(λ) = (1 − ε) Σ_n λ_n − Σ_a h(c_a(λ)),   c(λ) = Φᵀ (y ∘ λ),
    h(c) = max(0, c² / (2β) − γ),
    over 0 ≤ λ ≤ C and, with the unpenalised bias, yᵀλ = 0,

where Φ[n, a] = k_{w_a}(x_n, s_a). Its maximiser gives the hard-thresholded
primal α_a = c_a / β if |c_a| > τ = √(2γβ), else 0.

Solver choices, each from a measurement (``benchmarks/bench_rkhs.py``,
section 4, measures the three solvers' steps, time, dual value and model;
the RKHS design page quotes it):

* Start from the best scalar point λ = μ·w (w balances the classes so that
  yᵀλ = 0). Along that ray D is piecewise quadratic in μ with breakpoints at
  τ / |d_a|, d = Φᵀ(y ∘ w), so it is maximised exactly by one sort. From
  λ = 0 no atom passes the threshold and plain ascent idles.
* Default, :func:`active_set_dual`: exact quadratic (SVM) steps on the atoms
  above the threshold with an exact line search on D, keeping the support
  of smallest sparse primal value. It converges in tens of steps to a
  sparse model whose primal value is within a few percent of the dual.
* :func:`solve_sparse_dual`: FISTA with step 1/L, L = σ_max(Φ)² / β (power
  iteration), function-value restart and column generation over the atoms
  (the solve runs on a candidate set and a chunked pass over the whole
  dictionary checks that no other atom passes the threshold). It does not
  converge in thousands of iterations: the candidate set grows to a
  large share of the dictionary while D on the full dictionary stays
  negative. The dual is badly conditioned (wide atoms dominate σ_max) and
  has kinks where atoms cross the threshold.
* The paper's fixed-step projected ascent (``accelerate=False``): after
  thousands of iterations it is still far from the optimum, with a model
  of a few kernels and a lower accuracy.
* The γ = 0 problems (the clients' dense solve, the refit of a support) are
  SVMs on the atoms' features and go to libsvm (:func:`dense_dual`).
"""

import numpy as np
from scipy.optimize import minimize
from sklearn import get_config
from sklearn.svm import SVC

try:
    # scikit-learn's private binding of libsvm: no stability promise, so a
    # release that moves or changes it sends the solves back to SVC.fit
    # (the same solution, with the estimator's overhead).
    from sklearn.svm import _libsvm
except ImportError:  # pragma: no cover - depends on the installed release
    _libsvm = None

# Atoms whose |c_a| comes within this factor of the threshold join the
# candidate set, so that few extra passes over the dictionary are needed.
_CANDIDATE_MARGIN = 0.5
# libsvm needs a finite C: the hard margin (C = inf) becomes a C far above
# the dual values these problems reach (λ stays near 1 with C = 1). Larger
# values made SMO crawl on supports too sparse to separate the data, which
# the active-set solver visits on its way; the iteration cap is a backstop.
_HARD_MARGIN_C = 1e4
_SMO_MAX_ITER = 1_000_000
# Rows whose margin y f, at a nearby solution, lies within this distance
# of 1 start free in the working set (libsvm's scaling; the others start at
# a bound); a free row the solution leaves farther than this from 1 at a
# bound is held there.
_WORKING_BAND = 0.25
# Rows of the subsample whose solution gives the first quadratic step's
# starting margins (see _guess_margins).
_GUESS_ROWS = 300
# Most violators added to the working set per round (or as many as it
# holds): 20 to 200 took the same time on the paper's synthetic set.
_JOIN_BATCH = 100
# Rounds after which free rows stay free, so that the working set only
# grows and the loop ends.
_SETTLE_ROUNDS = 30
# The line search's resolution: its step is a multiple of this (the point
# of a 50-halving bisection of [0, 1]).
_LINE_STEP = 2.0**-50


# --------------------------------------------------------------------------
# The dictionary of atoms and its products


def gaussian_atoms(X, centers, widths, *, dtype=np.float32):
    """Φ restricted to one width per center: exp(−‖x − s_j‖² / (2 w_j²)).

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    centers : ndarray of shape (n_atoms, n_features)
        s_a, one row per atom.
    widths : ndarray of shape (n_atoms,)
        w_a, one per atom.
    dtype : dtype, default=np.float32

    Returns
    -------
    Phi : ndarray of shape (n_samples, n_atoms)
    """
    widths = np.asarray(widths, dtype=np.float64)
    scale = _length_scale(widths)
    sq = _sq_distances(X, centers, dtype, scale)
    sq *= (-0.5 / (widths / scale) ** 2).astype(dtype)
    np.exp(sq, out=sq)
    return sq


def _length_scale(widths):
    """A power of two near the largest width, to measure lengths in.

    ‖x − s‖² / (2w²) does not change when x, s and w are divided by the
    same number; dividing by a power of two is exact. In those units the
    squared distances of data at any magnitude (1e±30 and beyond) neither
    overflow nor underflow float32.
    """
    top = float(np.max(widths, initial=0.0))
    if not (np.isfinite(top) and top > 0):
        return 1.0
    return float(2.0 ** np.round(np.log2(top)))


def _sq_distances(X, centers, dtype, scale=1.0):
    # ‖x‖² − 2 x·s + ‖s‖² cancels when the norms are large next to the
    # distances (data far from the origin, above all in float32: an offset
    # of 1000 cost 3 accuracy points). Distances do not move with the
    # origin, so measure them from the centres' mean, shifted in float64.
    centers = np.asarray(centers)
    shift = np.mean(centers, axis=0, dtype=np.float64) if len(centers) else 0.0
    X = np.asarray((np.asarray(X) - shift) / scale, dtype=dtype)
    centers = np.asarray((centers - shift) / scale, dtype=dtype)
    sq = X @ centers.T
    sq *= -2
    sq += np.einsum("ij,ij->i", X, X)[:, None]
    sq += np.einsum("ij,ij->i", centers, centers)[None, :]
    np.maximum(sq, 0, out=sq)
    return sq


class AtomDictionary:
    """Φ for atoms at every (center, width) pair; atom a = k · n_centers + j.

    Holds Φ in memory when it fits in scikit-learn's ``working_memory``;
    otherwise every product recomputes it in column chunks, so memory stays
    at one chunk.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        The samples of the constraints (rows of Φ).
    centers : ndarray of shape (n_centers, n_features)
        s_j; the training points.
    widths : ndarray of shape (n_widths,)
        w_k.
    dtype : dtype, default=np.float32
        Φ lies in [0, 1]; float32 halves memory and time at ~1e-7 relative
        error, far below the solver tolerance. The rows are stored in this
        precision relative to the centres' mean (the kernels only see
        differences), so an offset in the data costs no precision;
        :meth:`atom_centers` returns the centres as given.
    """

    def __init__(self, X, centers, widths, *, dtype=np.float32):
        self._given_centers = np.asarray(centers)
        self.widths = np.asarray(widths, dtype=np.float64)
        # Held shifted to the centres' mean and in units of _scale (see
        # _sq_distances and _length_scale): the kernels do not change.
        self._scale = _length_scale(self.widths)
        shift = np.mean(self._given_centers, axis=0, dtype=np.float64)
        self.X = np.asarray((np.asarray(X) - shift) / self._scale, dtype=dtype)
        self.centers = np.asarray(
            (self._given_centers - shift) / self._scale, dtype=dtype
        )
        self.dtype = dtype = np.dtype(dtype)
        self.n_centers = self.centers.shape[0]
        self.n_atoms = self.n_centers * len(self.widths)
        budget = get_config()["working_memory"] * 2**20
        itemsize = np.dtype(dtype).itemsize
        n = self.X.shape[0]
        self._full = None
        if n * self.n_atoms * itemsize <= budget:
            # One distance matrix serves every width.
            sq = _sq_distances(self.X, self.centers, dtype)
            self._full = np.empty((n, self.n_atoms), dtype=dtype)
            for k, w in enumerate(self.widths / self._scale):
                block = self._full[:, k * self.n_centers : (k + 1) * self.n_centers]
                np.multiply(sq, dtype.type(-0.5 / w**2), out=block)
                np.exp(block, out=block)
        # Column chunk: the distances and one exponentiated block take half
        # the budget, leaving the rest for the caller's arrays (at a chunk
        # of the whole budget a server pool of 13,000 samples peaked at
        # 2.7 GB with scikit-learn's default 1 GB working memory).
        self._chunk = max(1, int(budget // (4 * max(n, 1) * itemsize)))

    def atom_centers(self, atoms):
        return self._given_centers[np.asarray(atoms) % self.n_centers]

    def atom_widths(self, atoms):
        return self.widths[np.asarray(atoms) // self.n_centers]

    def columns(self, atoms=None):
        """Φ[:, atoms] as a dense array; every atom when ``atoms`` is None
        (Φ itself when held, not a copy: do not modify it)."""
        if atoms is None:
            if self._full is not None:
                return self._full
            atoms = np.arange(self.n_atoms)
        atoms = np.asarray(atoms, dtype=np.intp)
        if self._full is not None:
            return self._full[:, atoms]
        return gaussian_atoms(
            self.X,
            self.centers[atoms % self.n_centers],  # shifted like self.X
            self.atom_widths(atoms) / self._scale,  # in self.X's units
            dtype=self.dtype,
        )

    def rmatvec(self, v):
        """c = Φᵀ v over every atom, without storing Φ.

        Parameters
        ----------
        v : ndarray of shape (n_samples,) or (n_samples, n_vectors)

        Returns
        -------
        c : ndarray of shape (n_atoms,) or (n_atoms, n_vectors), float64
        """
        v = np.asarray(v)
        vv = v.astype(self.dtype)
        if self._full is not None:
            return (self._full.T @ vv).astype(np.float64)
        out = np.empty((self.n_atoms,) + v.shape[1:], dtype=np.float64)
        scales = (-0.5 / (self.widths / self._scale) ** 2).astype(self.dtype)
        for start in range(0, self.n_centers, self._chunk):
            stop = min(start + self._chunk, self.n_centers)
            sq = _sq_distances(self.X, self.centers[start:stop], self.dtype)
            block = np.empty_like(sq)
            for k, scale in enumerate(scales):
                np.multiply(sq, scale, out=block)
                np.exp(block, out=block)
                out[k * self.n_centers + start : k * self.n_centers + stop] = (
                    block.T @ vv
                )
        return out


# --------------------------------------------------------------------------
# Pieces of the dual


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
    lam, c = _start(
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


def active_set_dual(
    dictionary, y, lam0=None, *, gamma, epsilon, upper, max_iter, tol, patience=7
):
    """Sparse dual by exact quadratic steps on the active set (with the bias).

    At λ the atoms with |c_a| > τ are active and, while they stay so, D is
    the concave quadratic of a linear SVM on their features Φ_A. Each
    iteration solves that quadratic model exactly (libsvm's SMO, which is
    indifferent to the conditioning that stalls gradient methods), then
    moves from λ towards the model's maximiser with an exact line search on
    the true, piecewise-quadratic D along the segment. Near λ the model and
    D have the same slope, so D never decreases. The line search stops just
    past the first kink it meets, so that the atom crossing the threshold
    there joins the next model rather than stalling it.

    Every quadratic step is also a candidate model: the SVM solution on the
    active set A is the refit of the thresholded support A, with sparse
    primal value P(A) = γ |A| + β/2 ‖α‖² + C Σ hinge. The iteration keeps
    the candidate with the smallest P, and D bounds P from below, so
    P − D is a certificate of the duality gap. It stops at a fixed point
    (the active set reproduces itself with a full step: λ is optimal), when
    the gap is within ``tol``, or when in ``patience`` steps P has not
    improved by ``tol`` nor D by ``10 tol`` (relatively): atoms pinned at
    |c| = τ leave D creeping up in tiny steps that no longer change the
    best support.

    Parameters
    ----------
    dictionary : AtomDictionary
    y : ndarray of shape (n_samples,) in {-1, +1}
    lam0 : ndarray of shape (n_samples,) or None
        Warm start; the better of it and the best scalar start is used.
    gamma, epsilon, upper : float
        γ, ε, C.
    max_iter : int
        Largest number of quadratic steps.
    tol : float
        Relative tolerance on the gap and on the progress of D and P; also
        the tolerance of the quadratic solves.
    patience : int, default=7
        Steps without progress before stopping. On the paper's synthetic set
        (N = 2000) 5 halved the quadratic solves of 10 at the same accuracy
        and a similar number of kernels, but cost 2 accuracy points on a
        federated breast-cancer fit; 3 stopped the centralized solve with
        100 kernels instead of ~20.

    Returns
    -------
    result : dict
        ``lam`` (the dual iterate), ``atoms`` (the best support A),
        ``coef`` and ``intercept`` (its refitted α and b), ``support_lam``
        (λ of that refit), ``support_converged`` (whether libsvm converged
        on it), ``trace`` (D per step), ``primal_trace`` (best P per step),
        ``n_iter``, ``converged``.
    """
    y = np.asarray(y, dtype=np.float64)
    beta = 1.0 - gamma
    tau = np.sqrt(2 * gamma * beta)
    lam, c = _start(dictionary, y, lam0, gamma=gamma, epsilon=epsilon, upper=upper)
    value = dual_value(lam, c, gamma=gamma, beta=beta, epsilon=epsilon)
    best = None
    trace, primal_trace, converged, n_iter, stale = [value], [], False, 0, 0
    # Working sets pay on pools well above their first size; on smaller
    # ones every step solves all the rows, as cheap, and the step's solution
    # is then libsvm's own rather than one to the working set's tolerance,
    # which on the sparse problem's nonconvex path can lead elsewhere (a
    # 3-kernel first model instead of 7 on 109 critical samples of the
    # user guide's moons, and 69% more rows sent by the refinement).
    working_set = len(y) > 2 * _GUESS_ROWS
    margins = None
    while n_iter < max_iter:
        n_iter += 1
        active = np.flatnonzero(np.abs(c) > tau)
        Phi = dictionary.columns(active)
        if working_set and margins is None:
            margins = _guess_margins(
                Phi, y, beta=beta, epsilon=epsilon, upper=upper, tol=tol
            )
        # From the second step on, libsvm starts from the rows the previous
        # step left undecided (the active set changes by a few atoms).
        fit = dense_dual(
            Phi,
            y,
            beta=beta,
            epsilon=epsilon,
            upper=upper,
            bias=True,
            max_iter=max_iter,
            tol=tol,
            margins=margins,
        )
        margins = fit["margins"] if working_set else None
        primal = gamma * len(active) + _primal_value(
            Phi, y, fit, beta=beta, epsilon=epsilon, upper=upper
        )
        improved = best is None or primal < best[0] - tol * abs(best[0])
        if best is None or primal < best[0]:
            best = (primal, active, fit)
        primal_trace.append(best[0])
        if active.size == 0:
            # No atom passes the threshold: D is linear here, rising with
            # Σλ; head for the box corner until atoms enter.
            reach = upper if np.isfinite(upper) else 10 * max(lam.max(), 1.0)
            direction = project(lam + reach, y, upper, True) - lam
            if not np.any(direction > 0):
                converged = True  # at the top: the bias alone is the model
                break
        else:
            direction = fit["lam"] - lam
        e = dictionary.rmatvec(y * direction)
        t = _line_search(c, e, direction.sum(), gamma=gamma, epsilon=epsilon)
        lam = lam + t * direction
        c = c + t * e
        new_value = dual_value(lam, c, gamma=gamma, beta=beta, epsilon=epsilon)
        trace.append(new_value)
        # D creeps up at kinks; only a clear gain counts as progress.
        improved |= new_value > value + 10 * tol * abs(value)
        value = max(value, new_value)
        stale = 0 if improved else stale + 1
        fixed = t == 1.0 and np.array_equal(active, np.flatnonzero(np.abs(c) > tau))
        gap = best[0] - value
        if fixed or gap <= tol * abs(best[0]) or stale >= patience:
            converged = True
            break
    _, atoms, fit = best
    return {
        "lam": lam,
        "atoms": atoms,
        "coef": fit["coef"],
        "intercept": fit["intercept"],
        "support_lam": fit["lam"],
        "support_converged": fit["converged"],
        "trace": np.asarray(trace),
        "primal_trace": np.asarray(primal_trace),
        "n_iter": n_iter,
        "converged": converged,
    }


def _primal_value(Phi, y, fit, *, beta, epsilon, upper):
    """β/2 ‖α‖² + C Σ_n (1 − ε − y_n f(x_n))₊ of a fitted support."""
    coef = np.asarray(fit["coef"], dtype=np.float64)
    f = np.asarray(Phi, dtype=np.float64) @ coef + fit["intercept"]
    slack = np.maximum(1 - epsilon - y * f, 0)
    # The hard margin is solved as libsvm's large finite C; rank the
    # supports by the same surrogate so that infeasible ones still compare.
    weight = upper if np.isfinite(upper) else _HARD_MARGIN_C * beta * (1 - epsilon)
    return 0.5 * beta * coef @ coef + weight * slack.sum()


def _line_search(c, e, direction_sum, *, gamma, epsilon):
    """argmax over t in [0, 1] of D(λ + t d), given c(λ) and e = Φᵀ(y ∘ d).

    D is concave along the segment, so its slope
    (1 − ε) Σd − Σ_a e_a h'(c_a + t e_a) is non-increasing (it jumps where
    atoms cross the threshold). The step is the first multiple of
    :data:`_LINE_STEP` past the point where the slope changes sign: just
    past a kink when the sign changes there, so that the atom crossing the
    threshold joins the next model rather than stalling it.
    """
    beta = 1.0 - gamma
    tau = np.sqrt(2 * gamma * beta)
    moving = e != 0
    c, e = c[moving], e[moving]
    # Most atoms stay on one side of the threshold over the whole segment
    # (they are below it for t in [t_low, t_high], an interval with a
    # margin here against rounding): their share of the slope is linear in
    # t, summed once. Only the few that cross are evaluated at each t.
    with np.errstate(divide="ignore"):
        t_a, t_b = (-tau - c) / e, (tau - c) / e
    t_low, t_high = np.minimum(t_a, t_b), np.maximum(t_a, t_b)
    slack = 1e-9
    above = (t_high < -slack) | (t_low > 1 + slack)
    below = (t_low < -slack) & (t_high > 1 + slack)
    crossing = ~(above | below)
    base = (1 - epsilon) * direction_sum
    fixed_c = np.sum(e[above] * c[above])
    fixed_e = np.sum(e[above] * e[above])
    c, e = c[crossing], e[crossing]

    def slope(t):
        u = c + t * e
        crossing_part = np.sum(e * u * (np.abs(u) > tau))
        return base - (fixed_c + t * fixed_e + crossing_part) / beta

    if slope(1.0) >= 0:
        return 1.0
    if slope(0.0) <= 0:
        return 0.0
    # The root from the sorted kinks (one pass instead of 50 bisections of
    # the slope over the crossing atoms: 20% of a ten-class fit); the
    # answer is then the grid point a bisection would return, checked
    # against the slope itself so that rounding in the running sums cannot
    # move it.
    root = _slope_root(
        c, e, t_low[crossing], t_high[crossing], base, fixed_c, fixed_e, beta
    )
    t = min(np.ceil(root / _LINE_STEP) * _LINE_STEP, 1.0)
    for _ in range(8):
        if slope(t) > 0:
            t = min(t + _LINE_STEP, 1.0)
        elif t > _LINE_STEP and slope(t - _LINE_STEP) <= 0:
            t -= _LINE_STEP
        else:
            return t
    # Rounding put the root estimate far off (not seen): bisect.
    lo, hi = 0.0, 1.0
    while hi - lo > _LINE_STEP:
        mid = 0.5 * (lo + hi)
        if slope(mid) > 0:
            lo = mid
        else:
            hi = mid
    return hi


def _slope_root(c, e, t_low, t_high, base, fixed_c, fixed_e, beta):
    """Where the slope of D along the segment changes sign, in (0, 1).

    Atom a (of those crossing the threshold) is above it outside
    [t_low_a, t_high_a]: it leaves at t_low_a and enters at t_high_a.
    Between consecutive kinks the slope is base − (A + t B) / β with A and
    B the sums of e c and e² over the atoms above (plus the fixed ones);
    the first piece whose slope reaches 0 holds the root, at its kink when
    the slope jumps past 0 there.
    """
    inside = (t_low > 0) & (t_low < 1)
    enters = (t_high > 0) & (t_high < 1)
    times = np.concatenate([t_low[inside], t_high[enters]])
    sign = np.concatenate([-np.ones(inside.sum()), np.ones(enters.sum())])
    ec = np.concatenate([(e * c)[inside], (e * c)[enters]]) * sign
    ee = np.concatenate([(e * e)[inside], (e * e)[enters]]) * sign
    order = np.argsort(times, kind="stable")
    start = np.append(0.0, times[order])
    stop = np.append(times[order], 1.0)
    above0 = (t_low > 0) | (t_high <= 0)
    a = fixed_c + np.sum(e[above0] * c[above0]) + np.append(0.0, np.cumsum(ec[order]))
    b = fixed_e + np.sum(e[above0] * e[above0]) + np.append(0.0, np.cumsum(ee[order]))
    at_stop = base - (a + stop * b) / beta
    j = int(np.argmax(at_stop <= 0)) if np.any(at_stop <= 0) else len(stop) - 1
    if base - (a[j] + start[j] * b[j]) / beta <= 0 or b[j] <= 0:
        return float(start[j])
    return float(np.clip((beta * base - a[j]) / b[j], start[j], stop[j]))


def _start(dictionary, y, lam0, *, gamma, epsilon, upper, bias=True):
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


def dense_dual(
    Phi, y, *, beta, epsilon, upper, bias, max_iter, tol, gram=None, margins=None
):
    """The γ = 0 problem on the atoms in the columns of ``Phi``.

    Used twice: by the clients on their whole local dictionary, and as the
    **refit** on the atoms the sparse solve selected. Hard thresholding
    leaves atoms exactly at |c| = τ, and the thresholded primal then
    violates constraints it should meet; re-solving the dense problem on
    the support puts the margins back.

    With the bias this is a linear SVM on the features Φ (rows = samples):
    dividing the primal by β(1 − ε)² gives ½‖α'‖² + C/(β(1 − ε)) Σ ξ with
    α = (1 − ε) α', b = (1 − ε) b' and λ = β (1 − ε) λ'. libsvm's SMO solves
    it exactly, where FISTA on the same dual still moved after thousands of
    iterations (see the benchmark). Without the bias (a one-label problem,
    which libsvm does not take) the box-constrained quadratic goes to
    L-BFGS-B.

    Parameters
    ----------
    Phi : ndarray of shape (n_samples, n_atoms)
    y : ndarray of shape (n_samples,) in {-1, +1}
    beta : float
        β = 1 − γ, the weight of the L2 term.
    epsilon, upper, bias, max_iter, tol
        See :func:`fista_dual`.
    gram : ndarray of shape (n_samples, n_samples), default=None
        ``dense_gram(Phi)``, when the caller solves several problems on the
        same atoms (the one-vs-rest problems of a chunk) and formed it once;
        read only when there are more atoms than samples.
    margins : ndarray of shape (n_samples,), default=None
        The ``margins`` of a nearby problem's solution (with the bias):
        libsvm then solves on a working set of rows
        (:func:`_working_set_svc`) instead of all of them.

    Returns
    -------
    result : dict
        ``lam`` (λ), ``coef`` (α = Φᵀ(y ∘ λ) / β), ``intercept`` (b),
        ``margins`` (y f / (1 − ε) on every row, with the bias),
        ``n_iter``, ``converged``.
    """
    y = np.asarray(y, dtype=np.float64)
    n = len(y)
    if not bias:
        return _dense_dual_no_bias(
            Phi, y, beta=beta, epsilon=epsilon, upper=upper, max_iter=max_iter, tol=tol
        )
    margin = 1.0 - epsilon
    if Phi.shape[1] == 0:
        # No atom: f = b, and the hinge loss is smallest at ±(1 − ε) on the
        # side of the larger class.
        side = 1.0 if np.sum(y > 0) > np.sum(y < 0) else -1.0
        return {
            "lam": np.zeros(n),
            "coef": np.zeros(0),
            "intercept": margin * side,
            "margins": y * side,
            "n_iter": 0,
            "converged": True,
        }
    c_svc = upper / (beta * margin) if np.isfinite(upper) else _HARD_MARGIN_C
    if margins is None:
        svm = _full_svc(Phi, y, C=c_svc, tol=tol, gram=gram)
    else:
        svm = _working_set_svc(Phi, y, margins, C=c_svc, tol=tol)
    lam = beta * margin * svm["dual"]
    support = np.flatnonzero(lam)
    coef = (Phi[support].T @ (y * lam)[support].astype(Phi.dtype)).astype(
        np.float64
    ) / beta
    return {
        "lam": lam,
        "coef": coef,
        "intercept": margin * svm["intercept"],
        # y f / (1 − ε) = y (Φ w + b) in libsvm's scaling, from α = (1 − ε) w.
        "margins": y * (_product(Phi, coef) + svm["intercept"] * margin) / margin,
        "n_iter": svm["n_iter"],
        "converged": svm["converged"],
    }


def _product(Phi, v):
    """Φ v in float64, a block of rows at a time (about 8 MB of float64 rows:
    no float64 copy of a large Φ).

    The KKT checks compare these margins with 1 to libsvm's tolerance; in
    float32 a model whose wide, nearly collinear atoms carry large
    coefficients of opposite signs loses more than that to cancellation.
    """
    v = np.asarray(v, dtype=np.float64)
    out = np.empty(Phi.shape[0])
    step = max(1, 2**20 // max(Phi.shape[1], 1))
    for start in range(0, Phi.shape[0], step):
        out[start : start + step] = (
            np.asarray(Phi[start : start + step], dtype=np.float64) @ v
        )
    return out


def _guess_margins(Phi, y, *, beta, epsilon, upper, tol):
    """Margins to start :func:`_working_set_svc` from when no previous
    solution is at hand: those of the solution on an even subsample of
    about :data:`_GUESS_ROWS` rows (every k-th row: the same rows for the
    same data)."""
    rows = np.arange(0, len(y), -(-len(y) // _GUESS_ROWS))
    if len(np.unique(y[rows])) < 2:
        return None
    margin = 1.0 - epsilon
    C = upper / (beta * margin) if np.isfinite(upper) else _HARD_MARGIN_C
    guess = _full_svc(Phi[rows], y[rows], C=C, tol=tol)
    return _svc_margins(
        Phi, y, _scatter(guess["dual"], rows, len(y)), guess["intercept"]
    )


def _scatter(values, rows, n):
    out = np.zeros(n)
    out[rows] = values
    return out


def _svc_margins(Phi, y, dual, intercept):
    """y_n f(x_n) of libsvm's solution on every row of ``Phi``, in its
    scaling (the margin is 1): f = Φ Φᵀ(y ∘ λ) + b."""
    support = np.flatnonzero(dual)
    w = np.asarray(Phi[support], dtype=np.float64).T @ (y * dual)[support]
    return y * (_product(Phi, w) + intercept)


def _full_svc(Phi, y, *, C, tol, gram=None):
    """libsvm on every row: the linear kernel on Φ, or the Gram matrix
    when there are more atoms than rows. Returns ``dual`` (λ in libsvm's
    scaling, zero off the support), ``intercept``, ``n_iter``,
    ``converged``."""
    n = len(y)
    if Phi.shape[1] > n:
        # More atoms than samples: libsvm reads the n × n Gram matrix.
        svm = _binary_svc(
            dense_gram(Phi) if gram is None else gram,
            y,
            kernel="precomputed",
            C=C,
            tol=tol,
        )
    else:
        svm = _binary_svc(Phi, y, kernel="linear", C=C, tol=tol)
    dual = np.zeros(n)
    dual[svm["support"]] = svm["dual_coef"]
    return {
        "dual": dual,
        "intercept": svm["intercept"],
        "n_iter": svm["n_iter"],
        "converged": svm["converged"],
    }


def _working_set_svc(Phi, y, margins, *, C, tol):
    """:func:`_full_svc`'s problem solved on a working set of rows.

    At the optimum most rows are settled at a bound: λ_n = 0 where
    y_n f(x_n) > 1 and λ_n = C where y_n f(x_n) < 1 (on the paper's
    synthetic set most of the server's pool sits at C and few rows between
    the bounds). Each such row costs libsvm's SMO pair steps and a kernel
    column, and the active-set loop calls libsvm dozens of times on
    nearly the same problem. Here libsvm sees only the rows that are not
    settled:

    * rows whose margin (from a nearby problem's solution: the previous
      quadratic step, or a solve on a subsample) lies within
      :data:`_WORKING_BAND` of 1 are **free**; rows below are **held at
      C**, rows above **held at 0**;
    * the rows held at C enter libsvm as one row per class, their mean
      feature, weighted by their number (so that its box is
      [0, C × count]): the problem restricted to equal λ within each
      group, which is the full problem where they all sit at C;
    * the solution is checked on every row against the KKT conditions, to
      libsvm's ``tol``: a row held at 0 with y f < 1 − tol, held at C with
      y f > 1 + tol, or in a group that left its bound with y f > 1 − tol
      is a violator. Up to :data:`_JOIN_BATCH` of the worst (or as many as
      there are free rows) join the free rows, free rows the solution left
      clearly at a bound are held there, and libsvm solves again.

    It stops when no row violates: the solution of the full problem to
    libsvm's tolerance (not to the bit: libsvm's path differs). After
    :data:`_SETTLE_ROUNDS` rounds free rows are no longer held again, so
    the free set only grows and the loop ends, at worst with every row
    free (the full problem).

    Parameters
    ----------
    Phi : ndarray of shape (n_samples, n_atoms)
    y : ndarray of shape (n_samples,) in {-1, +1}
    margins : ndarray of shape (n_samples,)
        y f of a nearby solution (:func:`_svc_margins`).
    C, tol : float
        libsvm's C and tolerance.

    Returns
    -------
    result : dict
        As :func:`_full_svc`, on every row, with ``n_iter`` summed over the
        rounds.
    """
    n = len(y)
    free = np.abs(margins - 1) <= _WORKING_BAND
    at_upper = ~free & (margins < 1)
    n_iter, converged, rounds = 0, True, 0
    while True:
        rounds += 1
        rows = np.flatnonzero(free)
        groups = [np.flatnonzero(at_upper & (y == label)) for label in (-1.0, 1.0)]
        groups = [group for group in groups if group.size]
        labels = np.concatenate([y[rows], [y[group[0]] for group in groups]])
        if np.all(labels > 0) or np.all(labels < 0):
            # libsvm needs both labels; a guess this far off is not worth
            # repairing.
            return _full_svc(Phi, y, C=C, tol=tol)
        features = np.vstack(
            [np.asarray(Phi[rows], dtype=np.float64)]
            + [np.mean(Phi[group], axis=0, dtype=np.float64)[None] for group in groups]
        )
        weight = np.concatenate([np.ones(len(rows)), [len(g) for g in groups]])
        if Phi.shape[1] > len(labels):
            features, kernel = features @ features.T, "precomputed"
        else:
            kernel = "linear"
        svm = _binary_svc(
            features,
            labels,
            kernel=kernel,
            C=C,
            tol=tol,
            sample_weight=weight if groups else None,
        )
        n_iter += svm["n_iter"]
        converged &= svm["converged"]
        solved = np.zeros(len(labels))
        solved[svm["support"]] = svm["dual_coef"]
        dual = np.zeros(n)
        dual[rows] = solved[: len(rows)]
        below_bound = np.zeros(n, dtype=bool)
        for group, value, count in zip(
            groups, solved[len(rows) :], weight[len(rows) :]
        ):
            dual[group] = value / count
            # libsvm puts a variable at its bound exactly.
            below_bound[group] = value < C * count
        margins = _svc_margins(Phi, y, dual, svm["intercept"])
        held_at_zero = ~free & ~at_upper
        joins = (held_at_zero & (margins < 1 - tol)) | (at_upper & (margins > 1 + tol))
        # A group below its bound: its rows want λ = C where y f < 1 and
        # less where y f ≥ 1; those leave it (all of it when none does,
        # which the tolerances allow).
        wants_less = below_bound & (margins > 1 - tol)
        for group in groups:
            if below_bound[group[0]]:
                joins[group] |= wants_less[group] if wants_less[group].any() else True
        if not np.any(joins):
            return {
                "dual": dual,
                "intercept": svm["intercept"],
                "n_iter": n_iter,
                "converged": converged,
            }
        # Adding every violator at once grew the working set to most of
        # the rows after a large step of the active-set loop; the worst
        # ones first keep libsvm's problems small.
        batch = max(_JOIN_BATCH, len(rows))
        if joins.sum() > batch:
            violators = np.flatnonzero(joins)
            worst = np.argsort(-np.abs(margins[violators] - 1), kind="stable")
            joins = np.zeros(n, dtype=bool)
            joins[violators[worst[:batch]]] = True
        settled = np.zeros(n, dtype=bool)
        if rounds <= _SETTLE_ROUNDS:
            settled_up = free & (dual >= C) & (margins < 1 - _WORKING_BAND)
            settled = settled_up | (free & (dual == 0) & (margins > 1 + _WORKING_BAND))
            at_upper |= settled_up
        free = (free & ~settled) | joins
        at_upper &= ~joins


def _binary_svc(features, y, *, kernel, C, tol, sample_weight=None):
    """libsvm's C-SVC on ±1 labels, called as ``SVC(kernel, C, tol).fit``
    calls it, without the estimator around it.

    The active-set solver calls libsvm hundreds of times on small problems
    (a ten-class fit on the digits: about 900 calls of 12 ms in libsvm);
    ``SVC.fit``'s input checks, label encoding and class weights took
    nearly as long again. The arguments are those ``SVC.fit`` passes for
    these inputs (labels coded 0/1 in sorted order, unit class weights, a
    float64 C-ordered matrix), so the solution is the same to the bit.
    ``sample_weight`` multiplies C row by row, as in ``SVC.fit``.

    Returns
    -------
    result : dict
        ``support`` (indices of the samples with λ > 0), ``dual_coef``
        (their |y λ| in libsvm's scaling), ``intercept`` (b, in SVC's
        sign), ``n_iter`` and ``converged`` (False when libsvm stopped at
        its iteration cap).
    """
    features = np.ascontiguousarray(features, dtype=np.float64)
    if _libsvm is not None:
        try:
            return _libsvm_fit(
                features, y, kernel=kernel, C=C, tol=tol, sample_weight=sample_weight
            )
        except TypeError:
            # The private binding takes other arguments in this release
            # (a wrong argument fails before libsvm runs).
            pass
    return _svc_fit(
        features, y, kernel=kernel, C=C, tol=tol, sample_weight=sample_weight
    )


def _libsvm_fit(features, y, *, kernel, C, tol, sample_weight=None):
    """:func:`_binary_svc` through scikit-learn's private libsvm binding."""
    # libsvm prints its progress unless told not to (a process-wide switch
    # that SVC.fit also sets on every call).
    _libsvm.set_verbosity_wrap(0)
    fitted = _libsvm.fit(
        features,
        (y > 0).astype(np.float64),
        svm_type=0,  # C-SVC
        sample_weight=(
            np.empty(0)
            if sample_weight is None
            else np.asarray(sample_weight, dtype=np.float64)
        ),
        class_weight=np.ones(2),
        kernel=kernel,
        C=float(C),
        nu=0.5,
        probability=False,
        degree=3,
        shrinking=True,
        tol=float(tol),
        cache_size=200,
        coef0=0.0,
        gamma=1.0,  # read by neither kernel
        epsilon=0.1,
        max_iter=_SMO_MAX_ITER,
        random_seed=0,  # read only for probability estimates
    )
    if len(fitted) != 9:
        raise TypeError("libsvm's binding returns other values in this release")
    support, _, _, dual_coef, intercept, _, _, status, n_iter = fitted
    return {
        "support": np.asarray(support, dtype=np.intp),
        "dual_coef": np.abs(dual_coef[0]),
        # SVC reports −ρ for the class coded 1 (the +1 labels here).
        "intercept": -float(intercept[0]),
        "n_iter": int(np.sum(n_iter)),
        "converged": status == 0,
    }


def _svc_fit(features, y, *, kernel, C, tol, sample_weight=None):
    """:func:`_binary_svc` through :class:`~sklearn.svm.SVC`'s public API."""
    svc = _QuietSVC(kernel=kernel, C=C, tol=tol, max_iter=_SMO_MAX_ITER)
    svc.fit(features, y, sample_weight=sample_weight)
    return {
        "support": np.asarray(svc.support_, dtype=np.intp),
        "dual_coef": np.abs(svc.dual_coef_[0]),
        "intercept": float(svc.intercept_[0]),
        "n_iter": int(np.sum(svc.n_iter_)),
        "converged": svc.fit_status_ == 0,
    }


class _QuietSVC(SVC):
    """SVC that leaves its early stop in ``fit_status_`` instead of warning.

    The callers report non-convergence themselves. Catching scikit-learn's
    warning instead (``warnings.catch_warnings``) swaps the process-wide
    warning filters and display hook, which is not thread-safe: client
    threads solving at once left the process recording every later warning
    into a dead list, so the user saw none.
    """

    def _warn_from_fit_status(self):
        pass


def dense_gram(Phi):
    """ΦΦᵀ as libsvm reads it (float64), formed in Φ's precision: float32
    halves the dominant n² · n_atoms cost and no float64 copy of Φ is
    made."""
    return (Phi @ Phi.T).astype(np.float64)


def _dense_dual_no_bias(Phi, y, *, beta, epsilon, upper, max_iter, tol):
    """γ = 0 dual without the bias: a box-constrained quadratic (L-BFGS-B)."""
    Phi64 = np.asarray(Phi, dtype=np.float64)

    def negative_dual(lam):
        c = Phi64.T @ (y * lam)
        value = c @ c / (2 * beta) - (1 - epsilon) * lam.sum()
        grad = y * (Phi64 @ c) / beta - (1 - epsilon)
        return value, grad

    n = len(y)
    bound = None if not np.isfinite(upper) else upper
    result = minimize(
        negative_dual,
        np.zeros(n),
        jac=True,
        method="L-BFGS-B",
        bounds=[(0, bound)] * n,
        options={"maxiter": max_iter, "gtol": tol * 1e-2, "ftol": tol * 1e-4},
    )
    lam = result.x
    # L-BFGS-B leaves round-off where the bound is active.
    lam[lam <= 1e-8 * max(lam.max(initial=0.0), 1e-300)] = 0.0
    return {
        "lam": lam,
        "coef": Phi64.T @ (y * lam) / beta,
        "intercept": 0.0,
        "n_iter": int(result.nit),
        "converged": bool(result.success),
    }
