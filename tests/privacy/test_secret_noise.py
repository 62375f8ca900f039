"""The noise is the clients' secret: a curious server that chose and sent
the seed, and knows every row but one, cannot recompute it.

The server's view is spied on at the transport: every upload it receives,
per client and round, before any sum.
"""

import math

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from skfed import DistributedKernelPCA, KFed
from skfed._engine._transports._joblib import JoblibTransport
from skfed.cluster._protocols import _kfed_private
from skfed.kernel._private_features import (
    feature_gram_statistics,
    feature_norm_bound,
    feature_sum_sensitivity,
    gram_sensitivity,
    paired_fourier_map,
)
from skfed.privacy import Accountant, DifferentialPrivacy


@pytest.fixture
def received(monkeypatch):
    """What the server sends and receives, per client and round:
    (step name, client, message, upload)."""
    seen = []
    run = JoblibTransport.run

    def spy(self, call, client_ids, messages):
        out = run(self, call, client_ids, messages)
        seen.extend(zip([call.name] * len(out), client_ids, messages, out))
        return out

    monkeypatch.setattr(JoblibTransport, "run", spy)
    return seen


def _flat(upload):
    if isinstance(upload, dict):
        return np.concatenate([np.ravel(upload[k]) for k in sorted(upload)])
    return np.asarray(upload, dtype=float)


def _uploads(received, step):
    return {c: _flat(u) for name, c, _, u in received if name == step}


def _data():
    X, _ = make_blobs(240, n_features=2, centers=3, cluster_std=0.5, random_state=0)
    neighbour = X.copy()
    neighbour[7] = [9.0, -9.0]  # one row replaced, the sizes unchanged
    return X, neighbour


# -- KFed ----------------------------------------------------------------------


def _kfed_releases(X, monkeypatch, epsilon=1.0):
    """The noised releases (sums, scaled counts) of a private KFed fit with
    random_state=0, per DP Lloyd iteration, as its clients uploaded them."""
    releases = []
    noise = _kfed_private.gaussian_noise

    def recording(value, std):
        out = noise(value, std)
        releases.append(out.copy())
        return out

    monkeypatch.setattr(_kfed_private, "gaussian_noise", recording)
    dp = DifferentialPrivacy(epsilon=epsilon, delta=1e-5, bounds=(-12.0, 12.0))
    model = KFed(3, privacy=dp, private_iter=2, random_state=0)
    model.fit(X, partitions=4)
    monkeypatch.setattr(_kfed_private, "gaussian_noise", noise)
    return releases, model


def test_refit_with_the_sent_seed_does_not_recompute_kfed_noise(received, monkeypatch):
    X, neighbour = _data()
    released, _ = _kfed_releases(X, monkeypatch)
    target = _uploads(received, "kfed.dp_lloyd")
    # The server refits both hypotheses with the seed it sent, as a client
    # would run them: seeded noise would reproduce the true one's uploads.
    received.clear()
    same, _ = _kfed_releases(X, monkeypatch)
    on_same = _uploads(received, "kfed.dp_lloyd")
    received.clear()
    other, _ = _kfed_releases(neighbour, monkeypatch)
    # Sums and counts, two iterations, four clients.
    assert len(released) == len(same) == len(other) == 2 * 2 * 4
    for client, upload in target.items():
        assert not np.allclose(upload, on_same[client])
    # Neither hypothesis explains the release better: the residuals are
    # the noise of two fits, of one scale under either.
    for a, b, c in zip(released, same, other):
        assert not np.allclose(a, b)
        assert not np.allclose(a, c)
    same_gap = np.sqrt(sum(np.sum((a - b) ** 2) for a, b in zip(released, same)))
    other_gap = np.sqrt(sum(np.sum((a - c) ** 2) for a, c in zip(released, other)))
    assert 0.5 < same_gap / other_gap < 2.0


def test_two_private_kfed_fits_with_one_seed_release_different_noise(monkeypatch):
    X, _ = _data()
    first, one = _kfed_releases(X, monkeypatch)
    again, two = _kfed_releases(X, monkeypatch)
    assert not np.allclose(one.cluster_centers_, two.cluster_centers_)
    # Each client's first release (sums, then scaled counts) comes from the
    # same starts and rows in both fits: they differ by two noises.
    z = Accountant(one.privacy, one.private_iter, estimator="KFed").noise_multiplier
    _, _, std = _kfed_private.release_scales(np.full(2, -12.0), np.full(2, 12.0), z)
    first_releases = [0, 1, 4, 5, 8, 9, 12, 13]  # iteration 1's sums, counts
    gap = np.concatenate([(first[i] - again[i]).ravel() for i in first_releases])
    assert len(gap) == 4 * (6 * 2 + 6)
    assert np.std(gap) == pytest.approx(math.sqrt(2) * std, rel=0.4)


def test_two_epsilons_with_one_seed_do_not_share_kfed_noise(monkeypatch):
    # Iteration 1 of each client starts from the seeded starts, so its
    # statistic is the same at every epsilon: epsilon = inf releases it as
    # it is. Shared noise would let r1 and r2 solve for it exactly.
    X, _ = _data()
    exact, _ = _kfed_releases(X, monkeypatch, epsilon=math.inf)
    one, model_one = _kfed_releases(X, monkeypatch, epsilon=1.0)
    two, model_two = _kfed_releases(X, monkeypatch, epsilon=2.0)
    box = (np.full(2, -12.0), np.full(2, 12.0))
    stds = [
        _kfed_private.release_scales(
            *box, Accountant(m.privacy, 2, estimator="KFed").noise_multiplier
        )[2]
        for m in (model_one, model_two)
    ]
    s1, s2 = stds
    first_releases = [0, 1, 4, 5, 8, 9, 12, 13]  # iteration 1's sums, counts
    error = np.concatenate(
        [
            ((s2 * one[i] - s1 * two[i]) / (s2 - s1) - exact[i]).ravel()
            for i in first_releases
        ]
    )
    expected = math.sqrt(2) * s1 * s2 / (s1 - s2)
    assert np.std(error) == pytest.approx(expected, rel=0.4)


# -- DistributedKernelPCA: the releases are the uploads ------------------------


def _kpca_fit(X, epsilon, received):
    received.clear()
    DistributedKernelPCA(
        2,
        gamma=0.3,
        n_random_features=20,
        privacy=DifferentialPrivacy(epsilon=epsilon, delta=1e-5),
        random_state=0,
    ).fit(X, partitions=2)
    return _uploads(received, "kernel_pca.feature_statistics")


def _exact_statistics(rows, seed, D=20, gamma=0.3):
    omega, offset = paired_fourier_map(seed, rows.shape[1], D, gamma, "rbf")
    upper, sums = feature_gram_statistics(
        rows, omega, offset, radius=feature_norm_bound(D)
    )
    return np.concatenate([upper, sums, [rows.shape[0]]])


def _noise_scales(epsilon, D=20):
    z = Accountant(DifferentialPrivacy(epsilon=epsilon), 2, estimator="t")
    R = feature_norm_bound(D)
    n_upper = D * (D + 1) // 2
    return np.concatenate(
        [
            np.full(n_upper, z.noise_multiplier * gram_sensitivity(R, D)),
            np.full(D, z.noise_multiplier * feature_sum_sensitivity(R)),
            [0.0],
        ]
    )


def test_refit_with_the_sent_seed_does_not_recompute_kernel_pca_noise(received):
    X, neighbour = _data()
    target = _kpca_fit(X, 1.0, received)
    same = _kpca_fit(X, 1.0, received)
    other = _kpca_fit(neighbour, 1.0, received)
    std = _noise_scales(1.0)
    for client, upload in target.items():
        # The public row count is sent as it is; everything else is noised.
        assert upload[-1] == same[client][-1] == other[client][-1]
        # Refitting D with the sent seed gives other noise: the residual
        # against the true hypothesis is two noises, not zero, and no
        # smaller than against the false one.
        residual_same = (upload - same[client])[:-1] / std[:-1]
        residual_other = (upload - other[client])[:-1] / std[:-1]
        assert np.std(residual_same) == pytest.approx(math.sqrt(2), rel=0.25)
        assert np.std(residual_other) == pytest.approx(math.sqrt(2), rel=0.25)


def test_two_epsilons_with_one_seed_do_not_share_their_noise(received):
    # With the noise following the seed, r1 = s + σ1 ξ and r2 = s + σ2 ξ
    # give s = (σ2 r1 − σ1 r2) / (σ2 − σ1) exactly. With fresh noise the
    # solve's error is the noises' combination: √2 σ1 σ2 / (σ2 − σ1).
    X, _ = _data()
    one = _kpca_fit(X, 1.0, received)
    two = _kpca_fit(X, 2.0, received)
    s1, s2 = _noise_scales(1.0)[:-1], _noise_scales(2.0)[:-1]
    assert np.all(s2 < s1)
    expected = math.sqrt(2) * s1 * s2 / (s1 - s2)
    # The exact statistic, which the server must not recover: the clients'
    # uploads add up to the sum of every row's.
    exact = _exact_statistics(X, _map_seed(received))[:-1]
    solved = sum((s2 * one[c][:-1] - s1 * two[c][:-1]) / (s2 - s1) for c in one)
    error = (solved - exact) / (expected * math.sqrt(len(one)))
    assert np.std(error) == pytest.approx(1.0, rel=0.25)
    assert np.max(np.abs(solved - exact)) > 1e-3


def _map_seed(received):
    # The server drew the map's seed and sent it in the round's message.
    (seed,) = {
        int(m[0])
        for name, _, m, _ in received
        if name == "kernel_pca.feature_statistics"
    }
    return seed


@pytest.mark.parametrize(
    "epsilon, non_deterministic", [(1.0, True), (math.inf, False), (None, False)]
)
def test_a_private_estimator_says_it_is_not_deterministic(epsilon, non_deterministic):
    privacy = None if epsilon is None else DifferentialPrivacy(epsilon=epsilon)
    for est in (KFed(privacy=privacy), DistributedKernelPCA(privacy=privacy)):
        assert est.__sklearn_tags__().non_deterministic is non_deterministic
