"""The federated standard scaler's rounds: per-feature means and variances
from sums over clients.

Without differential privacy, two ``sum_only`` rounds:

1. ``"scaler mean"``: the server sends N (the clients' row counts are the
   federation's public metadata); each client uploads its row count n_m
   and Σ x / N over its rows (1 + d floats). The sum is (N, x̄).
2. ``"scaler spread"`` (only with ``with_std``): the server sends (N, x̄);
   each client uploads Σ (x − x̄) / N and Σ (x − x̄)² / N over its rows,
   per feature (2d floats). With δ the first sum, the variance is the
   second minus δ² (the corrected two-pass algorithm: x̄ is rounded, and
   where the data sit a dozen orders of magnitude above their spread,
   that rounding would otherwise enter the variance as its square).

Why not one round of counts, sums and sums of squares: Σ x² / N − x̄²
cancels far from the origin (at a mean of 1e6 and a standard deviation of
1 the difference keeps about four digits of the variance), and per-client
means, which would repair that, are per-client statistics the server
would see. Around the global mean the variance is as exact as the data;
that is the corrected two-pass algorithm
:class:`~sklearn.preprocessing.StandardScaler` runs on pooled rows. Each
client divides its sums by N so that what it uploads is of the size of
the data, not N times it: under secure aggregation every number a client
uploads must stay below 2^31 / M in magnitude (M clients), which Σ x over
a thousand rows at 1e6 would not.

Under differential privacy, one ``sum_only`` round, ``"scaler
statistics"``: the server sends the bounds (2d floats); each client clips
its rows into the box, moves them to its centre and divides them by its
half-widths (v in [-1, 1]^d, public coordinates: no round is needed to find
them), and uploads Σ v, Σ v² (with ``with_std``) with Gaussian noise and its
(public) row count (d + 1 or 2d + 1 floats; one release).
"""

import math
from functools import partial
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from ..._engine._protocol import client_step
from ..._engine._rounds import sum_only
from ..._numerics._blocks import row_blocks
from ...privacy import concatenate_releases, gaussian_noise
from ...privacy._refusal import MIN_ROWS, MIN_SPREAD_ROWS, require_distinct_rows

__all__ = [
    "SCALER_MEAN",
    "SCALER_SPREAD",
    "SCALER_STATISTICS",
    "ScalerResult",
    "private_sensitivity",
    "private_step",
    "run_scaler",
]


# Rows a client densifies at once under differential privacy (sparse rows
# are clipped into a box whose centre fills every column).
def private_sensitivity(n_free, with_std):
    """The L2 sensitivity of one client's release to one of its rows
    replaced by any other (replace-one adjacency; the row count is public
    and released without noise).

    A row in box coordinates v ∈ [-1, 1]^d replaced by v' moves Σ v by
    v' − v (norm at most 2√d') and Σ v² by v'² − v² (entries in [-1, 1],
    norm at most √d'), where d' counts the features whose box has a
    positive width (v is 0 on the others). So Δ = √(5d'), or 2√d' without
    the squares. The bound comes from the box's dimension, never from the
    data.
    """
    return math.sqrt((5 if with_std else 4) * n_free)


# Without privacy: (n_m, Σ x / N), then (Σ (x − x̄) / N, Σ (x − x̄)² / N).
# The first of a client of one row is that row, with N public: the ledger
# counts it, and raw_rows="refuse" makes the client refuse it.
SCALER_MEAN = sum_only("scaler mean", rows=lambda upload: int(upload[0] == 1))
SCALER_SPREAD = sum_only("scaler spread")
# Under privacy: [Σ v, Σ v², n_m] noised, one release of sensitivity
# private_sensitivity(n_free, with_std).
SCALER_STATISTICS = sum_only(
    "scaler statistics", noised=1, sensitivity=private_sensitivity
)

_CHUNK = 4096
_REMEDY = (
    "Merge this client's rows with another client's, leave it out, or fit "
    "with privacy=DifferentialPrivacy(...), whose noised statistics need no "
    "minimum."
)


class ScalerResult(NamedTuple):
    """What the server ends with."""

    n_samples: int
    mean: np.ndarray  # (d,), or None
    var: np.ndarray  # (d,), or None
    client_ids: list


def run_scaler(fed, *, with_mean, with_std, private=None):
    """Server: the per-feature mean and variance over the open federation.

    Parameters
    ----------
    fed : Federation
        Open federation (inside its ``with`` block).
    with_mean, with_std : bool
        Which statistics the estimator needs: the mean for either, the
        variance for ``with_std``. With neither, no round: the row count
        is the federation's metadata.
    private : tuple (lower, upper, noise_std) or None
        Differential privacy: the clipping box and the standard deviation
        of the noise of the one release (:func:`private_sensitivity` times
        the accountant's noise multiplier, ``SCALER_STATISTICS.noise_std``).

    Returns
    -------
    result : ScalerResult
    """
    if not (with_mean or with_std):
        return ScalerResult(fed.n_samples, None, None, list(fed.client_ids))
    if private is not None:
        return _run_private(fed, with_std=with_std, private=private)
    n_total = int(fed.n_samples)
    refuse = fed.raw_rows == "refuse"
    mean_step = partial(_mean_step, min_rows=MIN_ROWS) if refuse else _mean_step
    n_samples, share = fed.run_round(SCALER_MEAN, mean_step, n_total)
    n_samples = int(n_samples)
    if n_samples == 0:
        raise ValueError("No client holds a row: there is nothing to scale.")
    # Clients that failed in the round (on_client_error="drop") are not in
    # the sum: the shares were of N, the mean is of the rows that answered.
    mean = share * (n_total / n_samples)
    var = None
    if with_std:
        spread_step = _spread_step
        if refuse:
            spread_step = partial(_spread_step, min_rows=MIN_SPREAD_ROWS)
        shift, second = fed.run_round(SCALER_SPREAD, spread_step, (n_samples, mean))
        # Rounding of the two sums can leave a constant feature's variance
        # a hair below zero.
        var = np.maximum(second - shift**2, 0.0)
    return ScalerResult(n_samples, mean, var, list(fed.client_ids))


def _run_private(fed, *, with_std, private):
    lower, upper, noise_std = private
    lower = np.asarray(lower, dtype=np.float64)
    upper = np.asarray(upper, dtype=np.float64)
    d = lower.shape[0]
    total = fed.run_round(
        SCALER_STATISTICS, _private_step_with(with_std, noise_std), (lower, upper)
    )
    # Everything below is post-processing of the noised sums.
    count = max(float(total[-1]), 1.0)
    centre, half = (lower + upper) / 2, (upper - lower) / 2
    mean_v = np.clip(total[:d] / count, -1.0, 1.0)
    mean = centre + half * mean_v
    var = None
    if with_std:
        second = np.clip(total[d : 2 * d] / count, 0.0, 1.0)
        # A variable in [-1, 1] of mean m has variance at most 1 - m².
        var_v = np.clip(second - mean_v**2, 0.0, 1.0 - mean_v**2)
        var = half**2 * var_v
    n_samples = max(int(round(count)), 1)
    return ScalerResult(n_samples, mean, var, list(fed.client_ids))


def _private_step_with(with_std, noise_std):
    return partial(private_step, with_std=bool(with_std), noise_std=noise_std)


# --------------------------------------------------------------------------
# Client steps


@client_step("scaler.mean", sum_only=True)
def _mean_step(client, state, n_total, *, min_rows=None):
    """Client: (n_m, Σ x / N) over its rows: 1 + d floats.

    With ``min_rows`` (``raw_rows="refuse"``) a client of fewer distinct
    rows raises instead: the sum of one row, with N public, is that row.
    """
    X = client.X
    if min_rows:
        require_distinct_rows(X, min_rows, "count and mean", _REMEDY)
    total = np.asarray(X.sum(axis=0, dtype=np.float64)).ravel()
    return state, (int(X.shape[0]), total / float(n_total))


@client_step("scaler.spread", sum_only=True)
def _spread_step(client, state, message, *, min_rows=None):
    """Client: (Σ (x − x̄) / N, Σ (x − x̄)² / N) over its rows, per
    feature: 2d floats.

    ``message`` is (N, x̄). Sparse rows are not densified: a column's
    unstored entries each add −x̄_j and x̄_j². With ``min_rows``
    (``raw_rows="refuse"``) a client of fewer distinct rows raises instead:
    with its count, the two sums of two values give both values.
    """
    n_total, mean = message
    mean = np.asarray(mean, dtype=np.float64)
    X = client.X
    if min_rows:
        require_distinct_rows(X, min_rows, "count, mean and spread", _REMEDY)
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        if not X.has_canonical_format:
            X = X.copy()
            X.sum_duplicates()
        diff = X.data.astype(np.float64) - mean[X.indices]
        unstored = X.shape[0] - np.bincount(X.indices, minlength=X.shape[1])
        first = np.bincount(X.indices, diff, minlength=X.shape[1])
        first -= unstored * mean
        ss = np.bincount(X.indices, diff * diff, minlength=X.shape[1])
        ss += unstored * mean**2
    else:
        first, ss = np.zeros(X.shape[1]), np.zeros(X.shape[1])
        for block in row_blocks(X.shape[0], _CHUNK):
            residual = np.asarray(X[block], dtype=np.float64) - mean
            first += residual.sum(axis=0)
            ss += np.einsum("ij,ij->j", residual, residual)
    return state, (first / float(n_total), ss / float(n_total))


@client_step("scaler.dp_statistics", sum_only=True)
def private_step(client, state, message, *, with_std, noise_std):
    """Client, under differential privacy: [Σ v, Σ v², n_m] with Gaussian
    noise, v the rows clipped into the box and moved to [-1, 1]^d (Σ v²
    only with ``with_std``): one release, d + 1 or 2d + 1 floats.

    The noise is drawn here, from fresh OS entropy, before the statistics
    leave the site; the row count n_m, public, follows unnoised.
    """
    lower, upper = (np.asarray(b, dtype=np.float64) for b in message)
    centre, half = (lower + upper) / 2, (upper - lower) / 2
    # Features of a box of zero width are known to be constant: v = 0.
    inverse = np.divide(1.0, half, out=np.zeros_like(half), where=half > 0)
    X = client.X
    d = X.shape[1]
    first, second = np.zeros(d), np.zeros(d)
    for block in row_blocks(X.shape[0], _CHUNK):
        rows = X[block]
        rows = rows.toarray() if sp.issparse(rows) else np.asarray(rows)
        v = (np.clip(rows.astype(np.float64), lower, upper) - centre) * inverse
        first += v.sum(axis=0)
        if with_std:
            second += np.einsum("ij,ij->j", v, v)
    parts = [first, second] if with_std else [first]
    # n_m is public (replace-one adjacency): it follows the sums unnoised.
    return state, concatenate_releases(
        [gaussian_noise(np.concatenate(parts), noise_std), [float(X.shape[0])]]
    )
