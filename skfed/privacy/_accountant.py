"""The accountant of one fit: calibrates the noise from the budget and
composes every noised release with Google's ``dp-accounting``."""

import math
from functools import lru_cache, partial

from ._distributed import DistributedNoise, release_rho
from ._errors import PrivacyBudgetError

__all__ = ["Accountant"]


# The PLD accountant's discretisation of the privacy loss.
_PLD_GRID = 1e-3


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
    honest : int or None, default=None
        Under distributed noise, h: the clients whose noise shares each
        masked release counts on (:mod:`skfed.privacy._distributed`). The
        fit's releases are then composed in Rényi DP: a masked release as
        the discrete mechanism's ρ-zCDP, the others as Gaussians.

    Raises
    ------
    PrivacyBudgetError
        When ``privacy.noise_multiplier`` is set and the fit's releases at
        that noise spend more than ``privacy.epsilon``.
    ValueError
        When ``privacy.delta`` is at least 1/N.
    """

    def __init__(self, privacy, n_releases, *, estimator, n_samples=None, honest=None):
        self.privacy = privacy
        self.n_releases = int(n_releases)
        self.honest = None if honest is None else int(honest)
        self.kind = privacy.accountant if self.honest is None else "rdp"
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
                self.kind,
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

    def epsilon_of(self, releases, shared=()):
        """Epsilon at ``privacy.delta`` of ``[(noise_multiplier, count), ...]``
        Gaussian releases and ``shared`` ones, under distributed noise.

        Never 0 when a release was noised: releases so noisy that the
        accountant finds them (0, delta)-private are also (epsilon,
        delta)-private for every epsilon > 0, and the figure reported is then
        the smaller of their Gaussian-DP parameter μ = √(Σ count / z²) and
        the requested epsilon (0 would read as nothing released).
        """
        # Releases at one noise are one self-composed event: composing its
        # parts one after another in the PLD accountant adds discretisation
        # error (1e-6 in epsilon) for the same mechanism.
        releases, shared = _merged(releases), _merged(shared)
        if not releases and not shared:
            return 0.0
        if any(z == 0 for z, _ in releases + shared):
            return math.inf
        delta = float(self.privacy.delta)
        if shared:
            epsilon = _epsilon_distributed(releases, shared, delta, self.honest)
        else:
            epsilon = _epsilon(releases, delta, self.kind)
        if epsilon > 0:
            return epsilon
        mu = math.sqrt(sum(count / z**2 for z, count in releases + shared))
        return min(mu, float(self.privacy.epsilon))

    def register(self, name, count=1, shared=False):
        """Record ``count`` releases of one round at this fit's noise;
        ``shared``: noised in shares by the clients of a masked round."""
        shared = bool(shared) and self.honest is not None
        self.events.append((str(name), self.noise_multiplier, int(count), shared))

    def spent(self):
        """``(epsilon, delta)`` of every registered release together."""
        eps = self.epsilon_of(
            [(z, c) for _, z, c, shared in self.events if not shared],
            [(z, c) for _, z, c, shared in self.events if shared],
        )
        return eps, float(self.privacy.delta) if self.events else 0.0

    def noise_std(self, sensitivity, shared=False):
        """The standard deviation a release of this sensitivity gets: a
        :class:`~skfed.privacy._distributed.DistributedNoise` for a release
        the clients of a masked round noise in shares (``shared``, under
        distributed noise)."""
        std = self.noise_multiplier * float(sensitivity)
        if shared and self.honest is not None:
            return DistributedNoise(std, sensitivity, self.honest)
        return std


def _merged(releases):
    """``[(z, count), ...]`` with one entry per noise multiplier, sorted."""
    counts = {}
    for z, count in releases:
        if count:
            counts[float(z)] = counts.get(float(z), 0) + int(count)
    return tuple(sorted(counts.items()))


@lru_cache(maxsize=256)
def _epsilon_distributed(releases, shared, delta, honest):
    # The discrete mechanism's guarantee is zero-concentrated DP, which
    # dp-accounting composes in Rényi DP, with the Gaussian releases.
    dp_accounting = _dp_accounting()
    accountant = dp_accounting.rdp.RdpAccountant()
    for z, count in releases:
        accountant.compose(_releases(z, count))
    for z, count in shared:
        event = dp_accounting.ZCDpEvent(release_rho(z, honest))
        accountant.compose(dp_accounting.SelfComposedDpEvent(event, count))
    return float(accountant.get_epsilon(delta))


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
