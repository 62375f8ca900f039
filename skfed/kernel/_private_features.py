"""Paired random Fourier features and the summed statistics of their Gram
matrix, with the norm bounds that make those statistics differentially
private without reading the data.

The map z(x) = √(2/D) [cos(ωᵢᵀx), sin(ωᵢᵀx)]ᵢ (pairs of phases 0 and
−π/2, one random-phase cosine when D is odd) has a norm fixed by D alone:
‖z(x)‖² = 2⌊D/2⌋/D + (2/D) cos²(·) ≤ 2⌈D/2⌉/D, which is 1 for even D,
whatever x is, however far from the origin. So replacing one row by
another moves Σ z zᵀ and Σ z by amounts bounded through D alone: the
sensitivities of a private release come from D, never from the data
(unlike coordinates, which need bounds to be clipped to). The adjacency is
replace-one with the clients' sizes public (:mod:`skfed.privacy`).
"""

import math
from functools import lru_cache, partial

import numpy as np

from .._engine._rounds import sum_only
from .._numerics._blocks import row_blocks
from ._random_features import (
    feature_statistics_raw_rows,
    random_fourier_features,
    sample_fourier_weights,
)

__all__ = [
    "centred_map",
    "count_sum_sensitivity",
    "feature_blocks",
    "feature_sum_sensitivity",
    "feature_gram_statistics",
    "feature_norm_bound",
    "feature_statistics_counting_rows",
    "feature_statistics_sensitivity",
    "gram_sensitivity",
    "paired_fourier_map",
    "private_feature_count",
    "private_statistics",
    "statistics_noise",
    "FEATURE_CHUNK",
    "FEATURE_STATISTICS",
    "PRIVATE_STATISTICS",
]

# Relative slack on the norm bounds: the cosines are taken in float32
# (``scaled_cosines``), so cos² + sin² of a pair may exceed 1 by a few
# float32 roundings (about 1e-7); the bound stays above it.
_SLACK = 1e-6
# Rows of random features a client holds at once (as the one-shot kernel
# k-means' clients).
FEATURE_CHUNK = 4096


# Two entries: this fit's map and that of one running beside it. Every
# client of a process draws the same map, twice (statistics, embedding).
@lru_cache(maxsize=2)
def paired_fourier_map(seed, n_features, n_random_features, gamma, kernel="rbf"):
    """Ω and b of the shared map z(x) = √(2/D) cos(xᵀΩ + b), read-only.

    D orthogonal random frequencies would be the plain map; here the
    frequencies come in pairs of features cos(ωᵀx) and sin(ωᵀx) =
    cos(ωᵀx − π/2) (phases 0 and −π/2 instead of random ones), ⌊D/2⌋
    frequencies (orthogonal for ``"rbf"``, see
    :func:`~skfed.kernel.sample_fourier_weights`), plus one random-phase
    feature when D is odd. A pair estimates cos(ωᵀ(x − y)) exactly, without
    the random phase's noise, so the map is still an unbiased estimate of
    the kernel with a smaller variance (Sutherland and Schneider, "On the
    Error of Random Fourier Features", UAI 2015), a translation of the data
    rotates each pair (the model does not change), and ‖z(x)‖ is fixed by D
    (see :func:`feature_norm_bound`). Both choices matter for a single map:
    on digits (D = 300, k-means on the top 30 components of the pooled
    features, mean of 6 draws) independent frequencies with random phases
    reached NMI 0.734, orthogonal ones 0.742, orthogonal pairs 0.746;
    independent pairs 0.709 (half as many frequencies).

    Parameters
    ----------
    seed : int
        The shared seed.
    n_features : int
        d.
    n_random_features : int
        D.
    gamma : float
        The kernel's γ.
    kernel : {"rbf", "laplacian"}, default="rbf"
        The shift-invariant kernel the map approximates.

    Returns
    -------
    omega : ndarray of shape (n_features, n_random_features)
    offset : ndarray of shape (n_random_features,)
    """
    pairs = n_random_features // 2
    frequencies, phases = sample_fourier_weights(
        int(seed),
        n_features,
        n_random_features - pairs,
        gamma,
        kernel=kernel,
        orthogonal=kernel == "rbf",
    )
    cosines, odd = frequencies[:, :pairs], frequencies[:, pairs:]
    omega = np.hstack([cosines, cosines, odd])
    offset = np.concatenate(
        [np.zeros(pairs), np.full(pairs, -np.pi / 2), phases[pairs:]]
    )
    omega.flags.writeable = offset.flags.writeable = False
    return omega, offset


def centred_map(seed, n_features, n_random_features, gamma, center):
    """:func:`paired_fourier_map` (``"rbf"``) of the rows x − c:
    cos((x − c)ᵀΩ + b) = cos(xᵀΩ + (b − cᵀΩ)), so only the phases change
    and sparse rows stay sparse. ``center=None``: the map itself."""
    omega, offset = paired_fourier_map(seed, n_features, n_random_features, gamma)
    if center is None:
        return omega, offset
    return omega, offset - np.asarray(center, dtype=np.float64) @ omega


def feature_norm_bound(n_random_features):
    """R, a bound on ‖z(x)‖ for every x, of :func:`paired_fourier_map`'s
    features: √(2⌈D/2⌉/D) (1 for even D), with a relative slack of 1e-6
    for the float32 cosines."""
    D = n_random_features
    return math.sqrt(2.0 * (D - D // 2) / D * (1 + _SLACK))


def gram_sensitivity(radius, n_random_features):
    """The L2 sensitivity of the upper triangle of Σ z zᵀ (diagonal
    included) to one row replaced by another, for rows of norm at most R.

    The triangle moves by that of A = z zᵀ − z' z'ᵀ, whose squared norm is
    Σᵢ Aᵢᵢ² + Σ_{i<j} Aᵢⱼ² = (‖A‖_F² + Σᵢ Aᵢᵢ²) / 2. Here
    ‖A‖_F² = ‖z‖⁴ + ‖z'‖⁴ − 2(zᵀz')² ≤ 2R⁴, and Aᵢᵢ = zᵢ² − z'ᵢ² lies in
    [−m², m²] (m² ≥ maxᵢ zᵢ², 2/D for a cosine times √(2/D)) with
    Σᵢ |Aᵢᵢ| ≤ ‖z‖² + ‖z'‖² ≤ 2R², so Σᵢ Aᵢᵢ² ≤ 2m²R². Hence

        Δ = √(R⁴ + m²R²) = R √(R² + m²),

    about R² for large D: √2 above one row added or removed, a factor √2
    below ‖A‖_F's bound because the server mirrors the triangle instead of
    receiving both halves.
    """
    m2 = min(radius**2, 2.0 / n_random_features * (1 + _SLACK))
    return math.sqrt(radius**4 + m2 * radius**2)


def feature_sum_sensitivity(radius):
    """The L2 sensitivity of Σ z to one row replaced by another, for rows
    of norm at most R: ‖z − z'‖ ≤ 2R. The row count beside it does not
    move (the clients' sizes are public) and is sent without noise."""
    return 2.0 * radius


def private_feature_count(n_samples, summed_noise, low, high):
    """D for random features under privacy, from public figures: the
    largest even D in [low, high] whose summed Gram noise keeps to a
    fifteenth of the components' energy.

    The summed triangle's noise (entries of standard deviation
    ``summed_noise``, features of norm at most 1) has spectral norm about
    2 √D σ, while the Gram's trace, the energy all components share, is at
    most N: more features than (N / (30 σ))² leave the components in the
    noise, and fewer features cost a finer kernel estimate far less.
    """
    if summed_noise <= 0:
        return high
    D = int((n_samples / (2.0 * _TRACE_OVER_NOISE * summed_noise)) ** 2)
    return int(min(max(D - D % 2, low + low % 2), high))


# N over the summed Gram noise's spectral norm, at least.
_TRACE_OVER_NOISE = 15.0


def count_sum_sensitivity(radius, count_scale=1.0):
    """The L2 sensitivity of per-center sums and scaled counts
    [Σ_j z, c n_j]_j to one row replaced by another, for rows of norm at
    most R.

    Both rows nearest one center: that sum moves by z' − z (≤ 2R), no count
    moves. Nearest two: two sums move by z and z', two counts by c
    (√(2R² + 2c²)). So Δ = max(2R, √(2(R² + c²))): 2R at c = R, which
    keeps the counts' noise R times smaller than the sums' where R is
    large.
    """
    return max(2.0 * radius, math.sqrt(2.0 * (radius**2 + count_scale**2)))


def feature_statistics_sensitivity(n_random_features):
    """The L2 sensitivities of the two releases of a client's random-feature
    statistics, the upper triangle of Σ z zᵀ and Σ z
    (:func:`gram_sensitivity` and :func:`feature_sum_sensitivity` at the
    norm bound of D features): one per release, from D alone."""
    radius = feature_norm_bound(n_random_features)
    return (
        gram_sensitivity(radius, n_random_features),
        feature_sum_sensitivity(radius),
    )


def statistics_noise(round, accountant, n_random_features):
    """The ``noise`` option of a statistics step, ``(radius, gram_std,
    sum_std)``: the features' norm bound and the standard deviations of the
    two releases that ``round`` declares (its ``sensitivity`` gives one
    distance per release) at the fit's noise multiplier."""
    gram_std, sum_std = round.noise_std(accountant, n_random_features)
    return feature_norm_bound(n_random_features), gram_std, sum_std


def clip_rows(Z, radius):
    """Scale, in place, the rows of ``Z`` longer than ``radius`` down to it.

    For features of :func:`paired_fourier_map` it changes nothing but the
    float32 cosines' rounding: it makes the bound hold by construction.
    """
    norms = np.sqrt(np.einsum("ij,ij->i", Z, Z))
    long = norms > radius
    if long.any():
        Z[long] *= (radius / norms[long])[:, None]
    return Z


def feature_blocks(X, omega, offset, *, chunk=FEATURE_CHUNK):
    """Z = z(X) under the shared map a block of rows at a time: yields
    (the block's slice of rows, its rows of Z).

    Z is never held whole: every block is written into one buffer of
    ``chunk`` rows, so a block's Z is valid only until the next is drawn.
    """
    Z = np.empty((min(chunk, X.shape[0]), omega.shape[1]))
    for block in row_blocks(X.shape[0], chunk):
        rows = Z[: block.stop - block.start]
        random_fourier_features(X[block], omega, offset, out=rows)
        yield block, rows


def feature_gram_statistics(X, omega, offset, *, radius=None, chunk=FEATURE_CHUNK):
    """A client's Σ z zᵀ (upper triangle, row by row) and Σ z over its
    rows, a block of rows at a time (Z is never held whole).

    Parameters
    ----------
    X : {ndarray, sparse matrix} of shape (n_m, d)
    omega, offset : ndarrays
        The shared map.
    radius : float, default=None
        Clip every row of Z to this norm first (differential privacy).
    chunk : int, default=4096
        Rows per block.

    Returns
    -------
    upper : ndarray of shape (D(D+1)/2,)
    sums : ndarray of shape (D,)
    """
    D = omega.shape[1]
    gram = np.zeros((D, D))
    sums = np.zeros(D)
    for _, rows in feature_blocks(X, omega, offset, chunk=chunk):
        if radius is not None:
            clip_rows(rows, radius)
        # numpy's Zᵀ Z is BLAS syrk and releases the GIL (clients in threads).
        gram += rows.T @ rows
        sums += rows.sum(axis=0)
    return gram[np.triu_indices(D)], sums


def symmetric_from_upper(upper, n_random_features):
    """The D x D symmetric matrix whose upper triangle (row by row) is
    ``upper``: a noised triangle mirrored, so the noise is symmetric."""
    D = n_random_features
    gram = np.zeros((D, D))
    gram[np.triu_indices(D)] = upper
    gram += np.triu(gram, 1).T
    return gram


# Each client's upper triangle of Z[m]ᵀZ[m] and Z[m]ᵀ1, summed (a client
# of fewer distinct rows than D gives its rows away, which the fit counts
# with ``feature_statistics_raw_rows``)...
FEATURE_STATISTICS = sum_only("random feature statistics")
# ... or, under differential privacy, two releases per client: the Gram
# triangle, then Z[m]ᵀ1 (n_m, public, follows unnoised).
PRIVATE_STATISTICS = FEATURE_STATISTICS.noised(2)._replace(
    sensitivity=feature_statistics_sensitivity
)


def feature_statistics_counting_rows(n_random_features):
    """:data:`FEATURE_STATISTICS` as a fit of D features runs it: the ledger
    counts the rows of a client whose statistics determine them (see
    :func:`~skfed.kernel._random_features.feature_statistics_raw_rows`)."""
    rows = partial(feature_statistics_raw_rows, n_random_features=n_random_features)
    disclosure = FEATURE_STATISTICS.disclosure._replace(rows=rows)
    return FEATURE_STATISTICS._replace(disclosure=disclosure)


def private_statistics(fed, step, message, n_random_features):
    """Server: the noised sums of the clients' feature statistics under the
    fit's accountant (differential privacy), and the row count (public).

    One round, :data:`PRIVATE_STATISTICS` (sum-only, two releases per
    client): the upper triangle of Z[m]ᵀZ[m], of replace-one sensitivity
    :func:`~skfed.kernel._private_features.gram_sensitivity`, and Z[m]ᵀ1,
    of sensitivity 2R, R the features' norm bound; the row count n_m is
    public and follows without noise. Both bounds come from D alone.
    ``step`` is the estimator's statistics step (taking ``n_features`` and
    ``noise``).

    Returns
    -------
    total : ndarray of shape (D(D+1)/2 + D,)
        The noised sum of the triangles, then of the feature sums.
    n_samples : float
        N, at least 1.
    """
    noise = statistics_noise(PRIVATE_STATISTICS, fed.accountant, n_random_features)
    total = fed.run_round(
        PRIVATE_STATISTICS,
        partial(step, n_features=n_random_features, noise=noise),
        message,
    )
    # N is exact, but a client may hold no row; the means divide by it.
    return total[:-1], max(float(total[-1]), 1.0)
