"""Distributed noise: under privacy with secure aggregation, the clients of
a masked round add shares of the central noise in the integers.

These tests hold the discrete sampler to its mass function, the shares to
their formula, the released sum's measured noise to the central Gaussian's,
the accounting to dp-accounting's Gaussian figure, and the round to its
dropout rule: a sum with fewer uploads than the noise counts on is never
unmasked, by the server or by a client a curious server asks.
"""

import math
from functools import partial

import numpy as np
import pytest
from scipy import stats
from sklearn.utils._param_validation import InvalidParameterError

import skfed
from skfed import ClientStepError
from skfed._engine import _federation
from skfed._engine._codec import dumps, loads
from skfed._engine._federation import Federation
from skfed._engine._protocol import client_step
from skfed._engine._rounds import sum_only
from skfed._engine._transports import _common as _transport
from skfed._engine._validation import check_partitions
from skfed.preprocessing import FederatedStandardScaler
from skfed.preprocessing._protocols._scaler import SCALER_STATISTICS
from skfed.privacy import Accountant, DifferentialPrivacy, _accountant, gaussian_noise
from skfed.privacy import _secure_aggregation as secagg
from skfed.privacy._distributed import (
    MIN_SHARE_STD,
    DistributedNoise,
    NoiseShare,
    add_noise_locally,
    discrete_gaussian,
    honest_count,
    release_rho,
    share_std,
    summed_noise_std,
)

RING = 2.0**secagg.FRACTION_BITS


# --------------------------------------------------------------------------
# The sampler


def _mass(std, support):
    weights = np.exp(-(support.astype(float) ** 2) / (2 * std * std))
    return weights / weights.sum()


@pytest.mark.parametrize("std", [0.6, 2.5, 7.0])
def test_the_sampler_draws_the_discrete_gaussian(std):
    # A chi-square test of 200,000 draws against the mass function, the
    # tails beyond 5 std pooled (their mass is below 1e-6).
    draws = discrete_gaussian(std, 200_000, np.random.default_rng(0))
    assert draws.dtype == np.int64
    top = max(int(5 * std), 2)
    support = np.arange(-top, top + 1)
    expected = _mass(std, np.arange(-60 * top, 60 * top + 1))
    inner = expected[60 * top - top : 60 * top + top + 1]
    inner = inner / inner.sum()
    clipped = np.clip(draws, -top, top)
    observed = np.array([np.count_nonzero(clipped == k) for k in support])
    _, p_value = stats.chisquare(observed, inner * draws.size)
    assert p_value > 1e-3
    # A sampler off by a tenth in scale fails the same test.
    wrong = discrete_gaussian(1.1 * std, 200_000, np.random.default_rng(0))
    wrong = np.clip(wrong, -top, top)
    observed = np.array([np.count_nonzero(wrong == k) for k in support])
    assert stats.chisquare(observed, inner * draws.size)[1] < 1e-6


def test_the_sampler_at_the_masking_rings_scale():
    # A share's standard deviation is about 2^32 times the statistic's:
    # the draws stay exact integers with the requested spread.
    std = 0.7 * RING
    draws = discrete_gaussian(std, 100_000, np.random.default_rng(1))
    assert np.std(draws) == pytest.approx(std, rel=0.01)
    assert abs(np.mean(draws)) < 5 * std / math.sqrt(draws.size)
    assert np.all(np.abs(draws) < 2**62)


def test_the_sampler_refuses_no_noise():
    with pytest.raises(ValueError, match="positive"):
        discrete_gaussian(0.0, 3, np.random.default_rng(0))


# --------------------------------------------------------------------------
# The shares and their accounting


def test_a_share_is_the_central_noise_over_root_h_on_the_rounded_statistic():
    noise = DistributedNoise(2.0, sensitivity=0.5, honest=4)
    # z = 4; the rounded statistic's sensitivity is 2^32 * 0.5 + sqrt(100).
    assert share_std(noise, 100, RING) == pytest.approx(4 * (0.5 * RING + 10) / 2)
    # Shares are never below the floor where the bound's tau term vanishes.
    tiny = DistributedNoise(1e-12, sensitivity=1e-12, honest=9)
    assert share_std(tiny, 1, RING) == MIN_SHARE_STD
    assert share_std(DistributedNoise(0.0, 1.0, 3), 10, RING) == 0.0
    assert share_std(DistributedNoise(0.0, 0.0, 3), 10, RING) == 0.0
    # The sum of M shares of an honest count h carries sqrt(M/h) std.
    assert summed_noise_std(noise, 4) == pytest.approx(2.0)
    assert summed_noise_std(noise, 16) == pytest.approx(4.0)
    assert summed_noise_std(2.0, 4) == pytest.approx(4.0)


@pytest.mark.parametrize("z", [0.5, 3.0, 40.0])
@pytest.mark.parametrize("honest", [1, 10, 1000])
def test_a_release_is_the_gaussians_rho(z, honest):
    # At the least share (10 ring units) the distributed discrete Gaussian's
    # correction term underflows: its zCDP rho is the Gaussian's 1/(2 z^2).
    assert release_rho(z, honest) == pytest.approx(1 / (2 * z * z), rel=1e-12)


def test_a_distributed_fit_spends_the_budget_the_accountant_calibrated():
    dp = DifferentialPrivacy(epsilon=1.0, delta=1e-6)
    accountant = Accountant(dp, 3, estimator="test", honest=5)
    assert accountant.kind == "rdp"
    for _ in range(3):
        accountant.register("noised sums", 1, shared=True)
    epsilon, delta = accountant.spent()
    assert epsilon <= 1.0 + 1e-9 and delta == 1e-6
    # dp-accounting's own Gaussian figure for the same releases.
    gaussian = _accountant._epsilon(((accountant.noise_multiplier, 3),), 1e-6, "rdp")
    assert epsilon == pytest.approx(gaussian, rel=1e-9)
    # The same budget through the tighter PLD accountant needs less noise:
    # distributed noise pays the Renyi accountant's margin, a few percent.
    local = Accountant(dp, 3, estimator="test")
    ratio = accountant.noise_multiplier / local.noise_multiplier
    assert 1.0 <= ratio < 1.2


def test_shared_noise_crosses_the_wire_as_shared_noise():
    text, arrays = dumps({"noise": (0.5, DistributedNoise(2.5, 0.1, 4))})
    noise = loads(text, arrays)["noise"][1]
    assert isinstance(noise, DistributedNoise)
    assert (float(noise), noise.sensitivity, noise.honest) == (2.5, 0.1, 4)


def test_an_unmasked_statistic_gets_the_whole_noise():
    # A client whose upload leaves unmasked adds all the noise itself.
    noise = DistributedNoise(3.0, sensitivity=1.0, honest=10)
    upload = NoiseShare.concatenate([gaussian_noise(np.zeros(20_000), noise), [7.0]])
    noised = add_noise_locally((upload,), np.random.default_rng(0))[0]
    assert np.std(noised[:-1]) == pytest.approx(3.0, rel=0.03)
    assert noised[-1] == 7.0  # a public count stays as it is
    # Never summed, sent or masked as a plain value by mistake.
    with pytest.raises(ValueError, match="Cannot sum"):
        secagg.sum_uploads([upload, upload])
    with pytest.raises(TypeError, match="only be masked"):
        secagg._flatten(upload, [])


def test_the_honest_count():
    assert honest_count(None, 10, may_drop=False) == 10
    assert honest_count(None, 10, may_drop=True) == 5
    assert honest_count(None, 7, may_drop=True) == 4
    assert honest_count(0.8, 10, may_drop=False) == 8
    assert honest_count(3, 10, may_drop=True) == 3
    with pytest.raises(ValueError, match="the fit has 10"):
        honest_count(11, 10, may_drop=False)


def test_the_honest_count_is_validated_at_fit():
    X = np.random.RandomState(0).uniform(-1, 1, size=(60, 2))
    bad = DifferentialPrivacy(bounds=(-1.0, 1.0), honest_clients=0)
    with pytest.raises(InvalidParameterError, match="honest_clients"):
        FederatedStandardScaler(privacy=bad, secure_aggregation=True).fit(
            X, partitions=3
        )
    too_many = DifferentialPrivacy(bounds=(-1.0, 1.0), honest_clients=4)
    with pytest.raises(ValueError, match="the fit has 3"):
        FederatedStandardScaler(privacy=too_many, secure_aggregation=True).fit(
            X, partitions=3
        )


# --------------------------------------------------------------------------
# Measured on fits


def _uniform(n_clients=10, rows=200, features=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n_clients * rows, features))
    return X, np.repeat(np.arange(n_clients), rows)


def _noise_of_means(X, partitions, fits, **params):
    """The released sums' noise, from the scaler's means (bounds (-1, 1):
    the statistic is the rows themselves)."""
    errors = []
    for _ in range(fits):
        scaler = FederatedStandardScaler(with_std=False, **params)
        scaler.fit(X, partitions=partitions)
        errors.append((scaler.mean_ - X.mean(axis=0)) * X.shape[0])
    return float(np.std(errors)), scaler


def test_the_masked_sum_carries_the_central_noise():
    # Ten clients, no dropout: the released sum's noise, measured, is
    # within 1.2 times the central Gaussian mechanism's for the same
    # (epsilon, delta); each client adding all of it gives sqrt(10) times.
    X, partitions = _uniform()
    dp = DifferentialPrivacy(epsilon=1.0, bounds=(-1.0, 1.0))
    central = SCALER_STATISTICS.noise_std(
        Accountant(dp, 1, estimator="central"), X.shape[1], False
    )
    shared, scaler = _noise_of_means(
        X, partitions, 20, privacy=dp, secure_aggregation=True
    )
    assert 0.9 * central < shared < 1.2 * central
    assert scaler.privacy_spent_[0] <= 1.0 + 1e-9
    local, _ = _noise_of_means(X, partitions, 5, privacy=dp)
    assert local > 2.5 * shared


def _fail_in_masked_rounds(monkeypatch, bad):
    original = _transport._run_sequential_step

    def failing(call, client, storage, message):
        if secagg.MASK_OPTION in call.options and client.client_id == bad:
            return _transport.StepFailure(RuntimeError("site unreachable"), "")
        return original(call, client, storage, message)

    monkeypatch.setattr(_transport, "_run_sequential_step", failing)


def test_a_private_masked_fit_survives_a_dropped_client(monkeypatch):
    X, partitions = _uniform()
    dp = DifferentialPrivacy(epsilon=1.0, bounds=(-1.0, 1.0))
    _fail_in_masked_rounds(monkeypatch, bad=2)
    scaler = FederatedStandardScaler(
        privacy=dp, secure_aggregation=True, on_client_error="drop"
    ).fit(X, partitions=partitions)
    assert set(scaler.failed_clients_) == {2}
    assert scaler.privacy_spent_[0] <= 1.0 + 1e-9
    kept = X[partitions != 2]
    # Nine shares of a noise counted on five: the sum carries sqrt(9/5)
    # times the central noise.
    central = SCALER_STATISTICS.noise_std(
        Accountant(dp, 1, estimator="central"), X.shape[1], False
    )
    noise = np.std((scaler.mean_ - kept.mean(axis=0)) * kept.shape[0])
    assert 0.5 * central < noise < 1.6 * math.sqrt(9 / 5) * central
    assert "secure aggregation unmasking" in scaler.communication_.floats_by_name()


def test_a_sum_with_fewer_shares_than_the_noise_counts_on_stays_masked(
    monkeypatch,
):
    X, partitions = _uniform()
    dp = DifferentialPrivacy(epsilon=1.0, bounds=(-1.0, 1.0), honest_clients=10)
    _fail_in_masked_rounds(monkeypatch, bad=2)
    scaler = FederatedStandardScaler(
        privacy=dp, secure_aggregation=True, on_client_error="drop"
    )
    with pytest.raises(ClientStepError, match="at least 10 of them") as info:
        scaler.fit(X, partitions=partitions)
    assert "honest_clients" in str(info.value)


# A curious server that skips its own check and asks the clients for the
# shares of a sum that holds too few noise shares.


@client_step("test_distributed.noised_sums", sum_only=True)
def noised_sums(client, state, message, *, noise):
    return state, gaussian_noise(client.X.sum(axis=0), noise)


_NOISED_SUMS = sum_only("noised sums", noised=1, sensitivity=lambda: 1.0)


def test_a_client_reveals_no_share_of_a_sum_too_small(monkeypatch):
    rng = np.random.RandomState(0)
    X = rng.uniform(-1, 1, size=(80, 3))
    ids = np.repeat(np.arange(4), 20)
    fed = Federation.from_arrays(X, None, check_partitions(ids, 80), random_state=0)
    fed.secure_aggregation = True
    fed.accountant = Accountant(
        DifferentialPrivacy(epsilon=1.0), 1, estimator="test", honest=4
    )
    captured = {}

    def skip(fed, name, setup, *args, **kwargs):
        captured["setup"] = setup
        return None

    monkeypatch.setattr(_federation, "unmask", skip)
    noise = _NOISED_SUMS.noise_std(fed.accountant)
    assert isinstance(noise, DistributedNoise) and noise.honest == 4
    with fed:
        fed.run_round(_NOISED_SUMS, partial(noised_sums, noise=noise))
        setup = captured["setup"]
        alive = setup["alive"]
        holder = alive[0]
        position = fed.transport.client_ids.index(fed.client_ids[0])
        keys = fed.transport._storage[position][secagg.KEYS_NAMESPACE]
        peers = [alive[j] for j in secagg.neighbours(0, len(alive))]

        def ring(key):
            return [alive[j] for j in secagg.neighbours(alive.index(key), 4)]

        request = {
            "round": setup["round"],
            "answered": alive[:3],
            "publics": np.stack([setup["publics"][p] for p in peers]),
            "sealed": np.stack(
                [setup["sealed"][p][ring(p).index(holder)] for p in peers]
            ),
        }
        with pytest.raises(PermissionError, match="counts on 4 uploads"):
            secagg.reveal_shares(keys, request)


def test_every_sum_only_release_is_shared(monkeypatch):
    # The estimators' masked private rounds all hand their noise to the
    # masking, none adds it whole.
    from skfed.classification import FederatedRKHSClassifier
    from skfed.cluster import DistributedKMeans, FederatedKernelKMeans
    from skfed.decomposition import DistributedKernelPCA

    shared = []
    original = secagg._noise_shares

    def recording(shares, mine):
        out = original(shares, mine)
        shared.append(len(out))
        return out

    monkeypatch.setattr(secagg, "_noise_shares", recording)
    rng = np.random.RandomState(0)
    X = rng.uniform(-1, 1, size=(300, 3))
    y = (X[:, 0] > 0).astype(int)
    dp = DifferentialPrivacy(epsilon=2.0, bounds=(-1.0, 1.0))
    fits = [
        FederatedStandardScaler(privacy=dp),
        DistributedKernelPCA(2, gamma=0.5, n_random_features=40, privacy=dp),
        FederatedKernelKMeans(2, gamma=0.5, n_random_features=40, privacy=dp),
        FederatedRKHSClassifier(widths=(0.5, 2.0), privacy=dp, random_state=0),
        DistributedKMeans(2, privacy=dp, random_state=0),
    ]
    for est in fits:
        shared.clear()
        est.set_params(secure_aggregation=True)
        if isinstance(est, FederatedRKHSClassifier):
            est.fit(X, y, partitions=3)
        else:
            est.fit(X, partitions=3)
        masked = sum(
            1
            for r in est.communication_.disclosure()
            if r["noised"] and r["disclosure"] == "sum_only"
        )
        assert masked > 0, type(est).__name__
        assert len(shared) == 3 * masked, type(est).__name__
        assert all(n > 0 for n in shared), type(est).__name__
        assert est.privacy_spent_[0] <= 2.0 + 1e-9


def test_a_single_client_adds_the_whole_noise_in_its_share():
    X, _ = _uniform(n_clients=1)
    dp = DifferentialPrivacy(epsilon=1.0, bounds=(-1.0, 1.0))
    with pytest.warns(UserWarning, match="no effect"):
        scaler = FederatedStandardScaler(privacy=dp, secure_aggregation=True)
        scaler.fit(X, partitions=np.zeros(len(X), dtype=int))
    assert scaler.privacy_spent_[0] <= 1.0 + 1e-9


def test_skfed_exposes_the_parameter():
    assert "honest_clients" in skfed.privacy.DifferentialPrivacy().get_params()
