"""The differential privacy machinery every estimator shares: the settings
object, clipping, the accountant, and the federation's safety net."""

import math
import pickle
from functools import partial

import dp_accounting
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from sklearn.base import clone

from skfed._engine._federation import ClientData, Federation
from skfed._engine._ledger import NO_UPLOAD, SUM_ONLY, Disclosure
from skfed._engine._protocol import client_step
from skfed.privacy import (
    Accountant,
    DifferentialPrivacy,
    PrivacyBudgetError,
    PrivacyLeakWarning,
    box_radius,
    clip_to_box,
    feature_bounds,
    gaussian_noise,
)


def test_settings_clone_pickle_and_nested_params():
    dp = DifferentialPrivacy(epsilon=2.0, delta=1e-6, bounds=(0.0, 1.0))
    twin = clone(dp)
    assert twin is not dp and twin.get_params() == dp.get_params()
    assert pickle.loads(pickle.dumps(dp)).get_params() == dp.get_params()
    twin.set_params(epsilon=0.5)
    assert twin.epsilon == 0.5 and dp.epsilon == 2.0


def _library_epsilon(kind, noise_multiplier, n_releases, delta=1e-5):
    # dp-accounting's own accountants with their own defaults.
    accountant = (
        dp_accounting.pld.PLDAccountant()
        if kind == "pld"
        else dp_accounting.rdp.RdpAccountant()
    )
    accountant.compose(
        dp_accounting.SelfComposedDpEvent(
            dp_accounting.GaussianDpEvent(noise_multiplier), n_releases
        )
    )
    return accountant.get_epsilon(delta)


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
@pytest.mark.parametrize("n_releases", [1, 7, 60])
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 10.0])
def test_calibrated_noise_is_what_the_accountant_prescribes(
    epsilon, n_releases, accountant
):
    dp = DifferentialPrivacy(epsilon=epsilon, delta=1e-5, accountant=accountant)
    acc = Accountant(dp, n_releases, estimator="test")
    # Composing the releases at the calibrated noise, in dp-accounting's own
    # accountant, spends the budget (to the calibration's tolerance) and a
    # little less noise would overspend it.
    spent = _library_epsilon(accountant, acc.noise_multiplier, n_releases)
    assert epsilon * 0.99 <= spent <= epsilon * (1 + 1e-6)
    less = _library_epsilon(accountant, acc.noise_multiplier * 0.97, n_releases)
    assert less > epsilon


@pytest.mark.parametrize("n_releases", [1, 7, 60])
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 10.0])
def test_default_accountant_is_pld_at_the_exact_gaussian_noise(epsilon, n_releases):
    # n releases at noise z are one Gaussian at z / sqrt(n); dp-accounting's
    # analytic Gaussian gives its exact noise, which PLD (the default) meets
    # to 1e-4 and Rényi DP overshoots.
    assert DifferentialPrivacy().accountant == "pld"
    z = Accountant(DifferentialPrivacy(epsilon=epsilon), n_releases, estimator="t")
    exact = dp_accounting.get_sigma_gaussian(epsilon, 1e-5) * math.sqrt(n_releases)
    assert z.noise_multiplier == pytest.approx(exact, rel=1e-4)
    assert z.noise_multiplier >= exact * (1 - 1e-9)
    rdp = Accountant(
        DifferentialPrivacy(epsilon=epsilon, accountant="rdp"),
        n_releases,
        estimator="t",
    )
    assert rdp.noise_multiplier > 1.04 * z.noise_multiplier


def test_spent_counts_registered_releases_only():
    dp = DifferentialPrivacy(epsilon=1.0, delta=1e-5)
    acc = Accountant(dp, 10, estimator="test")
    assert acc.spent() == (0.0, 0.0)
    acc.register("a", 4)
    four = acc.spent()[0]
    acc.register("b", 6)
    eps, delta = acc.spent()
    assert four < eps <= 1.0 + 1e-6 and eps > 0.99
    assert delta == 1e-5


def test_pld_accountant_is_tighter_than_rdp():
    rdp = Accountant(DifferentialPrivacy(accountant="rdp"), 5, estimator="t")
    pld = Accountant(DifferentialPrivacy(accountant="pld"), 5, estimator="t")
    assert pld.noise_multiplier < rdp.noise_multiplier


def test_fixed_noise_beyond_the_budget_is_refused():
    dp = DifferentialPrivacy(epsilon=1.0, noise_multiplier=1.0)
    with pytest.raises(PrivacyBudgetError, match="spend epsilon=.* more than"):
        Accountant(dp, 20, estimator="KFed")
    # Enough noise for the same releases is accepted and used as given.
    dp.set_params(noise_multiplier=100.0)
    assert Accountant(dp, 20, estimator="KFed").noise_multiplier == 100.0


def test_infinite_epsilon_adds_no_noise():
    acc = Accountant(DifferentialPrivacy(epsilon=math.inf), 10, estimator="t")
    assert acc.noise_multiplier == 0.0
    value = np.arange(5.0)
    np.testing.assert_array_equal(gaussian_noise(value, acc.noise_std(3.0)), value)


def test_noise_has_the_prescribed_scale_and_never_repeats():
    noisy = gaussian_noise(np.zeros(200_000), 2.5)
    assert abs(noisy.std() - 2.5) < 0.02
    assert abs(noisy.mean()) < 0.02
    # A second draw is independent of the first (correlation ~ N(0, 1/n)):
    # no seed reaches the noise, so nothing makes it repeat.
    again = gaussian_noise(np.zeros(200_000), 2.5)
    assert abs(np.corrcoef(noisy, again)[0, 1]) < 0.02


@settings(max_examples=40, deadline=None)
@given(
    arrays(np.float64, (6, 3), elements=st.floats(-1e6, 1e6)),
    arrays(np.float64, 3, elements=st.floats(-1e9, 1e9)),
    st.integers(0, 5),
)
def test_one_changed_row_moves_a_clipped_sum_by_at_most_the_radius(X, row, which):
    # Replacing one row is removing it and adding another: the clipped sum
    # moves by at most twice the box radius, each half by at most one.
    lower, upper = np.array([-1.0, 0.0, 5.0]), np.array([1.0, 10.0, 5.5])
    before = clip_to_box(X, lower, upper)
    changed = X.copy()
    changed[which] = row
    after = clip_to_box(changed, lower, upper)
    radius = box_radius(lower, upper)
    assert np.linalg.norm(before, axis=1).max() <= radius * (1 + 1e-12)
    moved = np.linalg.norm(after.sum(axis=0) - before.sum(axis=0))
    assert moved <= 2 * radius * (1 + 1e-12)


def test_bounds_read_from_the_data_warn():
    X = np.array([[0.0, 1.0], [2.0, 3.0]])
    with pytest.warns(PrivacyLeakWarning, match="read from the training data"):
        lower, upper = feature_bounds(DifferentialPrivacy(), X, estimator="KFed")
    np.testing.assert_array_equal(lower, [0, 1])
    np.testing.assert_array_equal(upper, [2, 3])
    with pytest.raises(ValueError, match="lower <= upper"):
        feature_bounds(DifferentialPrivacy(bounds=(1.0, 0.0)), X, estimator="KFed")


@client_step("test_privacy.plain_sum")
def _plain_sum(client, state, message):
    return state, client.X.sum(axis=0)


@client_step("test_privacy.noised_sum", sum_only=True)
def _noised_sum(client, state, message, *, std):
    return state, gaussian_noise(client.X.sum(axis=0), std)


def _federation(accountant):
    rng = np.random.RandomState(0)
    clients = [
        ClientData(c, rng.rand(5, 2), None, np.arange(5 * c, 5 * c + 5), (0, c))
        for c in range(3)
    ]
    fed = Federation(clients)
    fed.accountant = accountant
    return fed


def test_federation_refuses_un_noised_uploads_under_privacy():
    acc = Accountant(DifferentialPrivacy(), 2, estimator="t")
    with _federation(acc) as fed:
        with pytest.raises(RuntimeError, match="without noise"):
            fed.run_round("plain", _plain_sum, disclosure=SUM_ONLY)
        assert fed.log.n_rounds == 0  # refused before anything was sent
        with pytest.raises(RuntimeError, match="without noise"):
            fed.run_round("undeclared", _plain_sum)


def test_noised_rounds_are_registered_and_marked_in_the_ledger():
    acc = Accountant(DifferentialPrivacy(), 2, estimator="t")
    with _federation(acc) as fed:
        fed.run_round(
            "noised",
            partial(_noised_sum, std=acc.noise_std(1.0)),
            disclosure=Disclosure(SUM_ONLY, noised=2),
        )
    assert acc.events == [("noised", acc.noise_multiplier, 2, False)]
    assert fed.log.disclosure()[0]["noised"] == 2
    assert "sum_only noised" in fed.log.summary()
    assert acc.spent()[0] == pytest.approx(1.0, rel=0.01)


@client_step("test_privacy.fails_on_client_2", sum_only=True)
def _fails_on_client_2(client, state, message):
    if client.client_id == 2:
        raise ValueError("this client fails")
    return state, None


def test_a_rerun_after_a_late_failure_counts_both_runs_and_warns():
    acc = Accountant(DifferentialPrivacy(), 2, estimator="t")

    def protocol(fed):
        fed.run_round(
            "noised",
            partial(_noised_sum, std=acc.noise_std(1.0)),
            disclosure=Disclosure(SUM_ONLY, noised=1),
        )
        fed.run_round("late", _fails_on_client_2, tolerate=True, disclosure=NO_UPLOAD)

    with _federation(acc) as fed:
        with pytest.warns(UserWarning, match="rerun's noised releases add"):
            fed.run_protocol(
                partial(protocol, fed), random_state=np.random.RandomState(0)
            )
    # The noised round ran twice: once with client 2, once without it.
    assert [name for name, *_ in acc.events] == ["noised", "noised"]
