"""What every k-means estimator does with its fitted centers, written once.

:class:`~skfed.KFed` and :class:`~skfed.DistributedKMeans` cluster the data
in its own space, :class:`~skfed.FederatedKernelKMeans` in a spectral
embedding; all three end with ``cluster_centers_`` in some space and answer
``predict`` and ``score`` there, on the server, with no client involved.
The space is the one hook: :meth:`KMeansCentersMixin._center_space` maps
validated samples into it (the identity for the first two, the replayed
embedding for the third).
"""

import numpy as np
from sklearn.base import TransformerMixin
from sklearn.metrics.pairwise import euclidean_distances
from sklearn.utils.validation import check_is_fitted, validate_data

from .._engine._remote import blockwise, blockwise_sum, is_dask_collection, is_remote
from .._engine._validation import check_magnitude
from .._numerics._shift import shift_point, shifted_rows
from .._sklearn_compat import check_sample_weight as _check_sample_weight
from ._kmeans import assign_around_centers

__all__ = ["KMeansCentersMixin"]


def labels_where_held(estimator, X, *, returned=False):
    """The training rows' labels when the clients keep theirs (a fit under
    ``raw_rows="refuse"`` or differential privacy collects no per-row
    output): rows in this process are labelled here with the fitted model
    (nothing crosses); rows elsewhere stay unlabelled (None for
    ``labels_``).

    With ``returned=True`` (for ``fit_predict``), a dask X gives a lazy
    ``predict`` computed where its chunks are, and rows on Flower nodes
    raise ``ValueError`` saying how to label them.
    """
    if not is_remote(X):
        return estimator.predict(X)
    if not returned:
        return None
    if is_dask_collection(X):
        return estimator.predict(X)
    raise ValueError(
        "Under raw_rows='refuse' or differential privacy the training rows' "
        "labels stay on the Flower nodes: fit, then label each node's rows "
        "there with the fitted model's predict."
    )


class KMeansCentersMixin(TransformerMixin):
    """predict, transform, score, fit_predict and fit_transform from
    ``cluster_centers_`` (mix in before :class:`~sklearn.base.BaseEstimator`).

    A :class:`~sklearn.base.TransformerMixin`, so that ``set_output`` wraps
    the ``transform`` and ``fit_transform`` defined here.

    Distances are taken around the centers' mean (see
    :func:`skfed.cluster._kmeans.assign_around_centers`): far from the
    origin the expansion ‖x‖² − 2x·c + ‖c‖² would cancel, and a sample
    equidistant from two centers to rounding goes to the first.
    """

    def fit_predict(self, X, y=None, *, partitions=None, sample_weight=None):
        """Fit and return ``labels_`` (:meth:`predict` on X when
        ``compute_labels=False`` left the labels on the clients).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data.
        y : Ignored
            Not used, present here for API consistency by convention.
        partitions : None, int or array-like of shape (n_samples,), \
                default=None
            Client id of each sample, see :meth:`fit`.
        sample_weight : array-like of shape (n_samples,), default=None
            Weight of each sample, see :meth:`fit`.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            The cluster of each training sample, as the clients labelled it.
            With ``compute_labels=False``, the nearest center of each
            training sample (for a dask X, a lazy dask array computed on the
            workers).
        """
        if getattr(self, "compute_labels", True):
            self.fit(X, partitions=partitions, sample_weight=sample_weight)
            if hasattr(self, "labels_"):
                return self.labels_
            # Not gathered (raw_rows="refuse", privacy): labelled where the
            # rows are.
            if hasattr(X, "columns") and isinstance(partitions, str):
                X = X.drop(columns=[partitions])
            return labels_where_held(self, X, returned=True)
        if is_remote(X) and not is_dask_collection(X):
            # Refused before the fit: its rows cannot be predicted here.
            raise ValueError(
                "fit_predict with compute_labels=False labels the training "
                "samples with predict, which needs them in memory or in a "
                "dask collection; pass compute_labels=True to gather the "
                "clients' labels instead."
            )
        self.fit(X, partitions=partitions, sample_weight=sample_weight)
        if hasattr(X, "columns") and isinstance(partitions, str):
            # A dataframe's client column is not a feature.
            X = X.drop(columns=[partitions])
        return self.predict(X)

    def fit_transform(self, X, y=None, *, partitions=None, sample_weight=None):
        """Fit, then return the distances of X to the centers.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data.
        y : Ignored
            Not used, present here for API consistency by convention.
        partitions : None, int or array-like of shape (n_samples,), \
                default=None
            Client id of each sample, see :meth:`fit`.
        sample_weight : array-like of shape (n_samples,), default=None
            Weight of each sample, see :meth:`fit`.

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_clusters)
            Euclidean distance of each sample to each center. For a dask
            X, a lazy dask array computed block by block where X's chunks
            are.
        """
        self.fit(X, partitions=partitions, sample_weight=sample_weight)
        return self._distances(self._center_space(X))

    def predict(self, X):
        """Index of the nearest center of each sample (no client involved).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            New data.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            Index of the cluster each sample belongs to. For a dask X, a
            lazy dask array computed block by block where X's chunks are.
        """
        if is_dask_collection(X):  # lazy, block by block on the workers
            return blockwise(self, "predict", X)
        check_is_fitted(self)
        labels, _ = assign_around_centers(
            self._center_space(X), self._centers(), d2=None
        )
        return labels.astype(np.int32, copy=False)

    def transform(self, X):
        """Distances of X to the centers (as ``KMeans.transform``).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            New data.

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_clusters)
            Euclidean distance of each sample to each center. For a dask
            X, a lazy dask array computed block by block where X's chunks
            are.
        """
        if is_dask_collection(X):  # lazy, block by block on the workers
            return blockwise(self, "transform", X)
        check_is_fitted(self)
        return self._distances(self._center_space(X))

    def score(self, X, y=None, sample_weight=None):
        """Opposite of the k-means objective of X against the centers.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            New data.
        y : Ignored
            Not used, present here for API consistency by convention.
        sample_weight : array-like of shape (n_samples,), default=None
            Weight of each sample; equal weights when None.

        Returns
        -------
        score : float
            ``-Σ_i w_i min_j ‖x_i − c_j‖²``. For a dask X (and dask
            ``sample_weight``), computed block by block on the workers,
            which send one float per block.
        """
        if is_dask_collection(X):  # summed block by block on the workers
            weights = () if sample_weight is None else (_dask_like(sample_weight),)
            return blockwise_sum(self, "_score_block", X, *weights)
        check_is_fitted(self)
        rows = self._center_space(X)
        sample_weight = _check_sample_weight(sample_weight, rows, dtype=np.float64)
        _, d2 = assign_around_centers(rows, self._centers())
        return -float(sample_weight @ d2)

    def _score_block(self, X, sample_weight=None):
        """:meth:`score` of one block of a dask X (its sum over the
        blocks is the score)."""
        return self.score(X, sample_weight=sample_weight)

    # -- hooks ------------------------------------------------------------------

    def _center_space(self, X):
        """Validated samples in the space of ``cluster_centers_``."""
        return self._validated(X)

    def _validated(self, X, *, reset=False):
        """X as every k-means estimator here takes it, in fit (``reset``)
        and after: float64/32, CSR accepted, finite, of usable magnitude."""
        X = validate_data(
            self,
            X,
            accept_sparse="csr",
            dtype=[np.float64, np.float32],
            order="C",
            accept_large_sparse=False,
            reset=reset,
        )
        check_magnitude(X)
        return X

    def _centers(self):
        return self.cluster_centers_

    def _distances(self, rows):
        # Around the centers' mean: expanded distances cancel far from the
        # origin (CSR rows on the columns they all store, see skfed._numerics._shift).
        centers = self._centers()
        reference = shift_point(centers.mean(axis=0), rows)
        return euclidean_distances(shifted_rows(rows, reference), centers - reference)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags


def _dask_like(values):
    """Per-sample values as a dask array (they are rechunked to X's rows)."""
    if is_dask_collection(values):
        return values.to_dask_array(lengths=True) if hasattr(values, "iloc") else values
    import dask.array as da

    return da.from_array(np.asarray(values))
