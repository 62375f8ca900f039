import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from skfed import CommunicationLog
from skfed._engine._ledger import count_payload


@pytest.mark.parametrize(
    "payload, floats",
    [
        (None, 0),
        (3, 1),
        (2.5, 1),
        (np.float32(1), 1),
        (np.zeros((4, 5)), 20),
        ("rbf", 0),
        ((np.zeros(3), 7, {"a": np.ones((2, 2)), "b": None}), 8),
        ([np.zeros(2)] * 3, 6),
    ],
)
def test_count_payload_counts_numbers(payload, floats):
    assert count_payload(payload)[0] == floats


def test_count_payload_bytes_follow_dtype():
    assert count_payload(np.zeros(10, dtype=np.float32)) == (10, 40)
    assert count_payload(np.zeros(10)) == (10, 80)


def test_count_payload_sparse_counts_structure():
    X = sp.random(20, 30, density=0.1, format="csr", random_state=0)
    floats, _ = count_payload(X)
    assert floats == X.nnz * 2 + X.shape[0] + 1


def test_count_payload_refuses_unknown_types():
    with pytest.raises(TypeError, match="Cannot measure"):
        count_payload(object())


def test_totals_rounds_and_records():
    log = CommunicationLog()
    r = log.new_round()
    log.record("seed", "download", {"a": 1, "b": 1}, round=r)
    log.record("centers", "upload", {"a": 10, "b": 20}, round=r)
    log.record("model", "download", {"a": 5, "b": 5})
    assert log.upload_floats == 30
    assert log.download_floats == 12
    assert log.total_floats == 42
    assert log.upload_bytes == 8 * 30
    assert log.n_rounds == 2
    assert log.n_upload_rounds == 1
    assert len(log) == 3
    rows = log.to_records()
    assert rows[1] == {
        "round": 0,
        "name": "centers",
        "direction": "upload",
        "n_clients": 2,
        "floats": 30,
        "floats_per_client_max": 20,
        "bytes": 240,
        "disclosure": "",
        "raw_rows": 0,
        "noised": 0,
    }
    assert log.floats_by_name("download") == {"seed": 2, "model": 10}


def test_equal_per_client_counts_are_held_once():
    # A Lanczos fit over 1,000 clients records thousands of rounds in which
    # every client sends the same count; each record must not hold its own
    # 1,000 ints (about 0.5 GB over such a fit), and pickles share them too.
    import pickle

    clients = {f"client {i}": 324 for i in range(1000)}
    log = CommunicationLog()
    for _ in range(50):
        log.record("lanczos", "upload", clients)
    log.record("other", "upload", {**clients, "client 0": 7})
    shared = {id(r.floats) for r in log.records[:50]}
    assert len(shared) == 1 and len({id(r.bytes) for r in log.records[:50]}) == 1
    assert log.records[-1].floats[0] == 7 and log.records[-1].floats[1] == 324
    assert log.upload_floats == 51 * 324 * 1000 - 317
    again = pickle.loads(pickle.dumps(log))
    assert again.to_records() == log.to_records()
    assert len(pickle.dumps(log)) < 50 * 8 * 1000


def test_repr_and_summary_are_readable():
    log = CommunicationLog()
    log.record("centers", "upload", {0: 1234})
    assert repr(log) == (
        "CommunicationLog(n_rounds=1, upload_floats=1,234, download_floats=0)"
    )
    text = log.summary()
    assert "centers" in text and "1,234" in text and "1 rounds" in text


def test_record_rejects_unknown_direction():
    with pytest.raises(ValueError, match="direction"):
        CommunicationLog().record("x", "sideways", {0: 1})


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["upload", "download"]),
            st.lists(st.integers(0, 10_000), min_size=1, max_size=6),
        ),
        max_size=10,
    )
)
def test_totals_are_sums_of_records(rounds):
    log = CommunicationLog()
    for direction, floats in rounds:
        log.record("r", direction, dict(enumerate(floats)))
    up = sum(sum(f) for d, f in rounds if d == "upload")
    down = sum(sum(f) for d, f in rounds if d == "download")
    assert (log.upload_floats, log.download_floats) == (up, down)
    assert sum(row["floats"] for row in log.to_records()) == up + down
    assert log.n_rounds == len(rounds)


def test_summary_shows_bytes_and_uploads_against_the_raw_data():
    log = CommunicationLog()
    log.record("centers", "upload", {0: 100, 1: 50}, bytes={0: 400, 1: 200})
    log.record("centers", "download", {0: 30, 1: 30})
    assert "upload_ratio" not in log.summary() and log.upload_ratio is None
    assert "the raw data" not in log.summary()
    log.add_raw_data(6_000, 48_000)
    lines = log.summary().splitlines()
    assert lines[0].split()[:6] == [
        "round", "direction", "times", "floats", "bytes", "raw"
    ]  # fmt: skip
    assert lines[1].split()[:5] == ["centers", "upload", "1", "150", "600"]
    assert lines[2].split()[:5] == ["centers", "download", "1", "60", "480"]
    assert log.upload_ratio == pytest.approx(150 / 6_000)
    assert "uploads = 0.025x the raw data (6,000 floats, 48,000 bytes)" in lines


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fits_record_their_raw_data_by_formula(dtype):
    from skfed import FederatedRKHSClassifier, KFed

    rng = np.random.RandomState(0)
    n, d = 120, 3
    X = rng.normal(size=(n, d)).astype(dtype)
    y = (X[:, 0] > 0).astype(int)
    km = KFed(3, n_local_clusters=3, random_state=0).fit(X, partitions=4)
    log = km.communication_
    itemsize = np.dtype(km.cluster_centers_.dtype).itemsize
    assert (log.raw_data_floats, log.raw_data_bytes) == (n * d, n * d * itemsize)
    assert f"uploads = {log.upload_floats / (n * d):.3g}x the raw data" in (
        log.summary()
    )
    # A ledger continued by partial_fit counts every batch's rows.
    km.partial_fit(X[:60], partitions=2)
    assert km.communication_.raw_data_floats == (n + 60) * d
    # Labels are raw data too: one float (8 bytes) per row.
    clf = FederatedRKHSClassifier(random_state=0).fit(X, y, partitions=4)
    log = clf.communication_
    assert log.raw_data_floats == n * d + n
    assert log.raw_data_bytes == n * d * np.dtype(dtype).itemsize + 8 * n


def test_summary_leaves_out_upload_lines_of_rounds_that_upload_nothing():
    log = CommunicationLog()
    log.record("local centers", "upload", {0: 30, 1: 30}, disclosure="per_client")
    r = log.new_round()
    log.record("cluster map", "download", {0: 40, 1: 40}, round=r)
    log.record("cluster map", "upload", {0: 0, 1: 0}, round=r, disclosure="sum_only")
    lines = log.summary().splitlines()
    assert [line.split()[:2] for line in lines[1:3]] == [
        ["local", "centers"],
        ["cluster", "map"],
    ]
    assert "download" in lines[2]
    assert not any(
        line.startswith("cluster map") and "upload" in line for line in lines
    )
    # The figures are the ledger's, with or without the line.
    assert "2 rounds, 1 with uploads" in lines
    figures = (log.upload_floats, log.download_floats, len(log.disclosure()))
    assert figures == (60, 80, 2)
