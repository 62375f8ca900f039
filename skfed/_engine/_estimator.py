"""The estimator side of a federated fit: :class:`FederatedMixin`.

An estimator whose ``fit`` takes ``partitions`` inherits it: it checks the
privacy settings against the rounds the fit would run, opens the
:class:`~skfed._engine._federation.Federation` over in-memory or remote
data, hands it the settings (secure aggregation, raw-row refusal, the
privacy accountant and budgets) and records what the fit spent.
"""

import numbers
import warnings

import numpy as np
from sklearn.utils.validation import validate_data

from ..privacy import Accountant, check_privacy, summed_noise_std
from ..privacy._budget import carry_open_budgets, charge_fit, settle_fit
from ..privacy._distributed import honest_count
from ._client import client_config
from ._federation import Federation
from ._remote import is_remote
from ._rounds import masked_rounds, refused_rounds, releases, unnoised_rounds
from ._validation import check_partitions

__all__ = ["FederatedMixin"]


class FederatedMixin:
    """Mixin for estimators whose ``fit`` takes ``partitions``.

    Requests ``partitions`` for ``fit`` (and ``partial_fit``) by default, so
    that a ``Pipeline`` or a search routes it when metadata routing is
    enabled. An estimator whose algorithm can go on without a failed client
    has an ``on_client_error`` parameter ({"raise", "drop"}, default
    "raise"), which ``_federation()`` hands to the network, and lists the
    dropped clients in ``failed_clients_``.
    """

    __metadata_request__fit = {"partitions": True}
    __metadata_request__partial_fit = {"partitions": True}

    # Whether a fit over many small clients with n_jobs > 1 may hold them in
    # worker processes (see skfed._engine._transports._processes); False for
    # a protocol whose uploads outweigh the clients' work.
    _clients_in_processes = True

    # What to use instead, named when raw_rows="refuse" or differential
    # privacy refuses a fit with these parameters.
    _raw_rows_alternative = ""
    _private_alternative = ""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # A finite epsilon draws the noise from fresh entropy on the
        # clients: every fit gives another model, whatever random_state is.
        epsilon = getattr(getattr(self, "privacy", None), "epsilon", None)
        if isinstance(epsilon, numbers.Real) and epsilon < float("inf"):
            tags.non_deterministic = True
        return tags

    def _rounds(self):
        """The declared rounds (:class:`skfed._engine._rounds.Round`) a fit
        with these parameters runs, a repeated round once per run, or None
        for an estimator that still answers the older per-estimator hooks.

        The refusals before the first round (``raw_rows``, ``privacy``,
        ``secure_aggregation`` with nothing to mask) and the privacy
        accounting are read from them.
        """
        return None

    def _has_sum_only_rounds(self):
        rounds = self._rounds()
        return True if rounds is None else bool(masked_rounds(rounds))

    _privacy_refusal = ""
    _raw_row_rounds = ()

    def _privacy_releases(self):
        """How many noised releases each client makes in a fit with these
        parameters (see ``skfed.privacy.Accountant``)."""
        rounds = self._rounds()
        if rounds is None:
            raise NotImplementedError
        return releases(rounds)

    def _check_privacy_settings(self):
        """Refuse a fit that would send raw rows against ``raw_rows``, or
        that differential privacy cannot cover, and say when
        ``secure_aggregation`` has nothing to mask, before any round."""
        privacy = check_privacy(getattr(self, "privacy", None))
        rounds = self._rounds()
        name = type(self).__name__
        if rounds is not None:
            unnoised = unnoised_rounds(rounds)
            refused = refused_rounds(rounds)
        else:
            unnoised = ("",) if self._privacy_refusal else ()
            refused = tuple(self._raw_row_rounds)
        if privacy is not None and unnoised:
            if rounds is None:
                reason = self._privacy_refusal
            else:
                reason = (
                    f"round(s) {', '.join(map(repr, unnoised))} upload what "
                    "no noise of bounded sensitivity covers. "
                    f"{self._private_alternative}"
                )
            raise ValueError(
                f"{name} cannot fit under differential privacy with these "
                f"parameters: {reason}".rstrip()
            )
        if getattr(self, "raw_rows", "allow") == "refuse" and refused:
            raise ValueError(
                f"{name} sends rows of X, or uploads that determine them, in "
                f"round(s) {', '.join(map(repr, refused))}, which "
                "raw_rows='refuse' forbids. "
                f"{self._raw_rows_alternative}".rstrip()
            )
        if getattr(self, "secure_aggregation", False) and not (
            self._has_sum_only_rounds()
        ):
            warnings.warn(
                f"secure_aggregation=True has no effect on {name} with these "
                "parameters: none of its rounds uploads only a sum (see "
                "communication_.disclosure()), so there is nothing to mask.",
                UserWarning,
                stacklevel=4,
            )

    def _client_input_checks(self):
        """What each client checks on its rows when the data is a dask
        collection (the in-memory fit's ``validate_data`` arguments)."""
        sparse = self.__sklearn_tags__().input_tags.sparse
        return {
            "accept_sparse": "csr" if sparse else False,
            "dtype": ("float64", "float32"),
        }

    def _remote_fit_input(self, X, y=None, partitions=None, *, reset=True):
        """Prepare remote training data (dask, Flower nodes) without
        computing it.

        A dask dataframe becomes a dask array of its feature columns (a
        ``partitions`` that names one of its columns is that column, which
        is not a feature); ``n_features_in_`` and ``feature_names_in_`` are
        set as ``validate_data`` sets them. The rows are checked later, on
        the clients.

        Returns
        -------
        X, y, partitions : remote arrays (y and partitions may be None)
        """
        if hasattr(X, "columns"):
            if isinstance(partitions, str):
                if partitions not in X.columns:
                    raise ValueError(
                        f"partitions={partitions!r} names no column of X "
                        f"(columns: {list(X.columns)[:10]})."
                    )
                column = partitions
                partitions = X[column]
                X = X.drop(columns=[column])
            # The empty pandas frame dask keeps as metadata carries the
            # column names scikit-learn reads.
            validate_data(self, X._meta, skip_check_array=True, reset=reset)
            X = X.to_dask_array(lengths=True)
        else:
            validate_data(self, X, skip_check_array=True, reset=reset)
        if X.ndim != 2:
            raise ValueError(
                f"Expected 2D data, got a dask array of shape {X.shape}; "
                "reshape it to (n_samples, n_features)."
            )
        for name, value in (("y", y), ("partitions", partitions)):
            if value is None or isinstance(value, str):
                continue
            if not is_remote(value):
                raise ValueError(
                    f"With remote X, {name} must be held where X is (a dask "
                    "array or series aligned with X's rows, or the nodes' "
                    f"own); got {type(value).__name__}."
                )
        # Labels and client ids of a pandas extension dtype (strings) become
        # objects, as NumPy holds them, instead of dask's converting them
        # with a warning.
        if y is not None and hasattr(y, "to_dask_array"):
            y = y if isinstance(y.dtype, np.dtype) else y.astype(object)
            y = y.to_dask_array(lengths=True)
        if partitions is not None and hasattr(partitions, "to_dask_array"):
            if not isinstance(partitions.dtype, np.dtype):
                partitions = partitions.astype(object)
            partitions = partitions.to_dask_array(lengths=True)
        for name, value in (("y", y), ("partitions", partitions)):
            if value is not None and value.shape[0] != X.shape[0]:
                raise ValueError(
                    f"{name} has {value.shape[0]} entries but X has {X.shape[0]} rows."
                )
        return X, y, partitions

    def _federation(
        self,
        X,
        y,
        partitions,
        *,
        random_state,
        sample_weight=None,
        min_samples=1,
        log=None,
    ):
        """Validate ``partitions`` and open the simulated network.

        Parameters
        ----------
        X, y : validated arrays
        partitions : None, int or array-like
            See :func:`skfed._engine._validation.check_partitions`.
        random_state : RandomState
            The fit's generator: used for an int ``partitions`` and to seed
            the clients.
        sample_weight : validated array or None, default=None
            Cut with the data; each client sees its own as
            ``client.sample_weight``.
        min_samples : int, default=1
            Smallest client size the estimator accepts.
        log : CommunicationLog, default=None
            Ledger to continue (``partial_fit``); new when omitted.

        Returns
        -------
        federation : Federation
            Not yet entered; use it in a ``with`` block.
        """
        self._check_privacy_settings()
        fed = self._open_federation(
            X,
            y,
            partitions,
            random_state=random_state,
            sample_weight=sample_weight,
            min_samples=min_samples,
            log=log,
        )
        if y is not None:
            # The labels are raw data too: one per row (8 bytes each).
            fed.log.add_raw_data(fed.n_samples, 8 * fed.n_samples)
        return self._privacy_settings(fed)

    def _client_config(self):
        """Each client's own settings, made part of the client when it is
        made (``ClientData.config``), so that no round can turn them off."""
        return client_config(self)

    def _open_federation(
        self, X, y, partitions, *, random_state, sample_weight, min_samples, log
    ):
        """The network over remote (dask, Flower) or in-memory data."""
        config = self._client_config()
        if is_remote(X):
            if sample_weight is not None:
                raise ValueError(
                    "sample_weight is not supported with remote (dask or "
                    "Flower) data yet; weight the rows before fitting, or fit "
                    "in memory."
                )
            return Federation.from_remote(
                X,
                y,
                partitions,
                random_state=random_state,
                input_checks={**self._client_input_checks(), "client": config},
                min_samples=min_samples,
                verbose=getattr(self, "verbose", 0),
                log=log,
                on_client_error=getattr(self, "on_client_error", "raise"),
            )
        partitioning = check_partitions(
            partitions,
            X.shape[0],
            random_state=random_state,
            min_samples=min_samples,
        )
        return Federation.from_arrays(
            X,
            y,
            partitioning,
            random_state=random_state,
            sample_weight=sample_weight,
            n_jobs=getattr(self, "n_jobs", None),
            verbose=getattr(self, "verbose", 0),
            log=log,
            on_client_error=getattr(self, "on_client_error", "raise"),
            in_processes=self._clients_in_processes,
            client_config=config,
        )

    def _privacy_settings(self, fed):
        """Hand the estimator's ``secure_aggregation`` and ``raw_rows`` to
        the network (off and "allow" for an estimator without them)."""
        fed.secure_aggregation = bool(getattr(self, "secure_aggregation", False))
        fed.raw_rows = getattr(self, "raw_rows", "allow")
        if fed.secure_aggregation and len(fed.client_ids) == 1:
            # The sum of one upload is the upload: the masks cancel on it.
            warnings.warn(
                f"secure_aggregation=True has no effect on {type(self).__name__} "
                "with one client: the sum of one client's uploads is its "
                "upload, which the server then sees. Fit over several "
                "clients, or add privacy=DifferentialPrivacy(...) to protect "
                "that client's rows.",
                UserWarning,
                stacklevel=4,
            )
        privacy = getattr(self, "privacy", None)
        if privacy is not None:
            fed.accountant = Accountant(
                privacy,
                self._privacy_releases(),
                estimator=type(self).__name__,
                n_samples=fed.n_samples,
                honest=self._honest_clients(fed, privacy),
            )
            # Open PrivacyBudgets are charged before the first round.
            fed.budget_charges = charge_fit(self, privacy)
        return fed

    def _honest_clients(self, fed, privacy):
        """h, the clients whose noise shares each masked release counts on
        (:mod:`skfed.privacy._distributed`), when the fit masks a noised
        round; None when every release is noised on its client alone."""
        if not fed.secure_aggregation:
            return None
        rounds = self._rounds() or ()
        if not any(
            r.masked_by_secure_aggregation and r.disclosure.noised for r in rounds
        ):
            return None
        return honest_count(
            privacy.honest_clients,
            len(fed.client_ids),
            may_drop=fed.on_client_error == "drop",
        )

    def _summed_noise(self, fed):
        """The noise multiplier of a sum over the fit's clients (each adds
        all of it, or shares of one under ``secure_aggregation``), or None
        without privacy: what a feature count or a floor that follows the
        noise is read from."""
        if fed.accountant is None:
            return None
        shared = bool(getattr(self, "secure_aggregation", False))
        return summed_noise_std(fed.accountant.noise_std(1.0, shared), fed.n_clients)

    def _record_privacy(self, fed):
        """Set ``privacy_spent_``: the (epsilon, delta) the fit's noised
        releases spent, from the accountant; None without ``privacy``."""
        accountant = fed.accountant
        self.privacy_spent_ = None if accountant is None else accountant.spent()
        settle_fit(getattr(fed, "budget_charges", ()), self.privacy_spent_)

    def __getstate__(self):
        # Unpickled in another process, a private fit refuses instead of
        # spending outside the PrivacyBudgets open here (skfed.privacy._budget).
        return carry_open_budgets(self, super().__getstate__())
