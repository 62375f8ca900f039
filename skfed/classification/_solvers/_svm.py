"""The γ = 0 problems: an SVM on the atoms' features, solved by libsvm
(:func:`dense_dual`): the clients' dense solve on their local dictionary,
and the refit of a support (a step of the active-set solver)."""

import numpy as np
from scipy.optimize import minimize
from sklearn.svm import SVC

# scikit-learn's private binding of libsvm, or None: no stability promise,
# so a release that moves or changes it sends the solves back to SVC.fit
# (the same solution, with the estimator's overhead).
from ..._sklearn_compat import libsvm as _libsvm

__all__ = [
    "GUESS_ROWS",
    "HARD_MARGIN_C",
    "WORKING_SET_ROWS",
    "dense_dual",
    "dense_gram",
    "guess_margins",
]

# libsvm needs a finite C: the hard margin (C = inf) becomes a C far above
# the dual values these problems reach (λ stays near 1 with C = 1). Larger
# values made SMO crawl on supports too sparse to separate the data, which
# the active-set solver visits on its way; the iteration cap is a backstop.
HARD_MARGIN_C = 1e4
_SMO_MAX_ITER = 1_000_000
# Rows whose margin y f, at a nearby solution, lies within this distance
# of 1 start free in the working set (libsvm's scaling; the others start at
# a bound); a free row the solution leaves farther than this from 1 at a
# bound is held there.
_WORKING_BAND = 0.25
# Rows of the subsample whose solution gives the first quadratic step's
# starting margins (see guess_margins).
GUESS_ROWS = 300
# Most violators added to the working set per round (or as many as it
# holds): 20 to 200 took the same time on the paper's synthetic set.
_JOIN_BATCH = 100
# Rounds after which free rows stay free, so that the working set only
# grows and the loop ends.
_SETTLE_ROUNDS = 30
# libsvm's linear kernel takes its dot products one pair at a time, outside
# BLAS: on a server pool of noisy data (thousands of free rows, hundreds of
# atoms) they were most of each solve, and their count grows as rows² x
# atoms. From this many atoms on, the rows' Gram matrix is formed by BLAS
# and libsvm reads it (the same problem; 1.5x faster on 700 rows x 300
# atoms, more as both grow); with fewer atoms the dot products are cheap.
_GRAM_ATOMS = 64
# Largest Gram matrix formed that way (rows; 8 bytes an entry: 200 MB).
_GRAM_ROWS = 5000
# Pools on which the active-set solver's quadratic steps take working sets
# of rows (see guess_margins): below, every step is one libsvm solve on all
# the rows, through the Gram matrix. Each working-set round is a libsvm
# solve from scratch, and steps took about four rounds: on the kernel
# selection's 1,000 rows of a noisy set (10% flipped labels) the full
# solves made the fit 1.2 to 1.8 times faster at N = 2k to 10k.
WORKING_SET_ROWS = 2000


def _gram_pays(n_rows, n_atoms):
    """Whether libsvm should read the rows' Gram matrix rather than form
    their dot products itself."""
    return n_atoms > n_rows or (_GRAM_ATOMS <= n_atoms and n_rows <= _GRAM_ROWS)


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
    c_svc = upper / (beta * margin) if np.isfinite(upper) else HARD_MARGIN_C
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


def guess_margins(Phi, y, *, beta, epsilon, upper, tol):
    """Margins to start :func:`_working_set_svc` from when no previous
    solution is at hand: those of the solution on an even subsample of
    about :data:`GUESS_ROWS` rows (every k-th row: the same rows for the
    same data)."""
    rows = np.arange(0, len(y), -(-len(y) // GUESS_ROWS))
    if len(np.unique(y[rows])) < 2:
        return None
    margin = 1.0 - epsilon
    C = upper / (beta * margin) if np.isfinite(upper) else HARD_MARGIN_C
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
    elif _gram_pays(n, Phi.shape[1]):
        # In float64, as libsvm's own dot products would be (see _product).
        features = np.asarray(Phi, dtype=np.float64)
        svm = _binary_svc(
            features @ features.T,
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
        if _gram_pays(len(labels), Phi.shape[1]):
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
