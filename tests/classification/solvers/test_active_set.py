"""Tests for the active-set solver of the sparse dual
(skfed.classification._solvers._active_set): its exact line search and its
quadratic steps."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import make_moons

from skfed.kernel._multiwidth import AtomDictionary


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    scale_c=st.sampled_from([0.1, 1.0, 3.0]),
    scale_e=st.sampled_from([0.01, 0.3, 2.0]),
    direction_sum=st.floats(0, 200),
)
def test_line_search_matches_bisection_over_every_atom(
    seed, scale_c, scale_e, direction_sum
):
    # The line search sums the atoms that stay on one side of the threshold
    # once and bisects over the others; the step is the one a bisection of
    # the slope over every atom finds.
    from skfed.classification._solvers._active_set import _line_search

    rng = np.random.RandomState(seed)
    c = rng.normal(size=2000) * scale_c
    e = rng.normal(size=2000) * scale_e
    e[rng.rand(2000) < 0.1] = 0
    gamma, epsilon = 0.5, 0.1
    beta = 1 - gamma
    tau = np.sqrt(2 * gamma * beta)

    def slope(t):
        u = c + t * e
        return (1 - epsilon) * direction_sum - np.sum(e * u * (np.abs(u) > tau)) / beta

    if slope(1.0) >= 0:
        expected = 1.0
    elif slope(0.0) <= 0:
        expected = 0.0
    else:
        lo, hi = 0.0, 1.0
        for _ in range(50):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if slope(mid) > 0 else (lo, mid)
        expected = hi
    got = _line_search(c, e, direction_sum, gamma=gamma, epsilon=epsilon)
    assert got == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("kink", [0.3, 0.7 + 2.0**-52, 1 / 3])
def test_line_search_stops_just_past_the_kink_where_the_slope_turns(kink):
    # One atom enters at t = kink and its share of the slope, τ/β · e,
    # turns the slope from positive to negative there: the step is the
    # first multiple of 2⁻⁵⁰ past the kink (where a bisection of [0, 1]
    # lands), and the entering atom is above the threshold there.
    from skfed.classification._solvers._active_set import _line_search

    gamma, epsilon = 0.5, 0.0
    beta = 1 - gamma
    tau = np.sqrt(2 * gamma * beta)
    # Atom 0 crosses τ at t = kink; atom 1 stays below it throughout.
    e = np.array([1.0, 0.01])
    c = np.array([tau - kink, 0.0])
    direction_sum = 0.5 * tau * e[0] / beta  # slope +0.5 before, < 0 after
    t = _line_search(c, e, direction_sum, gamma=gamma, epsilon=epsilon)
    step = 2.0**-50
    grid = (np.ceil(kink / step) + np.arange(-2, 3)) * step
    expected = grid[np.argmax(c[0] + grid * e[0] > tau)]
    assert t == expected


@pytest.mark.parametrize("n, working", [(300, False), (1200, False), (2400, True)])
def test_working_sets_only_on_pools_above_their_first_size(n, working, monkeypatch):
    # On a pool of at most WORKING_SET_ROWS (2,000) rows every quadratic
    # step is libsvm on all the rows, through their Gram matrix (the path
    # of the user guide's moons example, whose refinement sent 69% more
    # rows when small pools took working sets; and on 1,000 noisy rows
    # twice as fast as a working set's rounds); above, the steps after
    # the first guess take working sets.
    import skfed.classification._solvers._svm as svm
    from skfed.classification._solvers._active_set import active_set_dual

    calls = []
    original = svm._working_set_svc

    def spy(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(svm, "_working_set_svc", spy)
    X, y = make_moons(n, noise=0.2, random_state=0)
    ypm = np.where(y == 1, 1.0, -1.0)
    dictionary = AtomDictionary(X, X, [0.3, 0.8])
    result = active_set_dual(
        dictionary, ypm, gamma=0.7, epsilon=0.3, upper=1.0, max_iter=4, tol=1e-4
    )
    assert result["n_iter"] >= 2 and len(result["atoms"]) > 0
    assert bool(calls) == working
