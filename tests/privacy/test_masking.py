"""Masking is the client's own setting, checked on the client.

A client made with ``secure_aggregation`` (the estimator's, in memory; the
node config's ``secure-aggregation`` over Flower) masks every sum-only
upload and refuses to send one unmasked, whatever the server asks; range
problems are avoided before masking, and the range error names no private
value.
"""

import re

import numpy as np
import pytest
from sklearn.datasets import make_blobs

import skfed
from skfed import ClientStepError
from skfed._engine._federation import Federation, client_config
from skfed._engine._ledger import PER_CLIENT, SUM_ONLY
from skfed._engine._protocol import client_step
from skfed._engine._validation import check_partitions
from skfed._testing import statistics
from skfed.cluster._protocols._coreset import cluster_sums_step
from skfed.privacy import _secure_aggregation as secagg


@client_step("test_masking.unmarked_sum")
def _unmarked_sum(client, state, message):
    return state, client.X.sum(axis=0)


def _federation(masks, n_clients=3, scale=1.0, n_rows=60):
    rng = np.random.RandomState(0)
    X = rng.normal(scale=scale, size=(n_clients * n_rows, 4))
    ids = np.repeat(np.arange(n_clients), n_rows)
    config = client_config(type("E", (), {"secure_aggregation": masks})())
    fed = Federation.from_arrays(
        X,
        None,
        check_partitions(ids, X.shape[0]),
        random_state=0,
        client_config=config,
    )
    fed.secure_aggregation = masks
    return X, fed


def test_a_masking_client_refuses_a_plain_upload_of_a_sum_only_round():
    X, fed = _federation(masks=True)
    with fed:
        # As the protocol asks: masked, and the server gets the sum.
        total = fed.run_round("stats", statistics, disclosure=SUM_ONLY)
        np.testing.assert_allclose(total[0], X.sum(axis=0), atol=1e-8)
        # A server that stops asking for masks (or calls the round
        # per-client) gets a refusal from each client, not their sums.
        fed.secure_aggregation = False
        for disclosure in (SUM_ONLY, PER_CLIENT, None):
            with pytest.raises(ClientStepError, match="refused") as info:
                fed.run_round("stats", statistics, disclosure=disclosure)
            assert isinstance(info.value.__cause__, PermissionError)
        # Steps whose uploads the server may see alone still answer.
        assert len(fed.run_round("plain", _unmarked_sum, disclosure=PER_CLIENT)) == 3


def test_a_client_that_does_not_mask_answers_as_asked():
    X, fed = _federation(masks=False)
    with fed:
        uploads = fed.run_round("stats", statistics, disclosure=PER_CLIENT)
    np.testing.assert_allclose(uploads[0][0], X[:60].sum(axis=0))


def test_a_sum_only_round_needs_a_step_registered_as_sum_only():
    _, fed = _federation(masks=False)
    with fed:
        with pytest.raises(RuntimeError, match="sum_only=True"):
            fed.run_round("sums", _unmarked_sum, disclosure=SUM_ONLY)
    assert fed.log.records == []  # refused before anything was sent


def test_the_estimators_setting_becomes_the_clients_own():
    X, _ = _federation(masks=False)
    km = skfed.DistributedKMeans(n_clusters=2, random_state=0, secure_aggregation=True)
    fed = km._federation(X, None, 3, random_state=np.random.RandomState(0))
    assert {fed.transport.client(c).config["secure_aggregation"] for c in range(3)} == {
        True
    }


# -- over Flower: the node's config ---------------------------------------------


def _node(X, **node_config):
    pytest.importorskip("flwr")
    from flwr.app import RecordDict

    from skfed.flower._client import _Node

    class Context:
        def __init__(self):
            self.node_config = {"partition-id": 0, **node_config}
            self.node_id = 1000
            self.run_id = 7
            self.state = RecordDict()

    return _Node(lambda context: X, None, ("skfed",)), Context()


def _open(node, context, secure):
    spec = {
        "accept_sparse": False,
        "dtype": ["float64"],
        "client": {"secure_aggregation": secure, "raw_rows": "allow", "private": False},
    }
    request = {"op": "open", "seed": 3, "spec": spec, "classes": None, "use_y": False}
    return node.answer(request, context)


def test_a_masking_node_refuses_a_fit_without_secure_aggregation():
    X = np.random.RandomState(0).rand(20, 3)
    node, context = _node(X, **{"secure-aggregation": True})
    with pytest.raises(PermissionError, match="secure-aggregation"):
        _open(node, context, secure=False)
    _open(node, context, secure=True)


@pytest.mark.parametrize("flag", [True, "true"])
def test_a_masking_node_refuses_a_plain_sum_only_step(flag):
    X = np.random.RandomState(0).rand(20, 3)
    node, context = _node(X, **{"secure-aggregation": flag})
    _open(node, context, secure=True)
    # The server asks the node's cluster sums without the mask option.
    step = {
        "op": "step",
        "name": "coreset.cluster_sums",
        "options": {"rows": None, "weighted": False},
        "module": cluster_sums_step.__module__,
        "message": X[:2],
    }
    answer = node.answer(step, context)
    assert "refused" in answer["error"]["text"]
    assert "upload" not in answer
    # Without the node config, the same node answers as asked.
    node, context = _node(X)
    _open(node, context, secure=False)
    assert "upload" in node.answer(step, context)


# -- range ------------------------------------------------------------------


def test_secure_distributed_kmeans_fits_unscaled_data():
    # Std 100 over 9,000 rows and 40 features: each client's cost, a sum of
    # squares, is ~1.2e9, beyond the 2^31 / 3 = 7.2e8 three clients can add
    # in fixed point: it is sent over the coreset's mean cost per row.
    rng = np.random.RandomState(0)
    X = rng.normal(scale=100, size=(9000, 40))
    X[:3000] += 300
    parts = np.repeat([0, 1, 2], 3000)
    params = {"n_clusters": 3, "random_state": 0}
    plain = skfed.DistributedKMeans(**params).fit(X, partitions=parts)
    per_client = [
        float(
            (
                (X[parts == c] - plain.cluster_centers_[plain.labels_[parts == c]]) ** 2
            ).sum()
        )
        for c in range(3)
    ]
    assert max(per_client) > 2**31 / 3  # the raw cost would not fit
    masked = skfed.DistributedKMeans(secure_aggregation=True, **params).fit(
        X, partitions=parts
    )
    scale = np.abs(plain.cluster_centers_).max()
    np.testing.assert_allclose(
        masked.cluster_centers_, plain.cluster_centers_, rtol=0, atol=1e-8 * scale
    )
    np.testing.assert_allclose(masked.inertia_, plain.inertia_, rtol=1e-9)
    np.testing.assert_array_equal(masked.labels_, plain.labels_)


def test_the_range_error_carries_no_private_value():
    # Rows of magnitude 1e12: the masked cluster sums do not fit. The error
    # reaches the server (here as the fit's exception) naming the range
    # only, never the statistic's magnitude.
    rng = np.random.RandomState(1)
    X = rng.normal(scale=1e12, size=(300, 3))
    with pytest.raises(ClientStepError, match="fixed point") as info:
        skfed.DistributedKMeans(
            n_clusters=2, random_state=0, secure_aggregation=True
        ).fit(X, partitions=3)
    text = str(info.value)
    numbers = re.findall(r"\d+(?:\.\d+)?e[+-]\d+", text)
    assert numbers == ["7.16e+08"], text
    # The encoder itself, on each kind of bad value.
    for bad in (3.7e9, np.nan, -np.inf):
        with pytest.raises(ValueError) as info:
            secagg._encode_fixed(np.array([0.5, bad]), 3)
        assert re.findall(r"\d+(?:\.\d+)?e[+-]\d+", str(info.value)) == ["7.16e+08"]
        assert not re.search(r"nan|inf\b|3\.7", str(info.value).lower())


def test_a_masking_client_refuses_a_ring_that_leaves_it_alone():
    # A server that names only one client among those that exchanged keys
    # would receive its vector without any mask; one that asks for a mask
    # on another ring than the round key's would get masks that do not
    # cancel.
    X, fed = _federation(masks=True)
    with fed:
        fed.run_round("stats", statistics, disclosure=SUM_ONLY)  # keys
        client = fed.transport.client(0).with_storage(fed.transport._storage[0])
    keys = client.masking_keys()
    own = int(keys["index"])
    others = [i for i in range(3) if i != own]
    for alive in ([own], others):
        with pytest.raises(PermissionError, match="refused"):
            secagg.draw_round_keys(keys, {"round": 9, "alive": alive, "threshold": 0.5})
        with pytest.raises(PermissionError, match="refused"):
            secagg.mask_upload(client, X[:2], {"round": 1, "alive": alive}, None)
    # The round it drew keys for is its last one, on the three clients.
    assert keys["round"]["alive"] == [0, 1, 2]
    with pytest.raises(PermissionError, match="refused"):
        secagg.mask_upload(client, X[:2], {"round": 9, "alive": [0, 1, 2]}, None)


@pytest.mark.parametrize("scale", [1e-8, 1e2])
def test_masked_kernel_width_at_any_scale_is_the_plain_one(scale):
    # The masked width's test for identical rows is relative to the data:
    # rows of spread 1e-8 are not copies (the floor was once M · 2^-32).
    X, _ = make_blobs(150, centers=3, n_features=3, random_state=0)
    X = scale * (X + 5.0)
    plain = skfed.FederatedKernelKMeans(3, random_state=0).fit(X, partitions=3)
    masked = skfed.FederatedKernelKMeans(
        3, secure_aggregation=True, random_state=0
    ).fit(X, partitions=3)
    np.testing.assert_array_equal(masked.labels_, plain.labels_)


@pytest.mark.parametrize(
    "X, match",
    [
        (np.full((60, 3), 2.5), "spread is zero, or below what secure aggregation"),
        # Spreads under 2^-64 a client round to nothing in the fixed point.
        (
            1e-13 * np.random.RandomState(0).standard_normal((60, 3)),
            "scale the data",
        ),
    ],
)
def test_a_masked_width_of_no_spread_says_why(X, match):
    km = skfed.FederatedKernelKMeans(3, secure_aggregation=True, random_state=0)
    with pytest.raises(ValueError, match=match):
        km.fit(X, partitions=3)
