"""Tests for disKPCA's sampling of representatives
(skfed.decomposition._protocols._sampling): RepSample's inclusion
probabilities and the server's quotas."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose

import skfed.decomposition._protocols._sampling as sampling_protocol


class _FakeClient:
    def __init__(self, X, seed):
        self.X, self.n_samples, self._seed = X, X.shape[0], seed

    def random_state(self, *keys):
        return np.random.RandomState([self._seed, *keys])


def test_systematic_draws_have_the_inclusion_probabilities():
    scores = np.array([50.0, 1.0, 2.0, 0.0, 3.0, 1.0, 4.0, 0.5])
    pi = sampling_protocol._inclusion_probabilities(scores, 3)
    assert pi.sum() == pytest.approx(3)
    assert pi[0] == 1 and pi[3] == 0
    # Unsaturated points keep the proportions of their scores.
    positive = scores > 0
    positive[0] = False
    assert_allclose(pi[positive] / scores[positive], pi[1] / scores[1])
    X = np.arange(8.0)[:, None]
    counts = np.zeros(8)
    for seed in range(1500):
        client = _FakeClient(X, seed)
        state = {"kpca_scores": scores, "kpca_order": np.arange(8)}
        _, rows = sampling_protocol._sample_step(
            client, state, 3, scores_key="kpca_scores", stream=0
        )
        assert rows.shape[0] == 3
        counts[rows[:, 0].astype(int)] += 1
    assert_allclose(counts / 1500, pi, atol=0.05)


@settings(max_examples=40, deadline=None)
@given(
    # Scores within a dynamic range of 1e6 (scores below the rounding of
    # their sum cannot be told from zero).
    st.lists(st.one_of(st.just(0.0), st.floats(1e-3, 1e3)), min_size=2, max_size=40),
    st.integers(1, 10),
    st.integers(2, 5),
)
def test_server_quota_matches_pooled_inclusion_probabilities(scores, total, n_clients):
    scores = np.array(scores)
    clients = np.arange(len(scores)) % n_clients
    summaries = [
        sampling_protocol._score_summary(scores[clients == m], total)
        for m in range(n_clients)
    ]
    sizes = np.bincount(clients, minlength=n_clients)
    quota = sampling_protocol._inclusion_quota(summaries, total, sizes)
    pi = sampling_protocol._inclusion_probabilities(scores, total)
    expected = np.bincount(clients, weights=pi, minlength=n_clients)
    # Clients tying for the last draws all take one (see allocate_quota).
    excess = quota.sum() - min(total, np.count_nonzero(scores > 0))
    assert 0 <= excess < n_clients
    assert np.all(np.abs(quota - expected) < 1 + 1e-6)
