"""Random Fourier features (Rahimi & Recht, 2007) and the federated
average-distance kernel width."""

import math
from functools import partial
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_random_state

from .._engine._protocol import client_step
from .._engine._rounds import per_client, sum_only
from .._numerics._blocks import row_blocks
from ..privacy._refusal import MIN_ROWS, MIN_SPREAD_ROWS, require_distinct_rows
from ..privacy._secure_aggregation import sum_uploads


def sample_fourier_weights(
    random_state,
    n_features,
    n_components,
    gamma,
    *,
    kernel="rbf",
    orthogonal=False,
    dtype=np.float64,
):
    """Draw the frequencies Ω and phases b of a random Fourier feature map.

    Parameters
    ----------
    random_state : int or RandomState
        Shared seed: every client drawing with the same seed gets the same map.
    n_features : int
        d, the input dimension.
    n_components : int
        D, the number of random features.
    gamma : float
        Kernel parameter: ``exp(-gamma ||x - y||^2)`` for ``"rbf"``,
        ``exp(-gamma ||x - y||_1)`` for ``"laplacian"``.
    kernel : {"rbf", "laplacian"}, default="rbf"
        Shift-invariant kernel whose spectral measure Ω is drawn from:
        Gaussian N(0, 2γ I) for ``"rbf"``, Cauchy with scale γ for
        ``"laplacian"``.
    orthogonal : bool, default=False
        Orthogonal random features (Yu et al., "Orthogonal Random
        Features", NeurIPS 2016), ``"rbf"`` only: the columns of Ω come in
        blocks of up to d mutually orthogonal directions, each scaled by an
        independent χ_d length, so that every column is still N(0, 2γ I)
        and ``Z Zᵀ`` still estimates the kernel matrix without bias, with a
        smaller variance (what the one-shot federated kernel k-means, which
        draws a single map, gains from it is in its user guide).
    dtype : dtype, default=np.float64

    Returns
    -------
    omega : ndarray of shape (n_features, n_components)
    offset : ndarray of shape (n_components,)
        Uniform on [0, 2π).
    """
    rng = check_random_state(random_state)
    if orthogonal and kernel != "rbf":
        raise ValueError(f"orthogonal features need kernel='rbf', got {kernel!r}.")
    if orthogonal:
        omega = np.sqrt(2 * gamma) * _orthogonal_gaussian(rng, n_features, n_components)
    elif kernel == "rbf":
        omega = np.sqrt(2 * gamma) * rng.standard_normal((n_features, n_components))
    elif kernel == "laplacian":
        omega = gamma * rng.standard_cauchy((n_features, n_components))
    else:
        raise ValueError(f"kernel must be 'rbf' or 'laplacian', got {kernel!r}.")
    offset = rng.uniform(0, 2 * np.pi, size=n_components)
    return omega.astype(dtype, copy=False), offset.astype(dtype, copy=False)


def _orthogonal_gaussian(rng, n_features, n_components):
    """d x D matrix whose columns are N(0, I) each, mutually orthogonal
    within blocks of up to d columns (the directions of a Haar-random
    orthogonal matrix, the lengths independent χ_d draws)."""
    blocks, drawn = [], 0
    while drawn < n_components:
        width = min(n_features, n_components - drawn)
        # The reduced QR of a Gaussian d x width matrix, signs fixed by R's
        # diagonal, has Haar-distributed orthonormal columns: d x width
        # flops instead of a full d x d orthogonal matrix (d = 784, D = 300).
        Q, R = np.linalg.qr(rng.standard_normal((n_features, width)))
        Q *= np.where(np.diag(R) < 0, -1.0, 1.0)
        blocks.append(Q * np.sqrt(rng.chisquare(n_features, size=width)))
        drawn += width
    return np.hstack(blocks)


def random_fourier_features(X, omega, offset, *, scale=None, out=None):
    """Map rows of X to ``scale * cos(X Ω + b)``.

    Parameters
    ----------
    X : {ndarray, sparse matrix} of shape (n_samples, n_features)
    omega, offset : ndarrays
        From :func:`sample_fourier_weights`.
    scale : float, default=None
        ``sqrt(2 / D)`` when omitted, so that ``Z Zᵀ`` estimates the kernel
        matrix (as ``sklearn.kernel_approximation.RBFSampler``); pass
        ``sqrt(2)`` for the unnormalised map with ``E[A Aᵀ / D] = K``.
    out : ndarray of shape (n_samples, n_components), default=None
        Where to write Z (a column block of a wider matrix, say); a new
        float64 array when omitted. A float32 ``out`` receives the float32
        cosines themselves (times ``scale``, exactly so when it is 1).

    Returns
    -------
    Z : ndarray of shape (n_samples, n_components)
        float64, accurate to float32 rounding (about 1e-7 of ``scale``):
        see ``scaled_cosines`` in this module.
    """
    if scale is None:
        scale = np.sqrt(2.0 / omega.shape[1])
    _check_phases(X, omega)
    n_samples, n_components = X.shape[0], omega.shape[1]
    if out is None:
        out = np.empty((n_samples, n_components))
    if sp.issparse(X) or omega.dtype != np.float64:
        Z = X @ omega
        Z += offset
        return scaled_cosines(Z, scale, out=out)
    # Phases a block of rows at a time, into scratch reused for every block:
    # X Ω for all rows at once was a fresh n x D array (10 MB for 4,096
    # rows), whose first writes and later reads out of cache took as long
    # as the cosines themselves.
    scratch = _CosineScratch(n_samples, n_components)
    for block in scratch.blocks():
        phase = scratch.phase[: block.stop - block.start]
        np.matmul(X[block], omega, out=phase)
        phase += offset
        scratch.cosines(phase, scale, out[block])
    return out


# Largest phase whose cosine float64 still resolves to about 1e-3 (its
# spacing there is 2**-9 rad); beyond 2**52 the reduction modulo 2π is
# noise, and beyond float32's range the reduced phase overflowed and the
# features were NaN ("array must not contain infs or NaNs" from the
# eigen-solver with gamma=1e300).
_MAX_PHASE = 2.0**43


def _check_phases(X, omega):
    """Refuse phases X Ω too large for their cosines to mean anything.

    A cheap bound first (largest absolute row sum of X times the largest
    |ω|); the phases themselves only when the bound is exceeded.
    """
    values = X.data if sp.issparse(X) else X
    if values.size == 0 or omega.size == 0:
        return
    row_sums = abs(X).sum(axis=1) if sp.issparse(X) else np.abs(X).sum(axis=1)
    largest = float(np.max(row_sums)) * float(np.max(np.abs(omega)))
    if not largest > _MAX_PHASE:
        return
    largest = float(np.max(np.abs(X @ omega)))
    if largest > _MAX_PHASE or not np.isfinite(largest):
        raise ValueError(
            f"The random Fourier features' phases reach {largest:.3g} radians, "
            f"beyond the {_MAX_PHASE:.3g} whose cosines float64 resolves: "
            "gamma is too large for these data (a kernel narrower than "
            "their rounding). Use a smaller gamma, e.g. gamma=None to take "
            "it from the data's spread, or rescale/centre the data."
        )


# Phases whose cosines are taken at once: 20 bytes of scratch per value
# (phase, turns, float32), so about 0.8 MB, which stays in a core's L2
# cache and is allocated once per call. With 300 features: 3.1 ns per value
# (the product X Ω included) at 128 rows, 3.5 at 256, 4.1 at 512, 5.5 at
# 1,024, whose 6 MB of scratch spilled out of a 2 MB L2; on a machine with
# a larger cache, 1,024 rows were faster than 4,096.
_COS_VALUES = 40_000
_TWO_PI = 2.0 * np.pi


def scaled_cosines(phase, scale, *, out):
    """``out[:] = scale * cos(phase)``, through float32 after reducing the
    phase modulo 2π in float64; ``phase`` is overwritten.

    numpy's float32 cosine is vectorised (about 0.4 ns per value on this
    project's benchmark machine) where its float64 cosine calls libm per
    value (about 13 ns); the float64 cosines were about half of a federated
    kernel k-means fit. Reducing in float64 keeps the phase of data far from
    the origin (phases of order 1e6); what float32 then loses, at most about
    2e-7 per feature, is far below the Monte Carlo error of D random
    features (order D^-1/2). Row blocks keep the scratch small, and writing
    into ``out`` (a column block of a wider matrix, say) saves a copy.
    """
    if phase.dtype != np.float64 or phase.ndim != 2:
        out[...] = scale * np.cos(phase)
        return out
    scratch = _CosineScratch(*phase.shape)
    for block in scratch.blocks():
        scratch.cosines(phase[block], scale, out[block])
    return out


class _CosineScratch:
    """Buffers for the cosines of ``n_rows`` x ``columns`` phases, taken a
    block of about ``_COS_VALUES`` at a time (see :func:`scaled_cosines`)."""

    def __init__(self, n_rows, columns):
        self.n_rows = n_rows
        self.rows = max(16, _COS_VALUES // max(columns, 1))
        rows = min(self.rows, n_rows)
        self.phase = np.empty((rows, columns))
        self.turns = np.empty((rows, columns))
        self.low = np.empty((rows, columns), np.float32)

    def blocks(self):
        """Slices of the ``n_rows`` rows, one block at a time."""
        return row_blocks(self.n_rows, self.rows)

    def cosines(self, phase, scale, out):
        """``out[:] = scale * cos(phase)`` for one block of rows;
        ``phase`` (float64) is overwritten."""
        n_rows = phase.shape[0]
        turns = np.multiply(phase, 1.0 / _TWO_PI, out=self.turns[:n_rows])
        np.rint(turns, out=turns)
        turns *= _TWO_PI
        phase -= turns
        # A float32 ``out`` takes the cosines itself: no copy through the
        # scratch (the float32 Gram matrix of federated kernel k-means).
        low = out if out.dtype == np.float32 else self.low[:n_rows]
        low[...] = phase
        np.cos(low, out=low)
        if low is not out:
            np.multiply(low, scale, out=out)
        elif scale != 1.0:
            out *= np.float32(scale)


class ZeroSpreadError(ValueError):
    """Every sample is the same point: no distance to scale a kernel by."""


# What a client refusing raw rows says instead of a width statistic.
_WIDTH_REMEDY = (
    "Set the kernel width explicitly (gamma, or widths as floats), leave the "
    "client out, or fit with privacy=DifferentialPrivacy(...)."
)


def _refuse_few_rows(X, min_rows, statistic):
    if min_rows:
        require_distinct_rows(X, min_rows, statistic, _WIDTH_REMEDY)


@client_step("kernel.moments")
def moments_step(client, state, message, *, min_rows=None):
    """Client step: (n_m, x̄_m, S_m), its rows' count, mean and sum of
    squares S_m = Σ ‖x − x̄_m‖² around that mean.

    Upload: d + 2 floats. From them the server gets the mean squared
    interpoint distance without seeing any point. Both are taken in two
    passes, around the rounded mean and then corrected by the mean of the
    residuals, so that they do not depend on where the data sit: identical
    rows give S_m = 0 and x̄_m equal to their row exactly, whatever their
    offset, and distinct rows a positive S_m (one pass around the rounded
    mean left rounding residue of about 1e-16 of the offset, which an
    "identical" threshold then had to guess at: rows of unit spread at an
    offset of 2e10 were refused).

    With ``min_rows`` (``raw_rows="refuse"``) a client of fewer distinct
    rows raises ``RawRowsRefused`` (a ``ValueError``) and uploads
    nothing: one row's moments are (1, x, 0).
    """
    _refuse_few_rows(client.X, min_rows, "count, mean and spread")
    return state, _moments(client.X)


@client_step("kernel.count_and_sum", sum_only=True)
def count_and_sum_step(client, state, message, *, min_rows=None):
    """Client step: (n_m, Σ x), for a sum-only round (the global mean);
    ``min_rows`` as in :func:`moments_step`."""
    _refuse_few_rows(client.X, min_rows, "count and sum")
    return state, _count_and_sum(_moments(client.X))


@client_step("kernel.spread", sum_only=True)
def spread_step(client, state, mean, *, min_rows=None):
    """Client step: Σ ‖x − x̄‖² of its rows around the global mean x̄ (the
    message), for a sum-only round: S_m + n_m ‖x̄_m − x̄‖², with S_m taken
    around the client's own mean (see :func:`moments_step`); ``min_rows``
    as there."""
    _refuse_few_rows(client.X, min_rows, "spread")
    return state, _spread_around(_moments(client.X), mean)


def _count_and_sum(moments):
    """(n_m, n_m x̄_m) from a client's moments (n_m, x̄_m, S_m)."""
    n, mean, _ = moments
    return n, n * mean


def _spread_around(moments, mean):
    """S_m + n_m ‖x̄_m − x̄‖², a client's spread around the global mean x̄
    from its moments. The clients' masked rounds and the server's reading
    of unmasked moments (:func:`gamma_from_moments`) share it and
    :func:`_count_and_sum`, so that both compute γ with the same
    roundings."""
    n, own_mean, ss = moments
    return ss + n * float(np.sum((own_mean - mean) ** 2))


def _moments(X):
    """(n, x̄, Σ ‖x − x̄‖²) of the rows X, in float64 (see
    :func:`moments_step`)."""
    n = X.shape[0]
    first = np.asarray(X.sum(axis=0), dtype=np.float64).ravel() / n
    if sp.issparse(X):
        # Residuals r = x − first, implicitly: stored entries x_ij − first_j,
        # and −first_j for the n − stored_j entries not stored; still sparse.
        X = sp.csr_matrix(X)
        diff = X.data.astype(np.float64) - first[X.indices]
        stored = np.bincount(X.indices, minlength=X.shape[1])
        unstored = n - stored
        stored_sum = np.bincount(X.indices, diff, minlength=X.shape[1])
        fix = (stored_sum - unstored * first) / n
        diff -= fix[X.indices]
        ss = float(diff @ diff + (unstored * (first + fix) ** 2).sum())
    else:
        residual = np.asarray(X, dtype=np.float64) - first
        fix = residual.mean(axis=0)
        residual -= fix
        ss = float(np.einsum("ij,ij->", residual, residual))
    # first + fix is exact for identical rows: fix = row − first exactly.
    return float(n), first + fix, ss


def moments_raw_rows(upload):
    """Rows of X a moments upload gives away: one when the spread is zero
    (the mean is the row of every one of the client's rows), both of a
    two-row client in one dimension (mean and spread solve for them)."""
    n, mean, ss = upload
    if n >= 1 and ss == 0:
        return 1
    return 2 if n == 2 and np.size(mean) == 1 else 0


def count_and_sum_raw_rows(upload):
    """Rows of X a (count, sum) upload is: the sum of a one-row client."""
    return 1 if upload[0] == 1 else 0


# What a client refusing raw rows says instead of its feature statistics.
FEATURE_REMEDY = (
    "Use n_random_features at most the distinct rows of the smallest "
    "client, leave the client out, or fit with "
    "privacy=DifferentialPrivacy(...)."
)


def feature_min_rows(n_random_features):
    """Distinct rows a client needs behind its random-feature Gram
    statistics under ``raw_rows="refuse"``: at least D. The range of
    Z[m]ᵀZ[m] is the span of the client's feature rows z(x); with fewer
    distinct rows than features the span is a proper subspace, and the
    server, which knows the map, finds the x whose z(x) lie in it (10 rows
    of 4 features recovered to 1e-5 from D = 104 by a local search from
    random starts). From D rows on the span is the whole space."""
    return max(MIN_ROWS, int(n_random_features))


def feature_statistics_raw_rows(upload, n_random_features):
    """Rows of X a random-feature statistics upload (the triangle of
    Z[m]ᵀZ[m], then Z[m]ᵀ1) gives away: one when the client holds one row,
    whose features z(x) are then the sums and the server, which knows the
    map, solves them for x. Read from the upload: Σ z_j² equals (Σ z_j)² in
    every feature j for one row only."""
    D = n_random_features
    j = np.arange(D)
    diagonal = upload[j * D - j * (j - 1) // 2]
    sums = upload[D * (D + 1) // 2 : D * (D + 1) // 2 + D]
    return int(np.allclose(diagonal, sums**2, rtol=1e-9, atol=1e-12 / max(D, 1)))


def _ordered_moments(uploads):
    # Summed in an order fixed by their values, so that the order and the
    # names of the clients cannot change a result by a rounding error.
    return sorted(uploads, key=lambda u: (u[0], u[2], tuple(u[1])))


def _shifted_means(uploads):
    """The clients' means as offsets from the first one's (in the order of
    :func:`_ordered_moments`), their sizes, and the global mean's offset
    from it: sums around a point of the data, not around the origin."""
    uploads = _ordered_moments(uploads)
    reference = uploads[0][1]
    sizes = np.array([u[0] for u in uploads])
    shifts = np.array([u[1] - reference for u in uploads])
    return reference, sizes, shifts, sizes @ shifts / math.fsum(sizes)


def mean_from_moments(uploads):
    """Server step: the global mean x̄ = Σ_m n_m x̄_m / N from client moments.

    Parameters
    ----------
    uploads : list of tuple
        The clients' answers to :func:`moments_step`.

    Returns
    -------
    mean : ndarray of shape (n_features,), float64
        Does not depend on the order or the names of the clients. A point
        every party can agree on, e.g. to work around instead of the origin
        (squared distances expanded on raw coordinates cancel far from it).
    """
    reference, _, _, shift = _shifted_means(uploads)
    return reference + shift


def gamma_from_moments(uploads):
    """Server step: γ = N² / (2 Σ_ij ‖x_i − x_j‖²) from client moments.

    Σ_ij ‖x_i − x_j‖² = 2 N S, where S = Σ_m S_m + Σ_m n_m ‖x̄_m − x̄‖² is the
    sum of squares around the global mean x̄; so γ = N / (4 S), one over twice
    the mean squared distance over all ordered pairs. The client means enter
    as offsets from one of them, so that S does not depend on where the data
    sit (translation changes γ only through the rounding of the data
    themselves, about 1e-16 of the offset over the spread), and S is zero
    exactly when every row is the same. The uploads are summed in an order
    fixed by their values (as :func:`mean_from_moments`).

    Raises
    ------
    ValueError
        If every row is the same (the distance is zero), or the rows differ
        by so little that γ overflows.
    """
    uploads = _ordered_moments(uploads)
    n = math.fsum(u[0] for u in uploads)
    _, sizes, shifts, shift = _shifted_means(uploads)
    between = float(sizes @ np.sum((shifts - shift) ** 2, axis=1))
    ss = math.fsum(u[2] for u in uploads) + between
    if ss > 0:
        # The value from the two sums a masked fit adds instead
        # (count_and_sum_step, spread_step), computed from the same moments:
        # masking then moves γ, and the model, by rounding only. S itself
        # decides only whether the rows differ.
        masked = _masked_spread(uploads)
        ss = masked if masked > 0 else ss
    return _gamma(n, ss)


def _masked_spread(uploads):
    """S as :func:`federated_gamma`'s two masked sums give it, from the
    clients' moments."""
    n, total = sum_uploads([_count_and_sum(u) for u in uploads])
    mean = total / n
    return sum_uploads([_spread_around(u, mean) for u in uploads])


def _gamma(n, ss, floor=None):
    """γ = N / (4 S) from the total spread S around the mean; ``floor``
    for a masked S."""
    # Identical rows give S = 0 exactly (see moments_step); under secure
    # aggregation the rounding of the mean leaves up to ``floor``.
    gamma = n / (4 * ss) if ss > (floor or 0.0) else np.inf
    if not np.isfinite(gamma):
        if floor is not None:
            # The clients' spreads themselves may be below the fixed
            # point's 2^-64: the server cannot tell such rows from copies.
            raise ZeroSpreadError(
                "The rows' spread is zero, or below what secure aggregation "
                "resolves (each client's sum of squared deviations under "
                "2^-64 ≈ 5e-20), so the average-distance kernel width is "
                "undefined; scale the data (e.g. FederatedStandardScaler), set "
                "the kernel width explicitly, or check the data."
            )
        raise ZeroSpreadError(
            "All samples are identical, so the average-distance kernel width "
            "is undefined; set the kernel width explicitly or check the data."
        )
    return gamma


class WidthRounds(NamedTuple):
    """The rounds of :func:`federated_gamma`, declared by the protocol that
    runs them (:func:`width_rounds`).

    Attributes
    ----------
    moments : Round
        Each client's row count, mean and spread (``per_client``).
    mean : Round
        Under secure aggregation: N and Σ x (``sum_only``).
    spread : Round
        Under secure aggregation: Σ ‖x − x̄‖² (``sum_only``).
    """

    moments: object
    mean: object
    spread: object

    def run(self, secure_aggregation):
        """The rounds a fit runs: the moments, or the two masked sums."""
        return (self.mean, self.spread) if secure_aggregation else (self.moments,)


def width_rounds(name):
    """The rounds of :func:`federated_gamma` under the name ``name``: one
    round ``name``, or ``name + " (mean)"`` and ``name + " (spread)"``
    under secure aggregation."""
    return WidthRounds(
        per_client(name, rows=moments_raw_rows),
        sum_only(f"{name} (mean)", rows=count_and_sum_raw_rows),
        sum_only(f"{name} (spread)"),
    )


def federated_gamma(fed, rounds):
    """Server: γ = N² / (2 Σ_ij ‖x_i − x_j‖²) over the federation ``fed``.

    One round ``rounds.moments`` of :func:`moments_step` (``per_client``:
    the server sees each client's mean and spread). Under secure
    aggregation, two ``sum_only`` rounds instead, ``rounds.mean`` (N and
    Σ x, so x̄) and ``rounds.spread`` (Σ ‖x − x̄‖², x̄ sent to every
    client), whose masked sums give the same γ within the fixed-point
    precision. ``rounds`` is a ``WidthRounds`` (or a name, for
    :func:`width_rounds` of it).

    Under ``raw_rows="refuse"`` every client first checks that its upload
    comes from at least ``MIN_SPREAD_ROWS`` (the mean and spread) or
    ``MIN_ROWS`` (the count and sum) distinct rows, masked or not (see
    ``skfed.privacy._refusal``). The ledger counts the moments of copies of one
    row (zero spread: the mean is the row) as one raw row.
    """
    if isinstance(rounds, str):
        rounds = width_rounds(rounds)
    refuse = fed.raw_rows == "refuse"
    spread_rows = {"min_rows": MIN_SPREAD_ROWS} if refuse else {}
    if not fed.secure_aggregation:
        return gamma_from_moments(
            fed.run_round(rounds.moments, partial(moments_step, **spread_rows))
        )
    n, total = fed.run_round(
        rounds.mean,
        partial(count_and_sum_step, **({"min_rows": MIN_ROWS} if refuse else {})),
    )
    mean = total / n
    ss = fed.run_round(rounds.spread, partial(spread_step, **spread_rows), mean)
    # Identical rows leave in S only the rounding of x̄ (a few units in its
    # last place, and the fixed point's 2^-64 below 2^-11): a floor relative
    # to the data, so that rows of spread 1e-8 are not taken for identical.
    slack = 4 * np.finfo(np.float64).eps * float(np.max(np.abs(mean))) + 2.0**-64
    return _gamma(n, ss, floor=n * mean.size * slack**2)
