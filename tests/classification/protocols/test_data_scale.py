"""Tests for the kernel widths derived from the federated data scale
(skfed.classification._protocols._data_scale)."""

import itertools

import numpy as np

from skfed.classification._protocols._data_scale import server_widths
from skfed.kernel import gamma_from_moments


def test_server_widths_are_order_free():
    # Summed in the clients' order, moments like these gave two different
    # sets of widths over the 24 orders (the last bit).
    rng = np.random.RandomState(0)
    uploads = []
    for m in range(4):
        X = rng.uniform(0, 1, (rng.randint(5, 50), 2)) * 10**m
        spread = float(((X - X.mean(axis=0)) ** 2).sum())
        uploads.append((float(len(X)), X.sum(axis=0), spread))
    widths = {
        tuple(server_widths(gamma_from_moments([uploads[i] for i in order]), 5))
        for order in itertools.permutations(range(4))
    }
    assert len(widths) == 1
