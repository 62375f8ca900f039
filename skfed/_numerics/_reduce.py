"""Server reductions that do not depend on the order of the clients.

Floating-point addition is not associative: summing the same uploads in
another order (clients renamed, or listed in another order) changes the
last bits of the total, and through an eigensolver or a restart the model.
The server therefore reduces uploads in an order fixed by their content.
"""

import hashlib

import numpy as np
import scipy.sparse as sp

__all__ = ["content_sorted", "order_free_sum"]


def _digest(upload, digest):
    """Feed an upload's content (arrays, numbers, nested sequences) into
    ``digest``."""
    if sp.issparse(upload):
        upload = upload.tocsr()
        for part in (upload.data, upload.indices, upload.indptr):
            _digest(part, digest)
    elif isinstance(upload, np.ndarray):
        digest.update(repr((upload.dtype.str, upload.shape)).encode())
        digest.update(np.ascontiguousarray(upload).data)
    elif isinstance(upload, (tuple, list)):
        digest.update(b"(%d" % len(upload))
        for part in upload:
            _digest(part, digest)
    elif isinstance(upload, dict):
        for key in sorted(upload):
            digest.update(repr(key).encode())
            _digest(upload[key], digest)
    else:  # numbers, strings, None
        digest.update(repr(upload).encode())


def content_sorted(uploads):
    """The uploads in an order fixed by their content alone (a digest of
    their bytes): equal sets of uploads give equal lists, whichever client
    sent which."""

    def key(upload):
        digest = hashlib.blake2b(digest_size=16)
        _digest(upload, digest)
        return digest.digest()

    return sorted(uploads, key=key)


def order_free_sum(uploads):
    """Σ of the clients' arrays (of one shape), added in
    :func:`content_sorted` order, one at a time (no stacked copy of them
    all)."""
    uploads = content_sorted(uploads)
    total = np.array(uploads[0], dtype=np.float64)
    for upload in uploads[1:]:
        total += upload
    return total
