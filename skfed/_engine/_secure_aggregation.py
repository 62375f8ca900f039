"""Secure aggregation as the engine runs it: the key exchange (once per
fit: each client's channel public key up, every public key down), each
masked round's keys (a fresh key pair per client, its private key
Shamir-shared among the round's neighbours), the call of a masked round,
and the recovery of a round some clients dropped out of.

The cryptography is :mod:`skfed.privacy._secure_aggregation`'s; the masking
of a round's uploads is a mod around its step (``skfed._engine._mods``),
which the call of a masked round asks for.
"""

import numpy as np

from ..privacy import _secure_aggregation as secagg
from ._errors import ClientStepError
from ._ledger import NO_UPLOAD, PER_CLIENT, Disclosure
from ._protocol import client_step

__all__ = [
    "exchange_keys",
    "keys_step",
    "masked_call",
    "peers_step",
    "recover_masks",
    "recovery_step",
    "round_keys",
    "round_keys_step",
]

_DATA_FREE = Disclosure(PER_CLIENT, data_free=True)
#: The ledger's names of the rounds secure aggregation adds.
ROUND_KEYS = "secure aggregation round keys"
RECOVERY = "secure aggregation recovery"


@client_step("secure_aggregation.keys")
def keys_step(client, state, message):
    """Client: draw an X25519 channel key pair; upload the public key (32
    bytes as 4 uint64). The private key stays in this client's state."""
    return secagg.draw_keys()


@client_step("secure_aggregation.peers")
def peers_step(client, state, message):
    """Client: keep every client's channel public key and its own place
    among them (:func:`skfed.privacy._secure_aggregation.keep_peers`)."""
    return secagg.keep_peers(state, message), None


@client_step("secure_aggregation.round_keys")
def round_keys_step(client, state, message):
    """Client: this masked round's key pair, its private key's shares
    sealed for its neighbours
    (:func:`skfed.privacy._secure_aggregation.draw_round_keys`)."""
    return secagg.draw_round_keys(state, message)


@client_step("secure_aggregation.recovery")
def recovery_step(client, state, message):
    """Client: its shares of the round keys of the clients that dropped out
    of the last masked round, never of one that answered
    (:func:`skfed.privacy._secure_aggregation.reveal_shares`)."""
    if message is None:
        return state, None
    return secagg.reveal_shares(state, message)


def exchange_keys(fed):
    """Run the key exchange over the clients of ``fed`` (a Federation):
    the key index of every client that took part."""
    ids = list(fed.client_ids)
    publics = fed.run_round(
        "secure aggregation keys", keys_step, tolerate=False, disclosure=_DATA_FREE
    )
    table = np.stack(publics)
    fed.run_round(
        "secure aggregation peers",
        peers_step,
        messages=[(table, i) for i in range(len(ids))],
        tolerate=False,
        disclosure=NO_UPLOAD,
    )
    return {c: i for i, c in enumerate(ids)}


def round_keys(fed, key_index, number, threshold, tolerate):
    """The keys of masked round ``number``: each client of ``fed`` draws a
    fresh key pair and seals its shares for its neighbours. A client that
    fails here is dropped (``tolerate``) and the others draw again on the
    ring without it, so that the ring of the masked round is the ring the
    shares were made for.

    Returns
    -------
    setup : dict
        ``alive`` (the key indices on the ring, in order), ``publics`` (key
        index -> round public key) and ``sealed`` (key index -> (k, 6)
        sealed shares, in ring order).
    """
    while True:
        ids = list(fed.client_ids)
        alive = [key_index[c] for c in ids]
        spec = {"round": number, "alive": alive, "threshold": threshold}
        uploads = fed.run_round(
            ROUND_KEYS,
            round_keys_step,
            spec,
            tolerate=tolerate,
            disclosure=_DATA_FREE,
        )
        if list(fed.client_ids) == ids:
            break
    return {
        "round": number,
        "alive": alive,
        "publics": {i: u[0] for i, u in zip(alive, uploads)},
        "sealed": {i: u[1] for i, u in zip(alive, uploads)},
    }


def _ring(alive, key):
    position = alive.index(key)
    return [alive[j] for j in secagg.neighbours(position, len(alive))]


def masked_messages(setup, messages):
    """Each client's message of a masked round, with each of its
    neighbours' round public key and the share it sealed for it."""
    alive, out = setup["alive"], []
    for key, message in zip(alive, messages):
        peers = _ring(alive, key)
        sealed = [setup["sealed"][p][_ring(alive, p).index(key)] for p in peers]
        publics = [setup["publics"][p] for p in peers]
        keys = {
            "publics": np.array(publics, dtype=np.uint64).reshape(-1, 4),
            "sealed": np.array(sealed, dtype=np.uint64).reshape(-1, 6),
        }
        out.append((message, keys))
    return out


def masked_call(call, setup):
    """The call of a masked round: the clients mask what the step uploads
    (the secure-aggregation mod, ``skfed._engine._mods``), with the round's
    number as the masks' nonce and the key indices of the clients taking
    part."""
    spec = {"round": setup["round"], "alive": setup["alive"]}
    return call._replace(options={**call.options, secagg.MASK_OPTION: spec})


def recover_masks(fed, name, setup, key_index, threshold, n_words):
    """After masked round ``name`` that some of the clients it asked did
    not answer: ask the clients that answered for their shares of the
    dropped clients' round keys (round ``"secure aggregation recovery"``),
    rebuild those keys and return what removes their masks from the sum.

    Raises
    ------
    ClientStepError
        When a dropped client's masks cannot be rebuilt (fewer shares than
        the threshold came back): nothing of the round is released.
    """
    alive = setup["alive"]
    answered = [key_index[c] for c in fed.client_ids]
    dropped = [k for k in alive if k not in answered]
    requests = []
    for key in answered:
        asked = [d for d in dropped if key in _ring(alive, d)]
        if not asked:
            requests.append(None)
            continue
        requests.append(
            {
                "round": setup["round"],
                "answered": answered,
                "dropped": asked,
                "publics": np.stack([setup["publics"][d] for d in asked]),
                "sealed": np.stack(
                    [setup["sealed"][d][_ring(alive, d).index(key)] for d in asked]
                ),
            }
        )
    holders = list(fed.client_ids)
    replies = fed.run_round(
        RECOVERY,
        recovery_step,
        messages=requests,
        tolerate=fed.on_client_error == "drop",
        disclosure=_DATA_FREE,
    )
    by_key = {
        key_index[c]: r
        for c, r in zip([c for c in holders if c in fed.client_ids], replies)
    }
    shares = {d: {} for d in dropped}
    for key, request in zip(answered, requests):
        if request is None or by_key.get(key) is None:
            continue
        for d, share in zip(request["dropped"], by_key[key]):
            shares[d][key] = share
    correction = np.zeros(n_words, dtype=np.uint64)
    names = {k: c for c, k in key_index.items()}
    for d in dropped:
        try:
            correction += secagg.rebuild_masks(
                setup["round"],
                alive,
                set(answered),
                d,
                setup["publics"],
                shares[d],
                n_words,
                threshold,
            )
        except ValueError as exc:
            raise ClientStepError(
                f"Masked round {name!r} cannot be completed: {exc}",
                client_id=names[d],
                round_name=name,
            ) from exc
    return correction
