"""Input checks shared by every skfed estimator: above all, ``partitions``."""

import inspect
import numbers
import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_random_state

from .._sklearn_compat import Interval
from ._remote import is_dask_collection

__all__ = [
    "Partitioning",
    "StrictInterval",
    "as_id_array",
    "check_magnitude",
    "check_partitions",
    "clip_to_data",
]


class StrictInterval(Interval):
    """An ``Interval`` parameter constraint that refuses booleans.

    ``True`` is an ``Integral`` (and a ``Real``) to Python, so scikit-learn's
    ``Interval`` lets ``n_clusters=True`` through to numpy, which then fails
    far from the cause. Use this for every numeric parameter.
    """

    def is_satisfied_by(self, val):
        return not isinstance(val, (bool, np.bool_)) and super().is_satisfied_by(val)


def _default_of(estimator, name):
    """The default of ``estimator``'s parameter ``name``, from its signature."""
    return inspect.signature(type(estimator).__init__).parameters[name].default


def clip_to_data(name, value, limit, what, *, estimator=None):
    """A size parameter clipped, with a warning, to what the data allows.

    As scikit-learn's ``Nystroem`` does with ``n_components``: a size beyond
    the data (e.g. 400 representatives of 150 rows) uses the data, and says
    so, instead of failing or allocating for nothing. A value the user left
    at its default is clipped without a warning: the default is a size for
    large data, and defaults must just work on small data too.

    Parameters
    ----------
    name : str
        The parameter, as the user wrote it.
    value : int
        Its value.
    limit : int
        The most the data allows.
    what : str
        What ``limit`` counts, e.g. "samples".
    estimator : BaseEstimator, default=None
        The estimator whose parameter ``name`` is: when given, its default
        value is clipped silently.

    Returns
    -------
    value : int
        ``min(value, limit)``.
    """
    if value <= limit:
        return value
    if estimator is not None and value == _default_of(estimator, name):
        return limit
    warnings.warn(
        f"{name}={value} exceeds the {limit} {what}; using {name}={limit}.",
        UserWarning,
        stacklevel=3,
    )
    return limit


def check_magnitude(X):
    """Refuse data whose squares overflow or underflow its floating type.

    Every estimator works with squared distances (or kernels of them): on
    values beyond about the square root of the type's range they overflow to
    inf or underflow to 0, and the fit fails with a misleading message
    ("all samples are identical", "contains NaN", "SVD did not converge") or
    returns non-finite output. Call after ``validate_data`` (X is finite).

    Parameters
    ----------
    X : {ndarray, sparse matrix} of float32 or float64

    Raises
    ------
    ValueError
        If the largest absolute value is above ``sqrt(finfo.max) * 1e-6``
        (1.3e148 for float64, 1.8e13 for float32) or, for data that is not
        all zero, below ``sqrt(finfo.tiny) * 1e6`` (1.5e-148 and 1.1e-13);
        the message gives the value found and the fix.
    """
    values = X.data if sp.issparse(X) else X
    if values.size == 0:
        return
    # max and -min rather than abs: no temporary copy of X.
    largest = max(float(values.max()), -float(values.min()))
    info = np.finfo(X.dtype)
    upper = float(np.sqrt(info.max)) * 1e-6
    lower = float(np.sqrt(info.tiny)) * 1e6
    if largest > upper:
        problem = f"values up to {largest:.3g} in magnitude"
    elif 0 < largest < lower:
        problem = f"no value above {largest:.3g} in magnitude"
    else:
        return
    raise ValueError(
        f"X has {problem}: squared distances between such {X.dtype} values "
        f"overflow or underflow (the usable range is about {lower:.0e} to "
        f"{upper:.0e}). Rescale the features first by a factor known without "
        "pooling the rows (e.g. change their unit)"
        + (", or pass float64 data." if X.dtype == np.float32 else ".")
    )


@dataclass(frozen=True)
class Partitioning:
    """Which samples each client holds.

    Attributes
    ----------
    client_ids : tuple
        The clients, in canonical (sorted) order.
    indices : tuple of ndarray of int
        ``indices[m]`` are the positions in ``X`` of client ``client_ids[m]``'s
        samples, in increasing order.
    n_samples : int
        Number of samples over all clients.
    """

    client_ids: tuple
    indices: tuple
    n_samples: int

    @property
    def n_clients(self):
        return len(self.client_ids)

    @property
    def sizes(self):
        """Number of samples per client, aligned with ``client_ids``."""
        return np.array([len(i) for i in self.indices], dtype=np.intp)


def _is_missing(value):
    """None, NaN, NaT or pandas.NA (whose comparisons are themselves NA)."""
    if value is None:
        return True
    try:
        return bool(value != value)
    except (TypeError, ValueError):  # pd.NA: "boolean value of NA is ambiguous"
        return True


def _holds_missing(value):
    """Whether an id is missing or is a tuple (or frozenset) holding a
    missing value at any depth.

    ``(nan, 0) != (nan, 0)`` when the two NaNs are different objects
    (Python compares a tuple's items by identity first), so such ids would
    split one client into one client per row.
    """
    if isinstance(value, (tuple, frozenset)):
        return any(_holds_missing(v) for v in value)
    return _is_missing(value)


def as_id_array(partitions):
    """One id per sample as a 1-D array, the ids exactly as given.

    A list is never coerced by numpy's common-type rules: ``[1, "1"]`` would
    become two equal strings and tuple ids a 2-D array.
    """
    if is_dask_collection(partitions):
        raise ValueError(
            "partitions is a dask collection but X is in memory; pass X as a "
            "dask array too (the clients are then built where the rows are), "
            "or pass the ids in memory (partitions.compute())."
        )
    if hasattr(partitions, "to_numpy"):  # pandas Series / Index / Categorical
        partitions = partitions.to_numpy()
    if isinstance(partitions, np.ndarray):
        return partitions
    values = list(partitions)
    raw = np.empty(len(values), dtype=object)
    raw[:] = values
    kinds = {type(v) for v in values}
    if kinds and (kinds <= {int} or kinds <= {str}):
        return np.asarray(values)  # the fast, sortable common case
    return raw


def _distinct_ids(raw):
    """The distinct ids of an object array, in order of first appearance.

    Raises
    ------
    ValueError
        If an id is unhashable (a list, an array, a dict) or holds a missing
        value (see :func:`_holds_missing`).
    """
    try:
        distinct = list(dict.fromkeys(raw.tolist()))
    except TypeError:
        bad = next(v for v in raw.tolist() if not _hashable(v))
        raise ValueError(
            f"partitions contains the unhashable client id {bad!r} (a "
            f"{type(bad).__name__}); a client id must be hashable: an int, a "
            "str, a tuple of those, or any other hashable value. Turn lists "
            "or arrays into tuples first."
        ) from None
    missing = [c for c in distinct if _holds_missing(c)]
    if any(not isinstance(c, (tuple, frozenset)) for c in missing):
        raise ValueError(
            "partitions contains missing values (None, NaN, NaT or pd.NA); "
            "every sample needs a client id."
        )
    if missing:
        raise ValueError(
            f"partitions contains the client id {missing[0]!r}, which holds a "
            "missing value (None, NaN, NaT or pd.NA): NaN never equals itself, "
            "so such an id cannot name one client. Replace the missing part "
            "of the id (e.g. with a string such as 'unknown')."
        )
    return distinct


def _hashable(value):
    try:
        hash(value)
    except TypeError:
        return False
    return True


def canonical_order(unique_ids):
    """Sort client ids; mixed types are ordered by type, then value.

    Ids that cannot be sorted (e.g. ``object()`` instances, or a type whose
    values have no order) keep the order they are given in (first
    appearance): never their ``repr`` or ``hash``, which may hold a memory
    address and so differ between two runs. The model does not depend on
    the clients' order; only this order of ``client_ids_`` does.
    """
    unique_ids = list(unique_ids)
    try:
        return sorted(unique_ids)
    except TypeError:
        pass
    by_type = {}
    for c in unique_ids:
        by_type.setdefault((type(c).__module__, type(c).__qualname__), []).append(c)
    ordered = []
    for kind in sorted(by_type):
        members = by_type[kind]
        try:
            members = sorted(members)
        except TypeError:
            pass
        ordered.extend(members)
    return ordered


def _integer_codes(raw):
    """``np.unique(raw, return_inverse=True)`` for integer ids spanning at
    most a few times as many values as there are samples, by counting
    instead of sorting (2 ms for a million samples against 35 ms); ``(None,
    None)`` for other ids."""
    if raw.dtype.kind not in "iu" or raw.size == 0:
        return None, None
    low = raw.min()
    if int(raw.max()) - int(low) > 4 * raw.size:
        return None, None
    # In 64 bits: an int8 difference could wrap. Modulo 2**64 the
    # difference is exact, and it is small.
    wide = np.dtype(np.int64 if raw.dtype.kind == "i" else np.uint64)
    low = wide.type(low)
    shifted = (raw.astype(wide) - low).astype(np.intp)
    present = np.bincount(shifted) > 0
    code = np.cumsum(present) - 1
    ids = (np.flatnonzero(present).astype(wide) + low).tolist()
    return tuple(ids), code[shifted]


def check_partitions(partitions, n_samples, *, random_state=None, min_samples=1):
    """Validate ``partitions`` and turn it into per-client sample indices.

    Parameters
    ----------
    partitions : None, int or array-like of shape (n_samples,)
        ``None``: one client holds every sample (the centralized algorithm).
        An int ``n``: the samples are split uniformly at random into ``n``
        clients of (almost) equal size, using ``random_state``.
        An array-like: the client id of each sample; any hashable values
        (ints, strings, tuples, ...) except missing values (None, NaN, NaT,
        pd.NA). Ids are taken as given: ``1`` and ``"1"`` are two clients.
    n_samples : int
        Number of samples in ``X``.
    random_state : int, RandomState instance or None, default=None
        Used only when ``partitions`` is an int.
    min_samples : int, default=1
        Smallest number of samples a client may hold. Estimators pass their
        own requirement (e.g. a local number of clusters).

    Returns
    -------
    partitioning : Partitioning

    Raises
    ------
    ValueError
        If ``partitions`` has the wrong length or shape, contains missing
        ids, asks for more clients than samples, or leaves a client with
        fewer than ``min_samples`` samples.
    """
    if n_samples < 1:
        raise ValueError("Cannot partition an empty dataset: X has 0 samples.")

    if partitions is None:
        labels = np.zeros(n_samples, dtype=np.intp)
        ids = (0,)
    elif isinstance(partitions, numbers.Integral) and not isinstance(partitions, bool):
        n_clients = int(partitions)
        if n_clients < 1:
            raise ValueError(
                f"partitions={n_clients} asks for no client; pass a positive "
                "number of clients, an array of client ids, or None for one client."
            )
        if n_clients > n_samples:
            raise ValueError(
                f"partitions={n_clients} asks for more clients than there are "
                f"samples ({n_samples}); use at most {n_samples} clients."
            )
        rng = check_random_state(random_state)
        # Equal sizes (up to one) so that no client is empty by chance.
        labels = np.empty(n_samples, dtype=np.intp)
        labels[rng.permutation(n_samples)] = np.arange(n_samples) % n_clients
        ids = tuple(range(n_clients))
    elif isinstance(partitions, (numbers.Number, str, bytes)):
        raise ValueError(
            f"partitions={partitions!r} is neither a number of clients nor one "
            "client id per sample; pass an int number of clients (e.g. "
            "partitions=3), an array of n_samples client ids, or None for one "
            "client."
        )
    else:
        raw = as_id_array(partitions)
        if raw.ndim != 1:
            raise ValueError(
                "partitions must be one client id per sample, of shape "
                f"(n_samples,); got an array of shape {raw.shape}."
            )
        if raw.shape[0] != n_samples:
            raise ValueError(
                f"partitions has {raw.shape[0]} entries but X has {n_samples} "
                "samples; pass one client id per sample (when slicing X for "
                "cross-validation, slice partitions the same way, e.g. by "
                "passing it as fit metadata)."
            )
        if raw.dtype.kind == "f" and np.isnan(raw).any():
            raise ValueError("partitions contains NaN; every sample needs a client id.")
        if raw.dtype.kind in "mM" and np.isnat(raw).any():
            raise ValueError("partitions contains NaT; every sample needs a client id.")
        if raw.dtype.kind == "O":
            ids = tuple(canonical_order(_distinct_ids(raw)))
            code = {c: i for i, c in enumerate(ids)}
            labels = np.fromiter((code[v] for v in raw), dtype=np.intp, count=n_samples)
        else:
            ids, labels = _integer_codes(raw)
            if ids is None:
                unique, labels = np.unique(raw, return_inverse=True)
                ids = tuple(unique.tolist())

    # Up to 65,536 clients, a stable sort of 16-bit codes is numpy's radix
    # sort: 3 ms for a million samples against 28 ms for intp codes.
    codes = labels.astype(np.uint16) if len(ids) <= 2**16 else labels
    order = np.argsort(codes, kind="stable")
    sizes = np.bincount(labels, minlength=len(ids))
    indices = tuple(np.split(order, np.cumsum(sizes)[:-1]))
    too_small = [c for c, s in zip(ids, sizes) if s < min_samples]
    if too_small:
        shown = ", ".join(repr(c) for c in too_small[:5])
        more = f" and {len(too_small) - 5} more" if len(too_small) > 5 else ""
        raise ValueError(
            f"Client(s) {shown}{more} hold fewer than {min_samples} sample(s), "
            f"which this estimator needs per client; merge small clients, "
            "use fewer clients, or lower the per-client requirement."
        )
    return Partitioning(client_ids=ids, indices=indices, n_samples=int(n_samples))
