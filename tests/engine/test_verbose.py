"""One verbose format for every estimator: at verbose=1 one ``[skfed]``
line per round of the fit, at verbose=2 the server's details too, also
prefixed and never the same line twice."""

import re

import numpy as np
import pytest
from sklearn.datasets import make_blobs

from skfed import (
    DistributedKernelPCA,
    DistributedKMeans,
    FederatedKernelKMeans,
    FederatedRKHSClassifier,
    KFed,
)

ROUND_LINE = re.compile(
    r"\[skfed\] round (\d+) '[^']+': \d+ clients, up [\d,]+ floats, "
    r"down [\d,]+ floats"
)

ESTIMATORS = [
    KFed(3, n_local_clusters=3, random_state=0),
    DistributedKMeans(3, coreset_size=40, n_init=3, random_state=0),
    FederatedKernelKMeans(3, gamma=0.5, n_random_features=20, random_state=0),
    FederatedKernelKMeans(
        3, gamma=0.5, n_random_features=20, max_iter=2, random_state=0
    ).set_params(algorithm="dspgd"),
    DistributedKernelPCA(2, n_representatives=10, random_state=0),
    FederatedRKHSClassifier(random_state=0),
]


def _fit(est, verbose):
    X, y = make_blobs(90, n_features=3, centers=3, random_state=0)
    y = (y == 0).astype(int)
    return est.set_params(verbose=verbose).fit(X, y, partitions=np.arange(90) % 3)


@pytest.mark.parametrize("est", ESTIMATORS, ids=lambda e: type(e).__name__)
def test_verbose_one_prints_one_line_per_round(est, capsys):
    fitted = _fit(est, 1)
    printed = capsys.readouterr()
    assert printed.out == ""
    lines = printed.err.splitlines()
    assert lines and all(ROUND_LINE.fullmatch(line) for line in lines), lines
    # Each round once, in order: as many lines as the ledger has rounds.
    numbers = [int(ROUND_LINE.fullmatch(line).group(1)) for line in lines]
    assert numbers == sorted(set(numbers))
    assert len(numbers) >= fitted.communication_.n_rounds


@pytest.mark.parametrize("est", ESTIMATORS, ids=lambda e: type(e).__name__)
def test_verbose_two_adds_prefixed_lines_never_repeated(est, capsys):
    _fit(est, 2)
    printed = capsys.readouterr()
    assert printed.out == ""
    lines = printed.err.splitlines()
    assert all(line.startswith("[skfed] ") for line in lines), lines
    assert len(lines) == len(set(lines))
