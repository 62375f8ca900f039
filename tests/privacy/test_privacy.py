"""What leaves a site: disclosure per round, raw rows by consent, and
secure aggregation of sum-only rounds."""

import functools
import warnings

import numpy as np
import pytest
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score

import skfed
from skfed._engine._codec import dumps, loads
from skfed._engine._federation import ClientStepError, Federation
from skfed._engine._ledger import (
    PER_CLIENT,
    RAW_ROWS,
    SUM_ONLY,
    Disclosure,
    raw_rows_of,
)
from skfed._engine._transports._common import StepFailure
from skfed._engine._validation import check_partitions
from skfed._testing import fail_on, first_rows, statistics
from skfed.kernel import federated_gamma
from skfed.privacy import _secure_aggregation as secagg

ESTIMATORS = {
    "KFed": lambda **kw: skfed.KFed(n_clusters=3, random_state=0, **kw),
    "DistributedKMeans": lambda **kw: skfed.DistributedKMeans(
        n_clusters=3, refine_iter=2, random_state=0, **kw
    ),
    "FederatedKernelKMeans": lambda **kw: skfed.FederatedKernelKMeans(
        n_clusters=3, random_state=0, **kw
    ),
    "DistributedKernelPCA": lambda **kw: skfed.DistributedKernelPCA(
        n_components=2, random_state=0, **kw
    ),
    "FederatedRKHSClassifier": lambda **kw: skfed.FederatedRKHSClassifier(
        random_state=0, **kw
    ),
}


def _data():
    X, y = make_blobs(300, centers=3, n_features=4, random_state=0)
    ids = np.arange(300) % 3
    return X, (y == 0).astype(int), ids


def _fit(name, **params):
    X, y, ids = _data()
    est = ESTIMATORS[name](**params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "FederatedRKHSClassifier":
            return est.fit(X, y, partitions=ids)
        return est.fit(X, partitions=ids)


def _federation(n_clients=3, offset=0.0):
    X, _, ids = _data()
    X = X + offset
    ids = np.arange(X.shape[0]) % n_clients
    p = check_partitions(ids, X.shape[0])
    return X, ids, Federation.from_arrays(X, None, p, random_state=0)


# -- 1. Disclosure -----------------------------------------------------------


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_every_round_of_every_estimator_declares_its_disclosure(name):
    log = _fit(name).communication_
    kinds = {r.disclosure for r in log.records if r.direction == "upload"}
    assert kinds <= {RAW_ROWS, PER_CLIENT, SUM_ONLY}
    assert all(r.disclosure for r in log.records)
    assert [d["name"] for d in log.disclosure()] == [
        r.name for r in log.records if r.direction == "upload"
    ]
    assert "disclosure" in log.summary()


def test_the_coreset_ledger_counts_the_rows_each_client_sampled():
    est = _fit("DistributedKMeans")
    log = est.communication_
    (sampling,) = [d for d in log.disclosure() if d["name"] == "coreset sampling"]
    assert sampling["disclosure"] == RAW_ROWS
    # Each client draws t_m rows (or sends all its rows when t_m covers them).
    sizes = np.bincount(_data()[2])
    expected = np.minimum(est.coreset_sample_counts_, sizes)
    assert [sampling["raw_rows"].get(c, 0) for c in range(3)] == list(expected)
    assert log.raw_rows == expected.sum()
    assert log.raw_rows_by_client() == {c: int(n) for c, n in enumerate(expected) if n}
    # The Lloyd sums and the total cost are sums only.
    kinds = {d["name"]: d["disclosure"] for d in log.disclosure()}
    assert kinds["lloyd refinement"] == kinds["coreset labels"] == SUM_ONLY
    assert kinds["coreset local cost"] == PER_CLIENT


def test_the_rkhs_ledger_counts_the_samples_sent_and_the_support_forwarded():
    est = _fit("FederatedRKHSClassifier")
    log = est.communication_
    assert log.raw_rows == est.n_samples_sent_
    assert log.raw_rows_by_client() == {
        c: len(s) for c, s in est.sent_samples_.items() if len(s)
    }
    forwarded = [d for d in log.disclosure() if d["name"] == "violating samples"]
    assert forwarded
    for d in forwarded:  # every client receives the model's centers alike
        assert len(d["forwarded_rows"]) == 3
        assert len(set(d["forwarded_rows"].values())) == 1
        assert min(d["forwarded_rows"].values()) > 0


@pytest.mark.parametrize(
    "params, sum_round",
    [
        ({"algorithm": "one_shot"}, "landmark feature statistics"),
        ({"algorithm": "one_shot", "features": "random"}, "random feature statistics"),
        ({"algorithm": "dspgd"}, "lanczos"),
    ],
)
def test_kernel_kmeans_counts_the_embedded_rows_it_samples(params, sum_round):
    # The coreset's rows are rows of the spectral embedding (s = 9 columns
    # here, X has 4): the server that made the embedding solves them for
    # rows of X, so the ledger counts them as raw rows.
    est = _fit("FederatedKernelKMeans", **params)
    log = est.communication_
    (sampling,) = [d for d in log.disclosure() if d["name"] == "coreset sampling"]
    assert est.embedding_.shape[1] >= 4
    assert sampling["disclosure"] == RAW_ROWS
    assert log.raw_rows == sum(sampling["raw_rows"].values()) > 0
    kinds = {d["name"]: d["disclosure"] for d in log.disclosure()}
    assert kinds[sum_round] == SUM_ONLY


def test_disclosure_of_kernel_pca_counts_representatives_forwarded():
    est = _fit("DistributedKernelPCA")
    log = est.communication_
    rounds = {d["name"]: d for d in log.disclosure()}
    for name in ("leverage sample", "adaptive sample"):
        assert rounds[name]["disclosure"] == RAW_ROWS
    # Every client receives every representative for the feature mean.
    n_rep = est.representatives_.shape[0] if hasattr(est, "representatives_") else None
    forwarded = set(rounds["feature mean"]["forwarded_rows"].values())
    assert len(forwarded) == 1
    if n_rep is not None:
        assert forwarded == {n_rep}
    assert rounds["feature mean"]["disclosure"] == SUM_ONLY


def test_a_sum_only_round_hands_the_server_only_the_sum():
    X, ids, fed = _federation()
    with fed:
        total = fed.run_round("stats", statistics, disclosure=SUM_ONLY)
        each = fed.run_round("stats", statistics, disclosure=PER_CLIENT)
    assert isinstance(total, tuple) and len(each) == 3
    np.testing.assert_allclose(total[0], X.sum(axis=0), rtol=1e-12)
    assert total[1]["n"] == X.shape[0] and isinstance(total[1]["n"], int)
    np.testing.assert_allclose(total[1]["ss"], (X**2).sum(), rtol=1e-12)


def test_raw_rows_are_counted_exactly_and_must_be_counted():
    _, _, fed = _federation()
    with fed:
        fed.run_round("rows", first_rows, 5, disclosure=raw_rows_of())
        with pytest.raises(ValueError, match="how many rows"):
            fed.run_round("rows", first_rows, 5, disclosure=RAW_ROWS)
        with pytest.raises(ValueError, match="one of"):
            fed.run_round("rows", first_rows, 5, disclosure="secret")
    assert fed.log.raw_rows_by_client() == {0: 5, 1: 5, 2: 5}
    text = fed.log.summary()
    assert "raw rows sent per client: 0: 5, 1: 5, 2: 5" in text


def test_a_per_client_round_that_sends_rows_is_recorded_as_raw_rows():
    _, _, fed = _federation()
    with fed:
        fed.run_round(
            "rows",
            first_rows,
            2,
            disclosure=Disclosure(PER_CLIENT, rows=lambda u: u.shape[0]),
        )
    (record,) = [r for r in fed.log.records if r.direction == "upload"]
    assert record.disclosure == RAW_ROWS and record.raw_rows == (2, 2, 2)


# -- 2. Raw rows only by consent ---------------------------------------------


@pytest.mark.parametrize(
    "name, round_name, alternative",
    [
        ("DistributedKernelPCA", "leverage sample", "random_features"),
        ("FederatedRKHSClassifier", "critical samples", "method='random_features'"),
        ("FederatedKernelKMeans", "coreset sampling", "algorithm='one_shot'"),
    ],
)
def test_refusing_raw_rows_raises_before_the_first_round(
    name, round_name, alternative, monkeypatch
):
    def no_round(*args, **kwargs):
        raise AssertionError("a round ran")

    # The classifier's default ("auto") takes its row-free method under
    # raw_rows="refuse"; its critical samples, asked for, are refused.
    # Kernel k-means' one-shot clusters by sums there; DSPGD's coreset
    # samples rows of the embedding.
    params = {
        "FederatedRKHSClassifier": {"method": "critical_samples"},
        "FederatedKernelKMeans": {"algorithm": "dspgd"},
        "DistributedKernelPCA": {"solver": "representatives"},
    }.get(name, {})
    monkeypatch.setattr(Federation, "run_round", no_round)
    with pytest.raises(ValueError, match=f"{round_name}.*raw_rows='refuse'"):
        _fit(name, raw_rows="refuse", **params)
    with pytest.raises(ValueError, match=alternative):
        _fit(name, raw_rows="refuse", **params)


@pytest.mark.parametrize(
    "name, params, attr",
    [
        ("KFed", {}, "cluster_centers_"),
        (
            "DistributedKernelPCA",
            {"solver": "random_features", "gamma": 0.1, "n_random_features": 60},
            "eigenvalues_",
        ),
    ],
)
def test_refusing_raw_rows_fits_without_them(name, params, attr):
    # No local cluster of these clients has fewer than two distinct rows,
    # and every client holds more distinct rows than features: refusing
    # changes nothing that is sent.
    allowed = _fit(name, **params)
    refused = _fit(name, raw_rows="refuse", **params)
    assert refused.communication_.raw_rows == 0
    np.testing.assert_allclose(
        getattr(refused, attr), getattr(allowed, attr), rtol=1e-12, atol=1e-12
    )


def test_kfed_counts_a_small_clients_rows_and_refuses_them_on_request():
    X, _, _ = _data()
    # Client 1 holds 4 distinct rows, at most k(z)=5: its centers are its rows.
    small = X[:4]
    Xs = np.vstack([X, small])
    ids = np.r_[np.zeros(len(X), dtype=int), np.ones(4, dtype=int)]
    fitted = skfed.KFed(n_clusters=3, n_local_clusters=5, random_state=0).fit(
        Xs, partitions=ids
    )
    assert fitted.communication_.raw_rows_by_client() == {1: 4}
    (local,) = [
        d for d in fitted.communication_.disclosure() if d["name"] == "local centers"
    ]
    assert local["disclosure"] == RAW_ROWS and local["raw_rows"] == {1: 4}
    with pytest.raises(ValueError, match="raw_rows='refuse'"):
        skfed.KFed(
            n_clusters=3, n_local_clusters=5, random_state=0, raw_rows="refuse"
        ).fit(Xs, partitions=ids)


def test_a_refusing_federation_sends_no_raw_round():
    _, _, fed = _federation()
    fed.raw_rows = "refuse"
    with fed:
        with pytest.raises(ValueError, match="'rows' would send raw rows"):
            fed.run_round("rows", first_rows, 5, disclosure=raw_rows_of())
    assert fed.log.records == []


# -- 3. Secure aggregation ---------------------------------------------------


def _masked_federation(n_clients=3, offset=0.0, **settings):
    X, ids, fed = _federation(n_clients, offset)
    fed.secure_aggregation = True
    for key, value in settings.items():
        setattr(fed, key, value)
    return X, ids, fed


@pytest.mark.parametrize("n_clients", [2, 3, 40])
def test_masked_sum_is_the_sum_within_the_fixed_point_precision(n_clients):
    X, _, fed = _masked_federation(n_clients)
    with fed:
        plain = secagg.sum_uploads(
            fed.run_round("stats", statistics, disclosure=PER_CLIENT)
        )
        masked = fed.run_round("stats", statistics, disclosure=SUM_ONLY)
    bound = n_clients * 2.0 ** -(secagg.FRACTION_BITS + 1)
    np.testing.assert_allclose(masked[0], plain[0], rtol=0, atol=bound)
    assert masked[1]["n"] == plain[1]["n"] == X.shape[0]
    assert abs(masked[1]["ss"] - plain[1]["ss"]) <= bound
    # The key exchange, once: 4 floats up per client, M keys (+ an index)
    # down to each, recorded as such.
    log = {(r.name, r.direction): r for r in fed.log.records}
    assert log["secure aggregation keys", "upload"].floats == (4,) * n_clients
    down = log["secure aggregation peers", "download"].floats
    assert down == (4 * n_clients + 1,) * n_clients


def test_the_server_of_a_masked_round_never_holds_an_individual_upload(monkeypatch):
    X, _, fed = _masked_federation()
    seen = []
    run = type(fed.transport).run

    def spy(self, call, client_ids, messages):
        out = run(self, call, client_ids, messages)
        seen.append((call.name, out))
        return out

    monkeypatch.setattr(type(fed.transport), "run", spy)
    with fed:
        fed.run_round("stats", statistics, disclosure=SUM_ONLY)
    (name, uploads) = seen[-2]
    assert name == "testing.statistics"
    assert seen[-1][0] == "secure_aggregation.unmasking"
    for client, u in zip(fed.client_ids, uploads):
        assert set(u) == {"masked", "layout"} and u["masked"].dtype == np.uint64
        # Read alone, a masked vector is not the client's column sum.
        alone = u["masked"].view(np.int64)[:4] / 2.0**secagg.FRACTION_BITS
        own = X[_data()[2] == client].sum(axis=0)
        assert np.all(np.abs(alone - own) > 1.0)
    # And the server side adds masked vectors only.
    with pytest.raises(ValueError, match="not a masked vector"):
        secagg.unmask_sum([{"plain": X[:1]}, uploads[1]])


def test_a_transport_that_hands_over_plain_uploads_is_refused(monkeypatch):
    _, _, fed = _masked_federation()
    run = type(fed.transport).run

    def unmasking(self, call, client_ids, messages):
        options = {k: v for k, v in call.options.items() if k != secagg.MASK_OPTION}
        return run(self, call._replace(options=options), client_ids, messages)

    with fed:
        fed.run_round("stats", statistics, disclosure=SUM_ONLY)  # keys
        monkeypatch.setattr(type(fed.transport), "run", unmasking)
        with pytest.raises(ValueError, match="not a masked vector"):
            fed.run_round("stats", statistics, disclosure=SUM_ONLY)


def test_a_client_failing_in_a_masked_round_is_dropped_or_raised():
    step = functools.partial(fail_on, bad=1)
    # on_client_error="drop": the others' shares rebuild its masks, and the
    # sum is that of the clients that answered, as unmasked.
    _, _, fed = _masked_federation(on_client_error="drop")
    with fed:
        total = fed.run_round("sizes", step, disclosure=SUM_ONLY)
    assert abs(total - 200.0) <= 2 * 2.0 ** -(secagg.FRACTION_BITS + 1)
    assert set(fed.failed_clients) == {1}
    assert "secure aggregation unmasking" in fed.log.floats_by_name()
    # on_client_error="raise": the failure raises, masked or not.
    _, _, fed = _masked_federation()
    with fed, pytest.raises(ClientStepError, match="disk on fire"):
        fed.run_round("sizes", step, disclosure=SUM_ONLY)


def test_clients_dropped_before_a_masked_round_leave_masks_that_cancel():
    X, ids, fed = _masked_federation(4)
    with fed:
        fed.run_round("stats", statistics, disclosure=SUM_ONLY)  # keys for 4
        fed.drop([2], "left")
        total = fed.run_round("stats", statistics, disclosure=SUM_ONLY)
    np.testing.assert_allclose(total[0], X[ids != 2].sum(axis=0), atol=1e-8)


def test_values_beyond_the_fixed_point_range_are_refused():
    # 2^31 / 3 clients is the largest magnitude three clients can add.
    secagg._encode_fixed(np.array([7e8, -7e8]), 3)
    for bad in (1e9, np.nan, -np.inf):
        with pytest.raises(ValueError, match="fixed point") as error:
            secagg._encode_fixed(np.array([0.0, bad]), 3)
        # The message reaches the server: it names the public range (7.16e8)
        # and nothing of the private value.
        text = str(error.value)
        assert "7.16e+08" in text
        assert not any(w in text.lower() for w in ("1e+09", "nan", "inf"))


def test_masked_uploads_and_the_mask_option_survive_the_codec(monkeypatch):
    # What crosses the network in the rounds of secure aggregation (the
    # round keys and sealed shares, the masked round's message with its
    # keys, the masked vectors, a recovery's request and shares) comes back
    # from the codec as it went.
    _, _, fed = _masked_federation(on_client_error="drop")
    seen = []
    run = type(fed.transport).run

    def spy(self, call, client_ids, messages):
        out = run(self, call, client_ids, messages)
        seen.append((call, list(messages), out))
        return out

    monkeypatch.setattr(type(fed.transport), "run", spy)
    with fed:
        fed.run_round("sizes", functools.partial(fail_on, bad=1), disclosure=SUM_ONLY)
    names = [call.name for call, _, _ in seen]
    assert names[-3:] == [
        "secure_aggregation.round_keys",
        "testing.fail_on",
        "secure_aggregation.unmasking",
    ]

    def same(a, b):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)
        elif isinstance(a, dict):
            assert list(a) == list(b)
            for key in a:
                same(a[key], b[key])
        elif isinstance(a, (tuple, list)):
            assert len(a) == len(b)
            for x, y in zip(a, b):
                same(x, y)
        else:
            assert a == b

    for call, messages, out in seen[-3:]:
        for payload in [call.options, *messages, *out]:
            if not isinstance(payload, StepFailure):
                same(payload, loads(*dumps(payload)))


@pytest.mark.parametrize(
    "name, params, attrs",
    [
        ("DistributedKMeans", {}, ("cluster_centers_", "inertia_")),
        # The embedding's signs are fixed and its rows ordered by the
        # clients' own rows: the same centers, numbered alike.
        (
            "FederatedKernelKMeans",
            {},
            ("cluster_centers_", "eigenvalues_", "inertia_"),
        ),
        pytest.param(
            "FederatedKernelKMeans",
            {"algorithm": "dspgd"},
            ("cluster_centers_", "eigenvalues_", "inertia_"),
            # Run to convergence: an unsettled iterate's nearly equal
            # eigenvalues let any rounding rotate the embedding.
            marks=pytest.mark.slow,
        ),
        ("DistributedKernelPCA", {}, ("dual_coef_", "eigenvalues_")),
    ],
)
def test_masked_fit_is_the_unmasked_model_within_the_precision(name, params, attrs):
    plain = _fit(name, **params)
    masked = _fit(name, secure_aggregation=True, **params)
    for attr in attrs:
        a, b = getattr(plain, attr), getattr(masked, attr)
        scale = max(1.0, float(np.max(np.abs(a))))
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-12 * scale)
    if hasattr(plain, "labels_"):  # the same clustering, numbers aside
        assert adjusted_rand_score(plain.labels_, masked.labels_) == 1.0
    kinds = {d["name"]: d["disclosure"] for d in masked.communication_.disclosure()}
    assert "secure aggregation keys" in kinds
    # Masking adds the key exchange (4 floats up per client) and, for each
    # masked round, each client's round key (4 floats) with the shares it
    # seals for each of its 2 neighbours (8 floats), and after it each
    # client's shares of its own and its 2 neighbours' self-mask seeds (2
    # floats each). Each summed number travels as two words, its fixed
    # point and the remainder below 2^-32: half of a masked round's upload.
    log = masked.communication_
    n_masked = sum(
        r.name == "secure aggregation round keys" and r.direction == "upload"
        for r in log.records
    )
    assert n_masked == sum(
        r.disclosure == SUM_ONLY and r.direction == "upload" and any(r.floats)
        for r in log.records
    )
    extra = log.upload_floats - plain.communication_.upload_floats
    masked_words = sum(
        sum(r.floats)
        for r in log.records
        if r.disclosure == SUM_ONLY
        and r.direction == "upload"
        and not r.name.startswith("secure aggregation")
    )
    assert masked_words % 2 == 0
    remainders = masked_words // 2
    assert extra == 4 * 3 + n_masked * 3 * (4 + 8 * 2 + 2 * 3) + remainders


@pytest.mark.parametrize(
    "name, params",
    [
        ("KFed", {}),
        ("FederatedRKHSClassifier", {"widths": [0.5, 1.0, 2.0]}),
        ("DistributedKernelPCA", {"center": False}),
    ],
)
def test_secure_aggregation_without_a_sum_only_round_warns(name, params):
    X, y, ids = _data()
    est = ESTIMATORS[name](secure_aggregation=True, **params)
    with pytest.warns(UserWarning, match="nothing to mask"):
        if name == "FederatedRKHSClassifier":
            est.fit(X, y, partitions=ids)
        else:
            est.fit(X, partitions=ids)
    assert not any(
        r.name.startswith("secure aggregation") for r in est.communication_.records
    )


@pytest.mark.parametrize("offset", [0.0, 1e3])
def test_masked_kernel_width_is_the_per_client_one(offset):
    _, _, plain = _federation(4, offset)
    _, _, masked = _masked_federation(4, offset)
    with plain:
        expected = federated_gamma(plain, "width")
    with masked:
        got = federated_gamma(masked, "width")
    np.testing.assert_allclose(got, expected, rtol=1e-9)
    kinds = {d["name"]: d["disclosure"] for d in masked.log.disclosure()}
    assert kinds["width (mean)"] == kinds["width (spread)"] == SUM_ONLY
    assert {d["disclosure"] for d in plain.log.disclosure()} == {PER_CLIENT}


@pytest.mark.slow
@pytest.mark.parametrize(
    "params", [{"eigen_solver": "gram"}, {"use_cem": False, "max_iter": 10}]
)
def test_masked_kernel_kmeans_solvers_give_the_plain_clustering(params):
    # The summed Gram triangles, and the baseline's summed projections.
    plain = _fit("FederatedKernelKMeans", **params)
    masked = _fit("FederatedKernelKMeans", secure_aggregation=True, **params)
    assert adjusted_rand_score(plain.labels_, masked.labels_) == 1.0
    # DSPGD's iterations carry the fixed point's 1e-10 from one eigen-problem
    # to the next: about 1e-8 of the largest eigenvalue here.
    top = plain.eigenvalues_.max()
    np.testing.assert_allclose(
        masked.eigenvalues_, plain.eigenvalues_, rtol=0, atol=1e-7 * top
    )
    kinds = {d["name"]: d["disclosure"] for d in masked.communication_.disclosure()}
    solver = "random features" if "eigen_solver" in params else "lanczos project"
    assert kinds[solver] == SUM_ONLY
    # Rows leave only as the coreset's embedded rows, which masking cannot
    # hide (the server reads each one).
    with_rows = {d["name"] for d in masked.communication_.disclosure() if d["raw_rows"]}
    assert with_rows == {"coreset sampling"}


def test_the_masked_rkhs_classifier_has_the_plain_widths_and_predictions():
    X, y, _ = _data()
    plain = _fit("FederatedRKHSClassifier")
    masked = _fit("FederatedRKHSClassifier", secure_aggregation=True)
    np.testing.assert_allclose(masked.widths_, plain.widths_, rtol=1e-9)
    np.testing.assert_array_equal(masked.predict(X), plain.predict(X))
    kinds = {d["name"]: d["disclosure"] for d in masked.communication_.disclosure()}
    assert kinds["data scale (mean)"] == kinds["data scale (spread)"] == SUM_ONLY
    assert kinds["critical samples"] == RAW_ROWS
