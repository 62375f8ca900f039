"""Sums over clients, in the clear or under pairwise masks (secure aggregation).

A round whose server step needs only the sum of the clients' uploads is
declared ``"sum_only"`` (:class:`skfed._engine._ledger.Disclosure`); the federation
then hands the server :func:`sum_uploads` of the uploads, never the list.
With ``secure_aggregation=True`` the clients also hide their uploads from
the server itself, as in SecAgg (Bonawitz et al., 2017) and SecAgg+ (Bell
et al., 2020) without their dropout recovery:

* **Keys** (once per fit, before the first masked round): each client draws
  an X25519 key pair and uploads its public key (32 bytes, 4 floats); the
  server sends every client all public keys (4 floats each).
* **Client, each masked round**: the upload's numbers (arrays, floats,
  ints, in a fixed order) are encoded in fixed point, ``round(x · 2^f)``
  with ``f = FRACTION_BITS``, as integers modulo 2^64. For each neighbour j
  on a ring of the clients taking part (every other client when they are
  few, ``2·ceil(log2 M)`` neighbours otherwise), the pair's shared X25519
  secret goes through HKDF-SHA256 to a ChaCha20 key, whose keystream for
  this round is the mask s_ij; client i adds s_ij for j after it on the
  ring and subtracts it for j before. Each masked vector alone is uniformly
  random; in the sum every mask cancels.
* **Server**: adds the masked vectors modulo 2^64 and decodes the sum. It
  never holds an unmasked individual upload (:func:`unmask_sum` refuses
  anything else).

Precision: each client's number is rounded to a multiple of 2^-32, an
error of at most 2^-33 ≈ 1.2e-10 per client, so a sum over M clients is
within M · 1.2e-10 of the exact one. Range: each client's values must stay
below 2^31 / M in magnitude (2^31 ≈ 2.1e9), so that no sum over the M
clients can wrap; a client with a larger one raises ``ValueError`` (scale
the data) rather than let the sum wrap.

A client that fails in a masked round leaves its masks in the others'
vectors: the sum is noise, so the fit fails (no dropout recovery).
Cryptography comes from the ``cryptography`` package; nothing here is a
primitive of its own.
"""

import json
import math
import numbers

import numpy as np
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import (
    X25519PrivateKey,
    X25519PublicKey,
)
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = [
    "FRACTION_BITS",
    "KEYS_NAMESPACE",
    "MASK_OPTION",
    "draw_keys",
    "keep_peers",
    "mask_upload",
    "neighbours",
    "refuse_unmasked",
    "sum_uploads",
    "unmask_sum",
]

#: Fractional bits of the fixed-point encoding: precision 2^-32 per value.
FRACTION_BITS = 32
_SCALE = float(2**FRACTION_BITS)
#: The reserved step option that tells a client to mask its upload.
MASK_OPTION = "_secure_aggregation"
#: Where a client keeps its key exchange's results: read by its masking
#: only, never by a step.
KEYS_NAMESPACE = "secure_aggregation"
_HKDF_INFO = b"skfed secure aggregation pairwise mask key"


# --------------------------------------------------------------------------
# Sums over clients (server side, in the clear)


def sum_uploads(uploads):
    """The elementwise sum of the clients' uploads, structure kept.

    Arrays are added one client after another in the given (canonical)
    order in float64 (int64 for integer arrays); Python and numpy floats
    with ``math.fsum`` (exact, so their order does not matter); ints
    exactly; ``None`` stays ``None``. Tuples, lists and dicts are summed
    item by item and must have the same shape on every client.

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
        total = np.zeros(shape, dtype=np.int64 if integer else np.float64)
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


def _flatten(upload, numbers_out):
    """The upload's layout (JSON-able), appending its numbers (float64)."""
    if upload is None:
        return None
    if isinstance(upload, dict):
        return {"dict": [[k, _flatten(v, numbers_out)] for k, v in upload.items()]}
    if isinstance(upload, (tuple, list)):
        kind = "tuple" if isinstance(upload, tuple) else "list"
        return {kind: [_flatten(v, numbers_out) for v in upload]}
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


def _encode_fixed(values, n_clients):
    """Fixed-point integers modulo 2^64 (two's complement in uint64)."""
    scaled = np.rint(values * _SCALE)
    # Each client's share of the range, so that no partial sum can wrap.
    limit = 2.0**63 / max(n_clients, 1)
    if not np.all(np.abs(scaled) < limit):
        # The message reaches the server: it names the public range only,
        # never the private value that broke it (nor whether it was finite).
        raise ValueError(
            "secure_aggregation encodes uploads in fixed point with "
            f"{FRACTION_BITS} fractional bits: a value of this client's upload "
            f"is outside what {n_clients} clients can add without overflow "
            f"(magnitudes below {limit / _SCALE:.3g}). Scale the data (e.g. "
            "FederatedStandardScaler) or fit without secure aggregation."
        )
    return scaled.astype(np.int64).view(np.uint64)


# --------------------------------------------------------------------------
# Client side. The engine runs the key exchange as two client steps
# (``skfed._engine._secure_aggregation``) and wraps the step of a masked
# round with :func:`mask_upload` (or, for a client that masks and was asked
# for a plain upload, :func:`refuse_unmasked`): this module knows nothing of
# the engine.


def draw_keys():
    """Client: draw an X25519 key pair. Returns the state to keep (the
    private key) and the upload (the public key, 32 bytes as 4 uint64)."""
    private = X25519PrivateKey.generate()
    raw = private.private_bytes(
        serialization.Encoding.Raw,
        serialization.PrivateFormat.Raw,
        serialization.NoEncryption(),
    )
    public = private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    state = {"private": np.frombuffer(raw, dtype=np.uint8).copy()}
    return state, np.frombuffer(public, dtype=np.uint64).copy()


def keep_peers(state, message):
    """Client: keep every client's public key and its own place among them
    (``message`` = (public keys as an (M, 4) uint64 array, own index)), and
    derive the pairwise keys with its neighbours on the ring of all M
    clients once (one X25519 agreement each, not one per round). Returns
    the new state (``state``: what :func:`draw_keys` kept)."""
    keys, index = message
    state = dict(state)
    state["public_keys"] = np.asarray(keys, dtype=np.uint64)
    state["index"] = int(index)
    private = _private_key(state)
    peers = neighbours(int(index), len(keys))
    state["peers"] = np.asarray(peers, dtype=np.int64)
    state["pair_keys"] = np.array(
        [
            np.frombuffer(_pair_key(private, state["public_keys"][j]), dtype=np.uint8)
            for j in peers
        ],
        dtype=np.uint8,
    ).reshape(len(peers), 32)
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


def _private_key(state):
    return X25519PrivateKey.from_private_bytes(state["private"].tobytes())


def _pair_key(private, peer_public):
    """The ChaCha20 key of a pair: HKDF-SHA256 over their X25519 secret."""
    shared = private.exchange(X25519PublicKey.from_public_bytes(peer_public.tobytes()))
    return HKDF(
        algorithm=hashes.SHA256(), length=32, salt=None, info=_HKDF_INFO
    ).derive(shared)


def _pair_stream(key, round_index, n_words):
    """s_ij for this round: the pair key's ChaCha20 keystream, with the
    round's index as nonce (a fresh stream every round)."""
    # ChaCha20's 16-byte nonce: a zero block counter, then the round index.
    nonce = bytes(4) + int(round_index).to_bytes(12, "little")
    stream = Cipher(algorithms.ChaCha20(key, nonce), mode=None).encryptor()
    return np.frombuffer(stream.update(bytes(8 * n_words)), dtype=np.uint64)


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


def mask_upload(client, upload, spec):
    """Client: the upload as one masked fixed-point vector and its layout.

    Parameters
    ----------
    client : ClientData
        Reads its keys from the ``"secure_aggregation"`` state.
    upload : object
        What the step would have uploaded (arrays, numbers, containers).
    spec : dict
        ``round`` (the round's index, the keystream's nonce) and ``alive``
        (key indices of the clients taking part, in canonical order).

    Returns
    -------
    masked : dict or None
        ``{"masked": uint64 array, "layout": str}``; None for no upload.
    """
    if upload is None:
        return None
    keys = client.masking_keys()
    if not keys or "index" not in keys:
        raise RuntimeError(
            "This client holds no secure-aggregation keys: the key exchange "
            "must run before a masked round."
        )
    parts = []
    layout = json.dumps(_flatten(upload, parts))
    values = np.concatenate(parts) if parts else np.zeros(0)
    alive = [int(i) for i in spec["alive"]]
    alone = len(set(alive)) < 2 and len(keys["public_keys"]) > 1
    if keys["index"] not in alive or alone:
        # Left alone on the ring of a fit of several clients, its vector
        # would carry no mask at all.
        raise PermissionError(
            "A masked round must name this client and at least one other "
            "of the clients that exchanged keys: refused."
        )
    position = alive.index(keys["index"])
    encoded = _encode_fixed(values, len(alive))
    cached = {int(j): key for j, key in zip(keys["peers"], keys["pair_keys"])}
    for j in neighbours(position, len(alive)):
        peer = alive[j]
        if peer in cached:
            key = cached[peer].tobytes()
        else:  # the ring closed over a client that dropped out
            key = _pair_key(_private_key(keys), keys["public_keys"][peer])
        s = _pair_stream(key, spec["round"], encoded.size)
        # uint64 arithmetic wraps: this is addition modulo 2^64.
        if j > position:
            encoded = encoded + s
        else:
            encoded = encoded - s
    return {"masked": encoded, "layout": layout}


# --------------------------------------------------------------------------
# Server side


def unmask_sum(masked_uploads):
    """Server: the sum of the clients' uploads from their masked vectors.

    Adds the vectors modulo 2^64 (the masks cancel), reads the sum as
    signed fixed point and rebuilds the upload's structure. Integer leaves
    come back exact; floats within ``M · 2^-33`` of the exact sum.

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
    layout = masked_uploads[0]["layout"]
    if any(u["layout"] != layout for u in masked_uploads):
        raise ValueError("The clients' masked uploads have different layouts.")
    total = np.zeros(masked_uploads[0]["masked"].shape, dtype=np.uint64)
    for u in masked_uploads:
        total += u["masked"]
    values = total.view(np.int64).astype(np.float64) / _SCALE
    value, _ = _unflatten(json.loads(layout), values)
    return value
