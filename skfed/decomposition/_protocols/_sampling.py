"""disKPCA's representatives (Balcan et al., KDD 2016, Algorithms 1-2):
sampled uniformly, or by leverage scores of a sketched kernel embedding
(disLS) and then adaptively by their residuals against span φ(P)
(RepSample). The drivers (:func:`uniform_sample`,
:func:`leverage_adaptive_sample`), their client steps and server steps.
"""

from functools import lru_cache, partial

import numpy as np
import scipy.linalg
from sklearn.utils import check_random_state

from ..._engine._ledger import raw_rows_of
from ..._engine._protocol import client_step
from ..._engine._rounds import Round, per_client
from ..._numerics._blocks import row_blocks
from ..._numerics._reduce import content_sorted
from ..._numerics._seeds import SEED_MAX
from ...kernel._feature_maps import explicit_feature_map
from ...kernel._median import allocate_quota
from ...kernel._pairwise import kernel_diag, kernel_matrix
from ...kernel._sketch import sketch_columns
from ._basis import (
    BLOCK,
    forwarded_representatives,
    row_order,
    span_basis,
    stack_rows,
    unique_rows,
    vstack_rows,
)

__all__ = [
    "ADAPTIVE_RESIDUALS",
    "ADAPTIVE_SAMPLE",
    "EMBEDDING",
    "LEVERAGE_SAMPLE",
    "LEVERAGE_SCORES",
    "UNIFORM_SAMPLE",
    "leverage_adaptive_sample",
    "uniform_sample",
]

# Rows drawn with quotas proportional to the clients' sizes.
UNIFORM_SAMPLE = Round("uniform sample", raw_rows_of())
# disLS: each client's sketched embedding, its leverage-score summary, and
# the rows drawn by their scores.
EMBEDDING = per_client("embedding")
LEVERAGE_SCORES = per_client("leverage scores")
LEVERAGE_SAMPLE = Round("leverage sample", raw_rows_of())
# RepSample: the residual summaries against span φ(P) (P, rows of X,
# forwarded to every client) and the rows drawn by their residuals.
ADAPTIVE_RESIDUALS = per_client(
    "adaptive residuals", forwarded=forwarded_representatives
)
ADAPTIVE_SAMPLE = Round("adaptive sample", raw_rows_of())

# Residuals below this fraction of κ(a, a) are rounding noise (the point is
# already in the span), not a reason to sample it.
_RESIDUAL_RTOL = 1e-9
# Float32 random features a client holds at once in the embedding round.
_FEATURE_VALUES = 2**19


def uniform_sample(fed, opts):
    """Y sampled uniformly: client quotas proportional to n_m."""
    sizes = fed.client_sizes
    quota = allocate_quota(opts.n_representatives, sizes, sizes)
    rows = fed.run_round(
        UNIFORM_SAMPLE,
        partial(_sample_step, scores_key=None, stream="kernel_pca.uniform"),
        messages=[int(s) for s in quota],
    )
    return stack_rows(rows)


def leverage_adaptive_sample(fed, opts, rng, spec, n_rep):
    """disLS then RepSample (Algorithms 1 and 2)."""
    seed = int(rng.randint(SEED_MAX))
    sizes = fed.client_sizes
    m1 = int(np.ceil(opts.leverage_fraction * n_rep))
    m2 = n_rep - m1
    P = None
    # With no leverage draws (leverage_fraction=0) disLS is skipped: its
    # embedding round would be paid for nothing.
    if m1 > 0:
        sketches = fed.run_round(
            EMBEDDING,
            partial(
                _embedding_step,
                kernel=opts.kernel,
                degree=opts.degree,
                coef0=float(opts.coef0),
                n_random_features=opts.n_random_features,
                embedding_dim=opts.embedding_dim,
                sketch_size=opts.sketch_size,
            ),
            (seed, spec["gamma"]),
        )
        Z = _leverage_basis(sketches, opts.embedding_dim)
        summaries = fed.run_round(
            LEVERAGE_SCORES,
            partial(_leverage_step, budget=m1),
            Z,
        )
        quota = _inclusion_quota(summaries, m1, sizes)
        rows = fed.run_round(
            LEVERAGE_SAMPLE,
            partial(
                _sample_step,
                scores_key="kpca_scores",
                stream="kernel_pca.leverage",
            ),
            messages=[int(s) for s in quota],
        )
        P = unique_rows(stack_rows(rows))
    if m2 == 0:
        return P
    # The basis of span φ(P) is computed here once and sent, rather than
    # by every client from P (an eigendecomposition of K_PP each).
    R_P = None
    if P is not None and P.shape[0] > 0:
        R_P = span_basis(kernel_matrix(P, P, spec))
    summaries = fed.run_round(
        ADAPTIVE_RESIDUALS,
        partial(_residual_step, spec=spec, budget=m2),
        (P, R_P, spec["gamma"]),
    )
    # Points already taken have zero residual, so they cannot be drawn
    # again and count for nothing in the expected shares.
    quota2 = _inclusion_quota(summaries, m2, sizes)
    rows = fed.run_round(
        ADAPTIVE_SAMPLE,
        partial(_sample_step, scores_key="kpca_scores", stream="kernel_pca.adaptive"),
        messages=[int(s) for s in quota2],
    )
    new = stack_rows(rows)
    return new if P is None else vstack_rows([P, new])


# ---------------------------------------------------------------------------
# Client steps


# Two entries: the embedding round of the current fit (and of one running
# beside it); the maps hold d · D + D · t floats each.
@lru_cache(maxsize=2)
def _shared_embedding(
    seed, n_features, kernel, gamma, degree, coef0, n_random_features, embedding_dim
):
    """The shared map z and Gaussian S of disLS, drawn from the round's seed.

    Every client draws the same ones; a process serving many clients (a
    thousand small ones in one joblib worker) draws them once.
    """
    shared = check_random_state(seed)
    # Leverage scores are only needed to a constant factor, so the embedding
    # is computed in float32: half the time and memory of the dominant cost
    # (n_m · D cosines or FFTs).
    f32 = np.float32
    features, dim = explicit_feature_map(
        shared, n_features, kernel, gamma, degree, coef0, n_random_features, f32
    )
    S = (shared.standard_normal((dim, embedding_dim)) / np.sqrt(embedding_dim)).astype(
        f32
    )
    S.flags.writeable = False
    return features, S


@client_step("kernel_pca.embedding")
def _embedding_step(
    client,
    state,
    message,
    *,
    kernel,
    degree,
    coef0,
    n_random_features,
    embedding_dim,
    sketch_size,
):
    """disLS, worker part 1: kernel subspace embedding and point sketch.

    E[m] = S z(X[m])ᵀ (t × n_m) with the shared map z and Gaussian S; the
    upload is G[m] = E[m] T_m (t × min(n_m, p)), T_m private to the client.
    E[m] stays on the client for the leverage scores.
    """
    seed, gamma = message
    X = client.X
    features, S = _shared_embedding(
        int(seed),
        X.shape[1],
        kernel,
        float(gamma) if gamma is not None else None,
        degree,
        coef0,
        n_random_features,
        embedding_dim,
    )
    n_rows = X.shape[0]
    Et = np.empty((n_rows, embedding_dim))
    # One float32 buffer of about 2 MB for every block's features, which
    # stays in cache for the product with S: a fresh float64 block of
    # 2,048 x D features and its float32 copy (48 MB at D = 2,000) for
    # every block made this round 1.5 times slower and, faulting in new
    # pages all the time, kept two client threads from running faster
    # than one.
    rows = min(n_rows, max(16, _FEATURE_VALUES // S.shape[0]))
    buffer = np.empty((rows, S.shape[0]), np.float32)
    for block in row_blocks(n_rows, rows):
        Z = features(X[block], buffer[: block.stop - block.start])
        Et[block] = np.asarray(Z @ S)
    state = dict(state or {})
    Et = Et[row_order(client, state)]
    state["kpca_embedding"] = Et
    return state, sketch_columns(
        Et.T, sketch_size, client.random_state("kernel_pca.embedding_sketch")
    )


@client_step("kernel_pca.leverage_scores")
def _leverage_step(client, state, Z, *, budget):
    """disLS, worker part 2: ℓ_j = ‖Z⁻ᵀ E_{:,j}‖²; upload Σ_j ℓ_j and the
    ``budget`` largest scores (see :func:`_score_summary`)."""
    state = dict(state)
    Et = state.pop("kpca_embedding")
    diag = np.abs(np.diag(Z))
    if diag.size and diag.min() > 1e-10 * diag.max():
        scores = np.sum(scipy.linalg.solve_triangular(Z, Et.T, trans="T") ** 2, axis=0)
    else:
        # Rank-deficient embedding (duplicates, fewer points than t, constant
        # data): leverage scores w.r.t. the pseudo-inverse of ZᵀZ.
        _, s, Vt = np.linalg.svd(Z)
        keep = s > 1e-10 * s.max() if s.size and s.max() > 0 else s > np.inf
        scores = np.sum((Et @ Vt[keep].T / s[keep]) ** 2, axis=1)
    state["kpca_scores"] = scores
    return state, _score_summary(scores, budget)


def _score_summary(scores, budget):
    """(Σ_j s_j, the min(budget, n_m) largest s_j): enough for the server to
    find which points every draw would take anyway (π_j = 1 below)."""
    top = np.sort(scores)[::-1][:budget]
    return float(scores.sum()), np.ascontiguousarray(top)


def _inclusion_probabilities(scores, size):
    """π_j = min(1, c s_j) with Σ_j π_j = size: sampling without replacement
    "in proportion to s", where points whose share would exceed one draw
    are taken for sure instead of wasting draws on them."""
    pi = np.zeros(scores.shape[0])
    positive = scores > 0
    if size >= np.count_nonzero(positive):
        pi[positive] = 1.0
        return pi
    c = _saturation_scale(np.sort(scores[positive])[::-1], scores.sum(), size)
    return np.minimum(1.0, c * scores)


def _saturation_scale(top, total, size):
    """c with Σ_j min(1, c s_j) = size, from the largest scores ``top``
    (sorted decreasingly) and the sum of all scores. Every saturated score is
    among the ``size`` largest, so ``top`` needs no more than that."""
    head = np.concatenate([[0.0], np.cumsum(top)])
    c = 0.0
    for n_sat in range(min(size, top.shape[0]) + 1):
        # The points counted as saturated must stay so, also when rounding
        # leaves (almost) nothing for the others.
        floor = 1.0 / top[n_sat - 1] if n_sat else 0.0
        rest = total - head[n_sat]
        if rest <= 0:
            return floor
        c = max((size - n_sat) / rest, floor)
        if n_sat == top.shape[0] or top[n_sat] * c < 1:
            return c
    return c


@client_step("kernel_pca.sample")
def _sample_step(client, state, quota, *, scores_key, stream):
    """RepSample, worker part: draw ``quota`` rows without replacement,
    uniformly or with inclusion probabilities min(1, c s_j) from the stored
    scores s, and upload them.

    Fewer rows are sent when fewer rows have a positive score (e.g. every
    point already lies in the span of P).
    """
    state = dict(state or {})
    n = client.n_samples
    rng = client.random_state(stream)
    if scores_key is None:
        idx = rng.choice(n, size=min(int(quota), n), replace=False)
    else:
        scores = state[scores_key]
        size = min(int(quota), np.count_nonzero(scores > 0))
        idx = np.zeros(0, dtype=np.intp)
        if size:
            # Systematic sampling: exactly ``size`` distinct points, point j
            # included with probability π_j.
            cum = np.cumsum(_inclusion_probabilities(scores, size))
            cum *= size / cum[-1]
            idx = np.searchsorted(cum, rng.uniform() + np.arange(size), side="right")
            idx = np.unique(np.minimum(idx, n - 1))
        scores = scores.copy()
        scores[idx] = 0.0  # taken: not drawn again by a later round
        state[scores_key] = scores
    rows = client.X[row_order(client, state)[np.sort(idx)]]
    return state, rows


@client_step("kernel_pca.residuals")
def _residual_step(client, state, message, *, spec, budget):
    """RepSample, adaptive part: d_j = κ(a_j, a_j) − ‖R_Pᵀ k_P(a_j)‖², the
    squared feature-space distance of a_j to span φ(P); upload Σ_j d_j and
    the ``budget`` largest d_j."""
    P, R, gamma = message
    spec = dict(spec, gamma=gamma)
    X = client.X
    diag = kernel_diag(X, spec)
    if P is None or P.shape[0] == 0:
        resid = diag
    else:
        resid = np.empty(X.shape[0])
        for block in row_blocks(X.shape[0], BLOCK):
            proj = kernel_matrix(X[block], P, spec) @ R
            resid[block] = diag[block] - np.einsum("ij,ij->i", proj, proj)
    resid[resid <= _RESIDUAL_RTOL * diag] = 0.0
    state = dict(state or {})
    state["kpca_scores"] = resid[row_order(client, state)]
    return state, _score_summary(resid, budget)


# ---------------------------------------------------------------------------
# Server steps


def _leverage_basis(sketches, embedding_dim):
    """disLS, master: QR of [G[1] … G[M]]ᵀ = U Z; returns Z (t × t).

    The sketches are stacked in an order set by their content, so that
    renamed clients give the same Z, bit for bit."""
    stacked = np.hstack(content_sorted(sketches)).T
    Z = np.linalg.qr(stacked, mode="r")
    if Z.shape[0] < embedding_dim:  # fewer sketched points than t
        Z = np.vstack([Z, np.zeros((embedding_dim - Z.shape[0], Z.shape[1]))])
    return Z[:embedding_dim]


def _inclusion_quota(summaries, total, sizes):
    """RepSample, master: split ``total`` draws over clients by the expected
    number of points each would contribute when every point j is drawn with
    probability min(1, c s_j), Σ_j min(1, c s_j) = total over all clients.

    A proportional split of the score sums would give a client holding one
    dominant point nearly every draw, which it can only spend on its small
    points (draws are without replacement), while large points elsewhere go
    unsampled.
    """
    sums = np.array([s for s, _ in summaries])
    tops = [np.asarray(t)[np.asarray(t) > 0] for _, t in summaries]
    # A client's summary lists all its positive scores when it shows fewer
    # than it was asked for (the rest are zero); otherwise it has at least
    # as many as it showed, and at most its size.
    n_positive = np.array(
        [top.size if top.size < min(total, n) else n for top, n in zip(tops, sizes)],
        dtype=np.intp,
    )
    if total >= n_positive.sum():
        # Every point with a positive score is drawn (π_j = 1); zero scores
        # never are, so the pooled scale would be infinite here.
        return n_positive
    pooled = np.sort(np.concatenate(tops))[::-1]
    c = _saturation_scale(pooled, sums.sum(), total)
    expected = np.empty(len(summaries))
    for m, (sum_m, top) in enumerate(zip(sums, tops)):
        saturated = top * c >= 1
        expected[m] = saturated.sum() + c * (sum_m - top[saturated].sum())
    # A client cannot contribute more points than it has with positive score,
    # and its expected count never exceeds that number.
    caps = np.minimum(n_positive, np.ceil(expected - 1e-9)).astype(np.intp)
    return allocate_quota(total, expected, caps)
