"""Federated kernel k-means: the estimator (long for its documentation and
its sizing rules: two protocols' parameters, and the random features', the
sketch's and the coreset's sizes chosen from N, d and M).

Two protocols, each followed by the distributed coreset k-means on the
spectral embedding: the one-shot random-feature statistics (ours, the
default), driven by :func:`run_one_shot` in
:mod:`skfed.cluster._protocols._kernel_kmeans_one_shot`, and the paper's DSPGD
with
the communication efficient mechanism, driven by :func:`run_kernel_kmeans`
in :mod:`skfed.cluster._protocols._kernel_kmeans` with the replay of DSPGD
for new points. Paper: "A Communication Efficient Federated Kernel
k-Means" (ICLR 2021 submission)."""

# Long module: the estimator's documentation and its sizing rules (the
# random features', the sketch's and the coreset's sizes from N, d and M).

import numbers
import warnings
from functools import partial

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    ClusterMixin,
    TransformerMixin,
)
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from .._engine._estimator import FederatedMixin
from .._engine._remote import blockwise, is_dask_collection, is_remote
from .._engine._shared_params import shared_constraints, shared_parameter_docs
from .._engine._validation import StrictInterval, check_magnitude
from .._sklearn_compat import StrOptions
from .._sklearn_compat import fit_context as _fit_context
from ..kernel._embedding import feature_embedding
from ..kernel._private_features import centred_map, private_feature_count
from ..privacy import check_privacy
from ._centers import KMeansCentersMixin
from ._distributed_kmeans import clipped_coreset_options
from ._protocols._kernel_kmeans import (
    CHUNK,
    dspgd_rounds,
    replay_eigenvectors,
    run_kernel_kmeans,
)
from ._protocols._kernel_kmeans_landmarks import (
    landmark_embedding,
    landmark_rounds,
    run_landmarks,
)
from ._protocols._kernel_kmeans_one_shot import one_shot_rounds, run_one_shot

__all__ = ["FederatedKernelKMeans"]

# Largest block of floats one party may allocate for random features (2 GiB
# in float64); beyond it a size parameter is refused before the fit starts.
_MAX_FLOATS = 2**28
# The Gram solver's D x D matrix counts up to this many columns in the guard.
_GRAM_MAX = 2**14
# D of ``n_random_features="auto"``: DSPGD's, and the one-shot's least.
_DEFAULT_FEATURES = 300
# refine_iter="auto": without privacy (the rounds stop early when the
# centers settle), and under it (each round one more release of the
# budget, which fewer rounds leave to each).
_DEFAULT_REFINE_ITER = 20
_PRIVATE_REFINE_ITER = 3
# The share of the raw data's N d floats the one-shot's statistics may take
# when ``"auto"`` raises D above the default (the coreset's rounds add a
# few hundredths more).
_STATISTICS_SHARE = 0.2
# l of ``sketch_size="auto"`` per column of the embedding, and the largest D
# the sketch's budget may take (beyond it the features' n_m d D flops grow
# for no measured gain).
_SKETCH_PER_COMPONENT = 2
_SKETCH_MAX_FEATURES = 2000
# The final coreset k-means' points under coreset_size="auto" (fewer when
# the data has fewer rows).
_AUTO_CORESET_SIZE = 1000
# n_L of ``n_landmarks="auto"``: as many landmarks as the random features'
# default D, so that the statistics' upload is the same.
_DEFAULT_LANDMARKS = 300


def one_shot_features(n_samples, n_features, n_clients):
    """D of the one-shot for ``n_random_features="auto"``.

    300, or more where the clients hold wide data in plenty: the largest
    even D whose statistics, M (D(D+1)/2 + D) floats up, stay within a
    fifth of the raw data's N d, and at most d, so that a client's Gram
    matrix (n_m D² flops) costs no more than its features (n_m d D). One
    map's kernel estimate is what the one-shot lacks against DSPGD's fifty
    on wide data; where the data is narrow or the clients small (digits:
    d = 64) D stays 300.
    """
    # Per client: D² / 2 + 3D / 2 ≤ budget, solved for D.
    budget = _STATISTICS_SHARE * n_samples * n_features / n_clients
    D = min(int((np.sqrt(9.0 + 8.0 * budget) - 3.0) / 2.0), n_features)
    # Even: paired features, whose norm is then exactly 1.
    return max(_DEFAULT_FEATURES, D - D % 2)


def one_shot_sketch(n_samples, n_features, n_clients, sketch_size):
    """D of the sketched one-shot for ``n_random_features="auto"``: the
    largest even D whose sketches, M (D l + D) floats up, stay within a
    fifth of the raw data's N d, between 300 (or l) and 2,000."""
    budget = _STATISTICS_SHARE * n_samples * n_features / n_clients
    D = min(int(budget // (sketch_size + 1)), _SKETCH_MAX_FEATURES)
    return max(_DEFAULT_FEATURES, sketch_size + sketch_size % 2, D - D % 2)


# fit_predict and fit_transform on remote rows whose per-row outputs stay
# where they are.
_KEPT_ON_NODES = (
    "Under raw_rows='refuse' or differential privacy the training rows' "
    "labels and embedding stay on the clients that hold them: fit, then "
    "label or embed each client's rows there with the fitted model's "
    "predict or transform."
)


@shared_parameter_docs("n_jobs", "verbose", "raw_rows", "secure_aggregation", "privacy")
class FederatedKernelKMeans(
    KMeansCentersMixin,
    FederatedMixin,
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
    ClusterMixin,
    BaseEstimator,
):
    """Federated kernel k-means on a spectral embedding of landmark or
    random features: one-shot feature statistics (the default) or DSPGD
    with the communication efficient mechanism (CEM, the paper's).

    Each client keeps its rows; k-means runs on the first ``n_components``
    columns of a spectral embedding H = U Λ^½ of the RBF kernel
    ``exp(-gamma ||x - y||²)``, approximated by random Fourier features, with
    the distributed coreset k-means. The server receives sums of random
    features' Gram matrices (or their products with Lanczos vectors), a few
    scalars and, in the final coreset k-means, weighted rows of H.

    ``algorithm="one_shot"`` (ours): the server draws one map of D
    orthogonal random Fourier features z(x) (a shared seed); each client
    uploads, once, the upper triangle of Z[m]ᵀZ[m] and Z[m]ᵀ1; from their
    sums over the clients the server takes the top s eigenvectors V of the
    features' covariance and sends them; each client forms
    H[m] = (Z[m] − 1 z̄ᵀ) V, the kernel PCA embedding of the random-feature
    kernel. Rounds (per client, in floats): ``"kernel width"`` (d + 2 up,
    only when ``gamma=None``), ``"random feature statistics"`` (down 2: the
    seed and γ; up D(D+1)/2 + D), ``"embedding"`` (down D s + s: V and
    z̄ᵀV), then the coreset k-means below. With landmark features (the
    default on narrow data, see ``features``) the map is z(x) = k(x, L) W
    on the clients' local centers L, which one ``"landmark centers"``
    round gathers first (k_m d up per client); the statistics round is
    ``"landmark feature statistics"`` (down L, W and γ).

    ``algorithm="dspgd"`` (the paper's): fresh random Fourier features
    every iteration; DSPGD converges to the top eigenpairs of the kernel
    matrix at an O(1/t) rate. Per iteration t (all counts per client, in
    floats):

    * ``"random features"``: down 3 (the seed of the shared features, η_t
      and whether the Gram matrix may be summed in float32). With
      ``eigen_solver="gram"`` the client answers with the upper triangle of
      W[m]ᵀW[m]: (D + r_t)(D + r_t + 1)/2 up.
    * ``"lanczos"`` (``eigen_solver="lanczos"``), Q_t times: down
      b (D + r_t) (a block of b = ``lanczos_block_size`` Lanczos vectors
      c), up b (D + r_t) (W[m]ᵀW[m] c for each); the last block of an
      iteration may be narrower.
    * ``"eigenpairs"``: down s_t (D + r_t + 1), the kept eigenvectors of G
      and their shrunk scales.

    Without CEM (``use_cem=False``, the paper's baseline) each Lanczos step
    on the N x N matrix R_t is two rounds, ``"lanczos project"`` (down n_m,
    up D, per vector of the block) and ``"lanczos expand"`` (down D, up
    n_m, per vector), and the server sends
    each client its rows of the embedding at the end (n_m · s down).

    Before the iterations, one ``"kernel width"`` round (d + 2 up, only when
    ``gamma=None``) and one ``"kernel width broadcast"`` (1 down); after
    them ``"embedding"`` (s down). Both algorithms end with the coreset
    k-means on H: its local cost and sampling rounds, up to ``refine_iter``
    ``"lloyd refinement"`` rounds (k·s down, k(s + 1) up each) and the
    labelling round; under ``raw_rows="refuse"`` the one-shot ends instead
    with a k-means that sends no row (see ``raw_rows``).
    :meth:`transform`, :meth:`predict` and :meth:`score` map new points on
    the server (one-shot: with the shared map and V; DSPGD: by replaying
    its recursion) and cost no communication.

    Read more in the :ref:`User Guide <user_guide_kernel_kmeans>`.

    Parameters
    ----------
    n_clusters : int, default=8
        k, the number of clusters.
    gamma : float, default=None
        γ, the RBF kernel width. ``None`` uses the average-distance width
        γ = N² / (2 Σ_ij ‖x_i − x_j‖²), computed from d + 2 floats per
        client (one extra round) without gathering any point.
    n_random_features : int or "auto", default="auto"
        D, random Fourier features: the one map of ``"one_shot"``, whose
        upload is D(D+1)/2 + D floats per client (45,450 at D = 300: less
        than the client's raw rows from n_m d ≥ 45,450 on), or the features
        drawn afresh every DSPGD iteration (with the default ``threshold``
        at least s + 2; each Lanczos step uploads D + r_t floats per
        client, and 100, the paper's figures, lost 0.02-0.03 NMI against
        300 on digits and on a 10,000 x 400 image set). ``"auto"``: 300 for
        DSPGD; for the one-shot, 300 or, where the
        clients hold wide data in plenty, the largest even D with
        M (D(D+1)/2 + D) ≤ N d / 5 (the statistics at most a fifth of the
        raw data's N d floats, M clients) and D ≤ d (the Gram matrix's
        n_m D² flops then cost no more than the features' n_m d D). A
        single map's kernel estimate is what limits the one-shot on wide
        data: on a 5,000 x 784 image set over 10 clients, D = 394 instead
        of 300 raised the NMI of k-means on the embedding from 0.564 to
        0.577 (12 seeds; exact kernel k-means 0.589), the fit's from 0.558
        to 0.562, for statistics of 0.20 instead of 0.12 times the raw
        data. With the sketched statistic (``sketch_size``) ``"auto"`` is
        instead the largest even D with M (D l + D) ≤ N d / 5, between 300
        and 2,000. Under ``privacy`` it follows the noise instead: the
        largest even D up to 300 with 2 √D σ ≤ N / 15, σ the noise of the
        summed Gram triangle's entries (smaller with
        ``secure_aggregation``'s distributed noise), and at least s + 2:
        beyond it the noise's spectral norm buries the components. The D
        used is ``n_random_features_``. See the user guide for the
        one-shot's quality and upload against D.
    sketch_size : int, "auto" or None, default="auto"
        l, the columns of the one-shot's sketched statistic (``"one_shot"``
        only). None: every client uploads the upper triangle of its
        random-feature Gram matrix, D(D+1)/2 + D floats. An int: it uploads
        instead the sketch Z[m]ᵀ(Z[m] Ω) of that Gram matrix against a
        shared D x l Gaussian test matrix Ω drawn from the map's seed, and
        Z[m]ᵀ1, D l + D floats (still one sum-only round), and the server
        takes the top eigenvectors of the Nyström approximation of the
        summed, centred Gram matrix (exact when its rank is at most l).
        The sketched features are taken around the global mean x̄, which
        one more sum-only round gives (n_m and Σ x, d + 1 floats up per
        client): around a fixed point, a translation of the data would
        rotate the features against Ω and so change the draw.
        At least ``n_components`` (s), else ``fit`` raises; above
        ``n_random_features`` (D) it is clipped to D with a warning (a
        sketch of D columns is exact). For the same floats the sketch
        affords a larger D, and one map's kernel estimate is what limits
        the one-shot on wide data: on a 5,000 x 784 image set over 10
        clients, D = 1,284 with l = 60 instead of the triangle's D = 394,
        for the same floats, raised the fit's NMI from 0.560 to 0.580 (3
        seeds; exact kernel k-means 0.589). ``"auto"``: the sketch with l = 2s where
        the clients hold wide data in plenty (where the triangle's
        ``"auto"`` D would exceed 300 and the sketch's budget allows a
        larger D), the triangle otherwise (digits, wine, low-dimensional
        data: unchanged models). Under ``privacy`` the triangle is kept
        (its noise's sensitivities are known); an int there raises
        ``ValueError``. The l used is ``sketch_size_``.
    n_components : int, default=None
        s, the spectral dimension clustered by k-means. With landmark
        features None keeps the fewest leading components that hold 90% of
        the features' variance, at least 3k and at most 100 (kernel k-means
        clusters in the whole feature space: s = 6 lost two rings that
        s = 10 found). With random features None means
        min(3k, D − 2) (at least k): the paper's s = k caps the clustering
        at exact spectral clustering with k dimensions and, with DSPGD's
        noise, fell 0.01-0.03 NMI below it; with s = 3k the fit matched or
        beat it on digits and on a 10,000-row image set, where s = 2k still
        fell 0.012 short (see the user guide). At most
        ``n_random_features``; the upload grows with s.
    algorithm : {"auto", "one_shot", "dspgd"}, default="auto"
        ``"one_shot"`` (ours): one upload of random-feature statistics per
        client, summed by the server, then the coreset k-means.
        ``"dspgd"``: the paper's iterations (``max_iter``, ``tol``,
        ``threshold``, ``step_size``, ``use_cem``, ``eigen_solver``,
        ``eigen_tol`` and ``lanczos_block_size`` apply to it only).
        ``"auto"`` takes ``"dspgd"`` when an option only DSPGD has asks for
        it (``use_cem=False``, or ``eigen_solver`` ``"lanczos"`` or
        ``"gram"``), ``"one_shot"`` otherwise (see the user guide for the
        comparison). The algorithm used is ``algorithm_``.
    features : {"auto", "landmarks", "random"}, default="auto"
        The one-shot's feature map z(x). ``"landmarks"`` (ours): Nyström
        features z(x) = k(x, L) W on landmarks L made of the clients' local
        k-means centers (k-FED's local step, one per-client round
        ``"landmark centers"``, k_m d floats up; a local cluster of fewer
        than two distinct rows is merged into its nearest before the
        upload, so no center is a row), W = U Λ^{-½}
        of K_LL = k(L, L); then the same sum-only statistics round
        (``"landmark feature statistics"``: down L, its mean, W and γ, up
        D(D+1)/2 + D). ``"random"``: D random Fourier features of a shared
        seed. ``"auto"`` takes the landmarks for the one-shot unless
        ``privacy`` is set (the centers carry no noise: the random features
        are the private path), ``n_random_features`` or ``sketch_size`` is
        given, or the clients hold wide data in plenty (where
        ``n_random_features="auto"`` would raise D above 300: the sketched
        random features are kept there). Random features follow the kernel
        evenly over the space and miss what a narrow kernel shows: on two
        rings at γ = 10 (5 clients) the landmarks scored NMI 1.000 as exact
        kernel k-means, the random features 0.576 (3 seeds). DSPGD uses
        random features only; ``"landmarks"`` with it, with an int
        ``sketch_size`` or under ``privacy`` raises ``ValueError``. The map
        used is ``features_``.
    n_landmarks : int or "auto", default="auto"
        n_L, the landmarks asked for over all clients
        (``features="landmarks"``): each client computes ⌈n_L / M⌉ local
        centers, at most half its rows. ``"auto"``: 300. The map has one
        feature per pair of K_LL above round-off, D ≤ n_L
        (``n_random_features_``); the landmarks used are ``landmarks_``.
    max_iter : int, default=50
        T, the DSPGD iterations (the budget; see ``tol``).
    tol : float, default=0.0
        Stop before T when each of the first s kernel-eigenvalue estimates
        moved by at most ``tol`` times its own value in the last iteration
        (a ``ConvergenceWarning`` when T is reached first). 0 runs all T
        iterations, as the paper does: with η_t = 1/t the estimates move by
        about 1/t of their noise per iteration (0.5-1% per iteration at
        t = 50 on digits), so a relative tolerance met early would stop a
        subspace that is still improving (sin² of the largest principal
        angle to the exact top-10 eigenvectors on digits: 0.11-0.15 at
        t = 18, 0.02-0.10 at t = 50).
    threshold : float, default=None
        λ, the soft threshold of the proximal step. ``None`` sets it to the
        (s+2)-th largest eigenvalue of G at t = 1 (the paper's (k+2)-th,
        generalised: with s > k pairs wanted, the paper's λ would let at
        most k + 1 survive). Only eigenpairs above λ survive; when fewer
        than s do, the embedding has fewer columns (a ``ConvergenceWarning``
        says so).
    step_size : {"1/t", "2/(t+1)"}, default="1/t"
        η_t, the learning-rate rule; both give η_1 = 1 and 0 < η_t ≤ 1.
    use_cem : bool, default=True
        Solve the eigen-problems on the (D + r_t)-sized G (CEM). ``False``
        runs the paper's baseline, Lanczos on the N x N matrix R_t, whose
        upload grows with N: for comparison only.
    eigen_solver : {"auto", "lanczos", "gram"}, default="auto"
        DSPGD's eigen-solver (the one-shot sums Gram matrices once, as
        ``"gram"`` does every iteration). ``"lanczos"``: distributed (block)
        Lanczos with full reorthogonalisation, one round per block of
        ``lanczos_block_size`` products (the paper's). ``"gram"``: every
        client uploads the triangle of W[m]ᵀW[m] once per iteration, one
        round and (D + r)(D + r + 1)/2 floats up; requires ``use_cem=True``.
        ``"auto"`` (ours) takes the one expected to exchange fewer floats
        per iteration, up and down: ``"gram"`` when D + s + 1 ≤ 4 P, with
        P = 4 (s + 2) products expected of Lanczos (2 (s + 2) with
        ``lanczos_block_size=1``; measured 3.4 (s + 2) and 4.6 (s + 2) with
        blocks of 8, 1.9 (s + 2) and 2 (s + 2) with single vectors, for
        s = 30 and s = 6). With D = 300 that is ``"gram"`` from s = 18 (the
        default s = 3k from k = 6); without CEM always ``"lanczos"``. The
        solver used is ``eigen_solver_``.
    eigen_tol : float, default=1e-4
        Relative residual tolerance of a converged Lanczos Ritz pair, relative
        to that pair's own Ritz value: the s-th eigenvalue converges to the
        same relative accuracy as the first (measured against the largest,
        as before, the s-th of digits' kernel matrix, 50-90 times smaller,
        could stop unconverged and lose its direction).
    lanczos_block_size : int, default=8
        b, the Lanczos vectors sent in one round (block Lanczos; ours, the
        paper sends one). A block of b cuts the rounds about b/2 to b/4
        times and costs more products in all, each uploaded: on the
        benchmark blobs (k = 10) b = 8 made 4.0 times fewer rounds than
        b = 1 and uploaded 1.8 times the floats (1.4 times with b = 4),
        with the same labels; on two rings (k = 2, fewer pairs wanted) 3.5
        times fewer rounds for 2.3 times the floats. Over 1,000 small
        clients the simulated fit ran twice as fast (each round reads every
        client's features once for b products). 1 is the paper's
        single-vector Lanczos. See the user guide for choosing it.
    coreset_size : int or "auto", default="auto"
        Points drawn over all clients by the final coreset k-means.
        ``"auto"`` draws 1000, or every row when the data has fewer. An int
        larger than the data is clipped to it, with a warning.
    n_init : int or "auto", default="auto"
        Restarts of the server's weighted k-means on the coreset (under
        ``raw_rows="refuse"``, on the pooled local centers). With the
        coreset, the clients' rows decide between the restarts' distinct
        solutions: each client uploads its cost under each (one sum-only
        round ``"coreset candidate costs"``, at most ``n_init`` floats up
        and ``n_init`` k·s down). ``"auto"``: 50 where the server's k-means
        is small (k·s at most 1,000, s the embedding's columns), 10 where
        its restarts cost more and matter less (k = 50 on 100 components,
        20,000 rows: 1.95 s a fit with 50 restarts, 1.05 s with 10), and
        10 on the pooled local centers under ``raw_rows="refuse"``. On
        two moons at γ = 10 (12 seeds, 5 clients, k·s = 58) the restarts
        found the moons more often as they grew: NMI 0.43 with 10, 0.55
        with 30, 0.62 with 50 (exact kernel k-means, 10 restarts on the
        whole kernel matrix: 0.61); a fit on digits took 0.22 s with 50
        and 0.12 s with 10 (busy machine).
    refine_iter : int or "auto", default="auto"
        Most distributed Lloyd rounds on H after the coreset solution, or
        under ``raw_rows="refuse"`` after the merged local centers (each
        k·s floats down and k(s + 1) up per client); they stop when the
        centers stop moving (the coreset's tolerance). Without them the
        coreset solution ended 1.8-2.7% above KMeans(n_init=10)'s cost on
        the same embedding (digits, a 10,000-row image set), with them 0.3%.
        ``"auto"``: 20, and 3 under ``privacy``, where each round is one
        more noised release of the budget and runs without early stop.
    random_state : int, RandomState instance or None, default=None
        Seeds the random features, the Lanczos start vectors, the coreset and
        the partition when ``partitions`` is an int. Under ``privacy`` with a
        finite epsilon the noise does not follow it (each client draws it
        from fresh entropy), so a private fit is not reproducible.
    n_jobs : int, default=None

    verbose : int, default=0
        2 also prints one line per DSPGD iteration (``algorithm="dspgd"``).

    raw_rows : {"allow", "refuse"}, default="allow"
        Without ``privacy``, the coreset step uploads rows of the spectral
        embedding H, from which the server (which drew the map and computed
        the components) solves for the rows of X; the ledger counts such
        rows as raw rows when the embedding has at least as many columns as
        X. "refuse" clusters H without them (the one-shot, with landmark or
        random features): round ``"local centers"``, each client's k-FED
        local centers of its rows of H and their sizes (k_m <=
        min(k, n_m - 1), as :class:`~skfed.DistributedKMeans` under
        refusal), merged by the server's weighted k-means (``n_init``
        restarts); then up to ``refine_iter`` rounds ``"lloyd refinement"``
        on the clients' summed per-cluster statistics of H, until the
        centers settle; then ``"cluster map"``, after which the clients
        keep their labels. A sum of n rows of H is s equations in the n d
        unknowns of their rows of X, so every local center and cluster sum
        a client sends comes from more than s / d distinct rows (at least
        two): a smaller local cluster is merged into its nearest on the
        client, a smaller cluster sum is left out of its upload.
        ``coreset_size`` plays no part. The earlier rounds keep their own
        minimums (a client of fewer distinct rows than the map's D features
        refuses the statistics round, ``ValueError``). DSPGD keeps its
        coreset: ``ValueError`` before the first round. With ``privacy`` no
        embedded row is sent and "refuse" fits.

    secure_aggregation : bool, default=False
        Masked here: the summed Gram
        triangles or Lanczos products, the baseline's projections, the
        coreset's Lloyd sums and total cost (under ``raw_rows="refuse"``
        the Lloyd rounds' sums: the local centers are per-client uploads),
        and the kernel width
        (``gamma=None``), then in two rounds of sums (the global mean, then
        the spread around it) instead of each client's moments.

    privacy : :class:`~skfed.privacy.DifferentialPrivacy` or None, \
            default=None
        Needs ``algorithm="one_shot"``
        (``"auto"`` takes it) and an explicit ``gamma``; ``ValueError``
        otherwise. Each client clips its random features to their norm
        bound R (‖z(x)‖ ≤ 1 for even D: a bound from D, not from the data,
        so ``privacy.bounds`` is not needed) and adds Gaussian noise, on
        the client, to the triangle of Z[m]ᵀZ[m] (replace-one L2
        sensitivity R √(R² + 2/D)) and to Z[m]ᵀ1 (2R), the public n_m
        following unnoised; the server mirrors the noised triangle. The
        coreset k-means, whose clients upload rows of H, is replaced by a
        private Lloyd on G = H + z̄ᵀV = Z V (rows of norm at most R): one
        ``"private cells"`` round (noised per-cell sums and counts against
        many server-drawn cells, whose noised means the server clusters)
        and exactly ``refine_iter`` ``"private lloyd"`` rounds (noised
        per-cluster sums and counts, sensitivity max(2R, √(2(R² + 1))); no
        early stop). Every upload is noised: 3 + ``refine_iter`` Gaussian
        releases per client, composed by the accountant
        (``privacy_spent_``); fewer Lloyd rounds leave more budget, hence
        less noise, for each. ``inertia_`` is NaN (it would
        be one more release).

    Attributes
    ----------
    algorithm_ : {"one_shot", "dspgd"}
        The algorithm used (``algorithm``, or what ``"auto"`` chose).
    features_ : {"landmarks", "random"}
        The feature map used (``features``, or what ``"auto"`` chose).
    landmarks_ : ndarray of shape (`n_landmarks_`, n_features)
        L, the pooled local centers (``features_ == "landmarks"`` only).
    n_landmarks_ : int or None
        Landmarks used; None with random features.
    labels_ : ndarray of shape (n_samples,)
        Cluster of each training sample (kept by its client; assembled here).
        Under ``raw_rows="refuse"`` or differential privacy the clients keep
        their labels and embedding: rows held in this process are labelled
        and embedded here with the fitted model (:meth:`predict` and the
        replayed embedding), and for rows held elsewhere (dask, Flower)
        neither ``labels_`` nor ``embedding_`` is set.
    cluster_centers_ : ndarray of shape (n_clusters, `n_components_`)
        Centers in the spectral space of ``embedding_``.
    embedding_ : ndarray of shape (n_samples, `n_components_`)
        H = U Λ^½ of the training samples: each client's rows stay on that
        client and are assembled here for the user, never communicated
        (except as coreset rows). See ``labels_`` for ``raw_rows="refuse"``
        and differential privacy.
    eigenvalues_ : ndarray of shape (`n_components_`,)
        Estimated top eigenvalues of the kernel matrix: μ_i + (1 − η_T) λ
        (DSPGD), those of the features' covariance C (one-shot: estimates
        of the centred kernel matrix's).
    eigenvalue_history_ : list of ndarray
        Estimated kernel eigenvalues of every kept pair, per iteration
        (one-shot: ``[eigenvalues_]``).
    n_components_ : int
        Columns of the embedding actually used (s, or fewer when fewer
        eigenvalues stand above the threshold, or above round-off).
    ranks_ : ndarray of shape (`n_iter_`,)
        r_t, the rank of Z_t at the start of each iteration (r_1 = 0;
        one-shot: ``[0]``).
    eigen_solver_ : {"lanczos", "gram"}
        The eigen-solver used (``eigen_solver``, or what ``"auto"`` chose;
        ``"gram"`` for the one-shot).
    lanczos_steps_ : ndarray of shape (`n_iter_`,)
        Q_t, Lanczos rounds per iteration (each a block of up to
        ``lanczos_block_size`` products); 0 with ``"gram"`` and one-shot.
    gamma_ : float
        The kernel width used.
    n_random_features_ : int
        D, the random features used (``n_random_features``, or what
        ``"auto"`` chose); with landmark features, the map's columns.
    sketch_size_ : int or None
        l, the sketch's columns used (``sketch_size``, or what ``"auto"``
        chose); None when the triangle was uploaded (and for DSPGD).
    threshold_ : float
        The threshold λ used (0.0 for the one-shot, which has none).
    n_iter_ : int
        DSPGD iterations run (1 for the one-shot).
    inertia_ : float
        Sum of squared distances of the embedded samples to their centers
        (NaN under ``privacy``).
    n_refine_iter_ : int
        Distributed Lloyd rounds run (at most ``refine_iter``; all of them
        under ``privacy``).
    n_clients_ : int
        Number of clients.
    communication_ : CommunicationLog
        Everything that crossed the simulated network.
    privacy_spent_ : tuple (epsilon, delta) or None
        What the fit's noised releases spent, from the accountant; None
        without ``privacy``.
        With ``secure_aggregation=True`` the masked releases are noised in
        shares (distributed noise), and the figure holds as long as at least
        ``privacy.honest_clients`` clients of each masked sum keep their
        shares from the server (see :class:`~skfed.privacy.DifferentialPrivacy`).
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during fit, when they are all strings.

    See Also
    --------
    skfed.DistributedKMeans : The coreset k-means run on the embedding.
    sklearn.cluster.SpectralClustering : A centralized spectral method.

    Notes
    -----
    What crosses the wire, one-shot: the server needs only the sums over
    clients of Z[m]ᵀZ[m] and Z[m]ᵀ1 (under secure aggregation it learns
    nothing else from that round; without it, each client's Gram matrix of
    the random features, which DSPGD's ``"gram"`` solver sends every
    iteration); then, as with DSPGD, rows of H in the coreset step (under
    ``raw_rows="refuse"`` local centers of H, each of more than s / d
    distinct rows, and per-cluster sums).

    DSPGD: the server learns W[m]ᵀW[m] c for every Lanczos
    vector c, which is W[m]ᵀW[m] itself once D + r_t independent vectors
    were sent in one iteration (blocks send more vectors per iteration, so
    the server learns it on a larger subspace; the ``"gram"`` solver sends
    it outright);
    for a client with a single sample that reveals its random features at
    that iteration, and the server knows the map (it sent the seed).
    The coreset step uploads rows of H and the Lloyd rounds per-cluster sums
    of H and counts. None of this is differentially private unless
    ``privacy`` is set, which noises every upload as described there.

    :meth:`transform` of the one-shot is (z(x) − z̄) V, the clients' own
    computation, from the seed, z̄ᵀV and V the server sent. For DSPGD it is
    our out-of-sample extension (the paper has none): the embedding after
    iteration t is linear in that iteration's random
    features and in the previous embedding, through matrices the server
    computed and sent, so the server replays the T iterations for new
    points. On the training samples it reproduces ``embedding_``, and
    :meth:`predict` (nearest center in H) reproduces ``labels_``. The cost
    is T random-feature maps per point: O(T D (d + r)) flops.

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from skfed import FederatedKernelKMeans
    >>> X, _ = make_blobs(200, centers=3, random_state=0)
    >>> km = FederatedKernelKMeans(
    ...     n_clusters=3, n_random_features=20, random_state=0
    ... ).fit(X, partitions=4)
    >>> km.algorithm_, km.labels_.shape, km.embedding_.shape
    ('one_shot', (200,), (200, 9))
    """

    # The one-shot statistics and each DSPGD eigen-solver round upload a
    # client's packed Gram matrix of its D random features, (D + r)(D + r +
    # 1)/2 floats whatever its rows: from a worker process every upload
    # comes back as a copy. N = 10,000 over
    # 1,000 clients: 56 s of a 61 s two-worker fit copying 2.8 billion
    # floats, against 18 s for the whole fit in this process.
    _clients_in_processes = False

    # DSPGD clusters with the coreset k-means, which samples rows of the
    # spectral embedding h(x); the server drew the maps and computed the
    # components, so it solves h for x (to 3e-7 on 4-feature blobs, s = 9).
    # The one-shot under raw_rows="refuse" clusters by sums only.
    _raw_rows_alternative = (
        "DSPGD clusters its spectral embedding with the coreset k-means, "
        "whose sampled embedded rows let the server, which made the "
        "embedding, solve for rows of X. Use algorithm='one_shot' (what "
        "'auto' takes without DSPGD-only options): under raw_rows='refuse' "
        "it clusters the embedding from local centers and Lloyd rounds' "
        "sums, each of several distinct rows, and sends no row. Or fit with "
        "privacy=DifferentialPrivacy(...)."
    )

    def _rounds(self):
        # Under privacy the clustering step is the private Lloyd, whose
        # noised sums are no embedded rows; under raw_rows="refuse" without
        # it the row-free k-means (local centers, then Lloyd sums). A
        # sketch_size of "auto", decided by the data's shape, is listed as
        # the triangle's round (both are sum-only, and neither is refused).
        common = {
            "gamma": self.gamma,
            "secure_aggregation": self.secure_aggregation,
            "refine_iter": self._refine_iter(),
        }
        row_free = self.raw_rows == "refuse" and self.privacy is None
        if self._features() == "landmarks":
            return landmark_rounds(row_free=row_free, **common)
        if self._algorithm() == "one_shot":
            return one_shot_rounds(
                sketch=isinstance(self.sketch_size, numbers.Integral),
                private=self.privacy is not None,
                row_free=row_free,
                **common,
            )
        return dspgd_rounds(
            use_cem=self.use_cem, eigen_solver=self._eigen_solver(), **common
        )

    _parameter_constraints: dict = {
        "n_clusters": [StrictInterval(numbers.Integral, 1, None, closed="left")],
        "gamma": [StrictInterval(numbers.Real, 0, None, closed="neither"), None],
        "n_random_features": [
            StrictInterval(numbers.Integral, 1, None, closed="left"),
            StrOptions({"auto"}),
        ],
        "sketch_size": [
            StrictInterval(numbers.Integral, 1, None, closed="left"),
            StrOptions({"auto"}),
            None,
        ],
        "n_components": [
            StrictInterval(numbers.Integral, 1, None, closed="left"),
            None,
        ],
        "algorithm": [StrOptions({"auto", "one_shot", "dspgd"})],
        "features": [StrOptions({"auto", "landmarks", "random"})],
        "n_landmarks": [
            StrictInterval(numbers.Integral, 1, None, closed="left"),
            StrOptions({"auto"}),
        ],
        "max_iter": [StrictInterval(numbers.Integral, 1, None, closed="left")],
        "tol": [StrictInterval(numbers.Real, 0, None, closed="left")],
        "threshold": [StrictInterval(numbers.Real, 0, None, closed="left"), None],
        "step_size": [StrOptions({"1/t", "2/(t+1)"})],
        "use_cem": ["boolean"],
        "eigen_solver": [StrOptions({"auto", "lanczos", "gram"})],
        "eigen_tol": [StrictInterval(numbers.Real, 0, 1, closed="neither")],
        "lanczos_block_size": [
            StrictInterval(numbers.Integral, 1, None, closed="left")
        ],
        "coreset_size": [
            StrictInterval(numbers.Integral, 1, None, closed="left"),
            StrOptions({"auto"}),
        ],
        "n_init": [
            StrictInterval(numbers.Integral, 1, None, closed="left"),
            StrOptions({"auto"}),
        ],
        "refine_iter": [
            StrictInterval(numbers.Integral, 0, None, closed="left"),
            StrOptions({"auto"}),
        ],
        "random_state": ["random_state"],
        **shared_constraints(
            "n_jobs", "verbose", "raw_rows", "secure_aggregation", "privacy"
        ),
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        gamma=None,
        n_random_features="auto",
        sketch_size="auto",
        n_components=None,
        algorithm="auto",
        features="auto",
        n_landmarks="auto",
        max_iter=50,
        tol=0.0,
        threshold=None,
        step_size="1/t",
        use_cem=True,
        eigen_solver="auto",
        eigen_tol=1e-4,
        lanczos_block_size=8,
        coreset_size="auto",
        n_init="auto",
        refine_iter="auto",
        random_state=None,
        n_jobs=None,
        verbose=0,
        raw_rows="allow",
        secure_aggregation=False,
        privacy=None,
    ):
        self.n_clusters = n_clusters
        self.gamma = gamma
        self.n_random_features = n_random_features
        self.sketch_size = sketch_size
        self.n_components = n_components
        self.algorithm = algorithm
        self.features = features
        self.n_landmarks = n_landmarks
        self.max_iter = max_iter
        self.tol = tol
        self.threshold = threshold
        self.step_size = step_size
        self.use_cem = use_cem
        self.eigen_solver = eigen_solver
        self.eigen_tol = eigen_tol
        self.lanczos_block_size = lanczos_block_size
        self.coreset_size = coreset_size
        self.n_init = n_init
        self.refine_iter = refine_iter
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.raw_rows = raw_rows
        self.secure_aggregation = secure_aggregation
        self.privacy = privacy

    def _check_private_fit(self):
        """Refuse, before any round, what differential privacy cannot cover
        in this estimator, saying what to use instead."""
        if check_privacy(self.privacy) is None:
            return
        if self._algorithm() == "dspgd":
            raise ValueError(
                "FederatedKernelKMeans cannot fit algorithm='dspgd' under "
                "differential privacy: its Lanczos rounds are data-dependent "
                "products whose number is not known before the fit. Use "
                "algorithm='one_shot' (one noised upload of random-feature "
                "statistics, then a private Lloyd), with use_cem=True and "
                "eigen_solver='auto'."
            )
        if self.sketch_size not in (None, "auto"):
            raise ValueError(
                f"sketch_size={self.sketch_size} cannot be used under "
                "differential privacy: the noise is calibrated to the "
                "sensitivities of the Gram matrix's triangle, not to a "
                "sketch's. Pass sketch_size=None (or 'auto', which takes "
                "the triangle under privacy)."
            )
        if self.features == "landmarks":
            raise ValueError(
                "features='landmarks' cannot be used under differential "
                "privacy: its landmarks are the clients' local centers, "
                "uploaded without noise. Pass features='random' (or 'auto', "
                "which takes the random features under privacy)."
            )
        if self.gamma is None:
            raise ValueError(
                "FederatedKernelKMeans under differential privacy needs an "
                "explicit gamma: the default kernel width is computed from "
                "the clients' means and spreads, statistics of the private "
                "rows. Pass gamma, e.g. 1 / (2 sigma**2) for a typical "
                "distance sigma between samples known from the domain (or "
                "from public data)."
            )

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, *, partitions=None):
        """Cluster ``X`` held by the clients given in ``partitions``.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training samples (CSR accepted: only products with X are needed).
        y : Ignored
            Not used, present for API consistency.
        partitions : None, int or array-like of shape (n_samples,), \
                default=None
            Client of each sample; an int splits uniformly at random into
            that many clients; ``None`` is one client (centralized DSPGD).

        Returns
        -------
        self : object
            Fitted estimator.
        """
        if is_remote(X):
            X, _, partitions = self._remote_fit_input(X, None, partitions)
        else:
            X = self._validated(X, reset=True)
        self._check_private_fit()
        n_samples = X.shape[0]
        algorithm = self._algorithm()
        rng = check_random_state(self.random_state)
        fed = self._federation(X, None, partitions, random_state=rng)
        # N, d and M are public protocol metadata: the rule needs no round.
        features = self._features(n_samples, X.shape[1], fed.n_clients)
        sketch = None
        if features == "random":
            sketch = self._sketch_size(n_samples, X.shape[1], fed.n_clients)
        D = self._n_random_features(
            n_samples, X.shape[1], fed.n_clients, sketch, self._summed_noise(fed)
        )
        if sketch is not None and sketch > D:
            # As Nystroem clips its components to the rows: a sketch of D
            # columns is already exact, more would only cost.
            warnings.warn(
                f"sketch_size={sketch} exceeds n_random_features={D}, and a "
                f"sketch of D columns is already exact: sketch_size={D} was "
                "used.",
                UserWarning,
                stacklevel=2,
            )
            sketch = D
        self._check_sizes(n_samples, D, sketch)
        self.n_random_features_ = D
        self.sketch_size_ = sketch
        if self.privacy is None:
            coreset_size, n_init = self._coreset_sizes(n_samples)
        else:
            # No coreset under privacy; n_init restarts the server's
            # k-means on the private cells (at least its own minimum).
            coreset_size, n_init = self.coreset_size, self.n_init
            if n_init == "auto":
                n_init = 1
            if coreset_size == "auto":
                coreset_size = _AUTO_CORESET_SIZE
        # What every protocol of the fit takes alike.
        shared = {
            "n_clusters": self.n_clusters,
            "random_state": rng,
            "coreset_size": coreset_size,
            "n_init": n_init,
            "gamma": self.gamma,
            "refine_iter": self._refine_iter(),
        }

        def run(protocol, **options):
            with fed:
                return fed.run_protocol(
                    partial(protocol, fed, **shared, **options), random_state=rng
                )

        if features == "landmarks" or algorithm == "one_shot":
            if features == "landmarks":
                self.n_random_features_ = None
                result = run(
                    run_landmarks,
                    n_components=self.n_components,
                    n_landmarks=self._n_landmarks(),
                )
            else:
                result = run(
                    run_one_shot,
                    n_components=self._s(D),
                    n_random_features=D,
                    sketch_size=sketch,
                )
            self._set_one_shot_attributes(result, fed, features=features)
            self._label_rows_held_here(X, fed)
            self._record_privacy(fed)
            return self
        eigen_solver = self._eigen_solver(D)
        result = run(
            run_kernel_kmeans,
            n_components=self._s(D),
            n_random_features=D,
            threshold=self.threshold,
            step_size=self.step_size,
            max_iter=self.max_iter,
            tol=self.tol,
            eigen_solver=eigen_solver,
            eigen_tol=self.eigen_tol,
            lanczos_block_size=self.lanczos_block_size,
            use_cem=self.use_cem,
            verbose=self.verbose,
        )
        self._set_common_attributes(result, fed)
        self.algorithm_ = "dspgd"
        self.features_ = "random"
        self.n_landmarks_ = None
        self.threshold_ = result.threshold
        self.n_iter_ = len(result.eigenvalue_history)
        self.ranks_ = result.ranks
        self.eigen_solver_ = eigen_solver
        self.lanczos_steps_ = result.lanczos_steps
        self.eigenvalue_history_ = result.eigenvalue_history
        # What the server sent the clients, kept to replay the recursion for
        # new points (transform, predict, score): no extra communication.
        self._replay = result.replay
        self._scales = result.scales
        self._label_rows_held_here(X, fed)
        self._record_privacy(fed)
        return self

    def _label_rows_held_here(self, X, fed):
        """``labels_`` and ``embedding_`` when the clients kept theirs
        (``raw_rows="refuse"``, privacy: one value per row never leaves a
        client): rows held in this process are embedded and labelled here
        with the fitted model; rows elsewhere are not (neither attribute is
        set; label them where they are with ``predict``)."""
        if fed.per_row_allowed or is_remote(X):
            return
        self.embedding_ = self._embed(X).astype(fed.dtype, copy=False)
        self.labels_ = self.predict(X).astype(np.intp, copy=False)

    def _set_one_shot_attributes(self, result, fed, features="random"):
        self._set_common_attributes(result, fed)
        self.algorithm_ = "one_shot"
        self.features_ = features
        # DSPGD's per-iteration attributes, for the one pass over the data.
        self.threshold_ = 0.0
        self.n_iter_ = 1
        self.ranks_ = np.zeros(1, dtype=np.intp)
        self.eigen_solver_ = "gram"
        self.lanczos_steps_ = np.zeros(1, dtype=np.intp)
        self.eigenvalue_history_ = [result.eigenvalues]
        # What the server sent the clients (the map's seed or landmarks, V
        # and z̄ᵀV), kept to map new points as the clients did: no
        # communication.
        if features == "landmarks":
            self.landmarks_ = result.landmarks
            self.n_landmarks_ = result.landmarks.shape[0]
            self.n_random_features_ = result.whitening.shape[1]
            self._landmark_map = (
                result.landmarks - result.center,
                result.center,
                result.whitening,
                result.basis,
                result.shift,
            )
            return
        self.n_landmarks_ = None
        self._one_shot_map = (result.seed, result.basis, result.shift, result.center)

    def _set_common_attributes(self, result, fed):
        self.gamma_ = result.gamma
        self.eigenvalues_ = result.eigenvalues
        self.n_components_ = len(result.eigenvalues)
        if result.labels is None:  # kept on the clients
            self.__dict__.pop("labels_", None)
            self.__dict__.pop("embedding_", None)
        else:
            self.labels_ = result.labels.astype(np.intp, copy=False)
            self.embedding_ = result.embedding.astype(fed.dtype, copy=False)
        self.cluster_centers_ = result.coreset.cluster_centers.astype(
            fed.dtype, copy=False
        )
        self.inertia_ = float(result.coreset.inertia)
        self.n_refine_iter_ = int(result.coreset.n_refine_iter)
        self.n_clients_ = len(result.client_ids)
        self.communication_ = fed.log

    def _coreset_sizes(self, n_samples):
        """coreset_size and n_init clipped to the embedding's rows."""
        return clipped_coreset_options(self, n_samples, _AUTO_CORESET_SIZE)

    def _check_sizes(self, n_samples, D, sketch_size=None):
        """Reject sizes the algorithm cannot serve, saying what to change."""
        k = self.n_clusters
        if self.features == "landmarks":
            if self._algorithm() != "one_shot":
                raise ValueError(
                    "features='landmarks' is an option of the one-shot "
                    "solver; pass algorithm='one_shot' (or 'auto' with its "
                    "defaults), or features='random' for DSPGD."
                )
            if self.sketch_size not in (None, "auto"):
                raise ValueError(
                    f"sketch_size={self.sketch_size} sketches random "
                    "features' statistics; pass sketch_size='auto' (or None) "
                    "with features='landmarks', or features='random'."
                )
        if self.sketch_size not in (None, "auto"):
            if self._algorithm() != "one_shot":
                raise ValueError(
                    f"sketch_size={self.sketch_size} is an option of the "
                    "one-shot solver; pass algorithm='one_shot' (or 'auto' "
                    "with its defaults), or sketch_size=None for DSPGD."
                )
            s = self._s(D)
            if sketch_size < s:
                raise ValueError(
                    f"sketch_size={sketch_size} must be at least "
                    f"n_components={s}: the sketch has rank at most l. Pass "
                    f"a sketch_size of {s} or more (at most "
                    f"n_random_features={D}), a smaller n_components, or "
                    "None for the triangle."
                )
        # A client holds a block of up to CHUNK rows of D (or D') random
        # features, the server a D x D Gram matrix: refuse sizes that would
        # allocate gigabytes instead of trying (10**7 features asked for
        # hundreds of GiB).
        rows = min(n_samples, CHUNK)
        floats = D * max(rows, min(D, _GRAM_MAX))
        if floats > _MAX_FLOATS:
            raise ValueError(
                f"n_random_features={D} would allocate "
                f"{8 * floats / 2**30:.0f} GiB per client or on the server; "
                "use a few hundred to a few thousand random features."
            )
        if k > n_samples:
            raise ValueError(
                f"n_samples={n_samples} should be >= n_clusters={k}; ask for "
                "fewer clusters or pass more samples."
            )
        s = self._s(D)
        dspgd = self._algorithm() == "dspgd"
        if dspgd and self.threshold is None and D < s + 2:
            raise ValueError(
                f"n_random_features={D} must be at least n_components + 2 = "
                f"{s + 2} (n_components={s}): the default threshold is the "
                "(s+2)-th eigenvalue of the D-dimensional random-feature Gram "
                "matrix. Raise n_random_features, lower n_components or pass "
                "a float threshold."
            )
        if self.gamma is None and n_samples < 2:
            raise ValueError(
                f"n_samples={n_samples}: the default (average-distance) kernel "
                "width needs at least two distinct samples; pass gamma."
            )
        if s > D:
            raise ValueError(
                f"n_components={s} exceeds n_random_features={D}: the "
                f"random-feature estimate of the kernel has rank at most {D}. "
                "Raise n_random_features or lower n_components."
            )
        if self.algorithm == "one_shot" and not self.use_cem:
            raise ValueError(
                "use_cem=False runs the paper's N x N baseline of DSPGD; pass "
                "algorithm='dspgd' (or 'auto') with it, or leave use_cem=True "
                "for the one-shot."
            )
        if not self.use_cem and self.eigen_solver == "gram":
            raise ValueError(
                "eigen_solver='gram' needs use_cem=True: without CEM the "
                "matrix is N x N and only Lanczos applies."
            )

    def _refine_iter(self):
        """``refine_iter``, or the one ``"auto"`` chooses: 20, and 3 under
        privacy, where every round is one more release of the budget."""
        if self.refine_iter != "auto":
            return self.refine_iter
        return _DEFAULT_REFINE_ITER if self.privacy is None else _PRIVATE_REFINE_ITER

    def _n_random_features(
        self,
        n_samples=None,
        n_features=None,
        n_clients=None,
        sketch_size=None,
        summed_noise=None,
    ):
        """D: ``n_random_features``, or the one ``"auto"`` chooses for the
        data's N, d and M (300 without them), the sketch's l (None: the
        triangle) and, under privacy, the summed noise's multiplier."""
        if self.n_random_features != "auto":
            return self.n_random_features
        if summed_noise is not None and self._algorithm() == "one_shot":
            low = (self.n_components or 3 * self.n_clusters) + 2
            return private_feature_count(
                n_samples, summed_noise, low, _DEFAULT_FEATURES
            )
        if (
            self._algorithm() != "one_shot"
            or self.privacy is not None
            or n_samples is None
        ):
            # Under privacy each of the D(D+1)/2 entries carries its own
            # noise: more features are not free there.
            return _DEFAULT_FEATURES
        if sketch_size is not None:
            return one_shot_sketch(n_samples, n_features, n_clients, sketch_size)
        return one_shot_features(n_samples, n_features, n_clients)

    def _sketch_size(self, n_samples, n_features, n_clients):
        """l: ``sketch_size``, or the one ``"auto"`` chooses (None: the
        triangle)."""
        if self.sketch_size != "auto":
            return self.sketch_size
        if (
            self._algorithm() != "one_shot"
            or self.privacy is not None
            or self.n_random_features != "auto"
        ):
            return None
        D = one_shot_features(n_samples, n_features, n_clients)
        if D <= _DEFAULT_FEATURES:
            # Narrow data or small clients: the budget does not even raise
            # the triangle's D; the triangle is kept (unchanged models).
            return None
        # l = 2s of the D the sketch would take (s grows with D up to 3k).
        sketch = _SKETCH_PER_COMPONENT * self._s(_SKETCH_MAX_FEATURES)
        sketched_D = one_shot_sketch(n_samples, n_features, n_clients, sketch)
        return sketch if sketched_D > D else None

    def _features(self, n_samples=None, n_features=None, n_clients=None):
        """``features``, or the one ``"auto"`` chooses for the data's N, d
        and M: the landmarks for the one-shot, unless privacy, a random
        feature option (``n_random_features`` or ``sketch_size`` given) or
        wide data in plenty (where ``"auto"`` raises the random features'
        D above 300) asks for the random features. Without the data's
        shape: the fit's choice once fitted, the landmarks before."""
        if self.features != "auto":
            return self.features
        if (
            self._algorithm() != "one_shot"
            or self.privacy is not None
            or self.sketch_size != "auto"
            or self.n_random_features != "auto"
        ):
            return "random"
        if n_samples is None:
            return getattr(self, "features_", "landmarks")
        wide = one_shot_features(n_samples, n_features, n_clients)
        return "random" if wide > _DEFAULT_FEATURES else "landmarks"

    def _n_landmarks(self):
        """n_L: ``n_landmarks``, or 300 for ``"auto"``."""
        if self.n_landmarks == "auto":
            return _DEFAULT_LANDMARKS
        return self.n_landmarks

    def _algorithm(self):
        """``algorithm``, or the one ``"auto"`` chooses: DSPGD when an option
        only DSPGD has asks for it, the one-shot otherwise."""
        if self.algorithm != "auto":
            return self.algorithm
        if not self.use_cem or self.eigen_solver != "auto":
            return "dspgd"
        return "one_shot"

    def _eigen_solver(self, D=None):
        """``eigen_solver``, or the one ``"auto"`` chooses."""
        if self.eigen_solver != "auto":
            return self.eigen_solver
        if not self.use_cem:
            return "lanczos"
        # The Gram triangle, (D + r)(D + r + 1)/2 floats up, against about
        # P Lanczos products of D + r floats each way, with r about s.
        D = D or self._n_random_features()
        s = self._s(D)
        products = (s + 2) * (2 if self.lanczos_block_size == 1 else 4)
        return "gram" if D + s + 1 <= 4 * products else "lanczos"

    def _s(self, D=None):
        """s: ``n_components``, or min(3k, D − 2) but at least k."""
        if self.n_components is not None:
            return self.n_components
        k, D = self.n_clusters, D or self._n_random_features()
        return max(k, min(3 * k, D - 2))

    def transform(self, X):
        """Spectral embedding H(x) of new samples, on the server.

        One-shot: H(x) = z(x) V − z̄ᵀV, the clients' computation, from the
        map's seed, V and z̄ᵀV that the server sent them; on the training
        samples this reproduces ``embedding_``.

        DSPGD, by replaying the iterations: every iteration's update is
        linear in that iteration's random features:
        U_t = [√(η_t / D) A_t, √(1 − η_t) B_t] V_t / √μ_t and B_{t+1}
        = U_t √(μ_t − η_t λ). The server sent the clients the seeds, η_t
        and the matrices V_t / √μ_t and kept them, so it replays the
        recursion for any x without a client; on the training samples this
        reproduces ``embedding_``. It is the Nyström extension of each
        iteration's eigenvectors (ours; the paper defines none).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            New samples.

        Returns
        -------
        H : ndarray of shape (n_samples, `n_components_`)
            Same dtype as X (float32 or float64).
        """
        if is_dask_collection(X):  # lazy, block by block on the workers
            return blockwise(self, "transform", X)
        check_is_fitted(self)
        X = self._validated(X)
        return self._embed(X).astype(X.dtype, copy=False)

    def _embed(self, X):
        """H(x) in float64 (see :meth:`transform`)."""
        if self.features_ == "landmarks":
            landmarks, center, whitening, basis, shift = self._landmark_map
            return landmark_embedding(
                X, landmarks, center, whitening, self.gamma_, basis, shift
            )
        if self.algorithm_ == "one_shot":
            seed, basis, shift, center = self._one_shot_map
            omega, offset = centred_map(
                seed, X.shape[1], self.n_random_features_, self.gamma_, center
            )
            return feature_embedding(X, omega, offset, basis, shift)
        U = replay_eigenvectors(X, self._replay, self.gamma_, self.n_random_features_)
        return U[:, : self.n_components_] * self._scales

    # predict and score come from KMeansCentersMixin, in the space the
    # hooks below give: the replayed embedding. On the training samples
    # predict gives ``labels_`` (up to floating-point ties) and score
    # ``-inertia_``, with no client involved.

    def _center_space(self, X):
        return self._embed(self._validated(X))

    def _validated(self, X, *, reset=False):
        # Only products with X are needed: any CSR matrix and memory layout
        # will do (the coordinate-space estimators ask for C order).
        X = validate_data(
            self, X, accept_sparse="csr", dtype=[np.float64, np.float32], reset=reset
        )
        check_magnitude(X)
        return X

    def _centers(self):
        # As the clients' label step: rows and centers in float64.
        return self.cluster_centers_.astype(np.float64)

    @property
    def _n_features_out(self):
        """Number of transformed output features."""
        return self.n_components_

    def fit_transform(self, X, y=None, *, partitions=None):
        """Fit and return ``embedding_``, the spectral embedding H.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training samples.
        y : Ignored
            Not used, present for API consistency.
        partitions : None, int or array-like of shape (n_samples,), \
                default=None
            See :meth:`fit`.

        Returns
        -------
        H : ndarray of shape (n_samples, `n_components_`)
        """
        self.fit(X, partitions=partitions)
        if not hasattr(self, "embedding_"):
            raise ValueError(_KEPT_ON_NODES)
        return self.embedding_

    def fit_predict(self, X, y=None, *, partitions=None):
        """Fit and return ``labels_``.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training samples.
        y : Ignored
            Not used, present for API consistency.
        partitions : None, int or array-like of shape (n_samples,), \
                default=None
            See :meth:`fit`.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            Cluster of each training sample.
        """
        self.fit(X, partitions=partitions)
        if not hasattr(self, "labels_"):
            raise ValueError(_KEPT_ON_NODES)
        return self.labels_
