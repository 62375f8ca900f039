"""Sums over clients, in the clear or under masks (secure aggregation).

A round whose server step needs only the sum of the clients' uploads is
declared ``"sum_only"`` (:class:`skfed._engine._ledger.Disclosure`); the federation
then hands the server :func:`sum_uploads` of the uploads, never the list.
With ``secure_aggregation=True`` the clients also hide their uploads from
the server itself, as in SecAgg (Bonawitz et al., 2017) and SecAgg+ (Bell
et al., 2020), double masking and dropout recovery included:

* **Channel keys** (once per fit, before the first masked round): each
  client draws an X25519 key pair and uploads its public key (32 bytes, 4
  floats); the server sends every client all public keys. Two neighbours
  seal what they send each other through the server under a key derived
  from their pair (X25519, HKDF-SHA256, ChaCha20-Poly1305).
* **Round keys** (before each masked round, :func:`draw_round_keys`): on a
  ring of the clients taking part (every other client when they are few,
  ``2·ceil(log2 M)`` neighbours otherwise), each client draws a fresh
  X25519 round key pair and a fresh self-mask seed, splits both into Shamir
  shares (one per neighbour and one it keeps; any t of them rebuild the
  secret, :func:`share_threshold`) and uploads its round public key and
  each neighbour's shares sealed for that neighbour.
* **Client, the masked round** (:func:`mask_upload`): the upload's numbers
  (arrays, floats, ints, in a fixed order) are encoded in fixed point as
  integers modulo 2^64, two words per number: ``round(x · 2^f)`` with
  ``f = FRACTION_BITS`` and what that rounding left, in units of 2^-2f
  (a noised upload sends the first word only);
  the client adds its self-mask (the seed's ChaCha20 keystream) and, for
  each neighbour j, the keystream s_ij of the key the pair's round keys
  agree on, added for j after it on the ring and subtracted for j before.
  Each masked vector alone is uniformly random; in the sum the pairwise
  masks cancel.
* **Unmasking** (:func:`reveal_shares`): each client that answered reveals,
  for each neighbour, its share of the seed if the server says the
  neighbour answered, or of the round key if it says it dropped out, never
  both, and each round once.
* **Server** (:func:`unmasking_correction`, :func:`unmask_sum`): rebuilds
  the seeds of the clients that answered and the round keys of those that
  dropped out, adds the masked vectors modulo 2^64 with the correction that
  removes the self-masks and the dropped clients' pairwise masks, and
  decodes the sum. It never holds an unmasked individual upload.

Precision: each client's number travels to a multiple of 2^-64 and the
sum is decoded with one rounding, so it is within about a unit in the last
place of the exact sum, as :func:`sum_uploads`' unmasked sum is (a noised
number is rounded to 2^-32, the grid its noise is drawn on). Range: each
client's values must stay below 2^31 / M in magnitude (2^31 ≈ 2.1e9), so
that no sum over the M clients can wrap; a client with a larger one
raises ``ValueError`` (scale the data) rather than let the sum wrap.

Cryptography comes from the ``cryptography`` package and Shamir's secret
sharing from ``pycryptodome``; nothing here is a primitive of its own.
"""

# Long module: the client's and the server's halves of one protocol (what a
# client seals, masks and reveals; what the server rebuilds from it), kept
# together so that each half reads against the other.

import json
import math
import numbers
import os

import numpy as np
from Crypto.Protocol.SecretSharing import Shamir
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import (
    X25519PrivateKey,
    X25519PublicKey,
)
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ._distributed import NoiseShare, discrete_gaussian, share_std
from ._mechanisms import noise_generator

__all__ = [
    "DEFAULT_THRESHOLD",
    "check_masked",
    "FRACTION_BITS",
    "KEYS_NAMESPACE",
    "MASK_OPTION",
    "draw_keys",
    "draw_round_keys",
    "keep_peers",
    "mask_upload",
    "neighbours",
    "refuse_unmasked",
    "reveal_shares",
    "share_threshold",
    "sum_uploads",
    "unmask_sum",
    "unmasking_correction",
]

#: Fractional bits of the first word of the fixed-point encoding (the
#: second carries the next FRACTION_BITS).
FRACTION_BITS = 32
_SCALE = float(2**FRACTION_BITS)
#: The reserved step option that tells a client to mask its upload.
MASK_OPTION = "_secure_aggregation"
#: Where a client keeps its key exchange's results: read by its masking
#: only, never by a step.
KEYS_NAMESPACE = "secure_aggregation"
_HKDF_INFO = b"skfed secure aggregation pairwise mask key"
_CHANNEL_INFO = b"skfed secure aggregation share encryption key"
#: The default threshold: a client's round key or self-mask seed is rebuilt
#: from more than this fraction of the shares it made, one per neighbour
#: and its own (a majority).
DEFAULT_THRESHOLD = 0.5
_SELF_INFO = b"skfed secure aggregation self mask key"
# What a client seals for a neighbour: three 16-byte Shamir shares (the
# 32-byte round key in two halves, then the 16-byte self-mask seed); sealed
# with ChaCha20-Poly1305 it is 64 bytes, 8 uint64. A revealed share of the
# round key is 4 uint64, of the seed 2.
_SEALED_WORDS = 8


# --------------------------------------------------------------------------
# Sums over clients (server side, in the clear)


def sum_uploads(uploads):
    """The elementwise sum of the clients' uploads, structure kept.

    Float arrays are added one client after another in the given
    (canonical) order with compensated summation, and Python and
    numpy floats with ``math.fsum``: within a unit in the last place of the
    exact sum, as a masked round's decoded sum is, so masking moves a model
    by rounding only. Integer arrays and ints are added exactly; ``None``
    stays ``None``. Tuples, lists and dicts are summed item by item and
    must have the same shape on every client.

    Raises
    ------
    ValueError
        If the uploads' structures differ, or there is none.
    """
    if not uploads:
        raise ValueError("No client answered the round: there is nothing to sum.")
    first = uploads[0]
    if first is None:
        if any(u is not None for u in uploads):
            raise ValueError("Some clients uploaded nothing and others a value.")
        return None
    if isinstance(first, dict):
        keys = list(first)
        if any(not isinstance(u, dict) or list(u) != keys for u in uploads):
            raise ValueError("The clients' uploads have different keys.")
        return {k: sum_uploads([u[k] for u in uploads]) for k in keys}
    if isinstance(first, (tuple, list)):
        n = len(first)
        if any(type(u) is not type(first) or len(u) != n for u in uploads):
            raise ValueError("The clients' uploads have different structures.")
        return type(first)(sum_uploads(list(parts)) for parts in zip(*uploads))
    if isinstance(first, np.ndarray):
        shape = first.shape
        if any(not isinstance(u, np.ndarray) or u.shape != shape for u in uploads):
            raise ValueError("The clients' arrays have different shapes.")
        integer = all(np.issubdtype(u.dtype, np.integer) for u in uploads)
        if not integer:
            return _compensated_sum(uploads)
        total = np.zeros(shape, dtype=np.int64)
        for u in uploads:
            total += u
        return total
    if all(_is_int(u) for u in uploads):
        return int(sum(int(u) for u in uploads))
    if all(isinstance(u, numbers.Real) for u in uploads):
        return math.fsum(float(u) for u in uploads)
    raise ValueError(
        f"Cannot sum uploads of type {type(first).__name__}: a sum-only round "
        "uploads arrays, numbers, or tuples/lists/dicts of those."
    )


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


# --------------------------------------------------------------------------
# Fixed point and the upload's layout (shared by clients and the server)


def _flatten(upload, numbers_out, shares_out=None):
    """The upload's layout (JSON-able), appending its numbers (float64)
    and, to ``shares_out``, each statistic whose noise the masking adds
    (:class:`~skfed.privacy._distributed.NoiseShare`) with its position."""
    if upload is None:
        return None
    if isinstance(upload, dict):
        return {
            "dict": [
                [k, _flatten(v, numbers_out, shares_out)] for k, v in upload.items()
            ]
        }
    if isinstance(upload, (tuple, list)):
        kind = "tuple" if isinstance(upload, tuple) else "list"
        return {kind: [_flatten(v, numbers_out, shares_out) for v in upload]}
    if isinstance(upload, NoiseShare):
        if shares_out is None:
            raise TypeError("A statistic awaiting its noise can only be masked.")
        shares_out.append((sum(part.size for part in numbers_out), upload))
        numbers_out.append(upload.value.ravel())
        return {"array": list(upload.value.shape), "int": False}
    if isinstance(upload, np.ndarray):
        if not (
            np.issubdtype(upload.dtype, np.floating)
            or np.issubdtype(upload.dtype, np.integer)
        ):
            raise TypeError(f"Cannot mask an array of dtype {upload.dtype}.")
        numbers_out.append(np.asarray(upload, dtype=np.float64).ravel())
        integer = np.issubdtype(upload.dtype, np.integer)
        return {"array": list(upload.shape), "int": bool(integer)}
    if _is_int(upload):
        numbers_out.append(np.array([float(upload)]))
        return "int"
    if isinstance(upload, numbers.Real):
        numbers_out.append(np.array([float(upload)]))
        return "float"
    raise TypeError(
        f"Cannot mask an upload of type {type(upload).__name__}: a sum-only "
        "round uploads arrays, numbers, or tuples/lists/dicts of those."
    )


def _unflatten(layout, values, start=0):
    """The value of ``layout`` read from ``values`` from ``start``; returns
    (value, next position)."""
    if layout is None:
        return None, start
    if layout == "int":
        return int(round(values[start])), start + 1
    if layout == "float":
        return float(values[start]), start + 1
    if "array" in layout:
        shape = tuple(layout["array"])
        size = math.prod(shape)
        part = values[start : start + size].reshape(shape)
        if layout["int"]:
            part = np.rint(part).astype(np.int64)
        return part, start + size
    if "dict" in layout:
        out = {}
        for key, item in layout["dict"]:
            out[key], start = _unflatten(item, values, start)
        return out, start
    kind = "tuple" if "tuple" in layout else "list"
    items = []
    for item in layout[kind]:
        value, start = _unflatten(item, values, start)
        items.append(value)
    return (tuple(items) if kind == "tuple" else items), start


def _encode_fixed(values, n_clients, noise=()):
    """Fixed-point integers modulo 2^64 (two's complement in uint64), with
    ``noise`` ((start, int64 array) pairs, in ring units) added.

    Without noise, each value travels as two words: its multiple of 2^-32
    and what rounding to it left, in units of 2^-64. The sum is then as
    precise as float64's, so a masked fit gives the unmasked fit's model to
    rounding, not one 2^-32 away. A noised upload sends the first word only: the
    noise is drawn on the 2^-32 grid, and a remainder below it would travel
    without noise.
    """
    scaled = np.rint(values * _SCALE)
    # Each client's share of the range, so that no partial sum can wrap.
    limit = 2.0**63 / max(n_clients, 1)
    in_range = np.all(np.abs(scaled) < limit)
    if in_range and noise:
        scaled = scaled.astype(np.int64)
        for start, draws in noise:
            scaled[start : start + draws.size] += draws
        in_range = np.all(np.abs(scaled) < limit)
    if not in_range:
        # The message reaches the server: it names the public range only,
        # never the private value that broke it (nor whether it was finite).
        raise ValueError(
            "secure_aggregation encodes uploads in fixed point with "
            f"{FRACTION_BITS} fractional bits: a value of this client's upload "
            f"is outside what {n_clients} clients can add without overflow "
            f"(magnitudes below {limit / _SCALE:.3g}). Scale the data (e.g. "
            "FederatedStandardScaler) or fit without secure aggregation."
        )
    words = scaled.astype(np.int64)
    if noise:
        return words.view(np.uint64)
    # Exact: ``values * _SCALE - scaled`` is a difference of floats at most
    # half a unit apart, and scaling by a power of two loses nothing; the
    # remainder is within 2^31 of zero, so M of them cannot wrap either.
    remainder = np.rint((values * _SCALE - scaled) * _SCALE).astype(np.int64)
    return np.concatenate([words, remainder]).view(np.uint64)


def _compensated_sum(arrays):
    """Σ of float arrays in float64 with a running compensation: each
    addition's rounding error, taken exactly (Knuth's TwoSum, whatever the
    operands' magnitudes), is summed apart and added back at the end. The
    sum is then within about one rounding of the exact one (a plain running
    sum loses the small terms to the large ones), and, being float
    arithmetic, scales exactly with a power-of-two scaling of the inputs."""
    total = np.array(arrays[0], dtype=np.float64, copy=True)
    compensation = np.zeros_like(total)
    running = np.empty_like(total)
    part = np.empty_like(total)
    error = np.empty_like(total)
    # In place: a round's statistics can be millions of floats a client.
    for array in arrays[1:]:
        value = np.asarray(array, dtype=np.float64)
        np.add(total, value, out=running)
        np.subtract(running, total, out=part)  # the share of value in it
        np.subtract(running, part, out=error)
        np.subtract(total, error, out=error)  # what total lost
        np.subtract(value, part, out=part)  # what value lost
        error += part
        compensation += error
        total, running = running, total
    return total + compensation


def _decode_fixed(total, n_values):
    """The float sums from the added words of :func:`_encode_fixed` (with
    the remainders' words when there are twice ``n_values`` of them)."""
    signed = total.view(np.int64)
    words = signed[:n_values]
    if signed.size != 2 * n_values or not n_values:
        return words.astype(np.float64) / _SCALE
    # The sum is words · 2^-32 + remainders · 2^-64 exactly; carry the
    # remainders' whole units into the words so that 0 ≤ remainder < 2^32,
    # and the one float addition below rounds the exact sum once (its two
    # terms are exact while the words stay below 2^53).
    remainders = signed[n_values:]
    carry = remainders >> FRACTION_BITS
    words = words + carry
    fraction = remainders - (carry << FRACTION_BITS)
    return (words.astype(np.float64) + fraction.astype(np.float64) / _SCALE) / _SCALE


def _n_values(layout):
    """How many numbers an upload of ``layout`` (from :func:`_flatten`)
    holds."""
    if layout is None:
        return 0
    if layout in ("int", "float"):
        return 1
    if "array" in layout:
        return math.prod(layout["array"])
    items = layout.get("dict") or layout.get("tuple") or layout.get("list") or []
    return sum(_n_values(item[1] if "dict" in layout else item) for item in items)


# --------------------------------------------------------------------------
# Client side. The engine runs the key exchange and each masked round's
# keys as client steps (``skfed._engine._secure_aggregation``) and wraps the
# step of a masked round with :func:`mask_upload` (or, for a client that
# masks and was asked for a plain upload, :func:`refuse_unmasked`): this
# module knows nothing of the engine.


def draw_keys():
    """Client: draw its X25519 channel key pair (once per fit). Returns the
    state to keep (the private key) and the upload (the public key, 32
    bytes as 4 uint64)."""
    private = X25519PrivateKey.generate()
    state = {"private": _raw_private(private)}
    return state, _raw_public(private)


def _raw_private(private):
    raw = private.private_bytes(
        serialization.Encoding.Raw,
        serialization.PrivateFormat.Raw,
        serialization.NoEncryption(),
    )
    return np.frombuffer(raw, dtype=np.uint8).copy()


def _raw_public(private):
    public = private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    return np.frombuffer(public, dtype=np.uint64).copy()


def keep_peers(state, message):
    """Client: keep every client's channel public key and its own place
    among them (``message`` = (public keys as an (M, 4) uint64 array, own
    index)). Returns the new state (``state``: what :func:`draw_keys`
    kept)."""
    keys, index = message
    state = dict(state)
    state["public_keys"] = np.asarray(keys, dtype=np.uint64)
    state["index"] = int(index)
    return state


def neighbours(position, n_alive):
    """Positions on the ring of ``n_alive`` clients that ``position`` shares
    masks with: all others for a few clients, else the ``ceil(log2 M)``
    nearest on each side (SecAgg+'s sparse graph; any connected graph
    hides each upload from a server that does not collude with clients).
    The relation is symmetric, so every mask has its negative."""
    half = max(1, math.ceil(math.log2(max(n_alive, 2))))
    if n_alive <= 2 * half + 1:
        return [j for j in range(n_alive) if j != position]
    return sorted({(position + d) % n_alive for d in range(-half, half + 1) if d != 0})


def share_threshold(n_shares, fraction=DEFAULT_THRESHOLD):
    """t, the shares that rebuild a client's round key or seed: more than
    ``fraction`` of the ``n_shares`` (one per neighbour and its own; a
    majority by default), at most all of them."""
    return min(n_shares, math.floor(fraction * n_shares) + 1)


def _private_key(raw):
    return X25519PrivateKey.from_private_bytes(np.asarray(raw).tobytes())


def _derive(private, peer_public, info):
    """A 32-byte key of a pair: HKDF-SHA256 over their X25519 secret."""
    peer = X25519PublicKey.from_public_bytes(np.asarray(peer_public).tobytes())
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(
        private.exchange(peer)
    )


def _pair_stream(key, round_index, n_words):
    """s_ij for this round: the pair's round key's ChaCha20 keystream, with
    the round's index as nonce."""
    # ChaCha20's 16-byte nonce: a zero block counter, then the round index.
    nonce = bytes(4) + int(round_index).to_bytes(12, "little")
    stream = Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor()
    return np.frombuffer(stream.update(bytes(8 * n_words)), dtype=np.uint64)


def _seal_terms(sender, receiver, round_index, sender_public):
    """The nonce and associated data of the share ``sender`` seals for
    ``receiver``: the channel key of a pair serves both directions and
    every round, so the nonce is the round and the direction; the data
    binds the share to both clients, the round and the sender's round
    public key (which the receiver thus authenticates)."""
    nonce = int(round_index).to_bytes(8, "little") + int(sender > receiver).to_bytes(
        4, "little"
    )
    data = (
        b"skfed share"
        + int(sender).to_bytes(8, "little")
        + int(receiver).to_bytes(8, "little")
        + int(round_index).to_bytes(8, "little")
        + np.asarray(sender_public, dtype=np.uint64).tobytes()
    )
    return nonce, data


def _channel(keys, peer):
    return ChaCha20Poly1305(
        _derive(_private_key(keys["private"]), keys["public_keys"][peer], _CHANNEL_INFO)
    )


def _ring(keys, alive):
    """This client's position on the round's ring of ``alive`` and its
    neighbours' key indices, in ring order."""
    alive = [int(i) for i in alive]
    if keys["index"] not in alive or len(set(alive)) != len(alive):
        raise PermissionError(
            "A masked round must name this client once among the clients "
            "taking part: refused."
        )
    position = alive.index(keys["index"])
    return position, [alive[j] for j in neighbours(position, len(alive))]


def draw_round_keys(keys, spec):
    """Client, before each masked round: a fresh X25519 key pair for this
    round's pairwise masks and a fresh 16-byte seed for its self-mask, both
    Shamir-shared among the round's neighbours (t of the k shares rebuild
    each).

    Parameters
    ----------
    keys : dict
        The client's key state (:func:`keep_peers`).
    spec : dict
        ``round`` (the masked round's number in the fit), ``alive`` (key
        indices of the clients taking part, in canonical order),
        ``threshold`` (see :func:`share_threshold`) and, under distributed
        noise, ``honest``: h, the uploads each sum of the round must hold
        (:mod:`skfed.privacy._distributed`). The client adds its share of
        the noise for h, and reveals no share for a sum of fewer.

    Returns
    -------
    state : dict
        ``keys`` with this round's private key, self-mask seed and ring.
    upload : tuple
        The round public key (4 uint64) and, for each neighbour in ring
        order, its shares of the round key and of the self-mask seed,
        sealed with the pair's channel key (ChaCha20-Poly1305): (k, 8)
        uint64. The server cannot read a share.
    """
    if not keys or "index" not in keys:
        raise RuntimeError(
            "This client holds no secure-aggregation keys: the key exchange "
            "must run before a masked round."
        )
    rnd, alive = int(spec["round"]), [int(i) for i in spec["alive"]]
    if _alone(keys, alive):
        raise PermissionError(
            "A masked round must name this client and at least one other "
            "of the clients that exchanged keys: refused."
        )
    honest = spec.get("honest")
    if honest is not None and not 1 <= int(honest) <= len(alive):
        raise PermissionError(
            f"A masked round's noise counts on {honest} clients, but "
            f"{len(alive)} take part: refused."
        )
    _, peers = _ring(keys, alive)
    fraction = float(spec["threshold"])
    if not 0.5 <= fraction < 1.0:
        # Below a majority, a server that tells some neighbours a client
        # answered and the others that it dropped could collect both its
        # seed's and its key's shares.
        raise PermissionError(
            f"Secure aggregation's threshold is a fraction in [0.5, 1), got "
            f"{fraction!r}: refused."
        )
    # One share for each neighbour and one the client keeps (Shamir's x
    # = 1 for itself, then its neighbours in ring order), so that a
    # client that answered counts its own share towards its seed.
    t = share_threshold(len(peers) + 1, fraction)
    private = X25519PrivateKey.generate()
    raw = _raw_private(private)
    public = _raw_public(private)
    seed = np.frombuffer(os.urandom(16), dtype=np.uint8)
    secrets = (raw[:16], raw[16:], seed)
    split = [
        Shamir.split(t, len(peers) + 1, part.tobytes(), ssss=False) if peers else []
        for part in secrets
    ]
    own = b"".join(parts[0][1] for parts in split) if peers else bytes(48)
    sealed = []
    for rank, peer in enumerate(peers, start=1):
        shares = b"".join(parts[rank][1] for parts in split)
        nonce, data = _seal_terms(keys["index"], peer, rnd, public)
        sealed.append(_channel(keys, peer).encrypt(nonce, shares, data))
    state = dict(keys)
    state["round"] = {
        "round": rnd,
        "alive": alive,
        "private": raw,
        # Without neighbours (a fit of one client) there is no one to
        # share the seed with, nor anyone to hide from.
        "seed": seed if peers else None,
        "own_share": np.frombuffer(own, dtype=np.uint64).copy(),
        "revealed": False,
        # The clients whose noise shares each sum of the round counts on
        # (distributed noise), or None.
        "honest": None if honest is None else int(honest),
    }
    upload = (
        public,
        np.frombuffer(b"".join(sealed), dtype=np.uint64).reshape(-1, _SEALED_WORDS),
    )
    return state, upload


def _self_mask(seed, rnd, n_words):
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_SELF_INFO)
    return _pair_stream(key.derive(np.asarray(seed).tobytes()), rnd, n_words)


def _alone(keys, alive):
    """Whether the ring would leave this client without a mask although
    others exchanged keys (a fit of one client has no one to hide from)."""
    return len(set(alive)) < 2 and len(keys["public_keys"]) > 1


def _open(keys, sender, rnd, sender_public, sealed):
    """The share ``sender`` sealed for this client in round ``rnd``."""
    nonce, data = _seal_terms(sender, keys["index"], rnd, sender_public)
    try:
        return _channel(keys, sender).decrypt(
            nonce, np.asarray(sealed, dtype=np.uint64).tobytes(), data
        )
    except InvalidTag:
        raise PermissionError(
            f"The share and round key said to come from client {sender} do "
            "not authenticate under the pair's channel key: refused."
        ) from None


def refuse_unmasked(upload, step_name):
    """Client: ``upload`` unless there is one. A client whose own settings
    say it masks sends a sum-only upload masked or not at all, whatever the
    server asks.

    Raises
    ------
    PermissionError
        When the step would upload something unmasked.
    """
    if upload is not None:
        raise PermissionError(
            f"This client masks its sum-only uploads (secure aggregation is "
            f"its own setting), and step {step_name!r} was asked for one "
            "unmasked: refused. Fit with secure_aggregation=True."
        )
    return upload


def mask_upload(client, upload, spec, setup):
    """Client: the upload as one masked fixed-point vector and its layout.

    Parameters
    ----------
    client : ClientData
        Reads its keys from the ``"secure_aggregation"`` state.
    upload : object
        What the step would have uploaded (arrays, numbers, containers).
    spec : dict
        ``round`` (the masked round's number, the keystream's nonce) and
        ``alive`` (key indices of the clients taking part, in canonical
        order), as for :func:`draw_round_keys`.
    setup : dict
        ``publics`` ((k, 4) uint64) and ``sealed`` ((k, 8) uint64): each
        neighbour's round public key and the share it sealed for this
        client, in ring order; the share authenticates the key.

    Returns
    -------
    masked : dict or None
        ``{"masked": uint64 array, "layout": str}``: the fixed-point upload
        plus its self-mask plus the pairwise masks; None for no upload.
    """
    if upload is None:
        return None
    keys = client.masking_keys()
    if not keys or "index" not in keys:
        raise RuntimeError(
            "This client holds no secure-aggregation keys: the key exchange "
            "must run before a masked round."
        )
    rnd, alive = int(spec["round"]), [int(i) for i in spec["alive"]]
    mine = keys.get("round") or {}
    if _alone(keys, alive) or mine.get("round") != rnd or mine.get("alive") != alive:
        # Left alone on the ring, its vector would carry no mask at all;
        # on another ring than its round key's, masks would not cancel.
        raise PermissionError(
            "A masked round must name this client and at least one other "
            "of the clients that exchanged keys, on the ring its round key "
            "was drawn for: refused."
        )
    parts, shares = [], []
    layout = json.dumps(_flatten(upload, parts, shares))
    values = np.concatenate(parts) if parts else np.zeros(0)
    position, peers = _ring(keys, alive)
    publics = np.asarray(setup["publics"], dtype=np.uint64)
    sealed = np.asarray(setup["sealed"], dtype=np.uint64)
    if publics.shape != (len(peers), 4) or sealed.shape != (
        len(peers),
        _SEALED_WORDS,
    ):
        raise PermissionError(
            "A masked round must send this client one round key and one "
            "share from each of its neighbours: refused."
        )
    encoded = _encode_fixed(values, len(alive), _noise_shares(shares, mine))
    if mine["seed"] is not None:
        # The self-mask: a vector the server can remove only with the
        # seed's shares, which a neighbour reveals only for a client it is
        # told answered (SecAgg's double masking).
        encoded = encoded + _self_mask(mine["seed"], rnd, encoded.size)
    private = _private_key(mine["private"])
    for peer, public, share in zip(peers, publics, sealed):
        _open(keys, peer, rnd, public, share)
        s = _pair_stream(_derive(private, public, _HKDF_INFO), rnd, encoded.size)
        # uint64 arithmetic wraps: this is addition modulo 2^64.
        if alive.index(peer) > position:
            encoded = encoded + s
        else:
            encoded = encoded - s
    return {"masked": encoded, "layout": layout}


def reveal_shares(keys, request):
    """Client, after a masked round: for each of its neighbours in the
    round, its share of the self-mask seed if the server says it answered,
    or its shares of the round key if it says it dropped out; never both.

    Parameters
    ----------
    keys : dict
        The client's key state, with the round's (:func:`draw_round_keys`).
    request : dict
        ``round``; ``answered`` (key indices of the clients whose masked
        vectors the server adds); ``publics`` ((k, 4)) and ``sealed``
        ((k, 8)): each neighbour's round public key and the shares it
        sealed for this client, in ring order.

    Returns
    -------
    state : dict
        ``keys``, the round marked as revealed.
    shares : dict
        ``own``: (2,) uint64, its share of its own seed; ``seeds``: (a, 2)
        uint64, its shares of the seeds of the a neighbours that answered;
        ``keys``: (k - a, 4) uint64, of the round keys of those that
        dropped out; both in ring order.

    Raises
    ------
    PermissionError
        For a round other than the last one this client masked in, a second
        request for it, a sum of fewer than two answered uploads or one
        without this client's, a client said to have answered that the
        round did not ask, or shares that do not open.
    """
    mine = keys.get("round") or {}
    rnd = int(request["round"])
    answered = {int(i) for i in request["answered"]}
    if mine.get("round") != rnd or mine.get("revealed"):
        # Asked twice, a neighbour could be told once that a client
        # answered and once that it dropped out.
        raise PermissionError(
            f"Shares of round {rnd} are revealed once, for the last round "
            "this client masked in: refused."
        )
    alive = mine["alive"]
    _, peers = _ring(keys, alive)
    honest = mine.get("honest")
    if honest is not None and len(answered) < honest:
        # The survivors' noise shares add up to less than the release's
        # noise: the sum must stay masked.
        raise PermissionError(
            f"The round's noise counts on {honest} uploads in the sum, and "
            f"{len(answered)} answered: refused."
        )
    if keys["index"] not in answered or len(answered) < 2:
        # The sum of one upload is that upload.
        raise PermissionError(
            "A masked round's unmasking must leave a sum of at least two "
            "answered uploads, this client's among them: refused."
        )
    if not answered <= set(alive):
        raise PermissionError(
            "The clients said to have answered did not all take part in "
            "the round: refused."
        )
    publics = np.asarray(request["publics"], dtype=np.uint64)
    sealed = np.asarray(request["sealed"], dtype=np.uint64)
    if publics.shape != (len(peers), 4) or sealed.shape != (
        len(peers),
        _SEALED_WORDS,
    ):
        raise PermissionError(
            "An unmasking must send this client one round key and its "
            "shares from each of its neighbours: refused."
        )
    seeds, rebuilt = [], []
    for peer, public, share in zip(peers, publics, sealed):
        opened = np.frombuffer(_open(keys, peer, rnd, public, share), dtype=np.uint64)
        if peer in answered:
            seeds.append(opened[4:])
        else:
            rebuilt.append(opened[:4])
    state = dict(keys)
    state["round"] = {**mine, "revealed": True}
    shares = {
        "own": mine["own_share"][4:],
        "seeds": np.array(seeds, dtype=np.uint64).reshape(-1, 2),
        "keys": np.array(rebuilt, dtype=np.uint64).reshape(-1, 4),
    }
    return state, shares


# --------------------------------------------------------------------------
# Server side


def _combine(shares, size):
    """The secret of ``size`` bytes that Shamir ``shares`` ((index, uint64
    words) pairs) rebuild, in 16-byte parts."""
    return b"".join(
        Shamir.combine([(i, w.tobytes()[h : h + 16]) for i, w in shares], ssss=False)
        for h in range(0, size, 16)
    )


def unmasking_correction(
    rnd, alive, answered, publics, replies, n_words, fraction, names=None
):
    """Server: what to add to the sum of the answered masked vectors to
    remove their self-masks and the masks they share with the clients that
    dropped out.

    Parameters
    ----------
    rnd : int
        The masked round's number.
    alive : list of int
        Key indices of the clients the round asked, in ring order.
    answered : collection of int
        Those whose masked vectors are in the sum.
    publics : dict
        Key index -> round public key (4 uint64) of every client asked.
    replies : dict
        Key index of a client that answered the unmasking -> its shares
        (:func:`reveal_shares`).
    n_words : int
        The masked vectors' length.
    fraction : float
        The threshold (see :func:`share_threshold`).
    names : dict, default=None
        Key index -> the client's name in messages (the index itself when
        omitted).

    Returns
    -------
    correction : ndarray of dtype uint64

    Raises
    ------
    ValueError
        When fewer than the threshold's shares came back for a client, or
        the shares do not rebuild the round key a client published.
    """
    answered = set(answered)

    def name(key):
        return key if names is None else names[key]

    rings = {
        key: [alive[j] for j in neighbours(alive.index(key), len(alive))]
        for key in alive
    }
    correction = np.zeros(n_words, dtype=np.uint64)
    for key in alive:
        ring = rings[key]
        if not ring:
            continue
        kind = "seeds" if key in answered else "keys"
        usable = []
        if key in answered and key in replies:
            usable.append((1, replies[key]["own"]))
        for holder in ring:
            if holder not in replies:
                continue
            # The holder's shares are in its ring order, those of answered
            # neighbours under "seeds", of dropped ones under "keys".
            same = [p for p in rings[holder] if (p in answered) == (key in answered)]
            usable.append(
                (ring.index(holder) + 2, replies[holder][kind][same.index(key)])
            )
        t = share_threshold(len(ring) + 1, fraction)
        if len(usable) < t:
            what = (
                "its upload's self-mask is removed"
                if key in answered
                else "it dropped out; its masks are rebuilt"
            )
            raise ValueError(
                f"Client {name(key)!r}: {what} with {t} of the {len(ring) + 1} "
                f"shares it and its neighbours hold, and only {len(usable)} "
                "came back, so the sum cannot be recovered and nothing of it "
                "is released: too many clients dropped out of the round or "
                "its unmasking. Fit again with the clients that can stay."
            )
        usable = [(i, np.asarray(w, dtype=np.uint64)) for i, w in usable[:t]]
        if key in answered:
            seed = np.frombuffer(_combine(usable, 16), dtype=np.uint8)
            correction = correction - _self_mask(seed, rnd, n_words)
            continue
        private = X25519PrivateKey.from_private_bytes(_combine(usable, 32))
        if not np.array_equal(_raw_public(private), np.asarray(publics[key])):
            raise ValueError(
                f"The shares of client {name(key)!r}'s round key do not rebuild the "
                "key it published: the sum cannot be recovered."
            )
        position = alive.index(key)
        for peer in ring:
            if peer not in answered:
                continue
            s = _pair_stream(_derive(private, publics[peer], _HKDF_INFO), rnd, n_words)
            # The peer added s if the dropped client comes after it on the
            # ring and subtracted it otherwise: undo that.
            if position > alive.index(peer):
                correction = correction - s
            else:
                correction = correction + s
    return correction


def _noise_shares(shares, mine):
    """This client's share of each release's noise, (start, int64 draws),
    for the honest clients its round key was drawn for."""
    releases = [
        (offset + start, stop - start, noise)
        for offset, share in shares
        for start, stop, noise in share.segments
        if float(noise) > 0
    ]
    if not releases:
        return ()
    honest = mine.get("honest")
    if honest is None or any(noise.honest != honest for _, _, noise in releases):
        raise PermissionError(
            "This upload's noise is shared for another number of honest "
            "clients than the masked round's keys were drawn for: refused."
        )
    generator = noise_generator()
    return [
        (start, discrete_gaussian(share_std(noise, size, _SCALE), size, generator))
        for start, size, noise in releases
    ]


def check_masked(masked_uploads):
    """Server: raise ``ValueError`` unless every upload is a masked vector
    (the server of a masked round is never handed an individual upload in
    the clear, nor unmasks anything else)."""
    for u in masked_uploads:
        if not (
            isinstance(u, dict)
            and set(u) == {"masked", "layout"}
            and isinstance(u["masked"], np.ndarray)
            and u["masked"].dtype == np.uint64
        ):
            raise ValueError(
                "A secure-aggregation round received an upload that is not a "
                "masked vector; the server adds masked uploads only."
            )


def unmask_sum(masked_uploads, correction=None):
    """Server: the sum of the clients' uploads from their masked vectors.

    Adds the vectors modulo 2^64 (the pairwise masks cancel) and
    ``correction`` (the self-masks and the masks shared with dropped
    clients, :func:`unmasking_correction`), reads the
    sum as signed fixed point (one rounding) and rebuilds the upload's
    structure: within rounding of what :func:`sum_uploads` gives for the
    unmasked uploads.

    Raises
    ------
    ValueError
        If an upload is not a masked vector (the server of a masked round
        is never handed an individual upload in the clear), or the layouts
        differ.
    """
    if not masked_uploads:
        raise ValueError("No client answered the round: there is nothing to sum.")
    if all(u is None for u in masked_uploads):
        return None
    check_masked(masked_uploads)
    layout = masked_uploads[0]["layout"]
    if any(u["layout"] != layout for u in masked_uploads):
        raise ValueError("The clients' masked uploads have different layouts.")
    total = np.zeros(masked_uploads[0]["masked"].shape, dtype=np.uint64)
    for u in masked_uploads:
        total += u["masked"]
    if correction is not None:
        total += correction
    tree = json.loads(layout)
    value, _ = _unflatten(tree, _decode_fixed(total, _n_values(tree)))
    return value
