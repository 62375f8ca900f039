"""The Gaussian mechanism's parts: the settings, the clipping box, the noise.

See :mod:`skfed.privacy` for the guarantee and each release's sensitivity.
"""

import numbers
import secrets
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator

from .._sklearn_compat import Interval, StrOptions
from ._distributed import DistributedNoise, NoiseShare
from ._errors import PrivacyLeakWarning

__all__ = [
    "DifferentialPrivacy",
    "box_radius",
    "check_privacy",
    "clip_to_box",
    "concatenate_releases",
    "feature_bounds",
    "gaussian_noise",
    "noise_generator",
]


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
        (milliseconds, 6 to 11% more noise for the same budget). A fit with
        distributed noise (below) composes its releases in Rényi DP
        whatever this says: the discrete mechanism's guarantee is a
        concentrated-DP one.
    honest_clients : int, float or None, default=None
        With ``secure_aggregation=True``, each sum-only release is noised
        in shares (distributed noise): every client of a masked round adds
        discrete Gaussian noise of variance σ²/h in the integers, so that
        the sum of any h clients' shares carries the whole noise σ² of the
        central mechanism, and none carries it alone. This is h: a count,
        or a fraction of the fit's clients (rounded up). None: every
        client when a client that fails fails the fit
        (``on_client_error="raise"``, the default), half of them (rounded
        up) when the fit may go on without it. The guarantee holds as long
        as at least h of the clients whose uploads enter each sum follow
        the protocol and keep their noise from the server: against a
        server that colludes with c clients, give at most M − c. A sum of
        fewer than h uploads (clients dropped out) is never unmasked: the
        fit fails, saying so. Without secure aggregation, and in rounds the
        server sees client by client, each client adds the whole noise.

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

    # Named, pickled and printed where users import it from.
    __module__ = "skfed.privacy"

    _parameter_constraints: dict = {
        # closed on the right: float("inf") is the clipped, non-private fit.
        "epsilon": [Interval(numbers.Real, 0, None, closed="right")],
        "delta": [Interval(numbers.Real, 0, 1, closed="neither")],
        "bounds": [tuple, None],
        "noise_multiplier": [Interval(numbers.Real, 0, None, closed="left"), None],
        "accountant": [StrOptions({"pld", "rdp"})],
        "honest_clients": [
            Interval(numbers.Integral, 1, None, closed="left"),
            Interval(numbers.Real, 0, 1, closed="right"),
            None,
        ],
    }

    def __init__(
        self,
        epsilon=1.0,
        delta=1e-5,
        bounds=None,
        noise_multiplier=None,
        accountant="pld",
        honest_clients=None,
    ):
        self.epsilon = epsilon
        self.delta = delta
        self.bounds = bounds
        self.noise_multiplier = noise_multiplier
        self.accountant = accountant
        self.honest_clients = honest_clients

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
    same ``random_state`` release different noise. For a release of a
    masked round under distributed noise (``std`` a
    :class:`~skfed.privacy._distributed.DistributedNoise`), the statistic
    comes back as a :class:`~skfed.privacy._distributed.NoiseShare`: the
    client's masking adds its share of the noise in the integers, or the
    whole noise if the upload leaves unmasked.
    """
    if isinstance(std, DistributedNoise):
        return NoiseShare(value, std)
    value = np.asarray(value, dtype=np.float64)
    if std == 0:
        return value.copy()
    return value + noise_generator().normal(0.0, std, size=value.shape)


def concatenate_releases(pieces):
    """The pieces of an upload end to end, as ``np.concatenate`` does, for
    an upload some of whose pieces come from :func:`gaussian_noise`: a
    statistic awaiting its noise shares stays one
    (:class:`~skfed.privacy._distributed.NoiseShare`), with each piece's
    noise kept to its own coordinates."""
    if any(isinstance(piece, NoiseShare) for piece in pieces):
        return NoiseShare.concatenate(pieces)
    return np.concatenate([np.asarray(piece, dtype=np.float64) for piece in pieces])
