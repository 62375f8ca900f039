"""Standardization fitted over the clients: the pooled data's mean and
variance from sums, without pooling a row.

The rounds live in :mod:`skfed.preprocessing._protocols._scaler`; this
module is the estimator.
"""

from functools import partial

import numpy as np
import scipy.sparse as sp
from sklearn.base import (
    BaseEstimator,
    OneToOneFeatureMixin,
    TransformerMixin,
)
from sklearn.utils import check_random_state
from sklearn.utils.sparsefuncs import inplace_column_scale
from sklearn.utils.validation import FLOAT_DTYPES, check_is_fitted, validate_data

from .._engine._estimator import FederatedMixin
from .._engine._remote import blockwise, is_dask_collection, is_remote
from .._engine._shared_params import shared_constraints, shared_parameter_docs
from .._engine._validation import check_magnitude
from .._sklearn_compat import fit_context as _fit_context
from ..privacy import check_privacy, feature_bounds
from ._protocols._scaler import (
    SCALER_MEAN,
    SCALER_SPREAD,
    SCALER_STATISTICS,
    run_scaler,
)

__all__ = ["FederatedStandardScaler"]


@shared_parameter_docs()
class FederatedStandardScaler(
    FederatedMixin, OneToOneFeatureMixin, TransformerMixin, BaseEstimator
):
    """Standardize features by the mean and variance of all the clients' rows.

    The federated counterpart of :class:`~sklearn.preprocessing.StandardScaler`:
    ``z = (x - u) / s`` with ``u`` the mean and ``s`` the standard deviation
    of each feature over the rows of every client, computed from sums over
    clients, so that no row and no client's own statistic reaches the
    server. Fitted on the same rows, ``mean_``, ``var_`` and ``scale_`` are
    those of ``StandardScaler`` on the pooled data to rounding (within 1e-14
    relative in the tests, wherever the data sit). It goes first in a
    :class:`~sklearn.pipeline.Pipeline` in front of any skfed estimator,
    with ``partitions`` routed to it as to the others. ``transform`` and
    ``inverse_transform`` are local: they need no round.

    Parameters
    ----------
    copy : bool, default=True
        If False, ``transform`` and ``inverse_transform`` scale in place
        where they can (a writeable float32 or float64 array), as in
        :class:`~sklearn.preprocessing.StandardScaler`.

    with_mean : bool, default=True
        Center the data before scaling. Sparse input needs False (centering
        would fill every stored zero).

    with_std : bool, default=True
        Scale the data to unit variance.

    on_client_error : {"raise", "drop"}, default="raise"
        With ``"drop"`` the statistics are of the other clients' rows.

    n_jobs : int, default=None

    random_state : int, RandomState instance or None, default=None
        Seeds an int ``partitions``' random split. The differential
        privacy noise never follows it: each client draws it from fresh OS
        entropy, so a private fit is not reproducible.

    verbose : int, default=0

    raw_rows : {"allow", "refuse"}, default="allow"
        The scaler sends no row, but the mean of a client of one row is
        that row, and with its count the mean and spread of a client of
        two rows give both: with "refuse" a client of fewer than two
        distinct rows (three with ``with_std``) raises instead of uploading.
        Noised statistics (``privacy``) need no minimum.

    secure_aggregation : bool, default=False
        Every round of the scaler needs only sums, and the masked sums are
        the unmasked ones to rounding (the same ``mean_`` and ``scale_``).
        Each client's shares (its rows' sum over N, and their squared
        deviations over N) must
        stay below 2^31 / M in magnitude: features whose variance is
        beyond about 2e9 / M need a known unit first (divide them by a
        constant).

    privacy : :class:`~skfed.privacy.DifferentialPrivacy` or None, \
            default=None
        Each client clips its rows into ``privacy.bounds``, moves them to
        the box's coordinates (v in [-1, 1]^d: centre subtracted,
        half-widths divided) and releases Σ v and Σ v² (with ``with_std``)
        once, with Gaussian noise of standard deviation z·√(5d') (z·2√d'
        without ``with_std``; z the accountant's noise multiplier, d' the
        features whose box has a positive width), and its row count n_m,
        public, without noise: one round, one release. The server divides
        by N and keeps the mean in the box and the variance between 0 and
        its largest value there (post-processing). Each of the M clients
        adds its own noise, so the noise in ``mean_`` is then about
        z·√(5d')·√M·h/N for a feature of half-width h: the bounds should be
        tight and the rows many. With ``secure_aggregation=True`` the
        clients add shares of one noise (distributed noise): about
        z·√(5d')·h/N with every client honest.

    Attributes
    ----------
    mean_ : ndarray of shape (n_features,) or None
        The mean of each feature over all the clients' rows; None when
        ``with_mean=False`` and ``with_std=False``.

    var_ : ndarray of shape (n_features,) or None
        The (biased) variance of each feature over all the clients' rows,
        used to compute ``scale_``; None when ``with_std=False``.

    scale_ : ndarray of shape (n_features,) or None
        ``sqrt(var_)``, with 1 for features of (almost) zero variance, as
        in :class:`~sklearn.preprocessing.StandardScaler`; None when
        ``with_std=False``.

    n_samples_seen_ : int
        N, the rows of the clients that took part (under ``privacy``, their
        noised count, rounded, at least 1).

    n_clients_ : int
        Number of clients whose rows are in the statistics.

    failed_clients_ : dict
        Client id -> reason (a sentence), for clients that failed with
        ``on_client_error="drop"``; ``{}`` when none.

    communication_ : CommunicationLog
        What crossed the network. Without ``privacy``: round ``"scaler
        mean"`` downloads N (1 float) and uploads n_m and Σ x / N (1 + d
        floats per client); round ``"scaler spread"`` (with ``with_std``)
        downloads N and x̄ (1 + d floats) and uploads Σ (x − x̄) / N and
        Σ (x − x̄)² / N (2d floats per client). Under ``privacy``: one
        round ``"scaler statistics"``, down the bounds (2d floats), up
        2d + 1 floats per client (d + 1 without ``with_std``). With
        ``with_mean=False`` and ``with_std=False``, no round. All are
        ``sum_only``.

    privacy_spent_ : tuple (epsilon, delta) or None
        What the fit spent under ``privacy``, from its accountant; None
        without ``privacy``.
        With ``secure_aggregation=True`` the masked releases are noised in
        shares (distributed noise), and the figure holds as long as at least
        ``privacy.honest_clients`` clients of each masked sum keep their
        shares from the server (see :class:`~skfed.privacy.DifferentialPrivacy`).

    n_features_in_ : int
        Number of features seen during ``fit``.

    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during ``fit``. Defined only when `X`
        has feature names that are all strings.

    See Also
    --------
    sklearn.preprocessing.StandardScaler : The same scaling fitted on pooled
        rows.

    Notes
    -----
    Without ``privacy`` the fit takes two ``sum_only`` rounds (one with
    ``with_std=False``): the mean first, then the squared deviations from
    it, as ``StandardScaler`` computes them on pooled rows. One round of
    sums of squares would lose the variance to cancellation far from the
    origin (Σ x²/N − x̄² at a mean of 1e6 and a standard deviation of 1
    keeps about four digits), and each client's own mean, which would
    repair it, is a per-client statistic. Each client divides its sums by
    N (public: the server knows every client's row count) so that what it
    uploads is of the size of the data, as secure aggregation needs.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.preprocessing import FederatedStandardScaler
    >>> X = np.array([[0.0, 10.0], [2.0, 10.0], [4.0, 30.0], [6.0, 30.0]])
    >>> scaler = FederatedStandardScaler().fit(X, partitions=[0, 0, 1, 1])
    >>> scaler.mean_
    array([ 3., 20.])
    >>> scaler.scale_
    array([ 2.23606798, 10.        ])
    >>> scaler.transform([[3.0, 20.0]])
    array([[0., 0.]])
    >>> scaler.communication_.n_upload_rounds
    2
    """

    _parameter_constraints: dict = {
        "copy": ["boolean"],
        "with_mean": ["boolean"],
        "with_std": ["boolean"],
        "random_state": ["random_state"],
        **shared_constraints(),
    }

    def __init__(
        self,
        *,
        copy=True,
        with_mean=True,
        with_std=True,
        on_client_error="raise",
        n_jobs=None,
        random_state=None,
        verbose=0,
        raw_rows="allow",
        secure_aggregation=False,
        privacy=None,
    ):
        self.copy = copy
        self.with_mean = with_mean
        self.with_std = with_std
        self.on_client_error = on_client_error
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose
        self.raw_rows = raw_rows
        self.secure_aggregation = secure_aggregation
        self.privacy = privacy

    def _rounds(self):
        if not (self.with_mean or self.with_std):
            # The row count is the federation's metadata: no round.
            return []
        if self.privacy is not None:
            return [SCALER_STATISTICS]
        return [SCALER_MEAN, SCALER_SPREAD] if self.with_std else [SCALER_MEAN]

    def _privacy_releases(self):
        # With neither statistic the fit makes no release, and
        # privacy_spent_ says so; the accountant is still calibrated for
        # one (it cannot be for none).
        return max(super()._privacy_releases(), 1)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # Sparse rows can be scaled, not centered.
        tags.input_tags.sparse = not self.with_mean
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, *, partitions=None):
        """Compute the mean and the standard deviation over the clients.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data of all clients (sparse with ``with_mean=False``).

        y : Ignored
            Not used, present here for API consistency by convention.

        partitions : None, int or array-like of shape (n_samples,), \
                default=None
            Client id of each sample; an int n splits the samples uniformly
            at random into n clients; None means one client.

        Returns
        -------
        self : object
            Fitted scaler.
        """
        if is_remote(X):
            X, _, partitions = self._remote_fit_input(X, None, partitions)
        else:
            X = validate_data(self, X, accept_sparse=("csr", "csc"), dtype=FLOAT_DTYPES)
            check_magnitude(X)
        if self.with_mean and sp.issparse(X):
            raise ValueError(
                "Cannot center sparse data: centering fills every stored zero. "
                "Pass with_mean=False (scale only), or densify X."
            )
        private = self._private_box(X)
        rng = check_random_state(self.random_state)
        fed = self._federation(X, None, partitions, random_state=rng)
        if private is not None:
            lower, upper = private
            n_free = int(np.count_nonzero(upper > lower))
            std = SCALER_STATISTICS.noise_std(fed.accountant, n_free, self.with_std)
            private = (lower, upper, std)
        with fed:
            result = fed.run_protocol(
                partial(
                    run_scaler,
                    fed,
                    with_mean=self.with_mean,
                    with_std=self.with_std,
                    private=private,
                ),
                random_state=rng,
            )
        self.n_samples_seen_ = int(result.n_samples)
        self.mean_ = result.mean
        self.var_ = result.var
        self.scale_ = None
        if self.with_std:
            constant = _constant_features(result.var, result.mean, result.n_samples)
            scale = np.sqrt(result.var)
            # Relative to the data's own size only, as StandardScaler's
            # constant mask: data scaled by 1e-16 scales the same way.
            scale[constant] = 1.0
            self.scale_ = scale
        self.n_clients_ = len(result.client_ids)
        self.failed_clients_ = dict(fed.failed_clients)
        self.communication_ = fed.log
        self._record_privacy(fed)
        return self

    def _private_box(self, X):
        """(lower, upper) under ``privacy``, None without."""
        privacy = check_privacy(self.privacy)
        if privacy is None:
            return None
        if is_remote(X) and privacy.bounds is None:
            raise ValueError(
                "FederatedStandardScaler with privacy on remote data needs "
                "DifferentialPrivacy(bounds=(lower, upper)): reading them from "
                "the clients' rows would leak them."
            )
        return feature_bounds(privacy, X, estimator="FederatedStandardScaler")

    def _fitted_input(self, X, copy):
        """X checked against the fit (features, dtype), copied unless
        ``copy`` (or the ``copy`` parameter, for None) says otherwise."""
        check_is_fitted(self)
        return validate_data(
            self,
            X,
            reset=False,
            accept_sparse=("csr", "csc"),
            copy=self.copy if copy is None else copy,
            dtype=FLOAT_DTYPES,
            force_writeable=True,
        )

    def transform(self, X, copy=None):
        """Standardize rows with the fitted statistics (local, no round).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            The rows to scale (sparse with ``with_mean=False``).

        copy : bool, default=None
            Copy X first; None follows the ``copy`` parameter.

        Returns
        -------
        X_tr : {ndarray, sparse matrix} of shape (n_samples, n_features)
            Transformed rows, of X's float dtype (for a dask array, a lazy
            dask array computed block by block where X's chunks are).
        """
        if is_dask_collection(X):
            return blockwise(self, "transform", X)
        X = self._fitted_input(X, copy)
        if sp.issparse(X):
            if self.with_mean:
                raise ValueError(
                    "Cannot center sparse data: pass with_mean=False (scale "
                    "only), or densify X."
                )
            if self.scale_ is not None:
                inplace_column_scale(X, 1 / self.scale_)
        else:
            if self.with_mean:
                X -= self.mean_.astype(X.dtype, copy=False)
            if self.with_std:
                X /= self.scale_.astype(X.dtype, copy=False)
        # Rows that come out beyond what the next step of a pipeline can
        # square are refused here, as every estimator's transform refuses
        # them.
        check_magnitude(X)
        return X

    def inverse_transform(self, X, copy=None):
        """Scale rows back to the original representation (local, no round).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Scaled rows.

        copy : bool, default=None
            Copy X first; None follows the ``copy`` parameter.

        Returns
        -------
        X_original : {ndarray, sparse matrix} of shape (n_samples, n_features)
            The rows in the original units (for a dask array, a lazy dask
            array computed block by block where X's chunks are).
        """
        if is_dask_collection(X):
            return blockwise(self, "inverse_transform", X)
        X = self._fitted_input(X, copy)
        if sp.issparse(X):
            if self.with_mean:
                raise ValueError(
                    "Cannot uncenter sparse data: pass with_mean=False, or densify X."
                )
            if self.scale_ is not None:
                inplace_column_scale(X, self.scale_)
            return X
        if self.with_std:
            X *= self.scale_.astype(X.dtype, copy=False)
        if self.with_mean:
            X += self.mean_.astype(X.dtype, copy=False)
        return X


def _constant_features(var, mean, n_samples):
    """Features whose variance is within the rounding of its computation.

    Summing N squared deviations rounds by about N·eps·var, and the mean's
    own rounding, of about N·eps·|x̄|, enters squared: below that bound a
    variance is zero that rounding made positive (the bound
    :class:`~sklearn.preprocessing.StandardScaler` uses, so constant
    features get scale 1 alike).
    """
    eps = np.finfo(np.float64).eps
    bound = n_samples * eps * var + (n_samples * mean * eps) ** 2
    return var <= bound
