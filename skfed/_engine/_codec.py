"""Messages as plain data and arrays, without pickle.

A transport that crosses a process or site boundary it does not trust (a
Flower deployment, say) must not unpickle what arrives: unpickling runs
code. :func:`encode` turns a round's message, upload or a client's kept
state into a *skeleton* that JSON can carry and a list of numpy arrays of
non-object dtype; :func:`decode` rebuilds the value from them. The types
are those the ledger measures (:func:`skfed._engine._ledger.count_payload`):
numpy arrays, scipy sparse matrices, numbers, strings, None, and tuples,
lists and dicts of those. Anything else raises ``TypeError``.
"""

import json
import numbers

import numpy as np
import scipy.sparse as sp

from ..privacy._distributed import DistributedNoise

__all__ = ["decode", "dumps", "encode", "loads"]

_SPARSE = {"csr": sp.csr_matrix, "csc": sp.csc_matrix, "coo": sp.coo_matrix}


def encode(obj):
    """``obj`` as (skeleton, arrays).

    Returns
    -------
    skeleton : JSON-serialisable
    arrays : list of ndarray
        Referred to by position from the skeleton.
    """
    arrays = []
    return _encode(obj, arrays), arrays


def decode(skeleton, arrays):
    """The value :func:`~skfed._engine._codec.encode` took apart."""
    return _decode(skeleton, arrays)


def dumps(obj):
    """``obj`` as (a JSON string, arrays)."""
    skeleton, arrays = encode(obj)
    return json.dumps(skeleton), arrays


def loads(text, arrays):
    """The value :func:`~skfed._engine._codec.dumps` took apart."""
    return decode(json.loads(text), arrays)


def _array(value, arrays):
    if value.dtype.hasobject:
        raise TypeError("Arrays of Python objects cannot be sent; use numbers.")
    # (np.ascontiguousarray would turn a 0-d array into a 1-d one.)
    arrays.append(value if value.flags.c_contiguous else value.copy(order="C"))
    return len(arrays) - 1


def _encode(obj, arrays):
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, np.ndarray):
        # Fortran order is kept: a step may depend on the layout it chose.
        if obj.flags.f_contiguous and not obj.flags.c_contiguous:
            return {"array": _array(obj.T, arrays), "order": "F"}
        return {"array": _array(obj, arrays)}
    if sp.issparse(obj):
        fmt = obj.format if obj.format in _SPARSE else "csr"
        m = obj.asformat(fmt)
        parts = (m.row, m.col) if fmt == "coo" else (m.indices, m.indptr)
        return {
            "sparse": fmt,
            "shape": list(m.shape),
            "data": _array(m.data, arrays),
            "index": [_array(p, arrays) for p in parts],
        }
    if isinstance(obj, np.generic):
        return {"scalar": _array(np.asarray(obj), arrays)}
    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, DistributedNoise):
        # The shares' noise: its standard deviation and what the shares
        # are drawn for (a plain float would have the client add it all).
        return {
            "distributed_noise": [
                _encode(float(obj), arrays),
                _encode(obj.sensitivity, arrays),
                int(obj.honest),
            ]
        }
    if isinstance(obj, numbers.Real):
        # JSON has no infinities or NaN; a 0-d array keeps them exactly.
        return {"scalar": _array(np.asarray(float(obj)), arrays), "py": "float"}
    if isinstance(obj, tuple):  # a NamedTuple comes back as a plain tuple
        return {"tuple": [_encode(v, arrays) for v in obj]}
    if isinstance(obj, list):
        return {"list": [_encode(v, arrays) for v in obj]}
    if isinstance(obj, dict):
        return {
            "dict": [[_encode(k, arrays), _encode(v, arrays)] for k, v in obj.items()]
        }
    raise TypeError(
        f"Cannot send a {type(obj).__name__}: messages, uploads and kept "
        "state are arrays, sparse matrices, numbers, strings, None and "
        "tuples, lists or dicts of those."
    )


def _decode(node, arrays):
    if not isinstance(node, dict):
        return node  # None, bool, str, int
    if "array" in node:
        value = arrays[node["array"]]
        return value.T if node.get("order") == "F" else value
    if "sparse" in node:
        fmt, shape = node["sparse"], tuple(node["shape"])
        data = arrays[node["data"]]
        first, second = (arrays[i] for i in node["index"])
        if fmt == "coo":
            return sp.coo_matrix((data, (first, second)), shape=shape)
        return _SPARSE[fmt]((data, first, second), shape=shape)
    if "scalar" in node:
        value = arrays[node["scalar"]][()]
        return float(value) if node.get("py") == "float" else value
    if "distributed_noise" in node:
        std, sensitivity, honest = node["distributed_noise"]
        return DistributedNoise(
            _decode(std, arrays), _decode(sensitivity, arrays), int(honest)
        )
    if "tuple" in node:
        return tuple(_decode(v, arrays) for v in node["tuple"])
    if "list" in node:
        return [_decode(v, arrays) for v in node["list"]]
    if "dict" in node:
        return {_decode(k, arrays): _decode(v, arrays) for k, v in node["dict"]}
    raise ValueError(f"Not an encoded value: {node!r}.")
