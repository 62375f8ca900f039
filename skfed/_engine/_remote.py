"""Training data that stays where it lives: what dask and Flower share.

An estimator's ``fit`` accepts, besides in-memory arrays, data held
elsewhere: a dask collection (its chunks on dask workers) or the data of
Flower nodes (:class:`skfed.flower.NodeData`). Such data is *remote*: the
estimator reads its shape, builds the federation's transport from it, and
never computes it here. The clients check their own rows with the checks
the in-memory fit would run and build their
:class:`~skfed._engine._client.ClientData` where they are
(:func:`skfed._engine._client.make_client`).
"""

from functools import partial

import numpy as np
import scipy.sparse as sp

from .._numerics._blocks import row_blocks

__all__ = [
    "RemoteArray",
    "aligned",
    "blockwise",
    "blockwise_sum",
    "code_labels",
    "distinct_values",
    "is_dask_collection",
    "is_remote",
]


class RemoteArray:
    """Base class of per-sample data held by remote clients (not dask).

    Subclasses set ``shape`` and ``dtype`` and implement ``distinct()``,
    ``coded(classes)`` and ``open_transport(y, seed, spec)``.
    """

    @property
    def ndim(self):
        return len(self.shape)


def is_dask_collection(X):
    """Whether X is a dask array, dataframe or series (without importing
    dask when it is not installed)."""
    return type(X).__module__.partition(".")[0] == "dask" and hasattr(
        X, "__dask_graph__"
    )


def is_remote(X):
    """Whether X is data held elsewhere (dask, Flower nodes)."""
    return isinstance(X, RemoteArray) or is_dask_collection(X)


# Values np.unique sorts at a time in distinct_values.
_DISTINCT_BLOCK = 2**18


def distinct_values(values):
    """The distinct values of a per-sample output, computed where it lives
    (for remote data only the distinct values come back)."""
    if isinstance(values, RemoteArray):
        return values.distinct()
    if is_dask_collection(values):
        import dask.array as da

        return np.asarray(da.unique(values).compute())
    values = np.asarray(values)
    if values.ndim != 1 or values.size <= _DISTINCT_BLOCK:
        return np.unique(values)
    # np.unique sorts a copy: block by block, a copy of one block rather
    # than of all the labels of a large fit.
    distinct = np.unique(values[:0])
    for block in row_blocks(values.size, _DISTINCT_BLOCK):
        distinct = np.union1d(distinct, np.unique(values[block]))
    return distinct


def code_labels(y, classes):
    """Remote labels as their positions in ``classes``, coded where they
    live."""
    if isinstance(y, RemoteArray):
        return y.coded(classes)
    return y.map_blocks(partial(np.searchsorted, classes), dtype=np.intp)


def aligned(obj):
    """``obj`` with every numpy array in it in memory of its own.

    dask and Flower hand over deserialised arrays as views into their
    message frames, at any byte offset. numpy's SIMD loops split their work
    by alignment, so a sum over such a view can round differently from the
    same sum over a fresh array; copying keeps every party's arithmetic
    what it is in one process, and so the model for a seed the same.
    """
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject or obj.base is None:
            return obj
        return obj.copy(order="K")
    if sp.issparse(obj):
        return obj.copy()
    if isinstance(obj, tuple) and type(obj) is not tuple:  # NamedTuple
        return type(obj)(*(aligned(v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(aligned(v) for v in obj)
    if isinstance(obj, dict):
        return {k: aligned(v) for k, v in obj.items()}
    return obj


def _dask_rows(estimator, X):
    """A dask array or dataframe checked against the fitted estimator (its
    feature names and count) without computing it, as a dask array of
    whole rows per chunk."""
    from sklearn.utils.validation import check_is_fitted, validate_data

    check_is_fitted(estimator)
    if hasattr(X, "columns"):
        # The empty pandas frame dask keeps as metadata carries the names.
        validate_data(estimator, X._meta, skip_check_array=True, reset=False)
        X = X.to_dask_array(lengths=True)
    else:
        validate_data(estimator, X, skip_check_array=True, reset=False)
    if X.ndim != 2:
        raise ValueError(
            f"Expected 2D data, got a dask array of shape {X.shape}; reshape "
            "it to (n_samples, n_features)."
        )
    return X.rechunk({1: -1}) if len(X.chunks[1]) > 1 else X


def _unnamed(call):
    """``call()`` on a block of a dask X, whose feature names (if any) were
    checked against the fit's on the collection's metadata (``_dask_rows``):
    its blocks are the same columns without the names, which scikit-learn
    would otherwise warn about on every block."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", "X does not have valid feature names", UserWarning
        )
        return call()


def _apply(block, *more, estimator, method):
    return _unnamed(lambda: getattr(estimator, method)(block, *more))


def blockwise(estimator, method, X):
    """``estimator.method(X)`` for a dask X: a lazy dask array computed
    block by block on the workers that hold X's chunks.

    Each task runs the in-memory method on its block of rows (checks
    included), as dask-ml's ``ParallelPostFit`` does; the fitted estimator
    travels into the graph with the tasks. The output's dtype and columns
    come from the method on one row of zeros here.
    """
    import warnings

    X = _dask_rows(estimator, X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        probe = np.asarray(
            getattr(estimator, method)(np.zeros((1, X.shape[1]), dtype=X.dtype))
        )
    apply = partial(_apply, estimator=estimator, method=method)
    if probe.ndim == 1:
        return X.map_blocks(apply, dtype=probe.dtype, drop_axis=1)
    return X.map_blocks(apply, dtype=probe.dtype, chunks=(X.chunks[0], probe.shape[1:]))


def _block_sum(block, *more, estimator, method):
    value = _unnamed(lambda: getattr(estimator, method)(block, *more))
    return np.array([value], dtype=np.float64)


def blockwise_sum(estimator, method, X, *aligned_arrays):
    """The sum over X's blocks of ``estimator.method(block, *aligned
    blocks)`` (an additive score such as the k-means objective), computed
    on the workers; only one float per block comes back.

    ``aligned_arrays``: dask arrays of one value per row of X (sample
    weights), rechunked to X's rows.
    """
    import dask.array as da

    X = _dask_rows(estimator, X)
    more = []
    for a in aligned_arrays:
        more += [a.rechunk({0: X.chunks[0]}), "i"]
    per_block = da.blockwise(
        partial(_block_sum, estimator=estimator, method=method),
        "i",
        X,
        "ij",
        *more,
        dtype=np.float64,
        concatenate=True,
        adjust_chunks={"i": 1},
    )
    return float(per_block.sum().compute())
