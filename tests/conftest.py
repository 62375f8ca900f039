"""Fixtures shared by the test folders."""

import pytest

from skfed._testing import blobs, server_received
from skfed._testing import rounds_run as _rounds_run


@pytest.fixture
def received(monkeypatch):
    """Everything a curious server receives and sends as the test's fits go
    (see :func:`skfed._testing.server_received`)."""
    return server_received(monkeypatch)


@pytest.fixture
def rounds_run(monkeypatch):
    """The names of the rounds every federation runs in the test."""
    return _rounds_run(monkeypatch)


@pytest.fixture(scope="session")
def blob_data():
    """The suite's usual small clustered data: ``blob_data(n, d, centers,
    cluster_std, seed) -> (X, y)`` (see :func:`skfed._testing.blobs`)."""
    return blobs
