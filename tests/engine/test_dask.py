"""The simulated network on a dask.distributed cluster of worker processes."""

import functools
import threading
import time

import numpy as np
import pytest
from joblib import parallel_config
from sklearn.datasets import make_blobs
from threadpoolctl import threadpool_limits

import skfed
from skfed._engine._federation import Federation
from skfed._engine._ledger import SUM_ONLY
from skfed._engine._validation import check_partitions
from skfed._testing import (
    INTEGRATION_CASES,
    fail_on,
    noisy_sum,
    settled_receipts,
    shipped_since,
)

distributed = pytest.importorskip("distributed")

N_WORKERS = 2


@pytest.fixture(scope="module")
def dask_client():
    cluster = distributed.LocalCluster(
        n_workers=N_WORKERS,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
    )
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


def _fit(X, ids, n_rounds):
    p = check_partitions(ids, X.shape[0])
    # A random_state of its own: the shipment counter tells fits apart by
    # the seed their clients derive from it.
    with Federation.from_arrays(X, None, p, random_state=48_611) as fed:
        out = [
            fed.run_round("sum", noisy_sum, {"round": r, "scale": 1.0})
            for r in range(n_rounds)
        ]
    return fed, np.array(out)


def test_dask_gives_the_sequential_result_and_ships_data_once(dask_client):
    rng = np.random.RandomState(0)
    X, ids = rng.standard_normal((200, 5)), rng.randint(0, 5, 200)
    n_rounds = 6
    _, expected = _fit(X, ids, n_rounds)

    before = settled_receipts(dask_client)
    with parallel_config(backend="dask"):
        fed, got = _fit(X, ids, n_rounds)
    shipped = shipped_since(before, settled_receipts(dask_client))

    np.testing.assert_array_equal(got, expected)
    assert fed.local_results("testing", "calls") == dict.fromkeys(range(5), n_rounds)
    # Each client's data reaches the workers once per fit, to one worker,
    # not once per round (which would be n_rounds * n_clients here) nor to
    # every worker.
    assert shipped == 5


@pytest.mark.parametrize("name", [n for n in INTEGRATION_CASES if n in skfed.__all__])
def test_estimators_on_dask_match_the_sequential_fit(name, dask_client):
    X, y = make_blobs(n_samples=240, centers=3, n_features=4, random_state=1)
    y = (y == 0).astype(int) if INTEGRATION_CASES[name][2] == "classify" else y
    partitions = np.arange(240) % 6
    # Each estimator's fit gets its own seed (the shipment counter tells
    # fits apart by it).
    seed = 1000 + sorted(INTEGRATION_CASES).index(name)
    params = dict(INTEGRATION_CASES[name][0], random_state=seed)

    # dask workers run BLAS on one thread; so do both fits in this process
    # (the server's steps run here), because a multithreaded BLAS sums in
    # another order (differences of ~1e-14).
    with threadpool_limits(limits=1):
        expected = getattr(skfed, name)(**params).fit(X, y, partitions=partitions)
        before = settled_receipts(dask_client)
        with parallel_config(backend="dask"):
            got = getattr(skfed, name)(**params).fit(X, y, partitions=partitions)
    shipped = shipped_since(before, settled_receipts(dask_client))

    for method in ("predict", "transform", "decision_function"):
        if hasattr(expected, method):
            np.testing.assert_array_equal(
                getattr(got, method)(X), getattr(expected, method)(X)
            )
    assert got.communication_.to_records() == expected.communication_.to_records()
    # Each client's data is received once in the fit, by one worker,
    # however many rounds the algorithm runs.
    assert shipped == 6


def test_secure_aggregation_on_dask_matches_the_sequential_fit(dask_client):
    # Each worker masks its clients' sums with the keys it keeps for them.
    X, _ = make_blobs(n_samples=240, centers=3, n_features=4, random_state=1)
    partitions = np.arange(240) % 6
    params = dict(
        INTEGRATION_CASES["DistributedKMeans"][0],
        random_state=2024,
        refine_iter=2,
        secure_aggregation=True,
    )
    with threadpool_limits(limits=1):
        expected = skfed.DistributedKMeans(**params).fit(X, partitions=partitions)
        with parallel_config(backend="dask"):
            got = skfed.DistributedKMeans(**params).fit(X, partitions=partitions)
    np.testing.assert_array_equal(got.predict(X), expected.predict(X))
    np.testing.assert_array_equal(got.cluster_centers_, expected.cluster_centers_)
    assert got.communication_.to_records() == expected.communication_.to_records()


def test_a_client_lost_in_a_masked_round_on_dask_is_recovered(dask_client):
    # Client 1 fails in a masked round on its worker: the others' shares,
    # opened where their clients live, rebuild its masks, and the round
    # gives the sequential sum of the other clients' sizes.
    X, _ = make_blobs(n_samples=240, centers=3, n_features=4, random_state=1)
    p = check_partitions(np.arange(240) % 6, 240)
    step = functools.partial(fail_on, bad=1)
    totals, logs = [], []
    for backend in ("sequential", "dask"):
        with parallel_config(backend=backend):
            fed = Federation.from_arrays(
                X, None, p, random_state=0, on_client_error="drop"
            )
            fed.secure_aggregation = True
            with fed:
                totals.append(fed.run_round("sizes", step, disclosure=SUM_ONLY))
            assert set(fed.failed_clients) == {1}
            logs.append(fed.log.floats_by_name())
    assert abs(totals[1] - 200.0) <= 6 * 2.0**-33
    assert totals[1] == totals[0]
    assert logs[1] == logs[0]
    assert "secure aggregation unmasking" in logs[1]


# --------------------------------------------------------------------------
# Data resident on the workers: X is a dask array built there, never here.

N_CHUNKS, CHUNK_ROWS = 6, 400


def _blob_block(block, block_info=None):
    """Rows of three blobs, generated on the worker from the chunk's index."""
    rng = np.random.RandomState(block_info[None]["chunk-location"][0])
    centers = np.array([[0.0, 0, 0, 0], [5, 5, 0, 0], [0, 5, 5, 0]])
    labels = rng.randint(0, 3, block.shape[0])
    return centers[labels] + rng.standard_normal((block.shape[0], 4))


def _resident_blobs():
    da = pytest.importorskip("dask.array")
    shape = (N_CHUNKS * CHUNK_ROWS, 4)
    X = da.zeros(shape, chunks=(CHUNK_ROWS, 4)).map_blocks(_blob_block, dtype=float)
    return X, (X[:, 0] > 2.5).astype(int)


@pytest.fixture
def fetched(dask_client, monkeypatch):
    """Sizes of everything this process fetches from the workers."""
    from dask.sizeof import sizeof

    sizes = []
    gather = dask_client.gather

    def counting(futures, *args, **kwargs):
        out = gather(futures, *args, **kwargs)
        sizes.append(sizeof(out))
        return out

    monkeypatch.setattr(dask_client, "gather", counting)
    return sizes


def _same_model(got, expected, X):
    for method in ("predict", "transform", "decision_function"):
        if hasattr(expected, method):
            np.testing.assert_array_equal(
                getattr(got, method)(X), getattr(expected, method)(X)
            )
    assert got.communication_.to_records() == expected.communication_.to_records()


@pytest.mark.parametrize("name", [n for n in INTEGRATION_CASES if n in skfed.__all__])
def test_estimators_on_resident_data_match_the_in_memory_fit(
    name, dask_client, fetched
):
    import dask

    X, y = _resident_blobs()
    with threadpool_limits(limits=1):
        X_mem, y_mem = dask.compute(X, y)
    params = INTEGRATION_CASES[name][0]
    chunk_ids = np.repeat(np.arange(N_CHUNKS), CHUNK_ROWS)
    with threadpool_limits(limits=1):
        expected = getattr(skfed, name)(**params).fit(
            X_mem, y_mem, partitions=chunk_ids
        )
        fetched.clear()
        got = getattr(skfed, name)(**params).fit(X, y)  # each chunk a client
    moved = sum(fetched)
    _same_model(got, expected, X_mem)
    assert got.n_clients_ == N_CHUNKS
    if hasattr(expected, "labels_"):
        # Per-sample results are fetched at the end of the fit, so that
        # they outlive the cluster.
        assert isinstance(got.labels_, np.ndarray)
        np.testing.assert_array_equal(got.labels_, expected.labels_)
    # What left the workers is the protocol's uploads plus a little per
    # client and round and per client (what clients keep that the fit
    # gathers, their sizes; for the classifier the positions of the samples
    # it sent, one int each, for sent_samples_). With few rounds that bound
    # is far below X, which therefore never left the workers.
    log = got.communication_
    bound = 128 * N_CHUNKS * log.n_rounds + 1024 * N_CHUNKS
    bound += 8 * getattr(got, "n_samples_sent_", 0)
    # Plus the per-sample fitted attributes, each client's values once (as
    # the clients keep them: up to 8 bytes a value).
    per_sample = [
        8 * v.size
        for k, v in vars(got).items()
        if k.endswith("_") and isinstance(v, np.ndarray) and len(v) == X.shape[0]
    ]
    bound += sum(per_sample)
    assert log.upload_bytes <= moved <= log.upload_bytes + bound
    if log.n_rounds <= 10:
        assert bound - sum(per_sample) < X.nbytes / 4


def test_resident_data_grouped_by_a_partitions_array(dask_client):
    import dask

    X, _ = _resident_blobs()
    # Three clients, each with rows in every chunk: they are gathered on
    # the workers, never here.
    ids = (X[:, 1] > 2.5).astype(int) + (X[:, 2] > 2.5).astype(int)
    X_mem, ids_mem = dask.compute(X, ids)
    params = INTEGRATION_CASES["KFed"][0]
    with threadpool_limits(limits=1):
        expected = skfed.KFed(**params).fit(X_mem, partitions=ids_mem)
        got = skfed.KFed(**params).fit(X, partitions=ids)
    _same_model(got, expected, X_mem)
    np.testing.assert_array_equal(got.labels_, expected.labels_)
    assert sorted(got.local_centers_) == sorted(np.unique(ids_mem).tolist())


@pytest.mark.parametrize("grouped", [False, True])
def test_per_sample_outputs_arrive_in_slices_of_large_clients(
    grouped, dask_client, monkeypatch
):
    # Clients larger than a fetch send their labels in slices (the driver
    # holds one slice at a time, whatever the clients' size): the labels
    # are those of the in-memory fit, for chunk clients and for clients
    # cut by a partitions array.
    import dask

    from skfed._engine._transports import _dask as dask_module

    monkeypatch.setattr(dask_module, "_ASSEMBLY_ROWS", 150)
    X, _ = _resident_blobs()
    ids = (X[:, 1] > 2.5).astype(int) if grouped else None
    X_mem, ids_mem = dask.compute(X, ids)
    if ids_mem is None:
        ids_mem = np.repeat(np.arange(N_CHUNKS), CHUNK_ROWS)
    for name in ("KFed", "DistributedKMeans"):
        params = INTEGRATION_CASES[name][0]
        with threadpool_limits(limits=1):
            expected = getattr(skfed, name)(**params).fit(X_mem, partitions=ids_mem)
            got = getattr(skfed, name)(**params).fit(X, partitions=ids)
        np.testing.assert_array_equal(got.labels_, expected.labels_)


def test_per_sample_fetches_cover_every_row_once_in_bounded_batches(monkeypatch):
    from skfed._engine._transports import _dask as dask_module

    monkeypatch.setattr(dask_module, "_ASSEMBLY_ROWS", 256)
    sizes = {"a": 5, "b": 600, "c": 3, "d": 256, "e": 1}
    batches = list(dask_module._batches(list(sizes), sizes))
    pieces = [p for batch in batches for p in batch]
    for cid, n in sizes.items():
        mine = [(a, b) for c, a, b in pieces if c == cid]
        covered = np.concatenate([np.arange(a, b) for a, b in mine])
        np.testing.assert_array_equal(covered, np.arange(n))
    assert [c for c, _, _ in pieces] == sorted(c for c, _, _ in pieces)
    assert all(sum(b - a for _, a, b in batch) <= 256 for batch in batches)
    assert max(b - a for _, a, b in pieces) == 256


def test_resident_dataframe_with_a_client_column(dask_client):
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    X, _ = _resident_blobs()
    X_mem = X.compute()
    frame = pd.DataFrame(X_mem, columns=["a", "b", "c", "d"])
    frame["site"] = np.repeat(["north", "south", "east"], len(frame) // 3)
    ddf = dd.from_pandas(frame, npartitions=4)
    params = INTEGRATION_CASES["DistributedKMeans"][0]
    with threadpool_limits(limits=1):
        expected = skfed.DistributedKMeans(**params).fit(
            frame[["a", "b", "c", "d"]], partitions=frame["site"]
        )
        got = skfed.DistributedKMeans(**params).fit(ddf, partitions="site")
    np.testing.assert_array_equal(got.feature_names_in_, ["a", "b", "c", "d"])
    _same_model(got, expected, frame[["a", "b", "c", "d"]])
    np.testing.assert_array_equal(got.labels_, expected.labels_)
    # Without labels_, fit_predict predicts the rows without the client
    # column.
    lazy = skfed.DistributedKMeans(**params, compute_labels=False)
    with threadpool_limits(limits=1):
        labels = lazy.fit_predict(ddf, partitions="site")
        np.testing.assert_array_equal(labels.compute(), expected.labels_)


def test_resident_data_is_checked_on_the_clients(dask_client):
    da = pytest.importorskip("dask.array")
    X, _ = _resident_blobs()
    bad = da.where(da.arange(X.shape[0])[:, None] == 401, np.nan, X)
    with pytest.raises(ValueError, match="Client 1: .*NaN"):
        skfed.KFed(n_clusters=3, random_state=0).fit(bad)
    with pytest.raises(ValueError, match="partitions must be"):
        skfed.KFed(n_clusters=3, random_state=0).fit(X, partitions=np.zeros(len(X)))


def test_resident_data_lost_before_the_fit_is_named_as_the_input(dask_client):
    # Persisted chunks released from the cluster: the clients cannot be
    # built, and no worker held them yet, so the error speaks of X.
    from distributed import futures_of

    from skfed import WorkerLostError

    X, _ = _resident_blobs()
    X = (X + 1).persist()
    dask_client.cancel(futures_of(X))
    with pytest.raises(WorkerLostError, match="before client") as error:
        skfed.KFed(n_clusters=3, random_state=0).fit(X)
    assert "worker(s) None" not in str(error.value)
    assert "X.compute()" in str(error.value)
    assert error.value.workers == [] and len(error.value.client_ids) == N_CHUNKS


def test_resident_data_partial_fit_adds_clients(dask_client):
    import dask
    import dask.array

    X, _ = _resident_blobs()
    X_mem = dask.compute(X)[0]
    first, later = X[:1200], X[1200:]
    n = CHUNK_ROWS
    params = INTEGRATION_CASES["KFed"][0]
    with threadpool_limits(limits=1):
        expected = skfed.KFed(**params).fit(
            X_mem[:1200], partitions=np.repeat([0, 1, 2], n)
        )
        expected.partial_fit(X_mem[1200:], partitions=np.repeat([3, 4, 5], n))
        got = skfed.KFed(**params).fit(first)  # clients 0, 1, 2
        da_ids = dask.array.from_array(np.repeat([3, 4, 5], n), chunks=n)
        got.partial_fit(later, partitions=da_ids)
    _same_model(got, expected, X_mem)
    np.testing.assert_array_equal(got.labels_, expected.labels_)
    assert sorted(got.local_centers_) == [0, 1, 2, 3, 4, 5]


# --------------------------------------------------------------------------
# Faults: a lost worker or a stalled round fails the fit, naming who.


@pytest.fixture
def doomed_cluster():
    """A cluster of its own for a test that kills one of its workers (the
    module's cluster stays whole for the other tests)."""
    cluster = distributed.LocalCluster(
        n_workers=N_WORKERS,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        memory_limit="1GiB",
    )
    client = distributed.Client(cluster, set_as_default=True)
    yield client
    client.close()
    cluster.close()


def _raised_within(seconds, func):
    """What ``func()`` raised and when (seconds), or fail if it has not
    returned within ``seconds`` (run in a thread: a hanging fit fails the
    test instead of hanging it)."""
    import threading
    import time

    out = {}

    def target():
        start = time.monotonic()
        try:
            func()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc
        out["elapsed"] = time.monotonic() - start

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    return out.get("error"), out["elapsed"]


def _kill_client_1(fed):
    from functools import partial

    from skfed._testing import exit_on

    # Client 1's step ends its worker's process, as the system's OOM killer
    # would; that worker holds other clients too.
    fed.run_round("sum", partial(exit_on, bad=1))


@pytest.mark.parametrize("where", ["resident", "scattered"])
def test_a_lost_worker_fails_the_fit_naming_it_and_its_clients(where, doomed_cluster):
    from skfed import WorkerLostError

    X, _ = _resident_blobs()
    if where == "resident":
        fed = Federation.from_remote(
            X, None, None, random_state=0, input_checks={}
        )  # six clients, one per chunk, built on the workers
    else:
        X_mem = X.compute()
        ids = np.repeat(np.arange(N_CHUNKS), CHUNK_ROWS)
        with parallel_config(backend="dask"):
            fed = Federation.from_arrays(
                X_mem, None, check_partitions(ids, len(ids)), random_state=0
            )
    home = fed.transport._home[1]
    held = sorted(c for c, w in fed.transport._home.items() if w == home)

    def fit():
        with fed:
            _kill_client_1(fed)

    error, elapsed = _raised_within(120, fit)
    assert isinstance(error, WorkerLostError), repr(error)
    assert error.workers == [home]
    assert sorted(error.client_ids) == held
    assert home in str(error) and all(repr(c) in str(error) for c in held)
    # Dask notices a closed connection at once; the fit must not wait for
    # the worker to come back (it never does: its replacement has another
    # address and none of the clients).
    assert elapsed < 30


def test_a_round_past_the_configured_deadline_names_its_workers(dask_client):
    from functools import partial

    import dask

    from skfed._testing import sleep_on

    X, _ = _resident_blobs()
    fed = Federation.from_remote(X, None, None, random_state=0, input_checks={})
    home = fed.transport._home[2]
    with dask.config.set({"skfed.timeout": "1s"}):
        with pytest.raises(TimeoutError, match="skfed.timeout") as info:
            with fed:
                fed.run_round("sum", partial(sleep_on, bad=2, seconds=8))
    assert home in str(info.value) and "2" in str(info.value)
    with dask.config.set({"skfed.timeout": "soon"}):
        with pytest.raises(ValueError, match="skfed.timeout"):
            with fed:
                fed.run_round("sum", partial(sleep_on, bad=2, seconds=0))


# --------------------------------------------------------------------------
# BLAS threads: the driver's and the workers' settings do not change a model.


def _fitted_arrays(model):
    return {
        k: v
        for k, v in vars(model).items()
        if k.endswith("_") and isinstance(v, np.ndarray) and v.dtype != object
    }


@pytest.mark.parametrize(
    "name, params",
    [
        ("DistributedKernelPCA", {"n_components": 3, "n_representatives": 60}),
        (
            "FederatedKernelKMeans",
            {"n_clusters": 3, "n_random_features": 40, "max_iter": 5},
        ),
        (
            "FederatedKernelKMeans",
            {"n_clusters": 3, "algorithm": "dspgd", "max_iter": 3},
        ),
    ],
)
@pytest.mark.parametrize("where", ["resident", "in memory"])
def test_the_drivers_blas_threads_do_not_change_the_model(
    name, params, where, dask_client
):
    X, _ = _resident_blobs()
    if where == "in memory":
        X = X.compute()
    models = []
    for threads in (1, 2):
        # The driver runs BLAS on `threads` threads outside the fit; the
        # fit's server steps, and its client steps wherever they run, must
        # not depend on it.
        with threadpool_limits(limits=threads, user_api="blas"):
            model = getattr(skfed, name)(**params, random_state=0)
            kw = {} if where == "resident" else {"partitions": 4}
            models.append(model.fit(X, **kw))
    one, two = map(_fitted_arrays, models)
    assert sorted(one) == sorted(two) and len(one) >= 2
    for key in one:
        np.testing.assert_array_equal(one[key], two[key], err_msg=key)


# --------------------------------------------------------------------------
# Outputs on dask data: lazy, block by block; fitted attributes outlive
# the cluster.


@pytest.mark.parametrize("name", [n for n in INTEGRATION_CASES if n in skfed.__all__])
def test_methods_on_a_dask_array_are_lazy_and_match_numpy(name, dask_client):
    import dask

    X, y = _resident_blobs()
    X_mem, y_mem = dask.compute(X, y)
    params = INTEGRATION_CASES[name][0]
    with threadpool_limits(limits=1):
        model = getattr(skfed, name)(**params).fit(X_mem, y_mem, partitions=4)
    for method in ("predict", "transform", "decision_function"):
        if not hasattr(model, method):
            continue
        got = getattr(model, method)(X)
        # A graph over X's chunks, not an array computed here.
        assert dask.is_dask_collection(got), method
        assert got.numblocks[0] == X.numblocks[0]
        with threadpool_limits(limits=1):
            expected = getattr(model, method)(X_mem)
            computed = got.compute()
        assert computed.dtype == expected.dtype and computed.shape == expected.shape
        # Each block is the in-memory method on its rows.
        np.testing.assert_allclose(computed, expected, rtol=1e-12, atol=1e-12)
    if hasattr(model, "score"):
        weights = np.random.RandomState(0).uniform(0.5, 2, len(X_mem))
        for w in (None, weights):
            got = model.score(X, y, sample_weight=w)
            assert isinstance(got, float)
            expected = model.score(X_mem, y_mem, sample_weight=w)
            np.testing.assert_allclose(got, expected, rtol=1e-10)


def test_fitted_labels_outlive_the_cluster():
    import dask

    X, _ = _resident_blobs()
    params = INTEGRATION_CASES["KFed"][0]
    cluster = distributed.LocalCluster(
        n_workers=1, processes=False, threads_per_worker=1, dashboard_address=":0"
    )
    with distributed.Client(cluster, set_as_default=True):
        X_mem = dask.compute(X)[0]
        model = skfed.KFed(**params).fit(X)
    cluster.close()
    # The cluster and the clients' state are gone; the labels are here.
    assert isinstance(model.labels_, np.ndarray)
    with threadpool_limits(limits=1):
        expected = skfed.KFed(**params).fit(
            X_mem, partitions=np.repeat(np.arange(N_CHUNKS), CHUNK_ROWS)
        )
    np.testing.assert_array_equal(model.labels_, expected.labels_)


def test_the_driver_holds_a_few_numbers_per_client_not_per_row(dask_client):
    import tracemalloc

    da = pytest.importorskip("dask.array")
    n_rows, n_chunks = 3_200_000, 8
    X = da.random.RandomState(0).random_sample(
        (n_rows, 2), chunks=(n_rows // n_chunks, 2)
    )
    X = X.astype(np.float32).persist()
    distributed.wait(X)
    tracemalloc.start()
    try:
        fed = Federation.from_remote(X, None, None, random_state=0, input_checks={})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert fed.n_samples == n_rows and len(fed.client_ids) == n_chunks
    # The clients' sample positions are built on the workers: an int64
    # per row here would be 24 MiB.
    assert peak < 4 * 2**20, peak


def test_fetched_labels_cost_the_driver_one_slice_beyond_themselves(dask_client):
    # labels_ and induced_labels_ (an int32 per row each) are fetched into
    # the driver at the end of the fit; besides them the driver holds one
    # slice of 2**18 rows' labels at a time, however large the clients (two
    # of 800,000 rows here: fetched whole, they cost the driver 9.9 MiB
    # besides labels_; 3.4 MiB in slices).
    import tracemalloc

    da = pytest.importorskip("dask.array")
    n_rows = 1_600_000
    X = da.random.RandomState(0).random_sample((n_rows, 2), chunks=(n_rows // 2, 2))
    X = X.astype(np.float32).persist()
    distributed.wait(X)
    tracemalloc.start()
    try:
        model = skfed.KFed(n_clusters=3, random_state=0).fit(X)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert model.labels_.nbytes == model.induced_labels_.nbytes == 4 * n_rows
    fetched = model.labels_.nbytes + model.induced_labels_.nbytes
    assert peak - fetched < 6 * 2**20, peak


@pytest.mark.parametrize("name", ["KFed", "DistributedKMeans"])
def test_compute_labels_false_gathers_no_row_into_the_driver(name, dask_client):
    # Without labels_ the driver holds a few numbers per client: its peak
    # stays under what the labels alone would take (6.1 MiB of int32 at
    # 1.6M rows; gathered, the peak was 8 MiB and above).
    import tracemalloc

    da = pytest.importorskip("dask.array")
    n_rows = 1_600_000
    X = da.random.RandomState(0).random_sample((n_rows, 2), chunks=(n_rows // 2, 2))
    X = X.astype(np.float32).persist()
    distributed.wait(X)
    model = getattr(skfed, name)(n_clusters=3, random_state=0, compute_labels=False)
    tracemalloc.start()
    try:
        model.fit(X)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not hasattr(model, "labels_")
    # Measured: 1.4 MiB (KFed), 2.1 MiB (DistributedKMeans).
    assert peak < 4 * 2**20, peak


@pytest.mark.parametrize("name", ["KFed", "DistributedKMeans"])
def test_fit_predict_without_labels_on_resident_data(name, dask_client, fetched):
    import dask

    X, _ = _resident_blobs()
    with threadpool_limits(limits=1):
        X_mem = dask.compute(X)[0]
        expected = getattr(skfed, name)(n_clusters=3, random_state=0).fit(
            X_mem, partitions=np.repeat(np.arange(N_CHUNKS), CHUNK_ROWS)
        )
        model = getattr(skfed, name)(n_clusters=3, random_state=0)
        model.set_params(compute_labels=False)
        fetched.clear()
        model.fit(X)
        moved = sum(fetched)
        labels = model.fit_predict(X)
    assert not hasattr(model, "labels_")
    np.testing.assert_array_equal(model.cluster_centers_, expected.cluster_centers_)
    # The uploads and a little per client and round: no per-sample value.
    log = model.communication_
    assert moved <= log.upload_bytes + 128 * N_CHUNKS * log.n_rounds + 1024 * N_CHUNKS
    if name == "KFed":
        # The clients' labels, gathered for fit_predict's return value.
        assert isinstance(labels, np.ndarray)
    else:
        # predict on the training rows: lazy, computed on the workers.
        assert dask.is_dask_collection(labels)
        labels = labels.compute()
    np.testing.assert_array_equal(labels, expected.labels_)


async def _n_loop_tasks():
    import asyncio

    return len(asyncio.all_tasks())


def test_a_long_round_leaves_no_waiter_per_poll(dask_client, monkeypatch):
    # Each check for lost workers (every _POLL_SECONDS) used to leave a
    # waiter per future on the dask client's loop until the round ended:
    # memory that grew with the round's length, hence with the clients'
    # rows (1.4 MiB more at 16M rows than at 1.6M for KFed).
    from skfed._engine._transports import _dask

    counts = []
    check = _dask._check_workers

    def counting(*args, **kwargs):
        counts.append(dask_client.sync(_n_loop_tasks))
        return check(*args, **kwargs)

    monkeypatch.setattr(_dask, "_check_workers", counting)
    monkeypatch.setattr(_dask, "_POLL_SECONDS", 0.1)
    worker = sorted(dask_client.scheduler_info()["workers"])[0]
    future = dask_client.submit(time.sleep, 2, workers=[worker], pure=False)
    _dask.wait_for_workers(dask_client, [future], [(worker, [0])], "a long round")
    # About 20 checks: a waiter each grew the loop's tasks by 20.
    assert len(counts) >= 5
    assert max(counts) <= counts[0] + 3, counts


def _store_tokens(token):
    from skfed._engine._transports import _dask

    return sorted(k[1] for k in _dask._STORE if k[0] == token)


def _store_put(token):
    from skfed._engine._transports import _dask

    _dask._STORE[token, 0] = {}
    _dask._STORE[token, 1] = {}


def test_finalizer_forgets_the_clients_without_waiting_on_the_event_loop(
    dask_client,
):
    # A transport's finalizer can run in a garbage collection inside any
    # dask client call, while that call holds the client's locks and so
    # blocks the client's event loop. It must return without waiting on the
    # loop (a blocking client.run there hung a program for good), and the
    # workers still drop the fit's clients once the loop is free.
    from skfed._engine._transports._dask import _forget_everywhere

    token = "finalizer-test"
    dask_client.run(_store_put, token)
    assert all(v == [0, 1] for v in dask_client.run(_store_tokens, token).values())

    loop_free = threading.Event()
    dask_client.loop.add_callback(loop_free.wait, 60)  # the loop is blocked
    caller = threading.Thread(target=_forget_everywhere, args=(dask_client, token))
    caller.start()
    caller.join(10)
    returned = not caller.is_alive()
    loop_free.set()
    caller.join()
    assert returned, "the finalizer waited on the blocked event loop"

    deadline = time.monotonic() + 30
    while any(dask_client.run(_store_tokens, token).values()):
        assert time.monotonic() < deadline, "the workers kept the clients"
        time.sleep(0.1)


def test_finalizer_is_silent_once_the_dask_client_is_closed():
    from skfed._engine._transports._dask import _forget_everywhere

    with distributed.Client(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0"
    ) as client:
        pass
    _forget_everywhere(client, "closed-client")  # no error, no wait


def test_methods_on_a_named_dask_frame_do_not_warn_per_block():
    # The names are checked once, on the frame's metadata; its blocks reach
    # the in-memory methods without them, silently.
    import warnings

    import dask

    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(
        np.random.RandomState(0).normal(size=(120, 3)), columns=["a", "b", "c"]
    )
    km = skfed.DistributedKMeans(2, random_state=0).fit(frame, partitions=3)
    with dask.config.set(scheduler="synchronous"), warnings.catch_warnings():
        warnings.simplefilter("error")
        lazy = km.predict(dd.from_pandas(frame, npartitions=2))
        np.testing.assert_array_equal(lazy.compute(), km.predict(frame))
        score = km.score(dd.from_pandas(frame, npartitions=2))
    assert score == pytest.approx(km.score(frame), rel=1e-12)
    with pytest.raises(ValueError, match="feature names"):
        km.predict(dd.from_pandas(frame.rename(columns={"a": "z"}), npartitions=2))
