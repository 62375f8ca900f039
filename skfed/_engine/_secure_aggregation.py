"""Secure aggregation as the engine runs it: the key exchange (once per
fit: each client's channel public key up, every public key down), each
masked round's keys (a fresh key pair per client, its private key
Shamir-shared among the round's neighbours), the call of a masked round,
and the unmasking after it (the self-masks, and the masks of the clients
that dropped out).

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
    "round_keys",
    "round_keys_step",
    "unmask",
    "unmasking_step",
]

_DATA_FREE = Disclosure(PER_CLIENT, data_free=True)
#: The ledger's names of the rounds secure aggregation adds.
ROUND_KEYS = "secure aggregation round keys"
UNMASKING = "secure aggregation unmasking"


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


@client_step("secure_aggregation.unmasking")
def unmasking_step(client, state, message):
    """Client: for each neighbour in the last masked round, its share of
    the neighbour's self-mask seed (it answered) or of its round key (it
    dropped out), never both
    (:func:`skfed.privacy._secure_aggregation.reveal_shares`)."""
    return secagg.reveal_shares(state, message)


def _check_honest(honest, count, verb, name):
    """Refuse a masked round whose sum would hold fewer noise shares than
    its releases count on (``honest``, under distributed noise)."""
    if honest is not None and count < honest:
        raise ClientStepError(
            f"Masked round {name!r} cannot be released: its noise is shared "
            f"among the clients on the assumption that at least {honest} of "
            f"them add their share to each sum, and only {count} {verb} it. "
            "The sum stays masked. Lower privacy.honest_clients (at the cost "
            "of more noise per client), or fit with fewer clients that may "
            "drop out.",
            round_name=str(name),
        )


def exchange_keys(fed):
    """Run the key exchange over the clients of ``fed`` (a Federation):
    the key index of every client that took part.

    Under ``on_client_error="drop"`` a client that fails here is left out:
    one that fails to send its key has no index, one that fails to keep
    the others' is on no round's ring (it is no longer a client of the
    fit)."""
    tolerate = fed.on_client_error == "drop"
    publics = fed.run_round(
        "secure aggregation keys", keys_step, tolerate=tolerate, disclosure=_DATA_FREE
    )
    ids = list(fed.client_ids)
    table = np.stack(publics)
    fed.run_round(
        "secure aggregation peers",
        peers_step,
        messages=[(table, i) for i in range(len(ids))],
        tolerate=tolerate,
        disclosure=NO_UPLOAD,
    )
    return {c: i for i, c in enumerate(ids)}


def round_keys(fed, key_index, number, threshold, tolerate, honest=None, name=None):
    """The keys of masked round ``number``: each client of ``fed`` draws a
    fresh key pair and seals its shares for its neighbours. A client that
    fails here is dropped (``tolerate``) and the others draw again on the
    ring without it, so that the ring of the masked round is the ring the
    shares were made for. Under distributed noise, ``honest`` is h, the
    uploads each sum must hold (:mod:`skfed.privacy._distributed`): with
    fewer clients left, the round fails before it is asked.

    Returns
    -------
    setup : dict
        ``alive`` (the key indices on the ring, in order), ``publics`` (key
        index -> round public key) and ``sealed`` (key index -> (k, 8)
        sealed shares, in ring order).
    """
    while True:
        ids = list(fed.client_ids)
        alive = [key_index[c] for c in ids]
        _check_honest(honest, len(alive), "take part in", name or number)
        spec = {
            "round": number,
            "alive": alive,
            "threshold": threshold,
            "honest": honest,
        }
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
            "sealed": np.array(sealed, dtype=np.uint64).reshape(-1, 8),
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


def unmask(fed, name, setup, key_index, threshold, n_words, honest=None):
    """After masked round ``name``: ask each client that answered for its
    shares of its neighbours' self-mask seeds (those that answered) and
    round keys (those that dropped out), round ``"secure aggregation
    unmasking"``; rebuild them and return what removes the self-masks and
    the dropped clients' masks from the sum.

    Raises
    ------
    ClientStepError
        When a client's masks cannot be removed (fewer shares than the
        threshold came back), or, under distributed noise, fewer than
        ``honest`` uploads are in the sum: nothing of the round is
        released.
    """
    alive = setup["alive"]
    answered = [key_index[c] for c in fed.client_ids]
    _check_honest(honest, len(answered), "answered", name)
    requests = []
    for key in answered:
        peers = _ring(alive, key)
        requests.append(
            {
                "round": setup["round"],
                "answered": answered,
                "publics": np.array(
                    [setup["publics"][p] for p in peers], dtype=np.uint64
                ).reshape(-1, 4),
                "sealed": np.array(
                    [setup["sealed"][p][_ring(alive, p).index(key)] for p in peers],
                    dtype=np.uint64,
                ).reshape(-1, 8),
            }
        )
    replies = fed.run_round(
        UNMASKING,
        unmasking_step,
        messages=requests,
        tolerate=fed.on_client_error == "drop",
        disclosure=_DATA_FREE,
    )
    by_key = {key_index[c]: r for c, r in zip(fed.client_ids, replies)}
    try:
        return secagg.unmasking_correction(
            setup["round"],
            alive,
            answered,
            setup["publics"],
            by_key,
            n_words,
            threshold,
            names={k: c for c, k in key_index.items()},
        )
    except ValueError as exc:
        raise ClientStepError(
            f"Masked round {name!r} cannot be completed: {exc}",
            round_name=name,
        ) from exc
