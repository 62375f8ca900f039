import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skfed import partition

SEEDS = st.integers(0, 2**16)


def _check_assignment(ids, n_samples, n_clients):
    assert ids.shape == (n_samples,)
    assert ids.dtype.kind == "i"
    counts = np.bincount(ids, minlength=n_clients)
    assert counts.size == n_clients, "a client id is out of range"
    assert counts.min() >= 1, "a client is empty"
    assert counts.sum() == n_samples


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 200), m=st.integers(1, 20), seed=SEEDS)
def test_iid_sizes_differ_by_at_most_one(n, m, seed):
    m = min(m, n)
    ids = partition.iid(n, m, random_state=seed)
    _check_assignment(ids, n, m)
    counts = np.bincount(ids)
    assert counts.max() - counts.min() <= 1
    np.testing.assert_array_equal(ids, partition.iid(n, m, random_state=seed))


def test_iid_accepts_data_and_shuffles():
    X = np.zeros((50, 2))
    ids = partition.iid(X, 5, random_state=0)
    assert len(ids) == 50
    assert not np.array_equal(ids, np.sort(ids))


@settings(max_examples=30, deadline=None)
@given(n=st.integers(50, 500), m=st.integers(2, 12), e=st.floats(0, 3), seed=SEEDS)
def test_power_law_sizes_follow_the_exponent(n, m, e, seed):
    ids = partition.power_law(n, m, exponent=e, random_state=seed)
    _check_assignment(ids, n, m)
    counts = np.bincount(ids)
    assert np.all(np.diff(counts) <= 1), "sizes must not increase with rank"
    # Above the one-sample floor, shares are proportional to rank**-e
    # (up to rounding by one sample).
    shares = np.arange(1, m + 1, dtype=float) ** -e
    expected = 1 + shares / shares.sum() * (n - m)
    assert np.all(np.abs(counts - expected) < 1 + 1e-9)


def test_power_law_exponent_two_is_skewed():
    counts = np.bincount(partition.power_law(10_000, 10, random_state=0))
    assert counts[0] / counts[-1] > 50


@settings(max_examples=20, deadline=None)
@given(alpha=st.sampled_from([0.05, 0.5, 5.0]), seed=SEEDS)
def test_label_dirichlet_assigns_every_sample(alpha, seed):
    y = np.repeat(np.arange(5), 40)
    ids = partition.label_dirichlet(y, 6, alpha=alpha, random_state=seed)
    _check_assignment(ids, 200, 6)


def _label_skew(y, ids):
    """Mean total-variation distance between client and global label shares."""
    glob = np.bincount(y) / len(y)
    tvs = []
    for c in np.unique(ids):
        local = np.bincount(y[ids == c], minlength=len(glob)) / np.sum(ids == c)
        tvs.append(0.5 * np.abs(local - glob).sum())
    return float(np.mean(tvs))


def test_label_dirichlet_really_skews():
    y = np.repeat(np.arange(10), 100)
    skew = {
        a: np.mean(
            [
                _label_skew(
                    y, partition.label_dirichlet(y, 10, alpha=a, random_state=s)
                )
                for s in range(5)
            ]
        )
        for a in (0.1, 1.0, 100.0)
    }
    iid = _label_skew(y, partition.iid(len(y), 10, random_state=0))
    assert skew[0.1] > skew[1.0] > skew[100.0]
    assert skew[0.1] > 0.6
    assert skew[100.0] < 0.15 and iid < 0.15


@settings(max_examples=20, deadline=None)
@given(k=st.integers(2, 12), kp=st.integers(1, 4), m0=st.integers(1, 5), seed=SEEDS)
def test_labels_per_client_limits_labels(k, kp, m0, seed):
    y = np.repeat(np.arange(k), 10)
    ids = partition.labels_per_client(y, kp, clients_per_group=m0, random_state=seed)
    n_clients = -(-k // kp) * m0
    _check_assignment(ids, len(y), n_clients)
    for c in range(n_clients):
        assert len(np.unique(y[ids == c])) <= kp
    counts = np.bincount(ids)
    for g in range(n_clients // m0):
        group = counts[g * m0 : (g + 1) * m0]
        assert group.max() - group.min() <= 1


@settings(max_examples=20, deadline=None)
@given(m=st.integers(1, 10), s=st.integers(1, 4), seed=SEEDS)
def test_shards_deal_equal_shards(m, s, seed):
    y = np.repeat(np.arange(10), 12)
    ids = partition.shards(y, m, shards_per_client=s, random_state=seed)
    _check_assignment(ids, len(y), m)
    counts = np.bincount(ids)
    assert counts.max() - counts.min() <= s


def test_shards_make_few_labels_per_client():
    y = np.repeat(np.arange(10), 60)
    ids = partition.shards(y, 20, shards_per_client=2, random_state=0)
    labels = [len(np.unique(y[ids == c])) for c in range(20)]
    assert max(labels) <= 4 and np.mean(labels) <= 2.5


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: partition.iid(3, 4), "more than the 3 samples"),
        (lambda: partition.power_law(10, 4, min_size=3), "at least 12 samples"),
        (lambda: partition.label_dirichlet([0, 1], 3), "at least 3 samples"),
        (lambda: partition.shards([0, 1, 2], 2), "at least 4 samples"),
        (
            lambda: partition.labels_per_client([0, 1], 1, clients_per_group=2),
            "fewer than clients_per_group",
        ),
        (lambda: partition.label_dirichlet(np.zeros((3, 2)), 1), "1-dimensional"),
        (lambda: partition.iid(10, 0), "n_clients"),
        (lambda: partition.label_dirichlet([0, 1, 1], 2, alpha=0), "alpha"),
    ],
)
def test_impossible_requests_are_explained(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_label_dirichlet_gives_up_with_advice():
    y = np.repeat([0, 1], 10)
    with pytest.raises(ValueError, match="raise alpha"):
        partition.label_dirichlet(y, 20, alpha=0.001, random_state=0)
