"""Differential privacy for federated fits: settings, clipping, noise, accounting.

An estimator that offers differential privacy takes ``privacy=None`` (off)
or a :class:`DifferentialPrivacy`. With it, every statistic a client
uploads is computed from rows whose influence is bounded (clipped to the
data bounds, or random features of bounded norm) and receives Gaussian
noise on the client, before it leaves the site; an accountant from Google's
``dp-accounting`` composes every noised release of the fit and the fitted
estimator reports what was spent in ``privacy_spent_``.

The guarantee is **sample-level, replace-one**: two data sets are
neighbours when one row of one client is replaced by any other row, every
client's size n_m unchanged (the sizes are public: the server learns them
before the first round). The whole fit, everything every client sends in
every round, is ``(epsilon, delta)``-differentially private for each row
under that adjacency. Each release's L2 sensitivity Δ is derived for it:

* a sum of rows clipped into a box of radius R (``box_radius``): 2R, the
  box's diameter; a row count: 0 (n_m is public; it is sent without noise);
* per-cluster sums and counts (one row moves from one cluster to another):
  max(2R, √(2(R² + c²))) with the counts scaled by c, which is 2R for
  c ≤ R (:func:`skfed.cluster._protocols._kfed_private.release_scales`);
* the upper triangle (diagonal included) of Σ z zᵀ over random features of
  norm at most R and coordinates of square at most m²: R √(R² + m²)
  (:func:`skfed.kernel._private_features.gram_sensitivity`).

Each client draws its noise from a generator seeded with fresh operating
system entropy for every release (:func:`noise_generator`), never from
``random_state``, from anything the server sends or from the data: the
server cannot recompute it, so a private fit is not reproducible (its
non-private parts still follow ``random_state``). Each client adds its own
noise, so the guarantee holds against the server and anyone who sees the
uploads, with or without secure aggregation. Rows live on one client each,
so the clients' releases compose in parallel: the accountant composes the
releases of one client.
"""

import math
import numbers
import secrets
import warnings
from functools import lru_cache, partial

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


# The PLD accountant's discretisation of the privacy loss.
_PLD_GRID = 1e-3


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
    fields (``GridSearchCV(est, {"privacy__epsilon": [0.5, 1, 2]})``; each
    fit of a search spends its own budget on the same rows).

    The guarantee holds for each row under **replace-one** adjacency: one
    row of one client replaced by any other row, the clients' sizes public
    and unchanged. The noise is drawn on each client from fresh operating
    system entropy, never from the estimator's ``random_state``: a private
    fit (finite ``epsilon``) gives a different model at every fit, whatever
    the seed.

    Parameters
    ----------
    epsilon : float, default=1.0
        The privacy budget epsilon of the whole fit, for every row: all the
        rounds' releases together. ``float("inf")`` adds no noise (the
        clipped, non-private algorithm, which ``random_state`` reproduces).
    delta : float, default=1e-5
        The delta of the guarantee. A fit refuses delta of 1/N or more (N
        the fit's rows): a mechanism that publishes each row as it is with
        probability delta meets such a guarantee. Choose it well below 1/N.
    bounds : tuple (lower, upper) or None, default=None
        The range of the features, two scalars or two arrays of
        ``n_features``: rows are clipped into it, which bounds what one row
        can change. ``None`` reads it from the training data, which the
        guarantee does not cover: a :class:`PrivacyLeakWarning` says so.
        A client all of whose rows lie outside the box refuses the fit
        (the error tells the server that much about that client). Estimators
        that work on random features of bounded norm do not need it.
    noise_multiplier : float or None, default=None
        The Gaussian noise's standard deviation over a release's
        sensitivity. ``None`` calibrates it from ``epsilon`` and ``delta``
        for the fit's releases; a value is checked against them instead,
        and a fit it cannot cover is refused before its first round.
    accountant : {"pld", "rdp"}, default="pld"
        The accountant from ``dp-accounting`` that composes the releases:
        privacy loss distributions (tight: the exact Gaussian figure to
        its tolerance; tenths of a second per calibration, cached) or Rényi DP
        (milliseconds, 6 to 11% more noise for the same budget).

    See Also
    --------
    PrivacyLeakWarning : The fit read something the guarantee does not cover.
    PrivacyBudgetError : A noise multiplier the budget cannot cover.

    Notes
    -----
    The fitted estimator reports what its releases spent as
    ``privacy_spent_ = (epsilon, delta)``.

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
        "accountant": [StrOptions({"pld", "rdp"})],
    }

    def __init__(
        self,
        epsilon=1.0,
        delta=1e-5,
        bounds=None,
        noise_multiplier=None,
        accountant="pld",
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
        lower, upper = (_bound_array(b, n_features) for b in privacy.bounds)
    if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper))):
        raise ValueError("privacy.bounds must be finite.")
    if np.any(upper < lower):
        raise ValueError(
            "privacy.bounds is (lower, upper) with lower <= upper for every feature."
        )
    # The clipped rows' sums and squared distances must stay finite in the
    # data's type, as check_magnitude asks of X itself.
    limit = float(np.sqrt(np.finfo(X.dtype).max)) * 1e-6
    largest = max(float(np.max(np.abs(lower))), float(np.max(np.abs(upper))))
    if largest > limit or box_radius(lower, upper) > limit:
        raise ValueError(
            f"privacy.bounds reach {largest:.3g} in magnitude: sums and squared "
            f"distances of rows clipped into such a box overflow {X.dtype} "
            f"(bounds and their span must stay below {limit:.0e}). Give "
            "bounds from the features' actual range, or rescale the features "
            "and their bounds together."
        )
    return lower, upper


def _bound_array(bound, n_features):
    """One side of ``privacy.bounds`` as an array of ``n_features``."""
    array = np.asarray(bound, dtype=np.float64)
    if array.ndim > 1 or array.size not in (1, n_features):
        raise ValueError(
            "privacy.bounds is (lower, upper): each a scalar or an array of "
            f"n_features={n_features} values; got one of shape {array.shape}."
        )
    return np.broadcast_to(array.ravel(), (n_features,)).copy()


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
    if accountant == "pld":
        # n releases at noise z are one Gaussian release at z/√n (their mean
        # is sufficient), whose exact noise dp-accounting computes. The PLD
        # accountant's estimate is an upper bound on epsilon, so its noise is
        # at or just above that: the first of a few steps above it that the
        # accountant finds within budget is within the step of its optimum,
        # in one to three evaluations where a root search took about ten
        # (at epsilon = 10 over 8 releases, 0.3 s against a second).
        exact = dp_accounting.get_sigma_gaussian(epsilon, delta) * math.sqrt(n_releases)
        for step in (0.0, 1e-9, 1e-7, 1e-5, 1e-3):
            z = exact * (1 + step)
            if _epsilon(((z, n_releases),), delta, "pld") <= epsilon:
                return z
        bracket = dp_accounting.ExplicitBracketInterval(exact, exact * 4)
        tol = exact * 1e-6
    else:
        bracket = dp_accounting.LowerEndpointAndGuess(1e-3, 1.0)
        tol = None
    return float(
        dp_accounting.calibrate_dp_mechanism(
            _make_accountant(accountant, epsilon),
            lambda z: _releases(z, n_releases),
            epsilon,
            delta,
            bracket_interval=bracket,
            tol=tol,
        )
    )


def _make_accountant(kind, epsilon=0.0):
    """A fresh accountant's factory; ``epsilon``, roughly the figure it will
    find, sets the PLD accountant's grid."""
    dp_accounting = _dp_accounting()
    if kind == "pld":
        # A coarser grid than the library's default 1e-4: its estimate stays
        # an upper bound on epsilon (pessimistic), matched the exact Gaussian
        # figure to 1e-12 at epsilon 0.1 to 10, and took a tenth of the time.
        # Its cost grows with epsilon over the grid: at epsilon 77 and 1,191
        # (a fixed noise far below the budget) a grid of 1e-3 took 2 and 12
        # s, one of a ten-thousandth of epsilon under a second.
        return partial(
            dp_accounting.pld.PLDAccountant,
            value_discretization_interval=max(_PLD_GRID, 1e-4 * epsilon),
        )
    return dp_accounting.rdp.RdpAccountant


def _releases(noise_multiplier, count):
    dp_accounting = _dp_accounting()
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.GaussianDpEvent(noise_multiplier), int(count)
    )


class Accountant:
    """The privacy ledger of one fit: calibrates the noise, registers every
    noised release and reports what was spent.

    Every release is a Gaussian mechanism on a statistic of replace-one L2
    sensitivity ``Δ`` (see the module's docstring), noised with standard
    deviation ``noise_multiplier * Δ``; one client's releases compose
    (sequentially), different clients' in parallel, so the fit's guarantee
    is that of one client's releases.

    Parameters
    ----------
    privacy : DifferentialPrivacy
        The requested budget.
    n_releases : int
        How many Gaussian releases each client makes over the whole fit
        (counted from the estimator's parameters before any round).
    estimator : str
        Named in errors.
    n_samples : int or None, default=None
        N, the fit's rows (public): ``privacy.delta`` must be below 1/N.

    Raises
    ------
    PrivacyBudgetError
        When ``privacy.noise_multiplier`` is set and the fit's releases at
        that noise spend more than ``privacy.epsilon``.
    ValueError
        When ``privacy.delta`` is at least 1/N.
    """

    def __init__(self, privacy, n_releases, *, estimator, n_samples=None):
        self.privacy = privacy
        self.n_releases = int(n_releases)
        self.events = []
        if n_samples and privacy.delta * n_samples >= 1:
            raise ValueError(
                f"{estimator}: privacy.delta={privacy.delta:g} is at least "
                f"1/N = {1 / n_samples:.3g} for this fit's N={n_samples} rows. A "
                "mechanism that publishes each row as it is with probability "
                "delta meets such a guarantee, so it protects no row. Choose "
                "delta well below 1/N (e.g. 1e-6, or 1/N**2)."
            )
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
        """Epsilon at ``privacy.delta`` of ``[(noise_multiplier, count), ...]``.

        Never 0 when a release was noised: releases so noisy that the
        accountant finds them (0, delta)-private are also (epsilon,
        delta)-private for every epsilon > 0, and the figure reported is then
        the smaller of their Gaussian-DP parameter μ = √(Σ count / z²) and
        the requested epsilon (0 would read as nothing released).
        """
        # Releases at one noise are one self-composed event: composing its
        # parts one after another in the PLD accountant adds discretisation
        # error (1e-6 in epsilon) for the same mechanism.
        counts = {}
        for z, count in releases:
            if count:
                counts[float(z)] = counts.get(float(z), 0) + int(count)
        releases = tuple(sorted(counts.items()))
        if not releases:
            return 0.0
        if any(z == 0 for z, _ in releases):
            return math.inf
        epsilon = _epsilon(releases, float(self.privacy.delta), self.privacy.accountant)
        if epsilon > 0:
            return epsilon
        mu = math.sqrt(sum(count / z**2 for z, count in releases))
        return min(mu, float(self.privacy.epsilon))

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


@lru_cache(maxsize=256)
def _epsilon(releases, delta, kind):
    dp_accounting = _dp_accounting()
    # Releases at noise z_i are one Gaussian at 1/√(Σ count_i / z_i²): its
    # exact epsilon only sizes the PLD accountant's grid.
    sigma = 1 / math.sqrt(sum(count / z**2 for z, count in releases))
    rough = dp_accounting.get_epsilon_gaussian(sigma, delta)
    accountant = _make_accountant(kind, rough)()
    for z, count in releases:
        accountant.compose(_releases(z, count))
    return float(accountant.get_epsilon(delta))


def noise_generator():
    """A generator for one release's noise, keyed with 256 fresh bits of the
    operating system's entropy (:mod:`secrets`).

    Nothing the fit knows seeds it (not ``random_state``, not the server's
    messages, not the data), so nobody, the server included, can recompute
    the noise. numpy's Philox is a counter-based generator whose output is
    a cipher-like bijection of a counter under the key: unlike a linear or
    permuted congruential generator's state, no way is known to recover its
    key from its output. It is not a certified cryptographic generator (the
    Privacy page lists this among the limits).
    """
    return np.random.Generator(
        np.random.Philox(np.random.SeedSequence(secrets.randbits(256)))
    )


def gaussian_noise(value, std):
    """``value`` plus independent N(0, std²) noise of the same shape.

    The client that releases ``value`` draws the noise from a fresh
    :func:`noise_generator`: it never follows a seed, so two fits with the
    same ``random_state`` release different noise.
    """
    value = np.asarray(value, dtype=np.float64)
    if std == 0:
        return value.copy()
    return value + noise_generator().normal(0.0, std, size=value.shape)
