"""raw_rows="refuse" against a curious server: no upload is, or determines,
a row of a client's data.

The server here runs the protocol as written and keeps everything it
receives (:func:`received`, a spy on the transport's answers). Each attack
recovers a training row from one upload; under ``raw_rows="allow"`` it
succeeds (so the test can fail), under ``"refuse"`` the client merges or
refuses before anything leaves and the attack finds nothing. The ledger's
raw-row count is checked against what was sent.
"""

import warnings
from functools import partial

import numpy as np
import pytest
from scipy.optimize import least_squares
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

import skfed
from skfed._engine._federation import ClientStepError, Federation, client_config
from skfed._engine._validation import check_partitions
from skfed._numerics._rows import row_hashes
from skfed._testing import blobs, rows_found
from skfed.cluster._protocols._kfed_local import _few_row_clusters, local_step
from skfed.decomposition._protocols._random_features import statistics_step
from skfed.kernel import federated_gamma
from skfed.kernel._private_features import (
    feature_gram_statistics,
    paired_fourier_map,
    symmetric_from_upper,
)
from skfed.kernel._random_features import (
    feature_statistics_raw_rows,
    moments_raw_rows,
)
from skfed.privacy import DifferentialPrivacy
from skfed.privacy._refusal import MIN_ROWS, n_distinct_rows


def _blobs(n=300, d=4):
    return blobs(n, d, cluster_std=0.6)[0]


# -- KFed: an outlier's singleton local cluster ------------------------------


def _with_outlier(copies=1):
    X = _blobs()
    outlier = np.full((copies, X.shape[1]), 40.0)
    ids = np.r_[np.arange(len(X)) % 3, np.zeros(copies, dtype=int)]
    return np.vstack([X, outlier]), ids, len(X)


@pytest.mark.parametrize("copies", [1, 2])
def test_kfed_outlier_center_is_its_row_unless_refused(received, copies):
    X, ids, first = _with_outlier(copies)
    outlier = X[first : first + 1]
    skfed.KFed(n_clusters=3, n_local_clusters=4, random_state=0).fit(X, partitions=ids)
    # The attack works on the default fit: the outlier's row was uploaded.
    assert rows_found(received["uploads"], outlier) == {0}
    received["uploads"].clear()

    refused = skfed.KFed(
        n_clusters=3, n_local_clusters=4, random_state=0, raw_rows="refuse"
    ).fit(X, partitions=ids)
    local = [u for u in received["uploads"] if u[0] == "local centers"]
    assert len(local) == 3
    # No uploaded center is any training row, the outlier's included.
    assert rows_found(local, X) == set()
    assert refused.communication_.raw_rows == 0
    # The outlier's cluster was merged on its client: one center fewer.
    (client0,) = [u for _, c, u in local if c == 0]
    assert "rows" not in client0 and client0["centers"].shape[0] == 3


def test_kfed_refusal_is_the_same_with_allow_raw_upload_false(received):
    X, ids, _ = _with_outlier()
    est = skfed.KFed(
        n_clusters=3, n_local_clusters=4, random_state=0, allow_raw_upload=False
    )
    with pytest.warns(FutureWarning, match="allow_raw_upload"):
        est.fit(X, partitions=ids)
    assert rows_found(received["uploads"], X) == set()
    assert est.communication_.raw_rows == 0


def test_kfed_merge_leaves_means_of_at_least_two_distinct_rows():
    # The client side of the merge: a singleton, a cluster of two copies of
    # one row, an empty cluster and two ordinary clusters.
    rng = np.random.RandomState(0)
    rows = np.vstack(
        [
            rng.randn(6, 2),
            rng.randn(5, 2) + 10,
            [[30.0, 30.0]],
            [[-20.0, 5.0], [-20.0, 5.0]],
        ]
    )
    labels = np.r_[np.zeros(6), np.ones(5), 2, 3, 3].astype(np.intp)
    weights = np.ones(len(rows))
    offsets = np.vstack(
        [rows[labels == j].mean(0) for j in range(4)] + [[100.0, 100.0]]
    )
    # In hash order, as the client step holds them.
    hashes = row_hashes(rows)
    order = np.argsort(hashes)
    rows, labels, hashes = rows[order], labels[order], hashes[order]
    centers, new_offsets, new_labels, n_few = _few_row_clusters(
        rows, weights, hashes, offsets, offsets, labels, 0.0, merge=True
    )
    assert n_few == 0 and centers.shape[0] == len(np.unique(new_labels)) == 2
    for j, center in enumerate(centers):
        members = rows[new_labels == j]
        assert n_distinct_rows(members) >= MIN_ROWS
        np.testing.assert_allclose(center, members.mean(0), atol=1e-12)
    # Without the merge the few-row clusters go last, to be sent as rows.
    centers, _, kept_labels, n_few = _few_row_clusters(
        rows, weights, hashes, offsets, offsets, labels, 0.0, merge=False
    )
    assert n_few == 2
    np.testing.assert_array_equal(centers[-2:], offsets[[2, 3]])
    np.testing.assert_array_equal(centers[kept_labels], offsets[labels])


def test_kfed_ledger_counts_a_singleton_center_as_a_raw_row():
    X, ids, _ = _with_outlier()
    allowed = skfed.KFed(n_clusters=3, n_local_clusters=4, random_state=0).fit(
        X, partitions=ids
    )
    log = allowed.communication_
    assert log.raw_rows_by_client() == {0: 1}
    (local,) = [d for d in log.disclosure() if d["name"] == "local centers"]
    assert local["disclosure"] == "raw_rows" and local["raw_rows"] == {0: 1}
    assert "raw rows sent per client: 0: 1" in log.summary()
    # Same model as before the count: the singleton's center still takes
    # part, as a row.
    assert 40.0 in allowed.local_centers_[0]


def test_kfed_under_refuse_still_finds_the_blobs():
    # Ordinary data: blobs and a few far rows, clients of unequal sizes, as
    # many local clusters as make singletons likely.
    X, truth = make_blobs(400, centers=3, n_features=4, cluster_std=0.6, random_state=1)
    X[:4] += 8.0
    ids = np.r_[np.zeros(200, dtype=int), np.arange(200) % 4 + 1]
    est = skfed.KFed(
        n_clusters=3, n_local_clusters=6, random_state=0, raw_rows="refuse"
    ).fit(X, partitions=ids)
    assert est.communication_.raw_rows == 0
    assert adjusted_rand_score(truth[4:], est.labels_[4:]) > 0.99


# -- the kernel width: a one-row client's (1, x, 0) --------------------------


def _federation(X, ids, raw_rows, **settings):
    fed = Federation.from_arrays(
        X, None, check_partitions(ids, X.shape[0]), random_state=0
    )
    fed.raw_rows = raw_rows
    for key, value in settings.items():
        setattr(fed, key, value)
    return fed


def _one_row_client():
    X = _blobs(301)
    return X, np.r_[np.arange(300) % 3, 3]


@pytest.mark.parametrize("secure_aggregation", [False, True])
def test_width_upload_of_a_one_row_client_is_its_row_unless_refused(
    received, secure_aggregation
):
    X, ids = _one_row_client()
    row = X[-1:]
    with _federation(X, ids, "allow", secure_aggregation=secure_aggregation) as fed:
        federated_gamma(fed, "kernel width")
    sent = [u for _, c, u in received["uploads"] if c == 3]
    if not secure_aggregation:
        # (1, x, 0): the attack reads the row off the upload.
        (upload,) = sent
        assert upload[0] == 1 and upload[2] == 0
        np.testing.assert_array_equal(upload[1], row[0])
        assert fed.log.raw_rows_by_client() == {3: 1}
    received["uploads"].clear()

    with _federation(X, ids, "refuse", secure_aggregation=secure_aggregation) as fed:
        with pytest.raises(ValueError, match="raw_rows='refuse'.*gamma"):
            federated_gamma(fed, "kernel width")
    # The client refused before it uploaded: nothing of it arrived.
    widths = [u for u in received["uploads"] if u[0].startswith("kernel width")]
    assert [c for _, c, _ in widths] and 3 not in [c for _, c, _ in widths]
    assert fed.log.raw_rows == 0


def test_kernel_kmeans_and_the_classifier_send_nothing_under_refuse(received):
    X, ids = _one_row_client()
    y = (X[:, 0] > X[:, 0].mean()).astype(int)
    # Kernel k-means fits row-free under refuse; the one-row client refuses
    # its first upload (the kernel width), and nothing of it arrives.
    with pytest.raises(ValueError, match="raw_rows='refuse'"):
        skfed.FederatedKernelKMeans(3, random_state=0, raw_rows="refuse").fit(
            X, partitions=ids
        )
    assert 3 not in [c for _, c, _ in received["uploads"]]
    received["uploads"].clear()
    # The classifier fits row-free under refuse (method="auto"); the
    # one-row client refuses its data-scale upload, and nothing of it
    # arrives.
    with pytest.raises(ValueError, match="raw_rows='refuse'"):
        skfed.FederatedRKHSClassifier(random_state=0, raw_rows="refuse").fit(
            X, y, partitions=ids
        )
    assert 3 not in [c for _, c, _ in received["uploads"]]


def test_kernel_kmeans_width_round_counts_a_one_row_client():
    X, ids = _one_row_client()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = skfed.FederatedKernelKMeans(3, random_state=0).fit(X, partitions=ids)
    (width,) = [
        d for d in est.communication_.disclosure() if d["name"] == "kernel width"
    ]
    assert width["disclosure"] == "raw_rows" and width["raw_rows"] == {3: 1}


def test_moments_count_what_determines_rows():
    x = np.array([1.0, 2.0])
    assert moments_raw_rows((1.0, x, 0.0)) == 1
    assert moments_raw_rows((5.0, x, 0.0)) == 1  # five copies of one row
    assert moments_raw_rows((2.0, np.array([3.0]), 0.5)) == 2  # 1-D pair
    assert moments_raw_rows((2.0, x, 0.5)) == 0
    assert moments_raw_rows((3.0, np.array([3.0]), 0.5)) == 0


def test_two_rows_in_one_dimension_need_three_for_the_width():
    # Mean and spread of two values solve for both: refused below three.
    X = np.r_[_blobs(300, d=1)[:, 0], 5.0, 7.0][:, None]
    ids = np.r_[np.arange(300) % 3, 3, 3]
    with _federation(X, ids, "refuse") as fed:
        with pytest.raises(ValueError, match="2 distinct row.*the 3"):
            federated_gamma(fed, "kernel width")


# -- kernel PCA on random features: a client's feature statistics ------------


def _solve_features(z, omega, offset, scale, n_starts=20, seed=0):
    """The server's attack: x with √(2/D) cos(xᵀΩ + b) = z, by least squares
    from random starts (it knows the map: it sent the seed)."""
    D = omega.shape[1]
    rng = np.random.RandomState(seed)
    best = None
    for _ in range(n_starts):
        start = rng.randn(omega.shape[0]) * scale
        fit = least_squares(
            lambda x: np.sqrt(2 / D) * np.cos(x @ omega + offset) - z, start
        )
        if best is None or fit.cost < best.cost:
            best = fit
    return best.x


def _feature_upload(uploads, client):
    (upload,) = [
        u for name, c, u in uploads if c == client and name.startswith("random")
    ]
    return upload


def _feature_message(messages):
    """The (seed, γ, kernel) the server sent with the statistics round."""
    return next(m for name, m in messages if name == "random feature statistics")


def test_feature_sum_of_a_one_row_client_is_its_row_unless_refused(received):
    X, ids = _one_row_client()
    D = 52
    params = {
        "n_components": 2,
        "solver": "random_features",
        "gamma": 0.1,
        "n_random_features": D,
        "random_state": 0,
    }
    est = skfed.DistributedKernelPCA(**params).fit(X, partitions=ids)
    upload = _feature_upload(received["uploads"], 3)
    seed, gamma, kernel = _feature_message(received["messages"])
    omega, offset = paired_fourier_map(seed, X.shape[1], D, gamma, kernel)
    z = upload[D * (D + 1) // 2 :]
    x = _solve_features(z, omega, offset, scale=X.std())
    # The attack recovers the row from the one upload.
    assert np.abs(x - X[-1]).max() < 1e-6
    assert est.communication_.raw_rows_by_client() == {3: 1}
    received["uploads"].clear()

    with pytest.raises(ValueError, match="raw_rows='refuse'"):
        skfed.DistributedKernelPCA(raw_rows="refuse", **params).fit(X, partitions=ids)
    assert [c for _, c, _ in received["uploads"] if c == 3] == []


def test_a_feature_gram_of_fewer_rows_than_features_spans_them(received):
    # Ten rows, D = 40 features: the range of the client's Gram matrix is
    # the span of their features, and the points whose features lie in it
    # are the rows. Refused under "refuse"; the attack works otherwise.
    rng = np.random.RandomState(0)
    X = np.vstack([_blobs(300, d=2), rng.randn(10, 2) * 2])
    ids = np.r_[np.arange(300) % 3, np.full(10, 3)]
    D = 40
    params = {
        "n_components": 2,
        "solver": "random_features",
        "gamma": 0.1,
        "n_random_features": D,
        "random_state": 0,
    }
    skfed.DistributedKernelPCA(**params).fit(X, partitions=ids)
    upload = _feature_upload(received["uploads"], 3)
    seed, gamma, kernel = _feature_message(received["messages"])
    omega, offset = paired_fourier_map(seed, 2, D, gamma, kernel)
    gram = symmetric_from_upper(upload[: D * (D + 1) // 2], D)
    values, vectors = np.linalg.eigh(gram)
    span = vectors[:, values > 1e-9 * values.max()]
    assert span.shape[1] == 10

    def off_span(x):
        z = np.sqrt(2 / D) * np.cos(x @ omega + offset)
        return z - span @ (span.T @ z)

    found = []
    for _ in range(60):
        fit = least_squares(off_span, rng.randn(2) * 3)
        # Zero but for the projection's rounding (about 1e-16 here).
        if fit.cost < 1e-14:
            found.append(fit.x)
    gaps = np.abs(np.array(found)[:, None] - X[-10:][None]).max(axis=2)
    assert (gaps.min(axis=0) < 1e-5).sum() >= 8  # all ten, when measured
    received["uploads"].clear()

    with pytest.raises(ValueError, match="n_random_features"):
        skfed.DistributedKernelPCA(raw_rows="refuse", **params).fit(X, partitions=ids)
    assert [c for _, c, _ in received["uploads"] if c == 3] == []


def test_feature_statistics_count_a_one_row_upload():
    D = 30
    omega, offset = paired_fourier_map(1, 3, D, 0.5)
    rows = np.random.RandomState(0).randn(4, 3)
    one = np.concatenate(feature_gram_statistics(rows[:1], omega, offset))
    copies = np.concatenate(feature_gram_statistics(rows[[0, 0]], omega, offset))
    four = np.concatenate(feature_gram_statistics(rows, omega, offset))
    assert feature_statistics_raw_rows(one, D) == 1
    assert feature_statistics_raw_rows(copies, D) == 0
    assert feature_statistics_raw_rows(four, D) == 0


def test_kernel_pca_under_refuse_fits_ordinary_data(received):
    X = _blobs(600)
    ids = np.arange(600) % 3
    params = {
        "n_components": 2,
        "solver": "random_features",
        "gamma": 0.1,
        "n_random_features": 60,
        "random_state": 0,
    }
    allowed = skfed.DistributedKernelPCA(**params).fit(X, partitions=ids)
    refused = skfed.DistributedKernelPCA(raw_rows="refuse", **params).fit(
        X, partitions=ids
    )
    assert refused.communication_.raw_rows == 0
    np.testing.assert_allclose(
        refused.transform(X[:50]), allowed.transform(X[:50]), rtol=1e-10, atol=1e-10
    )


def test_private_kernel_kmeans_fits_under_refuse(received):
    X, y = make_blobs(600, centers=3, cluster_std=0.5, random_state=0)
    est = skfed.FederatedKernelKMeans(
        3,
        gamma=0.2,
        n_random_features=60,
        random_state=0,
        raw_rows="refuse",
        privacy=DifferentialPrivacy(epsilon=10.0),
    ).fit(X, partitions=3)
    assert est.communication_.raw_rows == 0
    assert rows_found(received["uploads"], X) == set()


# -- KFed's refinement rounds: a client's one-row cluster ----------------------


def _refinement_rows(received):
    """Rows the server reads off the refinement rounds: a cluster's center
    plus its displacement sum over its weight, where the weight is one row's."""
    messages = [m for name, m in received["messages"] if name == "lloyd refinement"]
    uploads = [u for name, _, u in received["uploads"] if name == "lloyd refinement"]
    rows = []
    # One message per client and round, aligned with the uploads.
    for centers, (sums, totals) in zip(messages, uploads):
        one = np.isclose(totals, 1.0)
        rows.extend(np.asarray(centers)[one] + sums[one])
    return np.array(rows).reshape(-1, 4)


def test_kfed_refinement_sums_of_a_one_row_cluster_are_left_out(received):
    X, y = make_blobs(300, centers=3, n_features=4, cluster_std=0.6, random_state=0)
    # Client 2 holds blobs 1 and 2 and one row of blob 0: its blob-0 sum in
    # a refinement round is that row.
    lone = np.flatnonzero(y == 0)[0]
    ids = np.where(y == 0, 0, 1 + np.arange(len(y)) % 2)
    ids[lone] = 2
    kw = {"n_clusters": 3, "n_local_clusters": 2, "refine_iter": 2, "random_state": 0}
    skfed.KFed(**kw).fit(X, partitions=ids)
    stolen = _refinement_rows(received)
    assert np.abs(stolen - X[lone]).max(axis=1).min() <= 1e-9
    received["uploads"].clear()
    received["messages"].clear()

    refused = skfed.KFed(raw_rows="refuse", **kw).fit(X, partitions=ids)
    stolen = _refinement_rows(received)
    assert (
        len(stolen) == 0 or np.abs(stolen[:, None] - X[None]).max(axis=2).min() > 1e-6
    )
    assert refused.communication_.raw_rows == 0
    assert adjusted_rand_score(y, refused.labels_) > 0.99


# -- the refusal is the client's own setting -----------------------------------


def _refusing_federation(X):
    """Three clients made refusing raw rows (their own setting), whatever
    the server asks."""
    config = client_config(type("Refusing", (), {"raw_rows": "refuse"})())
    parts = check_partitions(np.arange(len(X)) % 3, len(X))
    return Federation.from_arrays(X, None, parts, random_state=0, client_config=config)


def test_a_refusing_client_refuses_a_step_asked_without_its_minimum():
    # A server that drops the minimum from its call (or asks k-FED's local
    # step for a small client's rows) is refused on the client, before the
    # step runs: raw_rows="refuse" is set when the client is made.
    with _refusing_federation(_blobs(60)) as fed:
        plain = partial(statistics_step, n_features=8)
        with pytest.raises(ClientStepError, match="refuses to send raw rows"):
            fed.run_round("features", plain, (0, 0.1, "rbf"), disclosure="sum_only")
        # Nor does a "noise" of zero deviation pass for privacy on a client
        # that is not private by its own setting.
        noiseless = partial(plain, noise=(1.0, 0.0, 0.0))
        with pytest.raises(ClientStepError, match="refuses to send raw rows"):
            fed.run_round("features", noiseless, (0, 0.1, "rbf"), disclosure="sum_only")
        options = {
            "n_clusters": 2,
            "n_init": 1,
            "max_iter": 5,
            "allow_raw_upload": True,
            "min_rows": 2,
        }
        with pytest.raises(ClientStepError, match="raw rows.*'allow_raw_upload'"):
            fed.run_round("local", partial(local_step, **options), None)
        # The local step's minimum behind each center, dropped: refused too.
        options.update(allow_raw_upload=False, min_rows=None)
        with pytest.raises(ClientStepError, match="raw rows.*'min_rows'"):
            fed.run_round("local", partial(local_step, **options), None)


# -- the federated scaler ------------------------------------------------------


def test_scaler_mean_of_a_one_row_client_is_its_row_unless_refused(received):
    X, ids = _one_row_client()
    scaler = skfed.preprocessing.FederatedStandardScaler().fit(X, partitions=ids)
    # The server's attack: N is public, so N times the share is the row.
    (upload,) = [
        u for name, c, u in received["uploads"] if c == 3 and name == "scaler mean"
    ]
    n_m, share = upload
    assert n_m == 1
    np.testing.assert_allclose(share * len(X), X[-1], rtol=1e-12)
    assert scaler.communication_.raw_rows_by_client() == {3: 1}
    received["uploads"].clear()

    refusing = skfed.preprocessing.FederatedStandardScaler(raw_rows="refuse")
    with pytest.raises(ValueError, match="1 distinct row.*count and mean"):
        refusing.fit(X, partitions=ids)
    assert 3 not in [c for _, c, _ in received["uploads"]]


def test_scaler_spread_of_a_two_row_client_is_refused():
    # With its count and the mean, the two sums of two values give both.
    X = np.r_[_blobs(300, d=2), [[5.0, 1.0], [7.0, -1.0]]]
    ids = np.r_[np.arange(300) % 3, 3, 3]
    refusing = skfed.preprocessing.FederatedStandardScaler(raw_rows="refuse")
    with pytest.raises(ValueError, match="2 distinct row.*the 3.*spread"):
        refusing.fit(X, partitions=ids)
    # The mean alone needs two: that fit goes through, as StandardScaler's.
    scaler = skfed.preprocessing.FederatedStandardScaler(
        raw_rows="refuse", with_std=False
    ).fit(X, partitions=ids)
    np.testing.assert_allclose(scaler.mean_, X.mean(axis=0), rtol=1e-12)
    assert scaler.communication_.raw_rows == 0


def test_a_refusing_scaler_client_refuses_a_mean_asked_without_its_minimum():
    from skfed.preprocessing._protocols._scaler import _mean_step

    with _refusing_federation(_blobs(60)) as fed:
        with pytest.raises(ClientStepError, match="refuses to send raw rows"):
            fed.run_round("scaler mean", _mean_step, 60, disclosure="sum_only")
