"""Secure aggregation survives clients that drop out of a masked round.

Before each masked round every client draws a fresh round key and seals
Shamir shares of it for its neighbours on the round's ring; a client that
fails in the round has its masks rebuilt from the shares of the others
(round ``"secure aggregation recovery"``), and the server receives the sum
of the clients that answered. These tests hold the sum to the unmasked one,
the recovery's traffic to its formula, the survivors to their refusals, and
a fit that loses a client in a masked round to the plain fit without it.
"""

import functools

import numpy as np
import pytest

import skfed
from skfed import ClientStepError
from skfed._engine import _transport
from skfed._engine._federation import Federation
from skfed._engine._ledger import SUM_ONLY
from skfed._engine._protocol import client_step
from skfed._engine._validation import check_partitions
from skfed.privacy import _secure_aggregation as secagg

PRECISION = 2.0 ** -(secagg.FRACTION_BITS + 1)


@client_step("test_recovery.column_sums", sum_only=True)
def column_sums(client, state, message, *, bad=()):
    """The client's column sums and row count; the clients in ``bad`` fail."""
    if client.client_id in bad:
        raise RuntimeError("site unreachable")
    return state, (client.X.sum(axis=0), client.n_samples)


def _masked(n_clients, n_rows=20, **settings):
    rng = np.random.RandomState(0)
    X = rng.normal(size=(n_clients * n_rows, 3))
    ids = np.repeat(np.arange(n_clients), n_rows)
    fed = Federation.from_arrays(
        X, None, check_partitions(ids, X.shape[0]), random_state=0, **settings
    )
    fed.secure_aggregation = True
    return X, ids, fed


def _spy(monkeypatch, fed):
    """Every call, message and answer the server sees: what a curious
    server holds."""
    seen = []
    run = type(fed.transport).run

    def spy(self, call, client_ids, messages):
        out = run(self, call, client_ids, messages)
        seen.append((call, list(client_ids), list(messages), list(out)))
        return out

    monkeypatch.setattr(type(fed.transport), "run", spy)
    return seen


@pytest.mark.parametrize("n_clients, bad", [(3, (1,)), (5, (0, 4)), (40, (5, 6, 30))])
def test_the_sum_of_the_clients_that_answered_within_the_precision(n_clients, bad):
    X, ids, fed = _masked(n_clients, on_client_error="drop")
    with fed:
        sums, n = fed.run_round(
            "sums", functools.partial(column_sums, bad=bad), disclosure=SUM_ONLY
        )
        # The next masked round runs on the ring without them.
        again, _ = fed.run_round("sums", column_sums, disclosure=SUM_ONLY)
    kept = ~np.isin(ids, bad)
    np.testing.assert_allclose(
        sums, X[kept].sum(axis=0), rtol=0, atol=n_clients * PRECISION
    )
    np.testing.assert_allclose(again, sums, rtol=0, atol=2 * n_clients * PRECISION)
    assert n == kept.sum()
    assert set(fed.failed_clients) == set(bad)
    assert all("site unreachable" in r for r in fed.failed_clients.values())


def test_the_recovery_is_in_the_ledger_by_formula():
    # 40 clients: each has 2·ceil(log2 40) = 12 neighbours on the ring.
    n_clients, bad = 40, (5, 6)
    _, _, fed = _masked(n_clients, on_client_error="drop")
    with fed:
        fed.run_round(
            "sums", functools.partial(column_sums, bad=bad), disclosure=SUM_ONLY
        )
    log = {(r.name, r.direction): r for r in fed.log.records}
    k = 2 * 6
    # Each client's round key (4 floats) and a share sealed for each
    # neighbour (6 floats).
    keys_up = log["secure aggregation round keys", "upload"]
    assert keys_up.floats == (4 + 6 * k,) * n_clients
    # Each survivor that neighbours a dropped client sends its two 16-byte
    # shares of each such client's round key (4 floats); the others nothing.
    answered = [c for c in range(n_clients) if c not in bad]
    asked = {
        c: [d for d in bad if c in secagg.neighbours(d, n_clients)] for c in answered
    }
    up = log["secure aggregation recovery", "upload"]
    assert dict(zip(answered, up.floats)) == {c: 4 * len(a) for c, a in asked.items()}
    assert sum(up.floats) == 4 * 2 * (k - 1)
    # The request: the round, who answered, whom it asks about, and each
    # dropped client's round key and the share it sealed for this survivor.
    down = log["secure aggregation recovery", "download"]
    expected = {
        c: (1 + len(answered) + 11 * len(a) if a else 0) for c, a in asked.items()
    }
    assert dict(zip(answered, down.floats)) == expected
    assert up.disclosure == "per_client"


def test_below_the_threshold_the_round_fails_before_any_release():
    # 4 clients: 3 neighbours each. With a threshold of 0.9 (all 3 shares),
    # two dropped neighbours leave each other 2 shares: nothing released.
    _, _, fed = _masked(4, on_client_error="drop")
    fed.secure_aggregation_threshold = 0.9
    step = functools.partial(column_sums, bad=(1, 2))
    with fed, pytest.raises(ClientStepError, match="only 2 came back") as info:
        fed.run_round("sums", step, disclosure=SUM_ONLY)
    assert "nothing of it is released" in str(info.value)
    assert info.value.client_id in (1, 2)
    assert isinstance(info.value.__cause__, ValueError)
    # The default threshold (a majority: 2 of 3) completes the same round.
    X, ids, fed = _masked(4, on_client_error="drop")
    with fed:
        sums, _ = fed.run_round("sums", step, disclosure=SUM_ONLY)
    np.testing.assert_allclose(
        sums, X[~np.isin(ids, (1, 2))].sum(axis=0), rtol=0, atol=4 * PRECISION
    )


def test_on_client_error_raise_still_raises_in_a_masked_round():
    _, _, fed = _masked(4)
    with fed, pytest.raises(ClientStepError, match="site unreachable") as info:
        fed.run_round(
            "sums", functools.partial(column_sums, bad=(2,)), disclosure=SUM_ONLY
        )
    assert info.value.client_id == 2
    assert "secure aggregation recovery" not in fed.log.floats_by_name()


def _state(fed, cid):
    """A client's key state, as only the client itself holds it."""
    position = fed.transport.client_ids.index(cid)
    return fed.transport._storage[position][secagg.KEYS_NAMESPACE]


def test_a_curious_server_gets_no_share_of_a_client_that_answered(monkeypatch):
    # The server sees every message and answer of the fit and builds any
    # request it likes; each client checks a request against its own round.
    X, ids, fed = _masked(5, on_client_error="drop")
    seen = _spy(monkeypatch, fed)
    with fed:
        fed.run_round("sums", column_sums, disclosure=SUM_ONLY)
        keys_call, keys_ids, _, keys_out = seen[-2]
        assert keys_call.name == "secure_aggregation.round_keys"
        masked_call, _, _, vectors = seen[-1]
        spec = masked_call.options[secagg.MASK_OPTION]
        alive = spec["alive"]
        publics = {alive[i]: u[0] for i, u in enumerate(keys_out)}
        sealed = {alive[i]: u[1] for i, u in enumerate(keys_out)}

        def request(holder, target, answered):
            ring = [alive[j] for j in secagg.neighbours(alive.index(target), 5)]
            return {
                "round": spec["round"],
                "answered": answered,
                "dropped": [target],
                "publics": publics[target][None],
                "sealed": sealed[target][ring.index(holder)][None],
            }

        # Client 2 answered: every survivor refuses to reveal its shares.
        for holder in (0, 1, 3, 4):
            with pytest.raises(PermissionError, match="answered the round"):
                secagg.reveal_shares(
                    _state(fed, holder), request(holder, 2, [0, 1, 2, 3, 4])
                )
        # A sum of one upload is that upload: refused too.
        with pytest.raises(PermissionError, match="at least two"):
            secagg.reveal_shares(_state(fed, 0), request(0, 2, [0]))
        # A share sealed for another client does not open.
        with pytest.raises(PermissionError, match="authenticate"):
            bad = request(0, 2, [0, 1, 3, 4])
            bad["sealed"] = request(1, 2, [0, 1, 3, 4])["sealed"]
            secagg.reveal_shares(_state(fed, 0), bad)

        # A round with a real dropout: the survivors reveal the dropped
        # client's shares once, and refuse a second request for that round
        # (a server that then claims a live client dropped).
        fed.run_round(
            "sums", functools.partial(column_sums, bad=(3,)), disclosure=SUM_ONLY
        )
        recovery = seen[-1]
        assert recovery[0].name == "secure_aggregation.recovery"
        spec = seen[-2][0].options[secagg.MASK_OPTION]
        alive = spec["alive"]
        keys_out = seen[-3][3]
        publics = {alive[i]: u[0] for i, u in enumerate(keys_out)}
        sealed = {alive[i]: u[1] for i, u in enumerate(keys_out)}
        for holder in (0, 1, 4):
            with pytest.raises(PermissionError, match="revealed once"):
                secagg.reveal_shares(_state(fed, holder), request(holder, 2, [0, 1, 4]))

    # Everything the server saw of the masked rounds: no masked vector is
    # its client's upload, even after removing every mask it can rebuild
    # (those shared with client 3, whose round key it now holds).
    own = {c: X[ids == c].sum(axis=0) for c in range(5)}
    masked_rounds = [s for s in seen if secagg.MASK_OPTION in s[0].options]
    assert len(masked_rounds) == 2
    shares = {
        alive[cid]: np.asarray(reply)[0]
        for cid, reply in zip(recovery[1], recovery[3])
        if reply is not None
    }
    assert len(shares) == 4
    for n, (_, client_ids, _, vectors) in enumerate(masked_rounds):
        for cid, vector in zip(client_ids, vectors):
            if isinstance(vector, _transport.StepFailure):
                continue
            words = vector["masked"]
            if n == 1:  # the round client 3 dropped out of
                words = words + secagg.rebuild_masks(
                    spec["round"],
                    alive,
                    {alive[client_ids.index(cid)]},
                    alive[client_ids.index(3)],
                    publics,
                    shares,
                    words.size,
                    secagg.DEFAULT_THRESHOLD,
                )
            read = words.view(np.int64)[:3] / 2.0**secagg.FRACTION_BITS
            assert np.all(np.abs(read - own[cid]) > 1.0)


def _fail_in_masked_rounds(monkeypatch, bad, after=0):
    """Client ``bad`` fails in the masked rounds after the ``after`` first."""
    original = _transport._run_sequential_step
    count = {"n": 0}

    def failing(call, client, storage, message):
        if secagg.MASK_OPTION in call.options and client.client_id == bad:
            count["n"] += 1
            if count["n"] > after:
                return _transport.StepFailure(RuntimeError("site unreachable"), "")
        return original(call, client, storage, message)

    monkeypatch.setattr(_transport, "_run_sequential_step", failing)


def _fail_in_rounds_named(monkeypatch, bad, names):
    original = _transport._run_sequential_step

    def failing(call, client, storage, message):
        if call.name in names and client.client_id == bad:
            return _transport.StepFailure(RuntimeError("site unreachable"), "")
        return original(call, client, storage, message)

    monkeypatch.setattr(_transport, "_run_sequential_step", failing)


def test_a_scaler_fit_survives_a_client_lost_in_its_masked_round(monkeypatch):
    # The scaler's first round is masked: the recovered sum is the model.
    rng = np.random.RandomState(0)
    X = rng.normal(loc=3.0, scale=2.0, size=(400, 5))
    ids = np.arange(400) % 5
    _fail_in_masked_rounds(monkeypatch, bad=2)
    masked = skfed.preprocessing.FederatedStandardScaler(
        secure_aggregation=True, on_client_error="drop"
    ).fit(X, partitions=ids)
    monkeypatch.undo()
    plain = skfed.preprocessing.FederatedStandardScaler().fit(
        X[ids != 2], partitions=ids[ids != 2]
    )
    assert set(masked.failed_clients_) == {2}
    np.testing.assert_allclose(masked.mean_, plain.mean_, rtol=0, atol=1e-8)
    np.testing.assert_allclose(masked.scale_, plain.scale_, rtol=1e-7)
    names = masked.communication_.floats_by_name()
    assert "secure aggregation recovery" in names
    with pytest.raises(ClientStepError, match="site unreachable"):
        _fail_in_masked_rounds(monkeypatch, bad=2)
        skfed.preprocessing.FederatedStandardScaler(secure_aggregation=True).fit(
            X, partitions=ids
        )


def test_a_kmeans_fit_losing_a_client_late_is_the_plain_fit_without_it(monkeypatch):
    # DistributedKMeans loses client 1 in its second masked (Lloyd) round:
    # the masked fit recovers the round, then runs again without it, as the
    # plain fit with the same failure does.
    rng = np.random.RandomState(0)
    centers = np.array([[0.0, 0.0], [5.0, 5.0], [0.0, 6.0]])
    X = np.concatenate([c + rng.normal(scale=0.5, size=(100, 2)) for c in centers])
    ids = np.arange(len(X)) % 4
    params = {"n_clusters": 3, "random_state": 0, "on_client_error": "drop"}
    _fail_in_masked_rounds(monkeypatch, bad=1, after=1)
    masked = skfed.DistributedKMeans(secure_aggregation=True, **params).fit(
        X, partitions=ids
    )
    monkeypatch.undo()
    _fail_in_rounds_named(monkeypatch, 1, {"coreset.cluster_sums"})
    plain = skfed.DistributedKMeans(**params).fit(X, partitions=ids)
    assert set(masked.failed_clients_) == set(plain.failed_clients_) == {1}
    np.testing.assert_allclose(
        masked.cluster_centers_, plain.cluster_centers_, rtol=0, atol=1e-8
    )
    names = masked.communication_.floats_by_name()
    assert "secure aggregation recovery" in names
