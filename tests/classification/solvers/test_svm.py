"""Tests for the gamma = 0 problems solved by libsvm
(skfed.classification._solvers._svm): the dense dual, its working sets, the
fallback to SVC."""

import threading
import warnings

import numpy as np
import pytest
from sklearn.datasets import make_moons
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import SVC

from skfed.classification._solvers._svm import dense_dual
from skfed.kernel._multiwidth import AtomDictionary


@pytest.mark.parametrize("n_atoms", [10, 40, 400])
@pytest.mark.parametrize("upper", [1.0, np.inf])
def test_dense_dual_is_svcs_solution_to_the_bit(n_atoms, upper):
    # dense_dual calls libsvm without SVC's estimator around it; the
    # arguments are those SVC.fit passes, so λ, b and the iteration count
    # are SVC's exactly (one libsvm run on the same float64 input, formed
    # by the same product). 20 atoms (10 centers, 2 widths) go to libsvm's
    # linear kernel; 80 atoms through the float64 Gram matrix of the rows
    # (libsvm's own dot products cost more from 64 atoms on); 800 atoms on
    # 300 samples through the Gram matrix formed in Φ's float32.
    X, y = make_moons(300, noise=0.3, random_state=0)
    ypm = np.where(y == 1, 1.0, -1.0)
    Phi = AtomDictionary(X, X[:n_atoms], [0.3, 0.8]).columns()
    beta, epsilon = 0.4, 0.3
    fit = dense_dual(
        Phi,
        ypm,
        beta=beta,
        epsilon=epsilon,
        upper=upper,
        bias=True,
        max_iter=10,
        tol=1e-4,
    )
    C = upper / (beta * (1 - epsilon)) if np.isfinite(upper) else 1e4
    if Phi.shape[1] > Phi.shape[0]:
        features, kernel = (Phi @ Phi.T).astype(np.float64), "precomputed"
    elif Phi.shape[1] >= 64:
        Phi64 = Phi.astype(np.float64)
        features, kernel = Phi64 @ Phi64.T, "precomputed"
    else:
        features, kernel = Phi.astype(np.float64), "linear"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        svc = SVC(
            kernel=kernel,
            C=C,
            tol=1e-4,
            max_iter=1_000_000,
        ).fit(features, ypm)
    lam = np.zeros(len(ypm))
    lam[svc.support_] = beta * (1 - epsilon) * np.abs(svc.dual_coef_[0])
    np.testing.assert_array_equal(fit["lam"], lam)
    assert fit["intercept"] == (1 - epsilon) * svc.intercept_[0]
    assert fit["n_iter"] == svc.n_iter_.sum()
    assert fit["converged"] == (svc.fit_status_ == 0)


def test_libsvm_cap_is_reported_without_a_warning_or_global_state(monkeypatch):
    # dense_dual runs in client threads and in the server's threads: it
    # reads libsvm's early stop from fit_status_, and neither warns nor
    # touches the process-wide warning machinery (catching the warning
    # there, two threads left every later warning recorded into a dead
    # list).
    import skfed.classification._solvers._svm as svm

    rng = np.random.default_rng(0)
    Phi = rng.standard_normal((200, 150)).astype(np.float32)
    y = np.where(rng.standard_normal(200) > 0, 1.0, -1.0)
    kw = {"beta": 1.0, "epsilon": 0.0, "upper": 1.0, "bias": True}
    kw.update(max_iter=100, tol=1e-3)
    assert dense_dual(Phi, y, **kw)["converged"]
    filters, show = warnings.filters, warnings._showwarnmsg_impl

    def solve_many(out):
        for _ in range(30):
            out.append(dense_dual(Phi, y, **kw)["converged"])

    monkeypatch.setattr(svm, "_SMO_MAX_ITER", 3)
    results = [[], []]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        threads = [threading.Thread(target=solve_many, args=(r,)) for r in results]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert results == [[False] * 30, [False] * 30]
    assert warnings.filters is filters
    assert warnings._showwarnmsg_impl is show


@pytest.mark.parametrize("binding", ["changed", "missing"])
def test_dense_dual_falls_back_to_svc_when_libsvms_binding_changes(
    monkeypatch, binding
):
    # The direct libsvm call uses scikit-learn's private binding; a release
    # that changes or removes it must give SVC.fit's solution, not an error.
    import types

    import skfed.classification._solvers._svm as svm

    X, y = make_moons(200, noise=0.3, random_state=0)
    ypm = np.where(y == 1, 1.0, -1.0)
    Phi = AtomDictionary(X, X[:50], [0.3, 0.8]).columns()
    kw = {"beta": 0.4, "epsilon": 0.3, "upper": 1.0, "bias": True}
    kw.update(max_iter=10, tol=1e-4)
    direct = dense_dual(Phi, ypm, **kw)

    def changed_fit(*args, **kwargs):
        raise TypeError("fit() got an unexpected keyword argument 'nu'")

    fake = types.SimpleNamespace(fit=changed_fit, set_verbosity_wrap=lambda v: None)
    monkeypatch.setattr(svm, "_libsvm", fake if binding == "changed" else None)
    through_svc = dense_dual(Phi, ypm, **kw)
    np.testing.assert_array_equal(through_svc["lam"], direct["lam"])
    assert through_svc["intercept"] == direct["intercept"]
    assert through_svc["converged"] and through_svc["n_iter"] == direct["n_iter"]


def _svm_dual_and_primal(Phi, y, fit, *, beta, epsilon, upper):
    # D and P of the γ = 0 problem (the dense dual's), from a fit's λ, α, b.
    c = Phi.astype(np.float64).T @ (y * fit["lam"])
    dual = (1 - epsilon) * fit["lam"].sum() - c @ c / (2 * beta)
    f = Phi.astype(np.float64) @ fit["coef"] + fit["intercept"]
    slack = np.maximum(1 - epsilon - y * f, 0)
    primal = 0.5 * beta * fit["coef"] @ fit["coef"] + upper * slack.sum()
    return dual, primal, f


@pytest.mark.parametrize("n_atoms", [12, 600])
def test_working_set_solve_matches_the_full_solve(n_atoms):
    # The working-set solve (libsvm on the unsettled rows, the rows at C
    # pooled per class) starting from a nearby problem's margins solves
    # the full problem to the tolerance: the same dual and primal values,
    # the same decisions. 600 atoms on 500 rows go through the Gram matrix.
    ypm, Phi, kw = _moons_dual_problem(500, 0, n_atoms, beta=0.4, epsilon=0.3)
    # The previous step of the active-set loop: one atom fewer.
    nearby = dense_dual(Phi[:, 1:], ypm, **kw)
    full = dense_dual(Phi, ypm, **kw)
    chunked = dense_dual(Phi, ypm, margins=nearby["margins"], **kw)
    (d_ws, p_ws, f_ws), (_, _, f_full) = _assert_same_svm(Phi, ypm, chunked, full, kw)
    # Weak duality holds for both: P ≥ D up to the solver tolerance.
    assert p_ws >= d_ws - 1e-3 * abs(d_ws)
    assert np.abs(f_ws - f_full).max() <= 0.05
    # Φ is float32: α is summed in it, the margins in float64.
    np.testing.assert_allclose(chunked["margins"], ypm * f_ws / 0.7, atol=1e-3)
    # Rows at the bound are rows at the bound.
    at_c = full["lam"] >= 0.999 * kw["upper"]
    assert np.mean(at_c == (chunked["lam"] >= 0.999 * kw["upper"])) >= 0.98


def _dp(kw):
    return {k: kw[k] for k in ("beta", "epsilon", "upper")}


def _moons_dual_problem(n, seed, n_atoms, *, beta, epsilon):
    """±1 labels, the atoms' features Φ (two widths over the first
    ``n_atoms`` rows) and the dense dual's options, on noisy moons."""
    X, y = make_moons(n, noise=0.3, random_state=seed)
    ypm = np.where(y == 1, 1.0, -1.0)
    Phi = AtomDictionary(X, X[:n_atoms], [0.3, 0.8]).columns()
    kw = {"beta": beta, "epsilon": epsilon, "upper": 1.0, "bias": True}
    kw.update(max_iter=10, tol=1e-5)
    return ypm, Phi, kw


def _assert_same_svm(Phi, ypm, got, expected, kw):
    """``got`` solves ``expected``'s problem: the same dual and primal
    values, the same decisions; returns both fits' D, P and f."""
    d_exp, p_exp, f_exp = _svm_dual_and_primal(Phi, ypm, expected, **_dp(kw))
    d_got, p_got, f_got = _svm_dual_and_primal(Phi, ypm, got, **_dp(kw))
    assert d_got == pytest.approx(d_exp, rel=1e-3)
    assert p_got == pytest.approx(p_exp, rel=1e-3)
    assert np.mean(np.sign(f_got) == np.sign(f_exp)) >= 0.99
    return (d_got, p_got, f_got), (d_exp, p_exp, f_exp)


@pytest.mark.parametrize("guess", ["held at zero", "held at C"])
def test_working_set_adds_the_violators_its_first_guess_missed(monkeypatch, guess):
    # A first working set far from the solution: a handful of rows free
    # and the rest held at 0 (or at C). The KKT check on every row must add
    # the violators until none is left, and reach the full solution.
    import skfed.classification._solvers._svm as svm

    ypm, Phi, kw = _moons_dual_problem(400, 1, 15, beta=0.5, epsilon=0.0)
    full = dense_dual(Phi, ypm, **kw)
    margins = np.full(len(ypm), 5.0 if guess == "held at zero" else -5.0)
    first = np.concatenate([np.flatnonzero(ypm > 0)[:3], np.flatnonzero(ypm < 0)[:3]])
    margins[first] = 1.0
    sizes = []
    solve = svm._binary_svc

    def counted(features, y, **options):
        sizes.append(len(y))
        return solve(features, y, **options)

    monkeypatch.setattr(svm, "_binary_svc", counted)
    chunked = dense_dual(Phi, ypm, margins=margins, **kw)
    assert len(sizes) >= 2 and sizes[0] <= 8  # 6 free rows (+ the groups)
    _assert_same_svm(Phi, ypm, chunked, full, kw)
    # Every row meets its KKT condition to the tolerance (margins in
    # libsvm's scaling, where the margin is 1).
    lam, m = chunked["lam"], chunked["margins"]
    C = kw["upper"]
    assert np.all(m[lam == 0] >= 1 - 1e-3)
    assert np.all(m[lam >= C] <= 1 + 1e-3)


@pytest.mark.parametrize("binding", ["changed", "missing"])
def test_working_set_solve_falls_back_to_svc(monkeypatch, binding):
    # The rows held at C reach libsvm as weighted rows: SVC.fit's
    # sample_weight must carry them when the private binding is unusable.
    import types

    import skfed.classification._solvers._svm as svm

    ypm, Phi, kw = _moons_dual_problem(300, 2, 20, beta=0.4, epsilon=0.3)
    margins = dense_dual(Phi[:, 2:], ypm, **kw)["margins"]
    direct = dense_dual(Phi, ypm, margins=margins, **kw)

    def changed_fit(*args, **kwargs):
        raise TypeError("fit() got an unexpected keyword argument 'nu'")

    fake = types.SimpleNamespace(fit=changed_fit, set_verbosity_wrap=lambda v: None)
    monkeypatch.setattr(svm, "_libsvm", fake if binding == "changed" else None)
    through_svc = dense_dual(Phi, ypm, margins=margins, **kw)
    np.testing.assert_allclose(through_svc["lam"], direct["lam"], atol=1e-6)
    assert through_svc["intercept"] == pytest.approx(direct["intercept"], abs=1e-6)
    assert through_svc["converged"]
