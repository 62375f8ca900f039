"""Distributed kernel PCA (disKPCA): leverage and adaptive sampling of
representative points, then a sketched low-rank solve in their span.

Balcan, Liang, Song, Woodruff & Xie, "Communication Efficient Distributed
Kernel Principal Component Analysis", KDD 2016 (Algorithms 1-4). The
protocols (:func:`run_kernel_pca`, the random-feature solver, their
steps) live in :mod:`skfed.decomposition._protocols`; this module is the
estimator.
"""

# Long module: the estimator's docstring, the user's reference for every
# parameter and attribute, takes about 350 of its lines; the code is the
# estimator's alone.

import numbers
import warnings
from functools import partial

import numpy as np
import scipy.sparse as sp
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
)
from sklearn.utils import check_random_state
from sklearn.utils.extmath import row_norms
from sklearn.utils.validation import check_is_fitted, validate_data

from .._engine._estimator import FederatedMixin
from .._engine._remote import blockwise, is_dask_collection, is_remote
from .._engine._shared_params import shared_constraints, shared_parameter_docs
from .._engine._validation import StrictInterval, check_magnitude, clip_to_data
from .._sklearn_compat import StrOptions
from .._sklearn_compat import fit_context as _fit_context
from ..kernel._pairwise import kernel_matrix
from ..kernel._private_features import (
    FEATURE_STATISTICS,
    PRIVATE_STATISTICS,
    private_feature_count,
)
from ..privacy import check_privacy
from ._protocols._kernel_width import KERNEL_WIDTH, MEDIAN_SAMPLE
from ._protocols._random_features import feature_projection, run_feature_pca
from ._protocols._representatives import (
    DISLR,
    DISLR_UNCENTRED,
    ERROR,
    FEATURE_MEAN,
    run_kernel_pca,
)
from ._protocols._sampling import (
    ADAPTIVE_RESIDUALS,
    ADAPTIVE_SAMPLE,
    EMBEDDING,
    LEVERAGE_SAMPLE,
    LEVERAGE_SCORES,
    UNIFORM_SAMPLE,
)

__all__ = ["DistributedKernelPCA"]

# Rows per block when transform evaluates kernels, so that memory stays
# O(block * |Y|) instead of O(n * |Y|).
_BLOCK = 2048
# D of n_random_features="auto", and its range under privacy: more features
# than the noise allows bury the components, and on digits (10 clients,
# k-means on 10 components) 50 to 300 kept more of the clusters than 2,000
# at epsilon 1 and 10, with and without distributed noise.
_DEFAULT_FEATURES = 2000
_PRIVATE_FEATURES = (50, 300)
# Largest number of floats one client's kernel embedding may allocate (1 GiB
# in float32): beyond it a size parameter is refused before anything runs.
_MAX_CLIENT_FLOATS = 2**28


@shared_parameter_docs("n_jobs", "verbose", "raw_rows", "secure_aggregation", "privacy")
class DistributedKernelPCA(
    FederatedMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator
):
    """Distributed kernel PCA by representative sampling (disKPCA).

    Finds k orthonormal directions L = φ(Y) C in the kernel feature space,
    spanned by a small set Y of representative points, that minimise the
    reconstruction error ‖φ(A) − L Lᵀ φ(A)‖²_F of the data A spread over
    clients, centred in feature space like
    :class:`sklearn.decomposition.KernelPCA` (the paper's uncentered problem
    with ``center=False``). Communication does not grow with the
    number of samples N:

    1. **disLS** (``sampling="leverage+adaptive"``): each client embeds its
       points with a kernel subspace embedding E = S z(X)ᵀ (random Fourier
       features or a TensorSketch z, then a shared Gaussian S ∈ R^{t × D}),
       sketches the point side to p columns and uploads it; the server's QR
       factor Z lets every client compute generalized leverage scores.
    2. **RepSample**: ``leverage_fraction`` of ``|Y|`` points are sampled in
       proportion to the leverage scores, the rest in proportion to the
       squared distance (in feature space) to the span of the first batch.
       With ``sampling="uniform"`` all of Y is sampled uniformly (the paper's
       uniform + disLR baseline).
    3. **disLR**: every client projects its data on an orthonormal basis
       Q = φ(Y) R of span φ(Y) and uploads either a sketch Π T (the paper) or
       the top scaled left singular vectors of Π (``lowrank_upload=
       "local_svd"``, our improvement); the server keeps the top-k left
       singular vectors W, and C = R W.

    ``transform(x) = Cᵀ k_Y(x)`` needs only Y and C, never a client.

    Read more in the :ref:`User Guide <user_guide_kernel_pca>`.

    Parameters
    ----------
    n_components : int, default=10
        k, the number of principal components.
    kernel : {"rbf", "laplacian", "poly", "linear"}, default="rbf"
        κ. "rbf" exp(−γ‖x − y‖²) and "laplacian" exp(−γ‖x − y‖₁) use random
        Fourier features in disLS, "poly" (γ xᵀy + c)^q uses a TensorSketch,
        "linear" xᵀy uses the data itself. The solve and ``transform`` always
        use the exact kernel. Not offered: "sigmoid" is not positive
        semi-definite (no feature space to do PCA in), "cosine" is "linear"
        on normalised rows (use ``Normalizer`` first), and the paper's
        arc-cosine kernel is left for later.
    gamma : float, default=None
        γ. None: for "rbf" and "laplacian" the paper's median heuristic,
        σ = ``median_factor`` × the median pairwise distance (Euclidean for
        "rbf", L1 for "laplacian"), estimated federatedly (one extra round,
        see Notes), and γ = 1/(2σ²) for "rbf", 1/σ for "laplacian"; for
        "poly" 1/n_features (scikit-learn's default). Ignored by "linear".
    degree : int, default=3
        q, the degree of the "poly" kernel (the paper uses 4).
    coef0 : float, default=1
        c of the "poly" kernel.
    median_factor : float, default=1.0
        σ / median distance for the default γ. 1.0 is the common median
        heuristic. The paper's experiments use 0.2, which on sklearn digits
        makes the RBF kernel nearly diagonal: the top 10 components then
        hold under 4% of trace(K), and even an exact solve is barely better
        than no projection at all (the error ratio of L = 0 is 1.04). With
        1.0, ``|Y|`` = 400 captures 99.96% of the optimal rank-10 energy there.
        In [1e-3, 1e3]: beyond, the kernel is a constant or an identity to
        float64 rounding.
    n_representatives : int, default=400
        ``|Y|``, the number of representative points (before removal of
        duplicates). More than the number of samples is clipped to it
        (every sample is then a representative), with a warning unless it
        is the default, as :class:`sklearn.kernel_approximation.Nystroem`
        does. Clients that tie exactly for the last draws of the split over
        clients (e.g. clients of one size) each take one, so that renaming
        the clients never decides who draws: ``|Y|`` can then exceed it by
        fewer than the number of clients.
    leverage_fraction : float, default=0.5
        m₁ / ``|Y|``: share of Y sampled by leverage scores; the rest (m₂) is
        sampled adaptively. Used with ``sampling="leverage+adaptive"``.
    sampling : {"leverage+adaptive", "uniform"}, default="leverage+adaptive"
        How Y is chosen: disLS + RepSample (the paper), or uniformly with
        client quotas proportional to client sizes (no disLS round).
    embedding_dim : int, default=50
        t, rows of the kernel subspace embedding S. Clipped to the number
        of samples and of random features (with a warning unless it is the
        default): the embedded points span no more.
    sketch_size : int, default=250
        p, columns of each client's point sketch T_m in disLS. Clients with
        at most p samples send their embedding unsketched (a warning says so
        when a p other than the default exceeds the number of samples).
    n_random_features : int or "auto", default="auto"
        D, random Fourier features ("rbf", "laplacian") or TensorSketch
        dimension ("poly") of the embedding z. A D for which a client's
        embedding would allocate more than 1 GiB is refused before the fit
        starts. ``"auto"``: 2,000 (under ``raw_rows="refuse"`` at most the
        smallest client's rows, which each client's statistics need as
        distinct rows), and under ``privacy`` what the noise allows: the
        largest even D up to 300 with 2 √D σ ≤ N / 15, σ the
        summed Gram triangle's noise (smaller with ``secure_aggregation``'s
        distributed noise), and at least 50 and ``n_components`` + 2. The
        D used is ``n_random_features_``.
    lowrank_upload : {"local_svd", "sketch"}, default="local_svd"
        What each client sends in disLR. "sketch": Π[m] T_m with a right
        sketch of width w (Algorithm 3 of the paper). "local_svd": the top
        ``local_rank`` left singular vectors of Π[m] scaled by their singular
        values (U_h Σ_h), which is exact when h reaches the rank of Π[m] and
        much smaller than the sketch for h ≈ 2k (our improvement).
    lowrank_sketch_size : int, default=None
        w, sketch width for ``lowrank_upload="sketch"``; None means ``|Y|`` (the
        paper). Clients with at most w samples send Π[m] unsketched.
    local_rank : int, default=None
        h for ``lowrank_upload="local_svd"``; None means 2k.
    center : bool, default=True
        Center the data in feature space, as
        :class:`sklearn.decomposition.KernelPCA` does (an extension of the
        paper). The mean is projected on span φ(Y) federatedly (one extra
        round: Y down, r floats up) and the components minimise the error
        around it; with ``|Y|`` = N this is exactly KernelPCA's centering.
        False solves the paper's uncentered problem, whose first component
        mostly points at the mean of the data in feature space.
    random_state : int, RandomState instance or None, default=None
        Seeds the shared maps, the client sketches and the sampling. Under
        ``privacy`` with a finite epsilon the noise does not follow it (each
        client draws it from fresh entropy), so a private fit is not
        reproducible.
    n_jobs : int, default=None

    verbose : int, default=0

    raw_rows : {"allow", "refuse"}, default="allow"
        The representatives are rows of X that the server forwards to every
        client (rounds ``"uniform sample"``, ``"leverage sample"``,
        ``"adaptive sample"``), so "refuse" raises ``ValueError`` before
        the first round with ``solver="representatives"``; ``"auto"`` then
        takes the random features ("rbf", "laplacian"), and ``gamma=None``
        the average-distance width γ = N² / (2 Σ_ij ‖x_i − x_j‖²) from each
        client's row count, mean and spread ("rbf"; the median heuristic
        samples rows, so the Laplacian kernel needs an explicit ``gamma``).
        With ``solver="random_features"`` no row leaves, and "refuse"
        makes every client check,
        before it uploads, that its statistics come from at least
        ``max(2, n_random_features)`` distinct rows (fewer would let the
        server solve the client's feature Gram matrix for its rows); a
        client with fewer raises ``ValueError``.

    secure_aggregation : bool, default=False
        Masked here: the feature mean
        (``center=True``) and the random-feature statistics; with the
        representatives and ``center=False`` no round is sum-only.

    solver : {"auto", "representatives", "random_features"}, default="auto"
        ``"representatives"``: disKPCA as above. ``"random_features"``:
        the server draws one map of D paired random Fourier features z(x)
        (``n_random_features``, "rbf" or "laplacian" only); each client
        uploads, once, the upper triangle of Z[m]ᵀZ[m] and Z[m]ᵀ1
        (D(D+1)/2 + D floats, a sum-only round); the components are the
        top eigenvectors V of the features' centred covariance
        C = Σ_m Z[m]ᵀZ[m] − N z̄ z̄ᵀ, and ``transform(x) = (z(x) − z̄)ᵀ V``:
        kernel PCA of the random-feature kernel, with no row of X leaving
        a client. The representatives' parameters do not apply to it.
        ``"auto"`` takes ``"random_features"`` under ``privacy`` and, for
        "rbf" and "laplacian", under ``raw_rows="refuse"``;
        ``"representatives"`` otherwise. The solver used is ``solver_``.

    privacy : :class:`~skfed.privacy.DifferentialPrivacy` or None, \
            default=None
        With ``solver="random_features"`` only (the representatives are
        rows of X: ``ValueError``) and an explicit ``gamma`` (the median
        heuristic samples rows). Each client clips its random features to
        their norm bound R (1 for even D: a bound from D, not from the
        data, so ``privacy.bounds`` is not needed) and adds Gaussian noise
        to the triangle (replace-one L2 sensitivity R √(R² + 2/D)) and to
        Z[m]ᵀ1 (2R): two releases per client, composed by the accountant;
        its row count n_m, public, follows unnoised. The server mirrors the
        noised triangle and divides by N; everything after is
        post-processing. The noise's spectral norm grows as √D while the
        components' energy does not, so under privacy
        ``n_random_features="auto"`` takes at most 300 features, fewer where
        the noise is larger (see the privacy page).

    Attributes
    ----------
    solver_ : {"representatives", "random_features"}
        The solver used (``solver``, or what ``"auto"`` chose).
    n_random_features_ : int
        D, the random features used (``n_random_features``, or what
        ``"auto"`` chose).
    representatives_ : {ndarray, sparse matrix} of shape \
            (`n_representatives_`, n_features)
        Y, the representative points (deduplicated, in a canonical order).
        Representatives' solver only (as ``dual_coef_``, ``rank_`` and
        ``n_representatives_``).
    dual_coef_ : ndarray of shape (`n_representatives_`, n_components)
        C: the components are φ(Y) C, orthonormal in feature space.
    components_ : ndarray of shape (n_components, n_random_features)
        Vᵀ, the components in the random features' space (random-feature
        solver only).
    eigenvalues_ : ndarray of shape (n_components,)
        ‖Cᵀ K_{Y,A}‖² per component (centered if ``center``): the energy each
        component captures, i.e. its Rayleigh quotient on the full kernel
        matrix, in decreasing order; exact eigenvalues of K when the span of
        Y contains the top eigenvectors. Random features: the top
        eigenvalues of C (noised under ``privacy``), the energy each
        component captures of the centred random-feature kernel matrix.
    explained_variance_ratio_ : ndarray of shape (n_components,)
        ``eigenvalues_`` divided by the total energy trace(K).
    total_energy_ : float
        trace(K) = Σ κ(a, a) (centered on the projected mean if ``center``);
        trace(C) with random features.
    approximation_error_ : float
        ‖φ(A) − L Lᵀ φ(A)‖²_F = trace(K) − Σ ``eigenvalues_``, computed
        federatedly.
    offset_ : ndarray of shape (n_components,)
        Subtracted after projection: Cᵀ applied to the projected feature mean
        when ``center``, else zeros; z̄ᵀV with random features (which
        always centre).
    gamma_ : float
        γ used (None for "linear").
    rank_ : int
        r, the rank of K_YY kept for the basis of span φ(Y).
    n_representatives_ : int
        ``|Y|`` after removing duplicates.
    n_clients_ : int
    communication_ : CommunicationLog
        Everything sent; see Notes for the per-round formulas.
    privacy_spent_ : tuple (epsilon, delta) or None
        What the fit's noised releases spent, from the accountant; None
        without ``privacy``.
        With ``secure_aggregation=True`` the masked releases are noised in
        shares (distributed noise), and the figure holds as long as at least
        ``privacy.honest_clients`` clients of each masked sum keep their
        shares from the server (see :class:`~skfed.privacy.DifferentialPrivacy`).
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (`n_features_in_`,)

    Notes
    -----
    Rounds and floats per client m (d features, n_m samples; all independent
    of N; a sparse point costs its nnz + column indices + 1 row pointer):

    ====================  =============================  ========================
    round                 download                       upload
    ====================  =============================  ========================
    median sample         2 (seed, quota s_m)            s_m · min(d, 64)
    embedding             2 (seed, γ)                    t · min(n_m, p)
    leverage scores       t² (Z)                         1 + min(m₁, n_m)
    leverage sample       1 (quota)                      quota · d (rows)
    adaptive residuals    ``|P|`` (d + r_P) + 1          1 + min(m₂, n_m)
    adaptive sample       1 (quota)                      quota · d (rows)
    uniform sample        1 (quota)                      quota · d (rows)
    feature mean          ``|Y|`` (d + r) + 1            r
    disLR                 ``|Y|`` (d + r) + 1, or r      r · min(h, r, n_m)
    error                 r · k (W)                      1 + 3k
    ====================  =============================  ========================

    Notes on the table:

    * "median sample" runs only for "rbf"/"laplacian" with ``gamma=None``:
      s_m is the client's share of 256 points. The server learns a uniform
      sample of rows, projected to 64 random dimensions for "rbf" when
      d > 64, raw otherwise ("laplacian" sends the sampled rows: s_m · d
      floats, or their CSR size).
    * "uniform sample" replaces the five disLS/RepSample rounds ("embedding"
      to "adaptive sample") for ``sampling="uniform"``.
    * "adaptive residuals" carries P, the basis R_P of span φ(P) and γ;
      "feature mean" or "disLR" carry Y, the basis R of span φ(Y) and γ:
      the server computes the bases once instead of every client.
    * "feature mean" runs only with ``center=True``: it then carries Y, and
      the "disLR" download is the projected mean (r floats).
    * The "disLR" upload is for ``lowrank_upload="local_svd"``; it is
      r · min(w, n_m) for ``"sketch"``.
    * The "leverage scores" and "adaptive residuals" uploads are the score
      sum (the paper's one scalar) and the client's m largest scores, with m
      the round's budget (m₁ = ⌈f ``|Y|``⌉ with f = ``leverage_fraction``,
      m₂ = ``|Y|`` − m₁): see the sampling bullet below.

    Failing clients: a client whose step raises stops the fit with a
    :class:`~skfed.ClientStepError` naming it and the round. There is no
    ``on_client_error="drop"``: the representatives, the feature mean and
    the low-rank solve combine every client's share of one kernel matrix,
    and a client lost between them would leave its rows in Y but its
    energy out of the solve.

    Far from the origin: "rbf" and "laplacian" kernels are evaluated around
    the mean of Y (known to every party), so data translated by up to 1e9
    times its spread gets the same kernels to rounding. The random features
    of the leverage-score round are not; they only guide which rows become
    representatives. "linear" and "poly" are not shift-invariant and work
    on the coordinates as given.

    Signs follow :class:`~sklearn.decomposition.KernelPCA`'s convention: on
    every component the training sample of largest absolute projection
    projects positively. Where a positive and a negative projection tie
    for the largest magnitude (to 1e-9 relative, as on data symmetric
    about its mean, where both signs satisfy the convention), the first
    significant coefficient of ``dual_coef_`` (over the representatives,
    in their canonical order) is made positive instead, so the signs do
    not depend on the order of the rows. The "error" round carries it
    (each client's largest and smallest projection, 2k floats).

    Privacy: RepSample uploads raw sampled rows (Y) and the server
    broadcasts them to every client; this is inherent to disKPCA. The
    "error" round sends 3k + 1 floats instead of the paper's 2 so that
    ``eigenvalues_`` are exact per component and the signs are fixed; the
    extremes tell the server how far out each client's most extreme
    samples lie along each component, on both sides.

    Choices where the paper is silent or loose:

    * Sampling "in proportion to the scores" s_j (leverage scores,
      residuals) is done without replacement with inclusion probabilities
      π_j = min(1, c s_j), Σ π_j = m: a point whose share exceeds one draw
      is taken once instead of absorbing several draws. Each client sends
      its score sum and its m largest scores, from which the server finds c
      and each client's expected count (the paper's split ∝ score sums gave
      a client holding one dominant point almost all draws, spent on its
      small points, and missed large points on other clients: error ratio
      1.35 instead of 1.00 on sparse data with 50 clients). Budgets are
      split by largest-remainder rounding of the expected counts (uniform
      sampling: of the client sizes), capped at what each client holds, not
      by a multinomial draw: lower variance, and the split does not depend
      on the clients' names or order. Clients draw by systematic sampling;
      Y is then deduplicated (equal rows held by several clients) and put
      in a canonical order.
    * Every client indexes its rows in a canonical order (by a hash of their
      values) before drawing or sketching, so the model depends on the data
      each client holds, not on row order or client ids.
    * K_YY is inverted on its numerical range (eigenvalues above 1e-10 of
      the largest), so duplicated or nearly dependent representatives are
      harmless; ``rank_`` reports what was kept.
    * The leverage embedding is computed in float32 (scores are only needed
      to a constant factor); every kernel evaluation of the solve is exact
      and in float64, so with ``|Y|`` = N the fit is exact KPCA.

    Benchmarks (``benchmarks/bench_kernel_pca.py``): the local-SVD upload
    matches the exact solve to 1e-5 with h = 2k while its disLR round needs
    2× (``|Y|`` = 50) to 13× (``|Y|`` = 400) fewer floats than the sketch at equal
    error, hence the default. On RBF
    kernels and on dense data of similar norms, uniform sampling reaches the
    same error with fewer floats (no disLS round); on sparse data whose row
    norms vary widely with a polynomial kernel, uniform sampling misses the
    few rows that carry the energy and leverage+adaptive sampling is the
    only scheme that works.

    ``inverse_transform`` is not offered, with either solver: a pre-image
    needs a regression learned on the training data, which lives on the
    clients.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed import DistributedKernelPCA
    >>> X = np.random.RandomState(0).normal(size=(300, 5))
    >>> kpca = DistributedKernelPCA(
    ...     n_components=3, n_representatives=60, random_state=0
    ... )
    >>> kpca.fit_transform(X, partitions=4).shape
    (300, 3)
    """

    _private_alternative = (
        "Use solver='random_features' (or 'auto') with an explicit gamma: one "
        "noised upload of random-feature statistics per client."
    )

    @property
    def _raw_rows_alternative(self):
        text = []
        if self._solver() == "representatives":
            text.append(
                "With solver='representatives' its components are combinations "
                "of κ(y, ·) over representatives y, rows of X that the server "
                "forwards to every client."
            )
        if self.gamma is None and self.kernel in ("rbf", "laplacian"):
            text.append(
                "The median heuristic (gamma=None) samples rows of X, sent as "
                "they are with d <= 64 or the laplacian kernel, randomly "
                "projected otherwise."
            )
        text.append(
            "solver='random_features' with an explicit gamma sends no rows of "
            "X (one sum of random-feature statistics per client, each of at "
            "least n_random_features distinct rows)."
        )
        return " ".join(text)

    def _rounds(self):
        rounds = []
        if self.gamma is None and self._row_free_width():
            rounds += KERNEL_WIDTH.run(self.secure_aggregation)
        elif self.gamma is None and self.kernel in ("rbf", "laplacian"):
            # Declared as rows: above 64 features the "rbf" sample is
            # projected, but by a map the server drew, of rows of X.
            rounds.append(MEDIAN_SAMPLE)
        if self._solver() == "random_features":
            private = self.privacy is not None
            rounds.append(PRIVATE_STATISTICS if private else FEATURE_STATISTICS)
            return rounds
        if self.sampling == "uniform":
            rounds.append(UNIFORM_SAMPLE)
        else:
            # disLS with leverage draws, RepSample with adaptive ones.
            if self.leverage_fraction > 0:
                rounds += [EMBEDDING, LEVERAGE_SCORES, LEVERAGE_SAMPLE]
            if self.leverage_fraction < 1:
                rounds += [ADAPTIVE_RESIDUALS, ADAPTIVE_SAMPLE]
        rounds += [FEATURE_MEAN, DISLR] if self.center else [DISLR_UNCENTRED]
        return [*rounds, ERROR]

    _parameter_constraints: dict = {
        "n_components": [StrictInterval(numbers.Integral, 1, None, closed="left")],
        "kernel": [StrOptions({"rbf", "laplacian", "poly", "linear"})],
        "gamma": [StrictInterval(numbers.Real, 0, None, closed="neither"), None],
        "degree": [StrictInterval(numbers.Integral, 1, None, closed="left")],
        "coef0": [StrictInterval(numbers.Real, 0, None, closed="left")],
        # σ beyond 1e3 median distances is a constant kernel to float64
        # rounding, below 1e-3 an identity on all but near duplicates (and
        # 1/(2σ²) overflowed or divided by zero at the extremes).
        "median_factor": [StrictInterval(numbers.Real, 1e-3, 1e3, closed="both")],
        "n_representatives": [StrictInterval(numbers.Integral, 1, None, closed="left")],
        "leverage_fraction": [StrictInterval(numbers.Real, 0, 1, closed="both")],
        "sampling": [StrOptions({"leverage+adaptive", "uniform"})],
        "embedding_dim": [StrictInterval(numbers.Integral, 1, None, closed="left")],
        "sketch_size": [StrictInterval(numbers.Integral, 1, None, closed="left")],
        "n_random_features": [
            StrictInterval(numbers.Integral, 1, None, closed="left"),
            StrOptions({"auto"}),
        ],
        "lowrank_upload": [StrOptions({"local_svd", "sketch"})],
        "lowrank_sketch_size": [
            StrictInterval(numbers.Integral, 1, None, closed="left"),
            None,
        ],
        "local_rank": [StrictInterval(numbers.Integral, 1, None, closed="left"), None],
        "center": ["boolean"],
        "random_state": ["random_state"],
        "solver": [StrOptions({"auto", "representatives", "random_features"})],
        **shared_constraints(
            "n_jobs", "verbose", "raw_rows", "secure_aggregation", "privacy"
        ),
    }

    def __init__(
        self,
        n_components=10,
        *,
        kernel="rbf",
        gamma=None,
        degree=3,
        coef0=1.0,
        median_factor=1.0,
        n_representatives=400,
        leverage_fraction=0.5,
        sampling="leverage+adaptive",
        embedding_dim=50,
        sketch_size=250,
        n_random_features="auto",
        lowrank_upload="local_svd",
        lowrank_sketch_size=None,
        local_rank=None,
        center=True,
        random_state=None,
        n_jobs=None,
        verbose=0,
        raw_rows="allow",
        secure_aggregation=False,
        solver="auto",
        privacy=None,
    ):
        self.n_components = n_components
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.median_factor = median_factor
        self.n_representatives = n_representatives
        self.leverage_fraction = leverage_fraction
        self.sampling = sampling
        self.embedding_dim = embedding_dim
        self.sketch_size = sketch_size
        self.n_random_features = n_random_features
        self.lowrank_upload = lowrank_upload
        self.lowrank_sketch_size = lowrank_sketch_size
        self.local_rank = local_rank
        self.center = center
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.raw_rows = raw_rows
        self.secure_aggregation = secure_aggregation
        self.solver = solver
        self.privacy = privacy

    def _solver(self):
        """``solver``, or the one ``"auto"`` takes: the random features under
        differential privacy, or under ``raw_rows="refuse"`` for a kernel
        they serve ("rbf", "laplacian"), the representatives otherwise."""
        if self.solver != "auto":
            return self.solver
        if self.privacy is not None:
            return "random_features"
        if self.raw_rows == "refuse" and self.kernel in ("rbf", "laplacian"):
            return "random_features"
        return "representatives"

    def _row_free_width(self):
        """Whether ``gamma=None`` takes the average-distance width from the
        clients' moments rather than the median of a sample of rows."""
        return self.raw_rows == "refuse" and self.kernel == "rbf"

    def _check_solver(self):
        """Refuse, before any round, a solver or kernel the fit cannot use,
        saying what to use instead."""
        private = check_privacy(self.privacy) is not None
        solver = self._solver()
        if private and solver == "representatives":
            raise ValueError(
                "DistributedKernelPCA cannot fit solver='representatives' under "
                "differential privacy: its representatives are rows of X that "
                "the server forwards to every client. Use "
                "solver='random_features' (or 'auto'): one noised upload of "
                "random-feature statistics per client."
            )
        if solver == "random_features" and self.kernel not in ("rbf", "laplacian"):
            raise ValueError(
                f"solver='random_features' approximates shift-invariant kernels "
                f"by random Fourier features: kernel='rbf' or 'laplacian', got "
                f"kernel={self.kernel!r}. Use solver='representatives' for it"
                + (" (not available under differential privacy)." if private else ".")
            )
        if private and self.gamma is None:
            raise ValueError(
                "DistributedKernelPCA under differential privacy needs an "
                "explicit gamma: the median heuristic samples rows of the "
                "private data. Pass gamma, e.g. 1 / (2 sigma**2) for a typical "
                "distance sigma between samples known from the domain (or from "
                "public data)."
            )
        return solver

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, *, partitions=None):
        """Fit disKPCA on data spread over clients.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data (CSR is used as is, never densified).
        y : None
            Ignored.
        partitions : None, int or array-like of shape (n_samples,), default=None
            Client of each sample; an int splits uniformly at random into
            that many clients; None is one client.

        Returns
        -------
        self : object
        """
        if is_remote(X):
            X, _, partitions = self._remote_fit_input(X, None, partitions)
        else:
            X = validate_data(
                self, X, accept_sparse="csr", dtype=[np.float64, np.float32]
            )
            check_magnitude(X)
            self._check_poly_range(X)
        solver = self._check_solver()
        n_samples, n_features = X.shape
        k = self.n_components
        if k >= n_samples:
            raise ValueError(
                f"n_components={k} must be smaller than n_samples={n_samples}: "
                "kernel PCA of N points has at most N - 1 informative "
                "components; lower n_components or pass more samples."
            )
        if solver == "random_features":
            return self._fit_random_features(X, partitions)
        n_rep = clip_to_data(
            "n_representatives",
            self.n_representatives,
            n_samples,
            "training samples",
            estimator=self,
        )
        clip_to_data(
            "sketch_size",
            self.sketch_size,
            n_samples,
            "training samples",
            estimator=self,
        )
        D = self.n_random_features_ = self._n_random_features()
        dim = n_features if self.kernel == "linear" else D
        self._embedding_dim = clip_to_data(
            "embedding_dim",
            self.embedding_dim,
            min(n_samples, dim),
            "training samples or features",
            estimator=self,
        )
        # The clients' embedding holds a block of up to 4096 rows of D
        # features and the t x D map S (float32): refuse sizes that would
        # allocate gigabytes per client instead of trying.
        if self.kernel != "linear":
            floats = D * (self._embedding_dim + _BLOCK)
            if floats > _MAX_CLIENT_FLOATS:
                raise ValueError(
                    f"n_random_features={D} would make "
                    f"every client allocate {4 * floats / 2**30:.1f} GiB for "
                    "its kernel embedding; use at most "
                    f"{_MAX_CLIENT_FLOATS // (self._embedding_dim + _BLOCK)} "
                    "(a few thousand features suffice for leverage scores)."
                )
        if k >= n_rep:
            raise ValueError(
                f"n_components={k} must be smaller than n_representatives="
                f"{n_rep}: the components are combinations of the "
                "representatives; raise n_representatives (the paper uses "
                "O(k/ε) points, e.g. 20k-40k) or lower n_components."
            )
        rng = check_random_state(self.random_state)
        fed = self._federation(X, None, partitions, random_state=rng)
        with fed:
            result = fed.run_protocol(
                partial(
                    run_kernel_pca,
                    fed,
                    n_components=k,
                    n_representatives=n_rep,
                    embedding_dim=self._embedding_dim,
                    random_state=rng,
                    kernel=self.kernel,
                    gamma=self.gamma,
                    degree=self.degree,
                    coef0=self.coef0,
                    median_factor=self.median_factor,
                    sampling=self.sampling,
                    leverage_fraction=self.leverage_fraction,
                    n_random_features=D,
                    sketch_size=self.sketch_size,
                    center=self.center,
                    local_rank=self.local_rank,
                    lowrank_upload=self.lowrank_upload,
                    lowrank_sketch_size=self.lowrank_sketch_size,
                    stacklevel=3,
                ),
                random_state=rng,
            )
        energy, trace = result.eigenvalues, result.total_energy
        dtype = fed.dtype
        self.representatives_ = result.representatives.astype(dtype, copy=False)
        self.dual_coef_ = result.dual_coef.astype(dtype, copy=False)
        self.offset_ = result.offset.astype(dtype, copy=False)
        self.eigenvalues_ = energy
        self.total_energy_ = trace
        self.approximation_error_ = float(max(trace - energy.sum(), 0.0))
        self.explained_variance_ratio_ = (
            energy / trace if trace > 0 else np.zeros_like(energy)
        )
        self.gamma_ = result.gamma
        self.rank_ = result.rank
        self.n_representatives_ = int(result.representatives.shape[0])
        self.n_clients_ = len(result.client_ids)
        self.communication_ = fed.log
        self.solver_ = "representatives"
        self._record_privacy(fed)
        return self

    def _n_random_features(self, fed=None, n_samples=None):
        """D: ``n_random_features``, or the one ``"auto"`` chooses: 2,000,
        or under privacy the most the summed noise leaves the components
        above (:func:`~skfed.kernel._private_features.private_feature_count`),
        from public figures (N, M and the noise multiplier)."""
        if self.n_random_features != "auto":
            return self.n_random_features
        if fed is None:
            return _DEFAULT_FEATURES
        if fed.accountant is not None:
            low = max(self.n_components + 2, _PRIVATE_FEATURES[0])
            return private_feature_count(
                n_samples, self._summed_noise(fed), low, _PRIVATE_FEATURES[1]
            )
        if self.raw_rows == "refuse":
            # Each client's statistics must come from at least D distinct
            # rows: at most the smallest client's size (public).
            smallest = int(min(fed.client_sizes))
            return max(min(_DEFAULT_FEATURES, smallest - smallest % 2), 2)
        return _DEFAULT_FEATURES

    def _fit_random_features(self, X, partitions):
        """The random-feature solver (see ``solver``)."""
        rng = check_random_state(self.random_state)
        fed = self._federation(X, None, partitions, random_state=rng)
        k = self.n_components
        D = self.n_random_features_ = self._n_random_features(fed, X.shape[0])
        if D * max(D, min(X.shape[0], _BLOCK)) > _MAX_CLIENT_FLOATS:
            raise ValueError(
                f"n_random_features={D} would make every client allocate "
                f"{8 * D * max(D, _BLOCK) / 2**30:.1f} GiB for its D x D "
                "statistics; use a few hundred to a few thousand features."
            )
        if k > D:
            raise ValueError(
                f"n_components={k} exceeds n_random_features={D}: the "
                f"random-feature kernel has rank at most {D}. Raise "
                "n_random_features or lower n_components."
            )
        with fed:
            result = fed.run_protocol(
                partial(
                    run_feature_pca,
                    fed,
                    n_components=k,
                    n_random_features=D,
                    kernel=self.kernel,
                    gamma=self.gamma,
                    median_factor=self.median_factor,
                    random_state=rng,
                ),
                random_state=rng,
            )
        energy, V, offset = result.eigenvalues, result.components, result.offset
        if len(energy) < k:
            warnings.warn(
                f"Only {len(energy)} eigenvalue(s) of the random features' "
                "covariance stand above round-off, fewer than "
                f"n_components={k}; the remaining components are zero.",
                UserWarning,
                stacklevel=3,
            )
            pad = k - len(energy)
            V = np.hstack([V, np.zeros((D, pad))])
            offset = np.concatenate([offset, np.zeros(pad)])
            energy = np.concatenate([energy, np.zeros(pad)])
        dtype = fed.dtype
        trace = result.total_energy
        self.components_ = V.T.astype(dtype, copy=False)
        self.offset_ = offset.astype(dtype, copy=False)
        self.eigenvalues_ = energy
        self.total_energy_ = trace
        self.approximation_error_ = float(max(trace - energy.sum(), 0.0))
        self.explained_variance_ratio_ = (
            energy / trace if trace > 0 else np.zeros_like(energy)
        )
        self.gamma_ = result.gamma
        self.n_clients_ = len(result.client_ids)
        self.communication_ = fed.log
        self.solver_ = "random_features"
        # The map's seed, kept to map new points as the clients did.
        self._feature_seed = result.seed
        self._record_privacy(fed)
        return self

    def transform(self, X):
        """Project X on the components: Cᵀ k_Y(x) (minus ``offset_``).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_components)
            Same dtype as X (float32 or float64).
        """
        if is_dask_collection(X):  # lazy, block by block on the workers
            return blockwise(self, "transform", X)
        check_is_fitted(self)
        X = validate_data(
            self, X, accept_sparse="csr", dtype=[np.float64, np.float32], reset=False
        )
        check_magnitude(X)
        if self.solver_ == "random_features":
            Z = feature_projection(
                X,
                self._feature_seed,
                self.n_random_features_,
                self.gamma_,
                self.kernel,
                self.components_.T.astype(np.float64),
                self.offset_.astype(np.float64),
            )
            return Z.astype(X.dtype, copy=False)
        spec = {
            "kernel": self.kernel,
            "gamma": self.gamma_,
            "degree": self.degree,
            "coef0": float(self.coef0),
        }
        Y = self.representatives_
        C = self.dual_coef_.astype(np.float64)
        out = np.empty((X.shape[0], C.shape[1]), dtype=X.dtype)
        for start in range(0, X.shape[0], _BLOCK):
            block = slice(start, start + _BLOCK)
            out[block] = kernel_matrix(X[block], Y, spec) @ C - self.offset_
        return out

    def fit_transform(self, X, y=None, *, partitions=None):
        """Fit, then project the training data.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : None
            Ignored.
        partitions : None, int or array-like of shape (n_samples,), default=None
            See :meth:`fit`.

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_components)
        """
        return self.fit(X, partitions=partitions).transform(X)

    @property
    def _n_features_out(self):
        """Number of transformed output features."""
        return self.offset_.shape[0]

    def _check_poly_range(self, X):
        """Refuse a polynomial kernel whose values overflow on X.

        κ(x, x) = (γ‖x‖² + coef0)^degree is the largest value; the solves
        square it (Gram products, SVD), so it must stay below the square
        root of float64's range (coef0=1e300 ended in "SVD did not
        converge").
        """
        if self.kernel != "poly":
            return
        gamma = 1.0 / X.shape[1] if self.gamma is None else float(self.gamma)
        values = X.data if sp.issparse(X) else X
        sq = float(np.max(row_norms(X, squared=True))) if values.size else 0.0
        with np.errstate(over="ignore"):
            largest = np.float64(gamma * sq + self.coef0) ** self.degree
        limit = float(np.sqrt(np.finfo(np.float64).max))
        if not largest <= limit:
            raise ValueError(
                f"The polynomial kernel (gamma <x, y> + coef0)^degree reaches "
                f"{largest:.3g} on these data (gamma={gamma:.3g}, "
                f"coef0={self.coef0:.3g}, degree={self.degree}), beyond the "
                f"{limit:.3g} that its products can square in float64; lower "
                "coef0, gamma or degree, or rescale the data."
            )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags
