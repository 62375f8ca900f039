"""skfed payloads as Flower records, and what a Flower message weighs.

A payload (a step's name and options with its message, an upload, a
client's kept state) is taken apart by :mod:`skfed._engine._codec` into a JSON
skeleton, carried in a ``ConfigRecord``, and arrays of non-object dtype,
carried in an ``ArrayRecord``. Nothing is pickled in either direction.
"""

from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from .._engine._codec import dumps, loads
from .._engine._remote import aligned

__all__ = ["from_records", "to_records", "wire_bytes"]


def to_records(payload, records=None, *, prefix="skfed"):
    """Put ``payload`` into ``records`` (a new RecordDict when None) under
    ``prefix`` and ``prefix + ".arrays"``."""
    records = RecordDict() if records is None else records
    text, arrays = dumps(payload)
    records[prefix] = ConfigRecord({"skeleton": text})
    records[prefix + ".arrays"] = ArrayRecord(
        array_dict={str(i): Array(ndarray=a) for i, a in enumerate(arrays)}
    )
    return records


def from_records(records, *, prefix="skfed", default=None):
    """The payload :func:`to_records` put under ``prefix`` (``default`` when
    there is none), every array in memory of its own."""
    if prefix not in records:
        return default
    text = records[prefix]["skeleton"]
    stored = records[prefix + ".arrays"]
    arrays = [stored[str(i)].numpy() for i in range(len(stored))]
    return aligned(loads(text, arrays))


def wire_bytes(message):
    """Bytes of the objects Flower transfers for ``message``: the message,
    its records and array chunks, each serialized once (Flower
    de-duplicates identical objects); transport framing is not counted.
    None when this Flower release does not expose its object tree (the
    ledger then has no wire records)."""
    try:
        from flwr.supercore.inflatable.inflatable_object import (
            get_all_nested_objects,
        )
    except ImportError:  # pragma: no cover - a Flower release that moved it
        return None
    return sum(len(obj.deflate()) for obj in get_all_nested_objects(message).values())
