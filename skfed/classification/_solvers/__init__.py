"""The classifier's solvers.

The critical samples' sparse multi-width kernel dual (:mod:`._dual`,
:mod:`._active_set`, :mod:`._fista`, :mod:`._svm`) and the random features'
ridge regression with its generalized cross-validation
(:mod:`._feature_ridge`).

The sparse dual.

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
