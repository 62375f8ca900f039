"""Secure aggregation survives clients that drop out of a masked round.

Before each masked round every client draws a fresh round key and
self-mask seed and seals Shamir shares of both for its neighbours on the
round's ring; after it, each client that answered reveals, for each
neighbour, its share of the seed (the neighbour answered) or of the round
key (it dropped out), never both (round ``"secure aggregation
unmasking"``), and the server receives the sum of the clients that
answered. These tests hold the sum to the unmasked one, the traffic to its
formula, a server that lies about who answered to what it can learn, and a
fit that loses a client in a masked round to the plain fit without it.
"""

import functools

import numpy as np
import pytest

import skfed
from skfed import ClientStepError
from skfed._engine import _federation
from skfed._engine._federation import Federation
from skfed._engine._ledger import SUM_ONLY
from skfed._engine._protocol import client_step
from skfed._engine._transports import _common as _transport
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


def test_the_unmasking_is_in_the_ledger_by_formula():
    # 40 clients: each has 2·ceil(log2 40) = 12 neighbours on the ring.
    n_clients, bad = 40, (5, 6)
    _, _, fed = _masked(n_clients, on_client_error="drop")
    with fed:
        fed.run_round(
            "sums", functools.partial(column_sums, bad=bad), disclosure=SUM_ONLY
        )
    log = {(r.name, r.direction): r for r in fed.log.records}
    k = 2 * 6
    # Each client's round key (4 floats) and the shares it seals for each
    # neighbour (8 floats); down, the round's number, ring and threshold.
    keys = log["secure aggregation round keys", "upload"]
    assert keys.floats == (4 + 8 * k,) * n_clients
    assert log["secure aggregation round keys", "download"].floats == (
        (n_clients + 2,) * n_clients
    )
    # Each survivor sends its share of its own seed (2 floats), of each
    # answered neighbour's seed (2 floats) and of each dropped neighbour's
    # round key (4 floats).
    answered = [c for c in range(n_clients) if c not in bad]
    lost = {c: sum(d in secagg.neighbours(c, n_clients) for d in bad) for c in answered}
    up = log["secure aggregation unmasking", "upload"]
    assert dict(zip(answered, up.floats)) == {
        c: 2 + 2 * (k - n) + 4 * n for c, n in lost.items()
    }
    # Down: the round, who answered, and each neighbour's round key and
    # the shares it sealed for this client (4 + 8 floats).
    down = log["secure aggregation unmasking", "download"]
    assert down.floats == (1 + len(answered) + 12 * k,) * len(answered)
    assert up.disclosure == "per_client"
    # The masked round's message carries the neighbours' keys and shares.
    masked = log["sums", "download"]
    assert masked.floats == (12 * k,) * n_clients


def test_below_the_threshold_the_round_fails_before_any_release():
    # 4 clients: each makes 4 shares (3 neighbours and its own), any 3 of
    # which rebuild its key or seed. Two dropouts leave each of the others
    # 2 of its seed's shares: nothing released.
    _, _, fed = _masked(4, on_client_error="drop")
    step = functools.partial(column_sums, bad=(1, 2))
    with fed, pytest.raises(ClientStepError, match="only 2 came back") as info:
        fed.run_round("sums", step, disclosure=SUM_ONLY)
    assert "nothing of it is released" in str(info.value)
    assert isinstance(info.value.__cause__, ValueError)
    # All 4 shares (a threshold of 0.9): one dropout is one too many.
    _, _, fed = _masked(4, on_client_error="drop")
    fed.secure_aggregation_threshold = 0.9
    step = functools.partial(column_sums, bad=(1,))
    with fed, pytest.raises(ClientStepError, match="only 3 came back"):
        fed.run_round("sums", step, disclosure=SUM_ONLY)
    # The default completes that round.
    X, ids, fed = _masked(4, on_client_error="drop")
    with fed:
        sums, _ = fed.run_round("sums", step, disclosure=SUM_ONLY)
    np.testing.assert_allclose(
        sums, X[ids != 1].sum(axis=0), rtol=0, atol=4 * PRECISION
    )
    # Below a majority, clients refuse to share.
    _, _, fed = _masked(4)
    fed.secure_aggregation_threshold = 0.4
    with fed, pytest.raises(ClientStepError, match="0.5, 1"):
        fed.run_round("sums", column_sums, disclosure=SUM_ONLY)


def test_on_client_error_raise_still_raises_in_a_masked_round():
    _, _, fed = _masked(4)
    with fed, pytest.raises(ClientStepError, match="site unreachable") as info:
        fed.run_round(
            "sums", functools.partial(column_sums, bad=(2,)), disclosure=SUM_ONLY
        )
    assert info.value.client_id == 2
    assert "secure aggregation unmasking" not in fed.log.floats_by_name()


def _state(fed, cid):
    """A client's key state, as only the client itself holds it."""
    position = fed.transport.client_ids.index(cid)
    return fed.transport._storage[position][secagg.KEYS_NAMESPACE]


class _CuriousServer:
    """A server that ran one masked round over 5 clients (each the
    neighbour of all others) without unmasking it, and holds everything
    it saw: the round keys, the sealed shares, the masked vectors."""

    def __init__(self, monkeypatch):
        self.X, self.ids, self.fed = _masked(5)
        seen = _spy(monkeypatch, self.fed)
        monkeypatch.setattr(_federation, "unmask", lambda *args, **kwargs: None)
        with self.fed:
            self.fed.run_round("sums", column_sums, disclosure=SUM_ONLY)
        (keys_call, _, _, keys_out), (call, _, _, vectors) = seen[-2:]
        assert keys_call.name == "secure_aggregation.round_keys"
        self.spec = call.options[secagg.MASK_OPTION]
        self.alive = self.spec["alive"]
        self.publics = {k: u[0] for k, u in zip(self.alive, keys_out)}
        self.sealed = {k: u[1] for k, u in zip(self.alive, keys_out)}
        self.vectors = {k: v["masked"] for k, v in zip(self.alive, vectors)}

    def ring(self, key):
        return [self.alive[j] for j in secagg.neighbours(self.alive.index(key), 5)]

    def ask(self, holder, answered):
        """Holder's reply to a request that says ``answered`` answered."""
        peers = self.ring(holder)
        request = {
            "round": self.spec["round"],
            "answered": answered,
            "publics": np.stack([self.publics[p] for p in peers]),
            "sealed": np.stack(
                [self.sealed[p][self.ring(p).index(holder)] for p in peers]
            ),
        }
        state, reply = secagg.reveal_shares(_state(self.fed, holder), request)
        # What the client keeps, as its step would.
        position = self.fed.transport.client_ids.index(holder)
        self.fed.transport._storage[position][secagg.KEYS_NAMESPACE] = state
        return reply

    def read(self, key, words):
        """The first values of a vector, as fixed point."""
        return words.view(np.int64)[:3] / 2.0**secagg.FRACTION_BITS

    def own(self, key):
        return self.X[self.ids == key].sum(axis=0)

    def pairwise(self, key, private):
        """The pairwise masks in ``key``'s vector, from its round key."""
        total = np.zeros(self.vectors[key].size, dtype=np.uint64)
        position = self.alive.index(key)
        for peer in self.ring(key):
            stream = secagg._pair_stream(
                secagg._derive(private, self.publics[peer], secagg._HKDF_INFO),
                self.spec["round"],
                total.size,
            )
            if self.alive.index(peer) > position:
                total = total + stream
            else:
                total = total - stream
        return total


def test_a_server_that_claims_a_live_client_dropped_cannot_unmask_it(monkeypatch):
    # The server received client 2's vector and tells everyone 2 dropped
    # out. Client 2 refuses (it answered); its neighbours, who cannot know,
    # reveal its round key's shares, and its seed's shares to nobody: its
    # vector, with every pairwise mask removed, is still self-masked.
    server = _CuriousServer(monkeypatch)
    claim = [0, 1, 3, 4]
    with pytest.raises(PermissionError, match="at least two"):
        server.ask(2, claim)
    replies = {h: server.ask(h, claim) for h in claim}
    for reply in replies.values():
        assert len(reply["seeds"]) == 3 and len(reply["keys"]) == 1
    shares = [(server.ring(2).index(h) + 2, r["keys"][0]) for h, r in replies.items()]
    private = secagg.X25519PrivateKey.from_private_bytes(
        secagg._combine(shares[:3], 32)
    )
    assert np.array_equal(secagg._raw_public(private), server.publics[2])
    unmasked = server.vectors[2] - server.pairwise(2, private)
    assert np.all(np.abs(server.read(2, unmasked) - server.own(2)) > 1.0)
    # Asked again (now saying 2 answered, for its seed), each refuses.
    for h in claim:
        with pytest.raises(PermissionError, match="revealed once"):
            server.ask(h, [0, 1, 2, 3, 4])


def test_a_server_that_splits_its_claims_gets_one_secret_of_a_client(monkeypatch):
    # Told by the server that client 2 dropped out, neighbours 0 and 1
    # reveal shares of its round key; told it answered, 3, 4 and 2 itself
    # reveal shares of its seed. More than half the shares rebuild either
    # (3 of 5), and each client reveals one of the two: the server gets the
    # seed, not the key, and the vector stays masked.
    server = _CuriousServer(monkeypatch)
    dropped = [0, 1, 3, 4]
    answered = [0, 1, 2, 3, 4]
    key_shares = [server.ask(h, dropped)["keys"][0] for h in (0, 1)]
    seed_shares = [server.ask(2, answered)["own"]] + [
        server.ask(h, answered)["seeds"][server.ring(h).index(2)] for h in (3, 4)
    ]
    t = secagg.share_threshold(5)
    assert t == 3 and len(key_shares) < t <= len(seed_shares)
    indices = [server.ring(2).index(h) + 2 for h in (0, 1)]
    guess = secagg.X25519PrivateKey.from_private_bytes(
        secagg._combine(list(zip(indices, key_shares)), 32)
    )
    assert not np.array_equal(secagg._raw_public(guess), server.publics[2])
    seed = secagg._combine(
        list(zip([1] + [server.ring(2).index(h) + 2 for h in (3, 4)], seed_shares)),
        16,
    )
    self_mask = secagg._self_mask(
        np.frombuffer(seed, np.uint8), server.spec["round"], 3
    )
    unmasked = server.vectors[2][:3] - self_mask
    assert np.all(np.abs(server.read(2, unmasked) - server.own(2)) > 1.0)
    # And no vector alone is its client's upload.
    for key, words in server.vectors.items():
        assert np.all(np.abs(server.read(key, words) - server.own(key)) > 1.0)


def test_shares_open_only_for_their_client_and_round(monkeypatch):
    server = _CuriousServer(monkeypatch)
    peers = server.ring(0)
    request = {
        "round": server.spec["round"],
        "answered": [0, 1, 2, 3, 4],
        "publics": np.stack([server.publics[p] for p in peers]),
        # Shares each neighbour sealed for another client, handed to 0.
        "sealed": np.stack(
            [server.sealed[p][(server.ring(p).index(0) + 1) % 4] for p in peers]
        ),
    }
    with pytest.raises(PermissionError, match="authenticate"):
        secagg.reveal_shares(_state(server.fed, 0), request)
    with pytest.raises(PermissionError, match="revealed once"):
        secagg.reveal_shares(_state(server.fed, 0), {**request, "round": 99})


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
    assert "secure aggregation unmasking" in names
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
    assert "secure aggregation unmasking" in names
