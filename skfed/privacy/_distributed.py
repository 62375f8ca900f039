"""Distributed noise: the central Gaussian mechanism's noise, added in
shares by the clients of a masked round.

Under ``privacy`` with ``secure_aggregation=True``, the server sees only
the sum of a sum-only round's uploads. A client then adds a share of the
noise the sum needs, not all of it, as in the distributed discrete
Gaussian mechanism (Kairouz, Liu & Steinke, ICML 2021):

* **Client.** The statistic ``x`` (one row moves it by at most Δ in L2,
  the round's declared sensitivity) is scaled by the masking ring's fixed
  point γ = 2^32 and rounded to integers. Rounding moves each of its d
  coordinates by at most 1/2, so one row moves the integer vector by at
  most Δ_Z = γΔ + √d. The client adds discrete Gaussian noise
  N_Z(0, s²) to each coordinate, with s = max(z Δ_Z / √h, 10): z the fit's
  noise multiplier, h the number of clients whose noise the guarantee
  counts on (``DifferentialPrivacy.honest_clients``). The noise is drawn
  from fresh operating-system entropy (:func:`noise_generator`), and the
  sum is masked as any other (:func:`mask_upload`).
* **Sum.** The honest clients' shares add up to noise of variance at least
  z² Δ_Z², the central mechanism's on the integer statistic. By the
  mechanism's theorem, the sum of h shares on a statistic of sensitivity
  Δ_Z is ρ-zero-concentrated DP with
  ρ = ½ min(√(Δ_Z² / (h s²) + τ d / 2), Δ_Z / (√h s) + τ √d)², where
  τ = 10 Σ_{k=1}^{h-1} exp(−2π² s² k / (k + 1)). At s ≥ 10, τ is below
  10⁻⁴²⁵ (zero in floating point), so ρ = 1 / (2 z²): the Gaussian
  mechanism's own figure, which the accountant composes with
  ``dp-accounting`` (:func:`release_rho`).
* **Dropouts.** A round whose sum holds fewer than h uploads is not
  released: the server refuses to unmask it, and so does each client asked
  for its shares.

Discrete noise comes from the rejection sampler of Canonne, Kamath &
Steinke (NeurIPS 2020, Algorithm 3) over numpy's geometric sampler,
vectorised; its output is tested against the distribution's mass function.
"""

import math
import numbers

import numpy as np

__all__ = [
    "MIN_SHARE_STD",
    "DistributedNoise",
    "NoiseShare",
    "add_noise_locally",
    "discrete_gaussian",
    "honest_count",
    "release_rho",
    "share_std",
    "summed_noise_std",
]

#: The least standard deviation of a client's share, in the masking ring's
#: units: the bound's τ term vanishes from there on (see the module's
#: docstring). A share is raised to it only where the central noise is
#: below about 10 √h · 2^-32 in the statistic's own units.
MIN_SHARE_STD = 10.0
#: The largest upload a distributed release covers: the accountant's ρ is
#: computed at this many coordinates (an upload of 2^40 floats would take
#: 8 TB).
MAX_DIMENSION = 2**40


class DistributedNoise(float):
    """The central noise's standard deviation for one release of a masked
    round, which the clients add in shares.

    It is the float the round's step would add as local noise (the
    standard deviation of the noise the sum carries), and carries the
    release's sensitivity Δ and the honest clients h the shares assume.
    Anything that does arithmetic with it gets a plain float back, which
    the step then adds in full on its client: more noise, never less.
    """

    def __new__(cls, std, sensitivity, honest):
        self = super().__new__(cls, std)
        self.sensitivity = float(sensitivity)
        self.honest = int(honest)
        return self

    def __reduce__(self):
        return (type(self), (float(self), self.sensitivity, self.honest))

    def __repr__(self):
        return (
            f"DistributedNoise({float(self)!r}, sensitivity={self.sensitivity!r}, "
            f"honest={self.honest})"
        )


class NoiseShare:
    """A client's statistic whose noise its masking adds: in shares
    (:func:`share_std`) when the upload is masked, in full when it is not
    (:meth:`local`).

    ``segments`` are ``(start, stop, noise)`` over the flattened value: one
    release each, ``noise`` its :class:`DistributedNoise` (or 0 for a part
    that is released as it is, such as a public count).
    """

    __slots__ = ("value", "segments")

    def __init__(self, value, noise):
        self.value = np.asarray(value, dtype=np.float64)
        self.segments = ((0, self.value.size, noise),)

    @classmethod
    def concatenate(cls, pieces):
        """The pieces (arrays, numbers or shares) end to end, as one share."""
        values, segments, start = [], [], 0
        for piece in pieces:
            if isinstance(piece, cls):
                values.append(piece.value.ravel())
                segments += [(start + a, start + b, n) for a, b, n in piece.segments]
            else:
                values.append(np.asarray(piece, dtype=np.float64).ravel())
            start += values[-1].size
        out = cls(np.concatenate(values), 0.0)
        out.segments = tuple(segments)
        return out

    def local(self, generator):
        """The statistic with the whole noise added on this client, as when
        the upload leaves it unmasked."""
        out = self.value.ravel().copy()
        for start, stop, noise in self.segments:
            if float(noise) > 0:
                out[start:stop] += generator.normal(0.0, float(noise), stop - start)
        return out.reshape(self.value.shape)


def share_std(noise, dimension, scale):
    """The standard deviation s of one client's discrete share, in ring
    units: s = max(z Δ_Z / √h, MIN_SHARE_STD) with Δ_Z = γΔ + √d, or 0 for
    a release without noise."""
    std = float(noise)
    if std == 0 or noise.sensitivity == 0:
        # No noise, or a release no row can move.
        return 0.0
    if dimension > MAX_DIMENSION:
        raise ValueError(
            f"A distributed release covers at most {MAX_DIMENSION} values; this "
            f"one has {dimension}."
        )
    multiplier = std / noise.sensitivity
    integer_sensitivity = scale * noise.sensitivity + math.sqrt(dimension)
    return max(
        multiplier * integer_sensitivity / math.sqrt(noise.honest), MIN_SHARE_STD
    )


def release_rho(noise_multiplier, honest, dimension=MAX_DIMENSION):
    """ρ (zero-concentrated DP) of one distributed release: h honest shares
    of standard deviation at least z Δ_Z / √h and ``MIN_SHARE_STD``, on a
    statistic of ``dimension`` coordinates.

    The distributed discrete Gaussian's bound (Kairouz, Liu & Steinke,
    2021) with Δ_Z / (√h s) at most 1 / z; τ decreases in s, so it is
    taken at the least share, where k / (k + 1) ≥ 1/2 bounds it by
    10 (h − 1) exp(−π² s²).
    """
    tau = 10.0 * max(int(honest) - 1, 0) * math.exp(-(math.pi**2) * MIN_SHARE_STD**2)
    inverse = 1.0 / float(noise_multiplier)
    epsilon = min(
        math.sqrt(inverse**2 + tau * dimension / 2),
        inverse + tau * math.sqrt(dimension),
    )
    return epsilon**2 / 2


def discrete_gaussian(std, size, rng):
    """``size`` draws of the discrete Gaussian N_Z(0, std²) (int64): mass
    proportional to exp(−x² / (2 std²)) on the integers.

    Canonne, Kamath & Steinke's rejection sampler: a discrete Laplace
    proposal of scale t = ⌊std⌋ + 1 (the difference of two geometric
    draws), accepted with probability exp(−(|y| − std²/t)² / (2 std²)).
    """
    std = float(std)
    if not std > 0:
        raise ValueError(f"The discrete Gaussian's std must be positive, got {std}.")
    t = math.floor(std) + 1
    # P(G = k) = (1 − q) q^k on k ≥ 0 with q = exp(−1/t); numpy counts
    # trials from 1.
    p = -math.expm1(-1.0 / t)
    variance = std * std
    out = np.empty(size, dtype=np.int64)
    todo = np.arange(size)
    while todo.size:
        y = rng.geometric(p, todo.size) - rng.geometric(p, todo.size)
        bias = np.abs(y) - variance / t
        accept = rng.random(todo.size) < np.exp(-(bias * bias) / (2 * variance))
        out[todo[accept]] = y[accept]
        todo = todo[~accept]
    return out


def honest_count(honest_clients, n_clients, *, may_drop):
    """h, the clients whose noise each distributed release counts on.

    Parameters
    ----------
    honest_clients : int, float or None
        ``DifferentialPrivacy.honest_clients``: a count, a fraction of the
        fit's clients (rounded up), or None: all of them when a failing
        client fails the fit, half of them (rounded up) when the fit may
        go on without it.
    n_clients : int
        The fit's clients.
    may_drop : bool
        Whether the fit goes on without a client that fails.

    Raises
    ------
    ValueError
        When the count exceeds the fit's clients.
    """
    if honest_clients is None:
        return math.ceil(n_clients / 2) if may_drop else n_clients
    if isinstance(honest_clients, numbers.Integral):
        h = int(honest_clients)
    else:
        h = math.ceil(float(honest_clients) * n_clients)
    if h > n_clients:
        raise ValueError(
            f"privacy.honest_clients={honest_clients!r} asks for the noise of "
            f"{h} clients in every sum, but the fit has {n_clients}. Give at "
            "most the number of clients (or a fraction of them)."
        )
    return max(h, 1)


def add_noise_locally(upload, generator):
    """``upload`` with each :class:`NoiseShare` given the whole noise on
    this client, from ``generator`` (fresh entropy): an upload that leaves
    unmasked carries no one else's share."""
    if isinstance(upload, NoiseShare):
        return upload.local(generator)
    if isinstance(upload, dict):
        return {k: add_noise_locally(v, generator) for k, v in upload.items()}
    if isinstance(upload, (tuple, list)):
        return type(upload)(add_noise_locally(v, generator) for v in upload)
    return upload


def summed_noise_std(std, n_clients):
    """The standard deviation of the noise in a sum of ``n_clients``
    uploads each noised at ``std``: √M std when each client adds all of it,
    √(M / h) std when they add shares of a
    :class:`DistributedNoise` (the central ``std`` once M = h)."""
    if isinstance(std, DistributedNoise):
        return float(std) * math.sqrt(n_clients / std.honest)
    return float(std) * math.sqrt(n_clients)
