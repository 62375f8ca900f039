"""Tests for skfed.KFed (one-shot federated k-means, k-FED)."""

import warnings

import joblib
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal
from scipy.optimize import linear_sum_assignment
from sklearn import config_context
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import adjusted_rand_score, confusion_matrix
from sklearn.metrics.pairwise import euclidean_distances
from sklearn.model_selection import GroupKFold, cross_validate
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils._param_validation import InvalidParameterError
from threadpoolctl import threadpool_info

import skfed.cluster._kmeans._restarts as restarts_module
import skfed.cluster._protocols._kfed_local as kfed_module
from skfed import ClientStepError, ClientValueError, KFed
from skfed._engine._protocol import run_alone
from skfed._testing import gathered_outputs
from skfed.cluster._kmeans import lloyd_rows, weighted_kmeans_plusplus
from skfed.partition import labels_per_client

HYPOTHESIS = settings(
    max_examples=5,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def matched_accuracy(y_true, y_pred):
    """Fraction of samples on which two labelings agree after the best
    one-to-one matching of their labels (Hungarian algorithm)."""
    cm = confusion_matrix(y_true, y_pred)
    rows, cols = linear_sum_assignment(-cm)
    return cm[rows, cols].sum() / len(y_true)


def gaussian_mixture(k, d, n_per_component, separation, random_state):
    """k components N(μ_r, I_d), every pair of means ``separation`` apart on
    average (random directions)."""
    rng = np.random.RandomState(random_state)
    means = rng.normal(scale=separation / np.sqrt(2 * d), size=(k, d))
    y = np.repeat(np.arange(k), n_per_component)
    X = means[y] + rng.normal(size=(len(y), d))
    return X, y


@pytest.fixture(scope="module")
def blobs():
    X, y = make_blobs(
        n_samples=600, centers=4, n_features=5, cluster_std=0.5, random_state=0
    )
    return X, y


@pytest.fixture(scope="module")
def structured():
    """The paper's Table 1 setting, small: k=16 components, k'=4 per client,
    m0=3 clients per group of components."""
    X, y = gaussian_mixture(16, 20, 60, separation=30, random_state=1)
    partitions = labels_per_client(y, 4, clients_per_group=3, random_state=0)
    return X, y, partitions


# -- agreement with centralized references ---------------------------------


def test_one_client_matches_kmeans(blobs):
    X, y = blobs
    kfed = KFed(n_clusters=4, random_state=0).fit(X)
    km = KMeans(n_clusters=4, n_init=10, random_state=0).fit(X)
    assert kfed.n_clients_ == 1
    assert adjusted_rand_score(km.labels_, kfed.labels_) == 1.0
    order = linear_sum_assignment(
        euclidean_distances(kfed.cluster_centers_, km.cluster_centers_)
    )[1]
    assert_allclose(kfed.cluster_centers_, km.cluster_centers_[order], rtol=1e-6)
    assert kfed.inertia_ == pytest.approx(km.inertia_, rel=1e-6)
    assert_array_equal(kfed.predict(X), kfed.labels_)


@pytest.mark.parametrize("center_weighting", ["size", "uniform"])
def test_iid_clients_match_kmeans(blobs, center_weighting):
    X, y = blobs
    kfed = KFed(n_clusters=4, center_weighting=center_weighting, random_state=0)
    kfed.fit(X, partitions=6)
    km = KMeans(n_clusters=4, n_init=10, random_state=0).fit(X)
    assert kfed.n_clients_ == 6
    assert adjusted_rand_score(km.labels_, kfed.labels_) == 1.0
    rtol = 1e-6 if center_weighting == "size" else 0.05
    assert kfed.inertia_ == pytest.approx(km.inertia_, rel=rtol)
    order = linear_sum_assignment(
        euclidean_distances(kfed.cluster_centers_, km.cluster_centers_)
    )[1]
    assert_allclose(
        kfed.cluster_centers_, km.cluster_centers_[order], rtol=rtol, atol=rtol
    )


def test_size_weighting_gives_centroids_of_induced_clusters(structured):
    X, _, partitions = structured
    kfed = KFed(n_clusters=16, n_local_clusters=4, random_state=0)
    kfed.fit(X, partitions=partitions)
    induced = kfed.induced_labels_
    centroids = np.array([X[induced == r].mean(axis=0) for r in range(16)])
    assert_allclose(kfed.cluster_centers_, centroids, rtol=1e-10, atol=1e-10)
    # inertia_ is KMeans': each row to its nearest center (labels_).
    sq = ((X[:, None, :] - kfed.cluster_centers_[None]) ** 2).sum(axis=2)
    assert_array_equal(kfed.labels_, sq.argmin(axis=1))
    assert kfed.inertia_ == pytest.approx(sq.min(axis=1).sum(), rel=1e-10)


def test_uniform_weighting_averages_local_centers(structured):
    X, _, partitions = structured
    kfed = KFed(
        n_clusters=16, n_local_clusters=4, center_weighting="uniform", random_state=0
    ).fit(X, partitions=partitions)
    pooled = np.concatenate(list(kfed.local_centers_.values()))
    tau = np.concatenate(list(kfed.local_center_labels_.values()))
    expected = np.array([pooled[tau == r].mean(axis=0) for r in range(16)])
    assert_allclose(kfed.cluster_centers_, expected, rtol=1e-10)


@pytest.mark.parametrize("center_weighting", ["size", "uniform"])
def test_structured_mixture_exact_recovery(structured, center_weighting):
    # k' = 4 < k = 16: no client sees more than 4 components, yet the
    # induced clustering recovers all 16 (the paper's Table 1 regime).
    X, y, partitions = structured
    kfed = KFed(
        n_clusters=16,
        n_local_clusters=4,
        center_weighting=center_weighting,
        random_state=0,
    ).fit(X, partitions=partitions)
    assert kfed.n_clients_ == len(np.unique(partitions))
    assert matched_accuracy(y, kfed.labels_) == 1.0
    # Every local cluster is one component of the client's data: its local
    # centers are exactly the means of the client's rows of each component.
    for cid, centers in kfed.local_centers_.items():
        own = partitions == cid
        means = np.array([X[own & (y == r)].mean(axis=0) for r in np.unique(y[own])])
        assert centers.shape == means.shape == (4, X.shape[1])
        match = euclidean_distances(centers, means).argmin(axis=1)
        assert_allclose(centers, means[match], rtol=1e-10, atol=1e-10)
        assert len(set(match)) == 4


def test_structured_mixture_reaches_oracle_cost(structured):
    # On well-separated structured data the one-shot clustering reaches the
    # cost of the true labelling, so it is no worse than centralized
    # KMeans(n_init=1) on the pooled data.
    X, y, partitions = structured
    kfed = KFed(n_clusters=16, n_local_clusters=4, random_state=0)
    kfed.fit(X, partitions=partitions)
    oracle = sum(((X[y == r] - X[y == r].mean(0)) ** 2).sum() for r in range(16))
    assert kfed.inertia_ == pytest.approx(oracle, rel=1e-10)
    km = KMeans(16, n_init=1, random_state=0).fit(X)
    assert kfed.inertia_ <= km.inertia_ * (1 + 1e-10)


def test_predict_transform_score(blobs):
    X, _ = blobs
    kfed = KFed(n_clusters=4, random_state=0).fit(X, partitions=3)
    distances = kfed.transform(X)
    assert_allclose(distances, euclidean_distances(X, kfed.cluster_centers_))
    assert_array_equal(kfed.predict(X), distances.argmin(axis=1))
    assert_array_equal(kfed.predict(X), kfed.labels_)
    assert kfed.score(X) == pytest.approx(-kfed.inertia_, rel=1e-9)
    weights = np.random.RandomState(0).uniform(size=X.shape[0])
    expected = -(weights * distances.min(axis=1) ** 2).sum()
    assert kfed.score(X, sample_weight=weights) == pytest.approx(expected)
    assert_array_equal(kfed.get_feature_names_out(), [f"kfed{i}" for i in range(4)])


def test_fit_predict_and_fit_transform(blobs):
    X, _ = blobs
    est = KFed(n_clusters=4, random_state=0)
    labels = est.fit_predict(X, partitions=3)
    assert_array_equal(labels, est.labels_)
    assert labels.dtype == np.int32
    Xt = KFed(n_clusters=4, random_state=0).fit_transform(X, partitions=3)
    assert_allclose(Xt, est.transform(X))


# -- communication ----------------------------------------------------------


@pytest.mark.parametrize("compute_labels", [True, False])
@pytest.mark.parametrize("center_weighting", ["size", "uniform"])
def test_communication_matches_formula(structured, center_weighting, compute_labels):
    X, _, partitions = structured
    k, d = 16, X.shape[1]
    ids = np.unique(partitions)
    # Per-client k(z): alternate 3 and 4 local clusters.
    k_local = {int(c): 3 + int(c) % 2 for c in ids}
    kfed = KFed(
        n_clusters=k,
        n_local_clusters=k_local,
        center_weighting=center_weighting,
        random_state=0,
        compute_labels=compute_labels,
    ).fit(X, partitions=partitions)
    # The labels stay on the clients or not: the rounds are the same.
    assert hasattr(kfed, "labels_") == compute_labels
    log = kfed.communication_
    per_center = d + (center_weighting == "size")
    (upload,) = [r for r in log if r.direction == "upload" and r.total_floats]
    assert upload.name == "local centers"
    assert dict(zip(upload.clients, upload.floats)) == {
        c: k_local[c] * per_center for c in k_local
    }
    assert log.upload_floats == sum(k_local.values()) * per_center
    assert log.n_upload_rounds == 1
    # Download: the global cluster of each local center and the model.
    (download,) = [r for r in log if r.direction == "download"]
    assert download.name == "cluster map"
    assert dict(zip(download.clients, download.floats)) == {
        c: k_local[c] + k * d for c in k_local
    }
    for cid, centers in kfed.local_centers_.items():
        assert centers.shape == (k_local[cid], d)
        assert kfed.local_center_labels_[cid].shape == (k_local[cid],)


# -- invariances --------------------------------------------------------------


def _fit_structured(X, partitions, **params):
    params = {"n_clusters": 16, "n_local_clusters": 4, "random_state": 3} | params
    return KFed(**params).fit(X, partitions=partitions)


@HYPOTHESIS
@given(
    seed=st.integers(0, 2**16),
    names=st.sampled_from(["int", "str", "reverse"]),
    dropout=st.sampled_from([0.0, 0.3]),
)
def test_invariant_to_client_names_client_order_and_sample_order(
    structured, seed, names, dropout
):
    X, _, partitions = structured
    reference = _fit_structured(X, partitions, client_dropout=dropout)

    rng = np.random.RandomState(seed)
    ids = np.unique(partitions)
    new_ids = rng.permutation(len(ids)) * 7 + 100  # relabels and reorders
    if names == "str":
        new_ids = np.array([f"client-{i}" for i in new_ids], dtype=object)
    elif names == "reverse":
        new_ids = -ids
    renamed = new_ids[np.searchsorted(ids, partitions)]
    perm = rng.permutation(X.shape[0])
    model = _fit_structured(X[perm], renamed[perm], client_dropout=dropout)

    assert_allclose(model.cluster_centers_, reference.cluster_centers_, rtol=1e-12)
    assert_array_equal(model.labels_, reference.labels_[perm])
    assert model.inertia_ == pytest.approx(reference.inertia_, rel=1e-12)
    rename = dict(zip(ids.tolist(), new_ids.tolist()))
    assert set(model.failed_clients_) == {rename[c] for c in reference.failed_clients_}
    for cid, centers in reference.local_centers_.items():
        assert_allclose(model.local_centers_[rename[cid]], centers, rtol=1e-12)


def test_starting_client_does_not_follow_names_when_clients_share_a_center():
    # Three clients share their smallest center (a duplicated row): their
    # order among the candidate starting clients must come from all their
    # centers, not from where the shared one sits in the pool.
    X = np.array([[0, 0], [10, 0], [0, 0], [0, 10], [0, 0], [-10, 0]], float)
    partitions = np.array([0, 0, 1, 1, 2, 2])
    for seed in range(5):
        reference = KFed(3, n_local_clusters=2, random_state=seed)
        reference.fit(X, partitions=partitions)
        for renamed in [2 - partitions, (partitions + 1) % 3]:
            model = KFed(3, n_local_clusters=2, random_state=seed)
            model.fit(X, partitions=renamed)
            assert_array_equal(model.cluster_centers_, reference.cluster_centers_)
            assert_array_equal(model.labels_, reference.labels_)


@pytest.mark.parametrize(
    "backend, n_jobs", [("threading", 2), ("loky", 2), ("sequential", 1)]
)
def test_invariant_to_n_jobs_and_backend(structured, backend, n_jobs):
    X, _, partitions = structured
    reference = _fit_structured(X, partitions, n_jobs=1)
    with joblib.parallel_config(backend=backend):
        model = _fit_structured(X, partitions, n_jobs=n_jobs)
    assert_allclose(model.cluster_centers_, reference.cluster_centers_, rtol=1e-12)
    assert_array_equal(model.labels_, reference.labels_)


def test_random_state_reproducible_and_starting_client_varies(structured):
    X, _, partitions = structured
    a = _fit_structured(X, partitions, random_state=0)
    b = _fit_structured(X, partitions, random_state=0)
    assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    # The seed decides the starting client among ties: the order of the
    # global clusters changes, the clustering does not.
    orders = {
        tuple(_fit_structured(X, partitions, random_state=s).labels_[::60])
        for s in range(4)
    }
    assert len(orders) > 1


# -- partial participation ----------------------------------------------------


def test_client_dropout_is_seeded_and_recorded(structured):
    X, y, partitions = structured
    kfed = _fit_structured(X, partitions, client_dropout=0.3, random_state=0)
    n_total = len(np.unique(partitions))
    dropped = set(kfed.failed_clients_)
    assert 0 < len(dropped) < n_total
    assert kfed.n_clients_ == n_total - len(dropped)
    assert all("simulated dropout" in r for r in kfed.failed_clients_.values())
    is_dropped = np.isin(partitions, list(dropped))
    assert (kfed.labels_[is_dropped] == -1).all()
    assert (kfed.labels_[~is_dropped] >= 0).all()
    (upload,) = [r for r in kfed.communication_ if r.name == "local centers"]
    assert set(upload.clients) == set(kfed.local_centers_)
    assert not dropped & set(upload.clients)
    again = _fit_structured(X, partitions, client_dropout=0.3, random_state=0)
    assert set(again.failed_clients_) == dropped
    # Dropping clients is fitting on the survivors' data alone.
    survivors = _fit_structured(X[~is_dropped], partitions[~is_dropped], random_state=0)
    assert_allclose(kfed.cluster_centers_, survivors.cluster_centers_, rtol=1e-12)
    assert_array_equal(kfed.labels_[~is_dropped], survivors.labels_)
    # The survivors are still clustered correctly. A whole group of
    # components can drop with its clients, so ask for as many clusters as
    # the survivors hold components: which clients drop does not depend on
    # n_clusters (each draws from its own stream first).
    held = len(np.unique(y[~is_dropped]))
    assert held >= 4
    kfed = _fit_structured(
        X, partitions, n_clusters=held, client_dropout=0.3, random_state=0
    )
    assert set(kfed.failed_clients_) == dropped
    assert matched_accuracy(y[~is_dropped], kfed.labels_[~is_dropped]) == 1.0


def _fail_on_client(monkeypatch, client_id, exc):
    """Make the local step raise ``exc`` on one client."""
    original = kfed_module._awasthi_sheffet

    def flaky(X, *args, **kwargs):
        if kwargs["client"].client_id == client_id:
            raise exc
        return original(X, *args, **kwargs)

    monkeypatch.setattr(kfed_module, "_awasthi_sheffet", flaky)


@pytest.mark.parametrize(
    "exc, error",
    [
        (RuntimeError("disk full"), ClientStepError),
        (TypeError("a bug"), ClientStepError),
        (MemoryError("out of memory"), ClientStepError),
        (ValueError("bad rows"), ClientValueError),
    ],
)
def test_failing_client_raises_by_default(structured, monkeypatch, exc, error):
    # A failing client is an error, not a warning and labels -1.
    X, _, partitions = structured
    _fail_on_client(monkeypatch, 5, exc)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(error, match="Client 5 failed in round 'local centers'"):
            _fit_structured(X, partitions)
    with pytest.raises(error) as info:
        _fit_structured(X, partitions).partial_fit(X, partitions=partitions)
    assert info.value.client_id == 5
    assert info.value.round_name == "local centers"
    assert info.value.__cause__ is not None


def test_failing_client_is_dropped_on_request(structured, monkeypatch):
    X, y, partitions = structured
    own = X[partitions == 5]
    _fail_on_client(monkeypatch, 5, RuntimeError("disk full"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kfed = _fit_structured(X, partitions, on_client_error="drop")
    assert list(kfed.failed_clients_) == [5]
    assert "RuntimeError" in kfed.failed_clients_[5]
    assert "disk full" in kfed.failed_clients_[5]
    assert kfed.n_clients_ == len(np.unique(partitions)) - 1
    assert (kfed.labels_[partitions == 5] == -1).all()
    # The model is that of the other clients (client 5's two group-mates
    # still hold its components).
    rest = partitions != 5
    others = _fit_structured(X[rest], partitions[rest])
    assert_allclose(kfed.cluster_centers_, others.cluster_centers_, rtol=1e-12)
    assert_array_equal(kfed.labels_[rest], others.labels_)
    assert matched_accuracy(y[rest], kfed.labels_[rest]) == 1.0
    # partial_fit follows the same rule: the failing client is recorded and
    # the other new client joins.
    new_X = np.vstack([own, X[partitions == 0]])
    new_ids = np.repeat([5, 99], [len(own), (partitions == 0).sum()])
    kfed.partial_fit(new_X, partitions=new_ids)
    assert list(kfed.failed_clients_) == [5]
    assert 99 in kfed.local_centers_
    assert (kfed.labels_[new_ids == 5] == -1).all()
    with pytest.raises(ClientStepError, match="Every client failed.*disk full"):
        kfed.partial_fit(own, partitions=np.full(len(own), 5))


def test_too_few_surviving_centers_raise(structured):
    X, _, partitions = structured
    with pytest.raises(ValueError, match="n_clusters=16 local centers.*Left out"):
        _fit_structured(X, partitions, client_dropout=0.9, random_state=0)


# -- new clients (Theorem 3.2) --------------------------------------------------


def test_partial_fit_new_clients(structured):
    X, y, partitions = structured
    d, k = X.shape[1], 16
    # Hold out one client of every group of components: the remaining
    # clients still cover every component.
    new = np.isin(partitions, np.unique(partitions)[::3])
    kfed = _fit_structured(X[~new], partitions[~new])
    old_centers = {c: v.copy() for c, v in kfed.local_centers_.items()}
    old_labels = kfed.labels_.copy()
    n_records = len(kfed.communication_)

    kfed.partial_fit(X[new], partitions=partitions[new])
    new_ids = set(np.unique(partitions[new]).tolist())
    # The new clients' points: labels agree with predict and with the
    # clustering of the old clients.
    assert_array_equal(kfed.predict(X[new]), kfed.labels_)
    assert_array_equal(kfed.predict(X[~new]), old_labels)
    full = np.empty(X.shape[0], dtype=int)
    full[~new], full[new] = old_labels, kfed.labels_
    assert matched_accuracy(y, full) == 1.0
    # Old clients were not contacted and kept their centers.
    for cid, centers in old_centers.items():
        assert_array_equal(kfed.local_centers_[cid], centers)
    for record in kfed.communication_.records[n_records:]:
        assert set(record.clients) <= new_ids
    added = kfed.communication_.records[n_records:]
    assert sum(r.total_floats for r in added if r.direction == "upload") == len(
        new_ids
    ) * 4 * (d + 1)
    assert sum(r.total_floats for r in added if r.direction == "download") == len(
        new_ids
    ) * (4 + k * d)
    assert kfed.n_clients_ == len(np.unique(partitions))
    # Size-weighted centers are the centroids of all points seen so far.
    centroids = np.array([X[full == r].mean(axis=0) for r in range(k)])
    assert_allclose(kfed.cluster_centers_, centroids, rtol=1e-10, atol=1e-10)


def test_partial_fit_on_unfitted_is_fit(structured):
    X, _, partitions = structured
    a = _fit_structured(X, partitions)
    b = KFed(n_clusters=16, n_local_clusters=4, random_state=3)
    b.partial_fit(X, partitions=partitions)
    assert_array_equal(a.cluster_centers_, b.cluster_centers_)
    assert_array_equal(a.labels_, b.labels_)


def test_partial_fit_returning_client_adds_centers(blobs):
    X, _ = blobs
    kfed = KFed(n_clusters=4, random_state=0).fit(X[:300])
    kfed.partial_fit(X[300:])  # client 0 again, with new data
    assert kfed.n_clients_ == 1
    # 300 rows each time: 2k = 8 local centers each (the default k(z)).
    assert kfed.local_centers_[0].shape == (16, X.shape[1])
    assert kfed.local_center_labels_[0].shape == (16,)
    assert_array_equal(kfed.predict(X[300:]), kfed.labels_)


def test_partial_fit_checks_features(blobs):
    X, _ = blobs
    kfed = KFed(n_clusters=4, random_state=0).fit(X)
    with pytest.raises(ValueError, match="features"):
        kfed.partial_fit(X[:, :3])


# -- input types ----------------------------------------------------------------


def test_sparse_matches_dense(structured):
    X, _, partitions = structured
    X = np.where(np.abs(X) > 1.0, X, 0.0)  # make it actually sparse
    dense = _fit_structured(X, partitions)
    sparse = _fit_structured(sp.csr_matrix(X), partitions)
    assert_allclose(sparse.cluster_centers_, dense.cluster_centers_, rtol=1e-6)
    assert_array_equal(sparse.labels_, dense.labels_)
    assert sparse.inertia_ == pytest.approx(dense.inertia_, rel=1e-9)
    assert_allclose(sparse.transform(sp.csr_matrix(X)), dense.transform(X))


def test_float32_preserved(structured):
    X, y, partitions = structured
    model = _fit_structured(X.astype(np.float32), partitions)
    reference = _fit_structured(X, partitions)
    assert model.cluster_centers_.dtype == np.float32
    assert model.transform(X.astype(np.float32)).dtype == np.float32
    for centers in model.local_centers_.values():
        assert centers.dtype == np.float32
    assert matched_accuracy(y, model.labels_) == 1.0
    assert_allclose(model.cluster_centers_, reference.cluster_centers_, rtol=1e-4)


def test_string_client_ids_and_pipeline_routing(blobs):
    X, _ = blobs
    partitions = np.array(["a", "b", "c"], dtype=object)[np.arange(len(X)) % 3]
    direct = make_pipeline(StandardScaler(), KFed(n_clusters=4, random_state=0))
    direct.fit(X, kfed__partitions=partitions)
    assert set(direct[-1].local_centers_) == {"a", "b", "c"}
    with config_context(enable_metadata_routing=True):
        routed = Pipeline(
            [("scale", StandardScaler()), ("kfed", KFed(n_clusters=4, random_state=0))]
        )
        routed.fit(X, partitions=partitions)
    assert_array_equal(routed[-1].labels_, direct[-1].labels_)


# -- degenerate and bad input ---------------------------------------------------


def test_small_client_uploads_raw_rows_visibly(blobs):
    X, _ = blobs
    partitions = np.zeros(len(X), dtype=int)
    partitions[:3] = 1  # client 1 holds 3 <= k' = 4 samples
    kfed = KFed(n_clusters=4, random_state=0).fit(X, partitions=partitions)
    assert kfed.raw_upload_clients_ == [1]
    centers = kfed.local_centers_[1]
    assert_allclose(np.sort(centers, axis=0), np.sort(X[:3], axis=0))
    (upload,) = [r for r in kfed.communication_ if r.name == "local centers"]
    floats = dict(zip(upload.clients, upload.floats))
    # Client 0 (597 rows) over-clusters into 2k = 8 local centers.
    assert floats == {0: 8 * (X.shape[1] + 1), 1: 3 * (X.shape[1] + 1)}
    with pytest.raises(ValueError, match=r"Client\(s\) 1 .*raw_rows='refuse'"):
        KFed(n_clusters=4, raw_rows="refuse").fit(X, partitions=partitions)
    with pytest.warns(FutureWarning, match="allow_raw_upload was deprecated"):
        with pytest.raises(ValueError, match=r"Client\(s\) 1 .*allow_raw_upload"):
            KFed(n_clusters=4, allow_raw_upload=False).fit(X, partitions=partitions)


@pytest.mark.parametrize("value", [True, False])
def test_allow_raw_upload_is_deprecated_for_raw_rows(blobs, value):
    X, _ = blobs
    partitions = np.arange(len(X)) % 3
    with pytest.warns(FutureWarning, match="removed in 0.3.0.*raw_rows="):
        old = KFed(n_clusters=4, random_state=0, allow_raw_upload=value).fit(
            X, partitions=partitions
        )
    new = KFed(
        n_clusters=4, random_state=0, raw_rows="allow" if value else "refuse"
    ).fit(X, partitions=partitions)
    assert_allclose(old.cluster_centers_, new.cluster_centers_)
    # Unset, it warns nothing (the suite turns warnings into errors).
    KFed(n_clusters=4, random_state=0).fit(X, partitions=partitions)


def test_single_sample_clients(blobs):
    X, _ = blobs
    partitions = np.arange(len(X))
    partitions[20:] = len(X)  # 20 one-sample clients and one large client
    kfed = KFed(n_clusters=4, random_state=0).fit(X, partitions=partitions)
    assert len(kfed.raw_upload_clients_) == 20
    reference = KFed(n_clusters=4, random_state=0).fit(X)
    assert adjusted_rand_score(reference.labels_, kfed.labels_) == 1.0


def test_duplicate_points_do_not_crash():
    rng = np.random.RandomState(0)
    base = np.array([[0.0, 0.0], [10.0, 10.0], [0.0, 10.0], [10.0, 0.0]])
    # Client 0: many copies of 2 distinct points (< k(0) = 3): uploads them.
    # Client 1: two clusters of duplicates plus a few distinct points, more
    # than k(1) = 2 distinct points: runs the local step.
    X0 = np.repeat(base[:2], 50, axis=0)
    X1 = np.repeat(base[2:] + rng.normal(scale=0.1, size=(2, 2)), 30, axis=0)
    X1 = np.vstack([X1, base[2:] + rng.normal(scale=0.1, size=(2, 2))])
    X = np.vstack([X0, X1])
    partitions = np.repeat([0, 1], [len(X0), len(X1)])
    kfed = KFed(n_clusters=4, n_local_clusters={0: 3, 1: 2}, random_state=0)
    kfed.fit(X, partitions=partitions)
    assert kfed.raw_upload_clients_ == [0]
    assert kfed.local_centers_[0].shape == (2, 2)
    assert set(np.unique(kfed.labels_)) == {0, 1, 2, 3}
    assert (
        adjusted_rand_score(np.argmin(euclidean_distances(X, base), 1), kfed.labels_)
        == 1.0
    )


def test_constant_data_warns_like_kmeans():
    X = np.ones((40, 3))
    with pytest.warns(ConvergenceWarning, match="distinct clusters"):
        kfed = KFed(n_clusters=3, random_state=0).fit(X, partitions=4)
    assert_allclose(kfed.cluster_centers_, 1.0)
    assert kfed.inertia_ == 0.0
    assert len(np.unique(kfed.labels_)) == 1
    assert kfed.raw_upload_clients_ == [0, 1, 2, 3]


def test_too_many_clusters_for_the_local_centers(blobs):
    X, _ = blobs
    with pytest.raises(ValueError, match="needs at least n_clusters=9 local.*only 8"):
        KFed(n_clusters=9, n_local_clusters=2).fit(X, partitions=4)
    with pytest.raises(ValueError, match="n_samples=1"):
        KFed(n_clusters=2).fit(X[:1])


@pytest.mark.parametrize(
    "n_local_clusters, match",
    [
        ({0: 2, 1: 2}, "no entry for client"),
        ({0: 2, 1: 2, 2: 0}, "positive int"),
    ],
)
def test_bad_n_local_clusters(blobs, n_local_clusters, match):
    X, _ = blobs
    with pytest.raises(ValueError, match=match):
        KFed(n_clusters=4, n_local_clusters=n_local_clusters).fit(X, partitions=3)


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_nan_and_inf_rejected(blobs, value):
    X = blobs[0].copy()
    X[5, 1] = value
    with pytest.raises(ValueError, match="NaN|infinity"):
        KFed(n_clusters=4).fit(X, partitions=3)


def test_more_local_clusters_than_features():
    # k' > d: the projection step keeps the full space.
    X, y = make_blobs(200, centers=4, n_features=2, cluster_std=0.5, random_state=0)
    kfed = KFed(n_clusters=4, random_state=0).fit(X, partitions=2)
    km = KMeans(4, n_init=10, random_state=0).fit(X)
    assert adjusted_rand_score(km.labels_, kfed.labels_) == 1.0
    assert kfed.inertia_ == pytest.approx(km.inertia_, rel=1e-9)


def test_no_warning_on_regular_fit(structured):
    X, _, partitions = structured
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _fit_structured(X, partitions)


def test_single_seeding_without_refinement(structured):
    # n_init=0: one k-means++ seeding on the projection, as in the paper's
    # minimal Algorithm 1; still exact on this well-separated mixture.
    X, y, partitions = structured
    kfed = _fit_structured(X, partitions, n_init=0)
    assert matched_accuracy(y, kfed.labels_) == 1.0


def test_thread_limits_restored_after_threaded_fit(structured):
    # Client steps call KMeans from several threads; their BLAS limits must
    # not leak out of the fit.
    X, _, partitions = structured
    before = {(i["filepath"], i["num_threads"]) for i in threadpool_info()}
    with joblib.parallel_config(backend="threading"):
        _fit_structured(X, partitions, n_jobs=2)
    after = {(i["filepath"], i["num_threads"]) for i in threadpool_info()}
    assert after == before


def test_leave_clients_out_cross_validation(blobs):
    X, _ = blobs
    partitions = np.arange(len(X)) % 6
    cv = GroupKFold(n_splits=3)
    scores = cross_validate(
        KFed(n_clusters=4, random_state=0),
        X,
        groups=partitions,
        cv=cv,
        params={"partitions": partitions},
    )["test_score"]
    # Each test fold holds two unseen clients (about a third of the data);
    # the score is minus their k-means cost against the trained centers.
    full = KFed(n_clusters=4, random_state=0).fit(X, partitions=partitions)
    assert_allclose(scores.sum(), -full.inertia_, rtol=0.05)


def test_local_centers_are_means_of_local_clusters_after_early_stop():
    # With max_iter=1 the local Lloyd stops before converging; the uploaded
    # centers must still be the means of the final local clusters, so the
    # size-weighted global centers are the centroids of labels_.
    X, _ = make_blobs(400, centers=6, n_features=4, cluster_std=2.5, random_state=0)
    kfed = KFed(n_clusters=6, max_iter=1, random_state=0).fit(X, partitions=3)
    induced = kfed.induced_labels_
    centroids = np.array([X[induced == r].mean(axis=0) for r in range(6)])
    assert_allclose(kfed.cluster_centers_, centroids, rtol=1e-10, atol=1e-10)
    # Against the nearest centers, no more than against the induced ones.
    sq = ((X[:, None, :] - kfed.cluster_centers_[None]) ** 2).sum(axis=2)
    assert kfed.inertia_ == pytest.approx(sq.min(axis=1).sum(), rel=1e-10)
    assert kfed.inertia_ <= sq[np.arange(len(X)), induced].sum()


def test_partial_fit_refuses_changed_settings(blobs):
    X, _ = blobs
    kfed = KFed(n_clusters=4, random_state=0).fit(X[:300], partitions=2)
    with pytest.raises(ValueError, match="center_weighting='uniform' differs"):
        kfed.set_params(center_weighting="uniform").partial_fit(X[300:])
    with pytest.raises(ValueError, match="n_clusters=3 differs"):
        kfed.set_params(center_weighting="size", n_clusters=3).partial_fit(X[300:])


# -- sample weights -------------------------------------------------------------


def test_unit_weights_are_no_weights(structured):
    X, _, partitions = structured
    plain = _fit_structured(X, partitions)
    ones = KFed(n_clusters=16, n_local_clusters=4, random_state=3).fit(
        X, partitions=partitions, sample_weight=np.ones(len(X))
    )
    assert_array_equal(ones.cluster_centers_, plain.cluster_centers_)
    assert_array_equal(ones.labels_, plain.labels_)


def test_integer_weights_match_repeated_rows(structured):
    X, y, partitions = structured
    weights = np.random.RandomState(0).randint(1, 4, size=len(X))
    weighted = KFed(n_clusters=16, n_local_clusters=4, random_state=3).fit(
        X, partitions=partitions, sample_weight=weights
    )
    repeat = np.repeat(np.arange(len(X)), weights)
    repeated = _fit_structured(X[repeat], partitions[repeat])
    assert matched_accuracy(y, weighted.labels_) == 1.0
    assert adjusted_rand_score(weighted.labels_[repeat], repeated.labels_) == 1.0
    order = linear_sum_assignment(
        euclidean_distances(weighted.cluster_centers_, repeated.cluster_centers_)
    )[1]
    assert_allclose(
        weighted.cluster_centers_, repeated.cluster_centers_[order], rtol=1e-10
    )
    assert weighted.inertia_ == pytest.approx(repeated.inertia_, rel=1e-10)
    # Sizes uploaded with center_weighting="size" are the weighted sizes:
    # the global centers are the weighted centroids of the induced clusters.
    induced = weighted.induced_labels_
    centroids = np.array(
        [
            np.average(X[induced == r], axis=0, weights=weights[induced == r])
            for r in range(16)
        ]
    )
    assert_allclose(weighted.cluster_centers_, centroids, rtol=1e-10, atol=1e-10)


def test_weighted_fit_is_invariant_to_sample_order(structured):
    X, _, partitions = structured
    rng = np.random.RandomState(1)
    weights = rng.uniform(0.5, 2.0, size=len(X))
    perm = rng.permutation(len(X))
    a = KFed(n_clusters=16, n_local_clusters=4, random_state=3).fit(
        X, partitions=partitions, sample_weight=weights
    )
    b = KFed(n_clusters=16, n_local_clusters=4, random_state=3).fit(
        X[perm], partitions=partitions[perm], sample_weight=weights[perm]
    )
    assert_allclose(b.cluster_centers_, a.cluster_centers_, rtol=1e-12)
    assert_array_equal(b.labels_, a.labels_[perm])


def test_zero_weights_do_not_move_centers(structured):
    X, y, partitions = structured
    weights = np.ones(len(X))
    weights[::7] = 0.0
    kfed = KFed(n_clusters=16, n_local_clusters=4, random_state=3).fit(
        X, partitions=partitions, sample_weight=weights
    )
    assert matched_accuracy(y, kfed.labels_) == 1.0
    kept = weights > 0
    centroids = np.array(
        [X[kept & (kfed.induced_labels_ == r)].mean(axis=0) for r in range(16)]
    )
    assert_allclose(kfed.cluster_centers_, centroids, rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match="Negative values"):
        KFed(n_clusters=16).fit(X, partitions=partitions, sample_weight=-weights)


@pytest.mark.parametrize("center_weighting", ["size", "uniform"])
def test_zero_weight_rows_are_as_if_removed_on_small_clients(center_weighting):
    # Client 2 holds 3 distinct rows <= k(2) = 3, one an outlier of weight 0:
    # it must not become a local (and then a global) center.
    rng = np.random.RandomState(0)
    X = np.vstack(
        [
            rng.normal(size=(30, 2)),
            rng.normal(size=(30, 2)) + 10,
            [[100.0, 100.0], [5.0, 5.0], [0.0, 0.0]],
        ]
    )
    partitions = np.repeat([0, 1, 2], [30, 30, 3])
    weights = np.ones(len(X))
    weights[60] = 0.0
    params = {
        "n_clusters": 3,
        "n_local_clusters": {0: 2, 1: 2, 2: 3},
        "center_weighting": center_weighting,
        "random_state": 0,
    }
    weighted = KFed(**params).fit(X, partitions=partitions, sample_weight=weights)
    kept = weights > 0
    removed = KFed(**params).fit(X[kept], partitions=partitions[kept])
    assert_allclose(weighted.cluster_centers_, removed.cluster_centers_)
    assert_array_equal(weighted.labels_[kept], removed.labels_)
    assert weighted.local_centers_[2].shape == (2, 2)
    # The zero-weight row is still labelled: induced by its nearest local
    # center, and by its nearest global center in labels_.
    assert weighted.induced_labels_[60] == weighted.induced_labels_[61]
    assert_array_equal(weighted.labels_, weighted.predict(X))


def test_client_with_only_zero_weights_raises_or_is_dropped_on_request(blobs):
    X, _ = blobs
    partitions = np.arange(len(X)) % 3
    weights = np.where(partitions == 2, 0.0, 1.0)
    with pytest.raises(ClientValueError, match="Client 2 .*weights .* are zero"):
        KFed(n_clusters=4, random_state=0).fit(
            X, partitions=partitions, sample_weight=weights
        )
    kfed = KFed(n_clusters=4, on_client_error="drop", random_state=0).fit(
        X, partitions=partitions, sample_weight=weights
    )
    assert set(kfed.failed_clients_) == {2}
    assert "are zero" in kfed.failed_clients_[2]
    assert (kfed.labels_[partitions == 2] == -1).all()
    assert (kfed.labels_[partitions != 2] >= 0).all()


# -- hostile inputs ---------------------------------------------------------


def test_data_far_from_the_origin_is_clustered_as_near_it():
    # A probe: X + 1e9 gave ARI 0.02 (squared distances expanded
    # on raw coordinates cancel); scikit-learn's KMeans gives 0.77.
    X, y = make_blobs(300, centers=3, n_features=2, random_state=0)
    km = KMeans(3, n_init=10, random_state=0).fit(X + 1e9)
    kfed = KFed(3, random_state=0).fit(X + 1e9, partitions=3)
    assert adjusted_rand_score(y, kfed.labels_) > 0.7
    assert adjusted_rand_score(km.labels_, kfed.labels_) > 0.8
    assert kfed.inertia_ < 1.1 * km.inertia_


@HYPOTHESIS
@given(
    exponent=st.integers(0, 9),
    sign=st.sampled_from([-1.0, 1.0]),
    seed=st.integers(0, 2**16),
)
def test_translation_moves_the_model_with_the_data(exponent, sign, seed):
    # Well-separated clusters, so that the clients' random draws (which
    # depend on the rows' values) cannot change the local clusterings: the
    # model on X + t is the model on X shifted by t, to float rounding, for
    # offsets up to 1e9 times the spread. One local cluster per blob
    # (k(z) = k): the default's finer local clusters split blobs where
    # those draws decide.
    X, _ = make_blobs(300, centers=4, n_features=3, cluster_std=0.5, random_state=0)
    rng = np.random.RandomState(seed)
    t = sign * 10.0**exponent * X.std(axis=0).max() * rng.uniform(0.5, 1, size=3)
    ref = KFed(4, n_local_clusters=4, random_state=seed).fit(X, partitions=3)
    model = KFed(4, n_local_clusters=4, random_state=seed).fit(X + t, partitions=3)
    atol = 8 * np.finfo(float).eps * (np.abs(t).max() + np.abs(X).max())
    assert_array_equal(model.labels_, ref.labels_)
    assert_allclose(model.cluster_centers_ - t, ref.cluster_centers_, atol=atol)
    assert_array_equal(model.predict(X + t), ref.predict(X))
    assert_allclose(model.transform(X + t), ref.transform(X), atol=atol)
    scale = X.shape[0] * atol * (1 + np.abs(ref.transform(X)).max())
    assert model.inertia_ == pytest.approx(ref.inertia_, abs=scale)
    assert model.score(X + t) == pytest.approx(ref.score(X), abs=scale)
    for cid, centers in ref.local_centers_.items():
        # The order of a client's local clusters follows its random draws.
        shifted = model.local_centers_[cid] - t
        order = euclidean_distances(centers, shifted).argmin(axis=1)
        assert_allclose(shifted[order], centers, atol=atol)


@pytest.mark.parametrize(
    "param", ["n_clusters", "n_local_clusters", "n_init", "max_iter", "tol"]
)
def test_boolean_parameters_are_refused(blobs, param):
    X, _ = blobs
    with pytest.raises(InvalidParameterError, match=param):
        KFed(**{param: True}).fit(X, partitions=3)


def test_n_init_is_clipped_to_the_client_sizes(blobs, monkeypatch):
    # n_init=10**7 on small clients must not run ten million seedings: each
    # client runs at most as many as it has samples, with a warning.
    X, _ = blobs
    X = X[:60]
    asked = []
    original = kfed_module._kmeans

    def spy(*args, **kwargs):
        asked.append(kwargs.get("n_init"))
        if kwargs.get("n_init", 1) > 20:
            raise AssertionError(f"n_init={kwargs['n_init']} on 20 samples")
        return original(*args, **kwargs)

    monkeypatch.setattr(kfed_module, "_kmeans", spy)
    with pytest.warns(UserWarning, match="n_init=10000000 exceeds .* 3 client"):
        kfed = KFed(4, n_init=10**7, random_state=0).fit(X, partitions=3)
    assert 20 in asked
    assert kfed.failed_clients_ == {}


@pytest.mark.parametrize(
    "make",
    [
        lambda X: X * 1e300,
        lambda X: X * 1e-300,
        lambda X: np.where(np.arange(X.size).reshape(X.shape) == 7, 1e300, X),
    ],
    ids=["times 1e300", "times 1e-300", "one 1e300 entry"],
)
def test_extreme_magnitudes_are_refused_with_the_fix(blobs, make):
    X, _ = blobs
    bad = make(X)
    with pytest.raises(ValueError, match="Rescale the features"):
        KFed(4, random_state=0).fit(bad, partitions=3)
    kfed = KFed(4, random_state=0).fit(X, partitions=3)
    for method in ("predict", "transform", "score"):
        with pytest.raises(ValueError, match="Rescale the features"):
            getattr(kfed, method)(bad)


def test_fewer_distinct_samples_than_clusters_warns_like_kmeans():
    # The defaults (n_clusters=8) on data with 4 distinct rows: KMeans warns
    # and duplicates centers; KFed did the same only when the clients
    # offered k centers, and raised otherwise.
    X = np.repeat([[1.0, 3.0], [2.0, 1.0], [3.0, 3.0], [4.0, 1.0]], 4, axis=0)
    with pytest.warns(ConvergenceWarning, match="distinct clusters \\(4\\)"):
        kfed = KFed(random_state=0).fit(X)
    with pytest.warns(ConvergenceWarning, match="distinct clusters \\(4\\)"):
        km = KMeans(random_state=0).fit(X)
    assert kfed.cluster_centers_.shape == (8, 2)
    assert len(np.unique(kfed.cluster_centers_, axis=0)) == 4
    assert adjusted_rand_score(km.labels_, kfed.labels_) == 1.0
    assert kfed.inertia_ == 0.0


@pytest.mark.parametrize("center_weighting", ["size", "uniform"])
def test_zero_weights_are_as_if_the_rows_were_removed(center_weighting):
    # Overlapping clusters, so that the clients' random draws matter: the
    # rows of zero weight must not change them (they did in 6 of these 10
    # seeds: other seedings, cost 55.0 against 53.9 in that probe).
    X, _ = make_blobs(200, centers=4, n_features=2, cluster_std=1.5, random_state=0)
    rng = np.random.RandomState(0)
    partitions = rng.randint(3, size=len(X))
    weights = np.where(rng.uniform(size=len(X)) < 0.2, 0.0, 1.0)
    kept = weights > 0
    params = {"n_clusters": 4, "n_local_clusters": 3}
    params["center_weighting"] = center_weighting
    for seed in range(10):
        weighted = KFed(**params, random_state=seed).fit(
            X, partitions=partitions, sample_weight=weights
        )
        removed = KFed(**params, random_state=seed).fit(
            X[kept], partitions=partitions[kept]
        )
        assert_allclose(weighted.cluster_centers_, removed.cluster_centers_, rtol=1e-12)
        assert_array_equal(weighted.labels_[kept], removed.labels_)
        assert weighted.inertia_ == pytest.approx(removed.inertia_, rel=1e-12)


@pytest.mark.slow
def test_projected_theta_recovers_mixtures_where_kmeans_does():
    # The paper's setting at 6 noise σ between means (d=100, k=64, k'=8,
    # five clients per group of 8 components). With θ_r the full-space mean
    # of the pruned set S_r, a one-point S_r became a noisy raw row that
    # Lloyd kept as a cluster of its own: 7% accuracy, against 86% for
    # KMeans(n_init=1). With the projected mean mean(P[S_r]) Vᵀ: 91%.
    k, d, k_local = 64, 100, 8
    ours, theirs = [], []
    for seed in range(3):
        rng = np.random.RandomState(1000 + seed)
        means = rng.normal(scale=6.0 / np.sqrt(2 * d), size=(k, d))
        y = np.repeat(np.arange(k), 100)
        X = means[y] + rng.standard_normal((len(y), d))
        parts = labels_per_client(y, k_local, clients_per_group=5, random_state=seed)
        kfed = KFed(k, n_local_clusters=k_local, random_state=seed)
        ours.append(matched_accuracy(y, kfed.fit_predict(X, partitions=parts)))
        km = KMeans(k, n_init=1, random_state=seed).fit(X)
        theirs.append(matched_accuracy(y, km.labels_))
    assert np.mean(ours) >= np.mean(theirs)


def test_over_clustering_k_prime_above_k(blobs):
    # k' > k: each client finds more local clusters than there
    # are global ones; the merge groups them. Twice the upload, and on
    # label-skewed digits it reached KMeans' NMI (0.752 vs 0.741 with 10
    # clients, k' = 2k; 0.699 with k' = k).
    X, y = blobs
    kfed = KFed(n_clusters=4, n_local_clusters=8, random_state=0).fit(X, partitions=3)
    assert adjusted_rand_score(y, kfed.labels_) == 1.0
    # The ledger: k'(d + 1) floats up per client (centers and sizes).
    up = kfed.communication_.records[0]
    assert up.direction == "upload"
    assert list(up.floats) == [8 * (X.shape[1] + 1)] * 3


@pytest.mark.parametrize("seed", range(3))
def test_robust_merge_never_worse_than_farthest_point(seed):
    # The default server merge (weighted k-means++ and Lloyd over the pooled
    # centres, best of server_n_init) against the paper's farthest point +
    # one Lloyd round, same uploads: label-skewed digits, 10 clients.
    from sklearn.datasets import load_digits

    from skfed.partition import label_dirichlet

    X, y = load_digits(return_X_y=True)
    ids = label_dirichlet(y, 10, alpha=0.3, min_size=5, random_state=seed)
    robust = KFed(10, random_state=seed).fit(X, partitions=ids)
    paper = KFed(10, merge="farthest", random_state=seed).fit(X, partitions=ids)
    assert robust.merge == "kmeans"
    assert -robust.score(X) <= -paper.score(X)
    km = KMeans(10, n_init=10, random_state=seed).fit(X)
    assert -robust.score(X) <= 1.07 * km.inertia_
    assert robust.communication_.upload_floats == paper.communication_.upload_floats


@pytest.mark.parametrize("seed", range(3))
def test_server_merge_restarts_side_by_side_or_in_turn_are_alike(seed, monkeypatch):
    # The server runs its restarts side by side up to a size
    # (weighted_kmeans), one after another above it: the same algorithm
    # with its draws in another order, so alike quality.
    from sklearn.datasets import load_digits

    from skfed.partition import label_dirichlet

    X, y = load_digits(return_X_y=True)
    ids = label_dirichlet(y, 10, alpha=0.3, min_size=5, random_state=seed)
    batched = KFed(10, random_state=seed).fit(X, partitions=ids)
    monkeypatch.setattr(restarts_module, "_BATCHED_RESTARTS_FLOATS", 0)
    in_turn = KFed(10, random_state=seed).fit(X, partitions=ids)
    # The same uploads; the centers differ only by the server's draws.
    assert batched.local_centers_.keys() == in_turn.local_centers_.keys()
    for cid, centers in batched.local_centers_.items():
        assert_array_equal(centers, in_turn.local_centers_[cid])
    assert -batched.score(X) == pytest.approx(-in_turn.score(X), rel=0.03)
    km = KMeans(10, n_init=10, random_state=seed).fit(X)
    assert -batched.score(X) <= 1.07 * km.inertia_


def test_better_of_keeps_the_cheaper_local_solution():
    # The default local step keeps the lower weighted local cost of the
    # Awasthi–Sheffet result and plain k-means++/Lloyd (local work only).
    from skfed.cluster._protocols._kfed_local import _better_of

    rng = np.random.RandomState(0)
    X = np.vstack([rng.normal(0, 1, (30, 2)), rng.normal(10, 1, (30, 2))])
    w = rng.uniform(0.5, 2.0, 60)
    truth = np.repeat([0, 1], 30)
    good = (np.array([X[truth == 0].mean(0), X[truth == 1].mean(0)]), truth, 3)
    split = (rng.permutation(X.shape[0]) % 2).astype(np.intp)
    bad = (np.array([X[split == 0].mean(0), X[split == 1].mean(0)]), split, 5)
    assert _better_of(X, w, bad, good) is good
    assert _better_of(X, w, good, bad) is good


@pytest.mark.slow
def test_local_step_and_merge_match_kmeans_on_label_skewed_digits():
    # The target: NMI within 0.03 of KMeans(n_init=10) and cost at
    # most 1.07 times its cost, 10 clients, Dirichlet(0.3). Met with k' = 2k
    # (NMI gap -0.004 in the benchmark); with the default k' = k the cost
    # is met and the NMI gap is 0.023-0.032 depending on the seeds.
    from sklearn.datasets import load_digits
    from sklearn.metrics import normalized_mutual_info_score as nmi

    from skfed.partition import label_dirichlet

    X, y = load_digits(return_X_y=True)
    over, default, theirs, ratio = [], [], [], []
    for seed in range(3):
        ids = label_dirichlet(y, 10, alpha=0.3, min_size=5, random_state=seed)
        km = KMeans(10, n_init=10, random_state=seed).fit(X)
        theirs.append(nmi(y, km.labels_))
        kfed = KFed(10, n_local_clusters=20, random_state=seed).fit(X, partitions=ids)
        over.append(nmi(y, kfed.labels_))
        ratio.append(-kfed.score(X) / km.inertia_)
        plain = KFed(10, random_state=seed).fit(X, partitions=ids)
        default.append(-plain.score(X) / km.inertia_)
    assert np.mean(over) >= np.mean(theirs) - 0.03
    assert np.mean(ratio) <= 1.07
    assert np.mean(default) <= 1.07


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_small_client_kmeans_matches_scikit_learn(monkeypatch, dtype):
    # Small clients run k-means on arrays (no KMeans.fit overhead); the
    # cost must be KMeans' own, from k-means++ and from a given init.
    from sklearn.datasets import make_blobs

    X, _ = make_blobs(300, centers=6, n_features=5, random_state=3)
    X = X.astype(dtype)
    w = np.random.RandomState(0).uniform(0.5, 2.0, 300)

    def cost(centers):
        d2 = ((X[:, None, :] - centers[None]) ** 2).sum(axis=2).min(axis=1)
        return float(w @ d2)

    def kmeans(**kwargs):
        # A generator step helper: its small k-means is handed over.
        return run_alone(kfed_module._kmeans(X, w, 6, **kwargs))

    kw = {"n_init": 5, "max_iter": 300, "tol": 1e-4, "seed": 0}
    small = kmeans(**kw)
    init = X[:6].astype(np.float64)
    small_init = kmeans(init=init, **dict(kw, n_init=1))
    monkeypatch.setattr(kfed_module, "SMALL_ROWS", 0)
    large = kmeans(**kw)
    large_init = kmeans(init=init, **dict(kw, n_init=1))
    assert cost(small[0]) == pytest.approx(cost(large[0]), rel=0.01)
    assert cost(small_init[0]) == pytest.approx(cost(large_init[0]), rel=0.01)
    # Labels are the nearest centers.
    for centers, labels, _ in (small, small_init):
        d2 = ((X[:, None, :] - centers[None]) ** 2).sum(axis=2)
        np.testing.assert_array_equal(labels, d2.argmin(axis=1))


def test_greedy_seeding_takes_one_seed_per_blob_and_no_zero_weight_row():
    # Greedy k-means++ on far-apart blobs: each new center lowers the
    # potential most in an unseeded blob, so the k seeds cover the k blobs;
    # a row of weight 0 has no mass to be drawn.
    X, y = make_blobs(3000, centers=20, n_features=5, cluster_std=0.1, random_state=0)
    X = X - X.mean(axis=0)
    weights = np.ones(X.shape[0])
    weights[::7] = 0.0
    X_f32 = X.astype(np.float32)
    sq_norms = np.einsum("ij,ij->i", X_f32, X_f32)
    for seed in range(5):
        rng = np.random.RandomState(np.random.PCG64(seed))
        seeds = weighted_kmeans_plusplus(X_f32, weights, 20, rng, x_sq=sq_norms)
        assert sorted(y[seeds]) == list(range(20))
        assert np.all(weights[seeds] > 0)


def test_large_clients_local_cost_matches_kmeans():
    # Clients above SMALL_ROWS rows run the greedy float32 seeding; their
    # best-of-n_init local cost must match KMeans' own restarts on the same
    # rows (mean over seeds, within 1%).
    rng = np.random.RandomState(0)
    k, d, n = 32, 10, 2 * kfed_module.SMALL_ROWS + 500
    means = rng.normal(scale=8.0 / np.sqrt(2 * d), size=(k, d))
    ratios = []
    for seed in range(4):
        X = means[rng.randint(k, size=n)] + rng.normal(size=(n, d))
        X -= X.mean(axis=0)
        rows = lloyd_rows(X, np.ones(n), 1e-4)
        centers, labels, _ = kfed_module._restarts(
            rows, k, n_init=3, max_iter=300, seed=seed
        )
        ours = ((X - centers[labels]) ** 2).sum()
        ratios.append(ours / KMeans(k, n_init=3, random_state=seed).fit(X).inertia_)
    assert np.mean(ratios) <= 1.01


@pytest.mark.parametrize("backend", ["threading", "loky"])
def test_large_clients_invariant_to_n_jobs(backend):
    # Clients above SMALL_ROWS rows take the float32 greedy seeding: its
    # draws must not depend on where the clients run.
    k = kfed_module.GREEDY_MIN_CLUSTERS
    X, _ = make_blobs(
        2 * kfed_module.SMALL_ROWS + 400, centers=k, n_features=6, random_state=1
    )
    partitions = np.arange(X.shape[0]) % 2
    reference = KFed(k, random_state=0).fit(X, partitions=partitions)
    with joblib.parallel_config(backend=backend):
        model = KFed(k, n_jobs=2, random_state=0).fit(X, partitions=partitions)
    assert_allclose(model.cluster_centers_, reference.cluster_centers_, rtol=1e-12)
    assert_array_equal(model.labels_, reference.labels_)


# -- compute_labels -------------------------------------------------------------


@pytest.fixture(scope="module")
def induced_differs():
    """Blobs over three clients on which some induced labels differ from
    the nearest global center (predict, and labels_), with the fit that
    shows it."""
    X, _ = make_blobs(3000, centers=4, random_state=0)
    partitions = np.arange(X.shape[0]) % 3
    model = KFed(4, random_state=0).fit(X, partitions=partitions)
    assert not np.array_equal(model.predict(X), model.induced_labels_)
    assert_array_equal(model.predict(X), model.labels_)
    return X, partitions, model


@pytest.mark.parametrize("n_jobs", [None, 2])
def test_compute_labels_false_keeps_the_model_and_gathers_no_label(
    induced_differs, monkeypatch, n_jobs
):
    X, partitions, reference = induced_differs
    gathered = gathered_outputs(monkeypatch)
    model = KFed(4, random_state=0, compute_labels=False, n_jobs=n_jobs)
    model.fit(X, partitions=partitions)
    assert gathered == []
    assert not hasattr(model, "labels_")
    assert not hasattr(model, "induced_labels_")
    # The same rounds and server steps: the same model, bit for bit.
    assert_array_equal(model.cluster_centers_, reference.cluster_centers_)
    assert model.inertia_ == reference.inertia_
    for cid, labels in reference.local_center_labels_.items():
        assert_array_equal(model.local_center_labels_[cid], labels)
    assert model.communication_.to_records() == reference.communication_.to_records()
    # A refit leaves no labels_ from an earlier fit that gathered them.
    model.set_params(compute_labels=True).fit(X, partitions=partitions)
    assert_array_equal(model.labels_, reference.labels_)
    assert_array_equal(model.induced_labels_, reference.induced_labels_)
    model.set_params(compute_labels=False).fit(X, partitions=partitions)
    assert not hasattr(model, "labels_")
    assert not hasattr(model, "induced_labels_")


def test_fit_predict_without_labels_returns_the_labels(induced_differs):
    X, partitions, reference = induced_differs
    model = KFed(4, random_state=0, compute_labels=False)
    labels = model.fit_predict(X, partitions=partitions)
    # labels_ of compute_labels=True, which are predict's, not the induced.
    assert_array_equal(labels, reference.labels_)
    assert_array_equal(labels, model.predict(X))
    assert not hasattr(model, "labels_")
    assert_array_equal(model.cluster_centers_, reference.cluster_centers_)
    assert_array_equal(
        KFed(4, random_state=0).fit_predict(X, partitions=partitions),
        reference.labels_,
    )


def test_partial_fit_without_labels(structured, monkeypatch):
    X, _, partitions = structured
    new = np.isin(partitions, np.unique(partitions)[::3])
    reference = _fit_structured(X[~new], partitions[~new])
    reference.partial_fit(X[new], partitions=partitions[new])
    model = _fit_structured(X[~new], partitions[~new], compute_labels=False)
    gathered = gathered_outputs(monkeypatch)
    model.partial_fit(X[new], partitions=partitions[new])
    assert gathered == []
    assert not hasattr(model, "labels_")
    assert_array_equal(model.cluster_centers_, reference.cluster_centers_)
    assert model.inertia_ == reference.inertia_
    assert model.local_center_labels_.keys() == reference.local_center_labels_.keys()
    for cid, labels in reference.local_center_labels_.items():
        assert_array_equal(model.local_center_labels_[cid], labels)


class _Streams:
    """Stands for a client's named random streams in the basis tests."""

    def random_state(self, name, *keys):
        return np.random.RandomState(0)


@pytest.mark.parametrize(
    "shape, rank",
    [
        ((500, 40), 6),  # few features: the d x d Gram matrix
        ((160, 300), 4),  # few rows: the n x n Gram matrix
        ((600, 300), 5),  # neither: randomized_svd
        ((5, 300), 8),  # fewer rows than the rank asked for
    ],
)
def test_projection_basis_spans_the_top_right_singular_vectors(shape, rank):
    # Whichever way the client computes it, the projection's basis is
    # orthonormal and spans the top right singular vectors of its rows
    # (a spectrum with a gap after the rank, so that span is well defined).
    rng = np.random.RandomState(0)
    n, d = shape
    signal = rng.normal(size=(n, min(rank, n))) @ rng.normal(size=(min(rank, n), d))
    X = 10 * signal + 0.01 * rng.normal(size=shape)
    X -= X.mean(axis=0)
    basis = kfed_module._top_right_singular_vectors(X, rank, _Streams())
    assert basis.shape[0] == d and min(rank, n) <= basis.shape[1] <= rank
    assert_allclose(basis.T @ basis, np.eye(basis.shape[1]), atol=1e-8)
    _, _, Vt = np.linalg.svd(X, full_matrices=False)
    # Every top singular vector of a positive singular value (centered
    # rows span one direction fewer than their number) lies in its span.
    top = Vt[: min(rank, np.linalg.matrix_rank(X))].T
    assert_allclose(basis @ (basis.T @ top), top, atol=1e-6)


# -- labels_ as predict, and the refinement rounds -----------------------------


def _nmi_gaps(X, y, k, partition, **params):
    """KMeans(n_init=1)'s NMI minus KFed's (labels_), over three seeds."""
    from sklearn.metrics import normalized_mutual_info_score as nmi

    gaps = []
    for seed in range(3):
        model = KFed(k, random_state=seed, **params)
        labels = model.fit(X, partitions=partition(seed)).labels_
        assert_array_equal(labels, model.predict(X))
        reference = KMeans(k, n_init=1, random_state=seed).fit_predict(X)
        gaps.append(nmi(y, reference) - nmi(y, labels))
    return np.array(gaps)


def test_labels_match_kmeans_nmi_on_label_skewed_digits():
    # One-shot (the default): measured mean gap -0.021 (KFed above KMeans);
    # -0.006 with k(z) = k, and the induced labels were 0.035 below.
    from sklearn.datasets import load_digits

    from skfed.partition import label_dirichlet

    X, y = load_digits(return_X_y=True)
    gaps = _nmi_gaps(
        X, y, 10, lambda s: label_dirichlet(y, 10, alpha=0.3, random_state=s)
    )
    assert gaps.mean() <= 0.02


def test_refinement_reaches_kmeans_nmi_on_standardised_wine():
    # Measured mean gap 0.011 with three refinement rounds (0.029 one-shot
    # with k(z) = k, which refinement closes on its own).
    from sklearn.datasets import load_wine

    from skfed.partition import iid

    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    gaps = _nmi_gaps(X, y, 3, lambda s: iid(len(X), 10, random_state=s), refine_iter=3)
    assert gaps.mean() <= 0.02


@pytest.mark.parametrize("data", ["iid digits", "standardised wine"])
def test_one_shot_labels_match_kmeans_nmi_on_iid_clients(data):
    # The default's finer local clusters (up to 2k on small clients): mean
    # gap measured -0.008 on digits and -0.002 on wine; with k(z) = k it
    # was 0.027 and 0.029. Still one upload round.
    from sklearn.datasets import load_digits, load_wine

    from skfed.partition import iid

    if data == "iid digits":
        (X, y), k = load_digits(return_X_y=True), 10
    else:
        (X, y), k = load_wine(return_X_y=True), 3
        X = StandardScaler().fit_transform(X)
    gaps = _nmi_gaps(X, y, k, lambda s: iid(len(X), 10, random_state=s))
    assert gaps.mean() <= 0.02
    model = KFed(k, random_state=0).fit(X, partitions=iid(len(X), 10, random_state=0))
    log = model.communication_
    assert model.n_refine_iter_ == 0
    assert log.n_upload_rounds == 1
    assert [(r.name, r.direction) for r in log] == [
        ("local centers", "upload"),
        ("cluster map", "download"),
        ("cluster map", "upload"),
    ]


def test_default_local_clusters_follow_the_client_sizes():
    # k(z) = min(2k, max(k, n_z // 4)) on clients of at most 2,048 rows,
    # k above; a client of at most k(z) rows uploads its rows.
    k = 4
    sizes = {"tiny": 3, "small": 22, "mid": 30, "big": 100, "large": 2100}
    X, _ = make_blobs(sum(sizes.values()), centers=k, random_state=0)
    partitions = np.repeat(list(sizes), list(sizes.values()))
    model = KFed(k, random_state=0).fit(X, partitions=partitions)
    expected = {"tiny": 3, "small": 5, "mid": 7, "big": 8, "large": 4}
    shapes = {c: len(centers) for c, centers in model.local_centers_.items()}
    assert shapes == expected
    assert model.raw_upload_clients_ == ["tiny"]
    (upload,) = [r for r in model.communication_ if r.name == "local centers"]
    floats = dict(zip(upload.clients, upload.floats))
    assert floats == {c: n * (X.shape[1] + 1) for c, n in expected.items()}
    # An explicit k(z) is kept whatever the client's size.
    model = KFed(k, n_local_clusters=k, random_state=0).fit(X, partitions=partitions)
    assert {c: len(v) for c, v in model.local_centers_.items()} == {
        c: min(n, k) for c, n in sizes.items()
    }


def test_default_local_clusters_add_no_raw_rows(blobs):
    # An outlier far from the blobs is a local cluster of one row: with an
    # explicit k(z) = 2k its center (the row) is uploaded and counted; the
    # default's clusters beyond k are merged away first.
    X, _ = blobs
    X = np.vstack([X[:199], X[:1] + 1e3])
    partitions = np.repeat([0, 1], [100, 100])
    explicit = KFed(4, n_local_clusters=8, random_state=0).fit(X, partitions=partitions)
    model = KFed(4, random_state=0).fit(X, partitions=partitions)
    (upload,) = [r for r in explicit.communication_ if r.name == "local centers"]
    assert upload.raw_rows == (0, 1)
    (upload,) = [r for r in model.communication_ if r.name == "local centers"]
    assert sum(upload.raw_rows) == 0 and upload.disclosure == "per_client"
    assert len(model.local_centers_[0]) == 8
    assert len(model.local_centers_[1]) == 7
    # The outlier still counts: the center it joined moved towards it.
    centers = model.local_centers_[1]
    assert np.abs(centers).max() > np.abs(X[100:199]).max()


def test_default_local_clusters_under_refuse_send_no_row(blobs):
    # Scattered outliers each make a local cluster of one row, more of
    # them than the default's clusters beyond k: under raw_rows="refuse"
    # every one is still merged, so no uploaded center is a row.
    X, _ = blobs
    rng = np.random.RandomState(0)
    outliers = 1e3 * rng.normal(size=(10, X.shape[1]))
    X = np.vstack([X[:40], outliers, X[40:90]])
    partitions = np.repeat([0, 1], [50, 50])  # k(z) = 8 on each
    model = KFed(4, raw_rows="refuse", random_state=0).fit(X, partitions=partitions)
    for cid, centers in model.local_centers_.items():
        own = X[partitions == cid]
        assert euclidean_distances(centers, own).min() > 1e-6
    assert len(model.local_centers_[1]) == 8
    assert len(model.local_centers_[0]) < 8
    # Allowed raw rows: the clusters beyond k are merged, the rest are
    # uploaded as rows and counted.
    allowed = KFed(4, random_state=0).fit(X, partitions=partitions)
    (upload,) = [r for r in allowed.communication_ if r.name == "local centers"]
    assert len(allowed.local_centers_[0]) == 4
    assert upload.raw_rows[0] >= 1


def test_refinement_rounds_are_lloyd_steps_over_the_clients(blobs):
    X, _ = blobs
    X = X + np.random.RandomState(0).normal(scale=2.0, size=X.shape)
    partitions = np.arange(len(X)) % 4
    weights = np.random.RandomState(1).uniform(0.5, 2.0, size=len(X))
    one_shot = KFed(4, random_state=0).fit(
        X, partitions=partitions, sample_weight=weights
    )
    assert one_shot.n_refine_iter_ == 0
    assert "lloyd refinement" not in one_shot.communication_.floats_by_name("upload")
    centers = one_shot.cluster_centers_
    for rounds in (1, 2):
        # Weighted Lloyd steps from the merged centers, on the pooled rows.
        labels = euclidean_distances(X, centers).argmin(axis=1)
        centers = np.array(
            [
                np.average(X[labels == r], axis=0, weights=weights[labels == r])
                for r in range(4)
            ]
        )
        model = KFed(4, random_state=0, refine_iter=rounds, tol=0).fit(
            X, partitions=partitions, sample_weight=weights
        )
        assert model.n_refine_iter_ == rounds
        assert_allclose(model.cluster_centers_, centers, rtol=1e-10, atol=1e-10)
        # labels_ and inertia_ follow the refined centers, as KMeans'.
        sq = euclidean_distances(X, model.cluster_centers_, squared=True)
        assert_array_equal(model.labels_, sq.argmin(axis=1))
        assert model.inertia_ == pytest.approx(weights @ sq.min(axis=1), rel=1e-10)
        # The induced labels are the merge's, whatever the refinement.
        assert_array_equal(model.induced_labels_, one_shot.induced_labels_)
        # Each round: k·d floats down and k(d + 1) up per client, sum-only.
        log = model.communication_
        k, d, m = 4, X.shape[1], 4
        up, down = log.floats_by_name("upload"), log.floats_by_name("download")
        assert up["lloyd refinement"] == rounds * m * k * (d + 1)
        assert down["lloyd refinement"] == rounds * m * k * d
        kinds = {r["name"]: r["disclosure"] for r in log.disclosure()}
        assert kinds["lloyd refinement"] == "sum_only"
        assert log.n_upload_rounds == 1 + rounds


def test_refinement_stops_once_the_centers_settle(blobs):
    X, _ = blobs
    model = KFed(4, random_state=0, refine_iter=50).fit(X, partitions=3)
    # Well separated blobs: the merge is at (or next to) Lloyd's fixed point.
    assert 1 <= model.n_refine_iter_ < 50


def test_masked_refinement_is_the_plain_one_within_the_precision(blobs):
    X, _ = blobs
    plain = KFed(4, random_state=0, refine_iter=2, tol=0).fit(X, partitions=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # something to mask: no warning
        masked = KFed(
            4, random_state=0, refine_iter=2, tol=0, secure_aggregation=True
        ).fit(X, partitions=3)
    assert_allclose(masked.cluster_centers_, plain.cluster_centers_, rtol=0, atol=1e-7)
    assert_array_equal(masked.labels_, plain.labels_)
    kinds = {r["name"]: r["disclosure"] for r in masked.communication_.disclosure()}
    assert "secure aggregation keys" in kinds


def test_refinement_is_refused_under_privacy(blobs):
    from skfed.privacy import DifferentialPrivacy

    X, _ = blobs
    dp = DifferentialPrivacy(epsilon=1.0, delta=1e-5, bounds=(-20.0, 20.0))
    with pytest.raises(ValueError, match="refine_iter=2 cannot run under privacy"):
        KFed(4, refine_iter=2, privacy=dp).fit(X, partitions=3)
