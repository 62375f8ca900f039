"""The key exchange of secure aggregation, as the engine runs it: two
client steps (each client's public key up, every public key down).

The cryptography is :mod:`skfed.privacy._secure_aggregation`'s; the masking
of a round's uploads is a mod around its step (``skfed._engine._mods``).
"""

from ..privacy import _secure_aggregation as secagg
from ._protocol import client_step

__all__ = ["keys_step", "peers_step"]


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
