"""Secure aggregation as the engine runs it: the key exchange (two rounds
of two client steps: each client's public key up, every public key down)
and the call of a masked round.

The cryptography is :mod:`skfed.privacy._secure_aggregation`'s; the masking
of a round's uploads is a mod around its step (``skfed._engine._mods``),
which the call of a masked round asks for.
"""

import numpy as np

from ..privacy import _secure_aggregation as secagg
from ._ledger import NO_UPLOAD, PER_CLIENT, Disclosure
from ._protocol import client_step

__all__ = ["exchange_keys", "keys_step", "masked_call", "peers_step"]


@client_step("secure_aggregation.keys")
def keys_step(client, state, message):
    """Client: draw an X25519 key pair; upload the public key (32 bytes as
    4 uint64). The private key stays in this client's state."""
    return secagg.draw_keys()


@client_step("secure_aggregation.peers")
def peers_step(client, state, message):
    """Client: keep every client's public key and its own place among them,
    and the pairwise keys with its neighbours on the ring
    (:func:`skfed.privacy._secure_aggregation.keep_peers`)."""
    return secagg.keep_peers(state, message), None


def exchange_keys(fed):
    """Run the key exchange over the clients of ``fed`` (a Federation):
    the key index of every client that took part."""
    ids = list(fed.client_ids)
    publics = fed.run_round(
        "secure aggregation keys",
        keys_step,
        tolerate=False,
        disclosure=Disclosure(PER_CLIENT, data_free=True),
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


def masked_call(call, rnd, alive):
    """The call of a masked round: the clients mask what the step uploads
    (the secure-aggregation mod, ``skfed._engine._mods``), with the round's
    index as the masks' nonce and the key indices of the clients taking
    part."""
    spec = {"round": rnd, "alive": alive}
    return call._replace(options={**call.options, secagg.MASK_OPTION: spec})
