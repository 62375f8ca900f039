"""Differential privacy for federated fits: settings, clipping, noise, accounting.

An estimator that offers differential privacy takes ``privacy=None`` (off)
or a :class:`DifferentialPrivacy`. With it, every statistic a client
uploads is computed from rows whose influence is bounded (clipped to the
data bounds, or random features of bounded norm) and receives Gaussian
noise on the client, before it leaves the site; an accountant from Google's
``dp-accounting`` composes every noised release of the fit and the fitted
estimator reports what was spent in ``privacy_spent_``.

The guarantee is **sample-level** (add/remove one row of one client): the
whole fit, everything every client sends in every round, is
``(epsilon, delta)``-differentially private for each row. Each client
draws and adds its own noise, so the guarantee holds against the server
and anyone who sees the uploads, with or without secure aggregation. Rows
live on one client each, so the clients' releases compose in parallel:
the accountant composes the releases of one client.
"""

import math
import numbers
import warnings
from functools import lru_cache

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import Interval, StrOptions

from ._budget import BudgetEntry, PrivacyBudget

__all__ = [
    "BudgetEntry",
    "DifferentialPrivacy",
    "PrivacyBudget",
    "PrivacyBudgetError",
    "PrivacyLeakWarning",
]


class PrivacyLeakWarning(UserWarning):
    """A differentially private fit read something from the private data
    that its guarantee does not cover (e.g. data bounds taken from X)."""


class PrivacyBudgetError(ValueError):
    """The requested privacy budget cannot cover the fit's releases."""


class DifferentialPrivacy(BaseEstimator):
    """Sample-level (epsilon, delta)-differential privacy for a federated fit.

    Pass an instance as an estimator's ``privacy`` parameter. It is a
    small settings object with scikit-learn's ``get_params`` and
    ``set_params``, so ``clone`` and pickling keep it and a search tunes its
    fields (``GridSearchCV(est, {"privacy__epsilon": [0.5, 1, 2]})``).

    Parameters
    ----------
    epsilon : float, default=1.0
        The privacy budget epsilon of the whole fit, for every row: all the
        rounds' releases together. ``float("inf")`` adds no noise (the
        clipped, non-private algorithm).
    delta : float, default=1e-5
        The delta of the guarantee: choose it well below one over the
        number of rows of the largest client.
    bounds : tuple (lower, upper) or None, default=None
        The range of the features, two scalars or two arrays of
        ``n_features``: rows are clipped into it, which bounds what one row
        can change. ``None`` reads it from the training data, which the
        guarantee does not cover: a :class:`PrivacyLeakWarning` says so.
        Estimators that work on random features of bounded norm do not need
        it.
    noise_multiplier : float or None, default=None
        The Gaussian noise's standard deviation over a release's
        sensitivity. ``None`` calibrates it from ``epsilon`` and ``delta``
        for the fit's releases; a value is checked against them instead,
        and a fit it cannot cover is refused before its first round.
    accountant : {"rdp", "pld"}, default="rdp"
        The accountant from ``dp-accounting`` that composes the releases:
        Rényi DP (fast) or privacy loss distributions (tighter, seconds per
        calibration).

    Attributes
    ----------
    None: the fitted estimator reports ``privacy_spent_``.

    Examples
    --------
    >>> from skfed.privacy import DifferentialPrivacy
    >>> DifferentialPrivacy(epsilon=2.0, bounds=(0.0, 16.0))
    DifferentialPrivacy(bounds=(0.0, 16.0), epsilon=2.0)
    """

    _parameter_constraints: dict = {
        # closed on the right: float("inf") is the clipped, non-private fit.
        "epsilon": [Interval(numbers.Real, 0, None, closed="right")],
        "delta": [Interval(numbers.Real, 0, 1, closed="neither")],
        "bounds": [tuple, None],
        "noise_multiplier": [Interval(numbers.Real, 0, None, closed="left"), None],
        "accountant": [StrOptions({"rdp", "pld"})],
    }

    def __init__(
        self,
        epsilon=1.0,
        delta=1e-5,
        bounds=None,
        noise_multiplier=None,
        accountant="rdp",
    ):
        self.epsilon = epsilon
        self.delta = delta
        self.bounds = bounds
        self.noise_multiplier = noise_multiplier
        self.accountant = accountant

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = False
        return tags


def check_privacy(privacy):
    """Validate an estimator's ``privacy`` parameter; None stays None."""
    if privacy is None:
        return None
    if not isinstance(privacy, DifferentialPrivacy):
        raise ValueError(
            "privacy must be None or a skfed.privacy.DifferentialPrivacy, got "
            f"{type(privacy).__name__}."
        )
    privacy._validate_params()
    if privacy.bounds is not None:
        if len(privacy.bounds) != 2:
            raise ValueError(
                "privacy.bounds is (lower, upper): two scalars or two arrays of "
                f"n_features; got a tuple of {len(privacy.bounds)}."
            )
    return privacy


def feature_bounds(privacy, X, *, estimator):
    """The clipping box ``(lower, upper)`` as two arrays of ``n_features``.

    Read from ``privacy.bounds``, or from ``X`` with a
    :class:`PrivacyLeakWarning` when they are not given.
    """
    n_features = X.shape[1]
    if privacy.bounds is None:
        warnings.warn(
            f"{estimator}: privacy.bounds were not given, so they are read from "
            "the training data; the differential privacy guarantee does not "
            "cover that. Pass DifferentialPrivacy(bounds=(lower, upper)) from "
            "knowledge of the domain, not from the data.",
            PrivacyLeakWarning,
            stacklevel=3,
        )
        lower, upper = X.min(axis=0), X.max(axis=0)
        if sp.issparse(lower):
            lower, upper = lower.toarray(), upper.toarray()
        lower = np.asarray(lower, dtype=np.float64).ravel()
        upper = np.asarray(upper, dtype=np.float64).ravel()
    else:
        lower, upper = (
            np.broadcast_to(np.asarray(b, dtype=np.float64), (n_features,)).copy()
            for b in privacy.bounds
        )
    if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper))):
        raise ValueError("privacy.bounds must be finite.")
    if np.any(upper < lower):
        raise ValueError(
            "privacy.bounds is (lower, upper) with lower <= upper for every feature."
        )
    return lower, upper


def clip_to_box(X, lower, upper):
    """Rows of ``X`` clipped into the box, shifted to its centre.

    A shifted row's L2 norm is then at most ``box_radius(lower, upper)``,
    whatever the row was, which bounds each release's sensitivity without
    reading the data.
    """
    centre = (lower + upper) / 2
    return np.clip(X, lower, upper) - centre


def box_radius(lower, upper):
    """The largest L2 norm of a row of ``clip_to_box``'s output."""
    return float(np.linalg.norm((upper - lower) / 2))


def _dp_accounting():
    try:
        import dp_accounting
    except ImportError as exc:  # an optional dependency
        raise ImportError(
            "Differential privacy needs Google's dp-accounting library for its "
            'accountant: pip install "dp-accounting>=0.4" (or skfed\'s "dp" '
            "extra)."
        ) from exc
    return dp_accounting


@lru_cache(maxsize=256)
def _calibrate(epsilon, delta, n_releases, accountant):
    dp_accounting = _dp_accounting()
    # Rényi DP over-estimates epsilon, so its noise is an upper end for the
    # tighter PLD accountant's; PLD's discretisation needs a bracket that
    # keeps away from vanishing noise.
    bracket = dp_accounting.LowerEndpointAndGuess(1e-3, 1.0)
    if accountant == "pld":
        upper = _calibrate(epsilon, delta, n_releases, "rdp")
        bracket = dp_accounting.ExplicitBracketInterval(upper / 2, upper)
    return float(
        dp_accounting.calibrate_dp_mechanism(
            _make_accountant(accountant),
            lambda z: _releases(z, n_releases),
            epsilon,
            delta,
            bracket_interval=bracket,
        )
    )


def _make_accountant(kind):
    dp_accounting = _dp_accounting()
    if kind == "pld":
        return dp_accounting.pld.PLDAccountant
    return dp_accounting.rdp.RdpAccountant


def _releases(noise_multiplier, count):
    dp_accounting = _dp_accounting()
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.GaussianDpEvent(noise_multiplier), int(count)
    )


class Accountant:
    """The privacy ledger of one fit: calibrates the noise, registers every
    noised release and reports what was spent.

    Every release is a Gaussian mechanism on a statistic of L2 sensitivity
    ``Δ``, noised with standard deviation ``noise_multiplier * Δ``; one
    client's releases compose (sequentially), different clients' in
    parallel, so the fit's guarantee is that of one client's releases.

    Parameters
    ----------
    privacy : DifferentialPrivacy
        The requested budget.
    n_releases : int
        How many Gaussian releases each client makes over the whole fit
        (counted from the estimator's parameters before any round).
    estimator : str
        Named in errors.

    Raises
    ------
    PrivacyBudgetError
        When ``privacy.noise_multiplier`` is set and the fit's releases at
        that noise spend more than ``privacy.epsilon``.
    """

    def __init__(self, privacy, n_releases, *, estimator):
        self.privacy = privacy
        self.n_releases = int(n_releases)
        self.events = []
        if math.isinf(privacy.epsilon):
            self.noise_multiplier = 0.0
        elif privacy.noise_multiplier is None:
            self.noise_multiplier = _calibrate(
                float(privacy.epsilon),
                float(privacy.delta),
                self.n_releases,
                privacy.accountant,
            )
        else:
            self.noise_multiplier = float(privacy.noise_multiplier)
            planned = self.epsilon_of([(self.noise_multiplier, self.n_releases)])
            if planned > privacy.epsilon:
                raise PrivacyBudgetError(
                    f"{estimator} makes {self.n_releases} noised releases per "
                    f"client; at noise_multiplier={self.noise_multiplier:g} they "
                    f"spend epsilon={planned:.4g} at delta={privacy.delta:g}, more "
                    f"than the requested epsilon={privacy.epsilon:g}. Raise "
                    "epsilon or the noise multiplier, fewer iterations, or leave "
                    "noise_multiplier=None to calibrate it."
                )

    def epsilon_of(self, releases):
        """Epsilon at ``privacy.delta`` of ``[(noise_multiplier, count), ...]``."""
        if not releases:
            return 0.0
        if any(z == 0 for z, count in releases if count):
            return math.inf
        accountant = _make_accountant(self.privacy.accountant)()
        for z, count in releases:
            if count:
                accountant.compose(_releases(z, count))
        return float(accountant.get_epsilon(self.privacy.delta))

    def register(self, name, count=1):
        """Record ``count`` releases of one round at this fit's noise."""
        self.events.append((str(name), self.noise_multiplier, int(count)))

    def spent(self):
        """``(epsilon, delta)`` of every registered release together."""
        eps = self.epsilon_of([(z, c) for _, z, c in self.events])
        return eps, float(self.privacy.delta) if self.events else 0.0

    def noise_std(self, sensitivity):
        """The standard deviation a release of this sensitivity gets."""
        return self.noise_multiplier * float(sensitivity)


def gaussian_noise(value, std, random_state):
    """``value`` plus independent N(0, std²) noise of the same shape.

    The noise is drawn by the client that releases ``value``, from its own
    generator, so the same seed gives the same noisy model.
    """
    value = np.asarray(value, dtype=np.float64)
    if std == 0:
        return value.copy()
    return value + random_state.normal(0.0, std, size=value.shape)
