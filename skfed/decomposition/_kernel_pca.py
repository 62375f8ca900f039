"""Distributed kernel PCA (disKPCA): leverage and adaptive sampling of
representative points, then a sketched low-rank solve in their span.

Balcan, Liang, Song, Woodruff & Xie, "Communication Efficient Distributed
Kernel Principal Component Analysis", KDD 2016 (Algorithms 1-4).
"""

import numbers
import warnings
from functools import lru_cache, partial

import numpy as np
import scipy.linalg
import scipy.linalg.blas
import scipy.sparse as sp
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
    _fit_context,
)
from sklearn.metrics.pairwise import pairwise_kernels
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from .._federation import FederatedMixin
from .._protocol import client_step
from .._validation import StrictInterval, check_magnitude, clip_to_data
from ..kernel._median import (
    allocate_quota,
    canonical_row_order,
    median_distance,
    median_sample_step,
)
from ..kernel._random_features import random_fourier_features, sample_fourier_weights
from ..kernel._sketch import (
    count_sketch_matrix,
    sample_count_sketch,
    sample_tensor_sketch,
    sketch_columns,
    tensor_sketch,
)

__all__ = ["DistributedKernelPCA"]

_SEED_MAX = np.iinfo(np.int32).max
# Rows per block when a client evaluates kernels or features, so that memory
# stays O(block * |Y|) instead of O(n_m * |Y|).
_BLOCK = 2048
# Eigenvalues of K_YY below this fraction of the largest are treated as zero:
# their directions carry no energy and would only amplify rounding.
_EIG_RTOL = 1e-10
# Residuals below this fraction of κ(a, a) are rounding noise (the point is
# already in the span), not a reason to sample it.
_RESIDUAL_RTOL = 1e-9
# Median heuristic: size of the pooled sample and projection dimension.
_MEDIAN_SAMPLES = 256
_MEDIAN_PROJECTIONS = 64
# Largest number of floats one client's kernel embedding may allocate (1 GiB
# in float32): beyond it a size parameter is refused before anything runs.
_MAX_CLIENT_FLOATS = 2**28


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
    n_representatives : int, default=400
        ``|Y|``, the number of representative points (before removal of
        duplicates). More than the number of samples is clipped to it with
        a warning (every sample is then a representative), as
        :class:`sklearn.kernel_approximation.Nystroem` does.
    leverage_fraction : float, default=0.5
        m₁ / ``|Y|``: share of Y sampled by leverage scores; the rest (m₂) is
        sampled adaptively. Used with ``sampling="leverage+adaptive"``.
    sampling : {"leverage+adaptive", "uniform"}, default="leverage+adaptive"
        How Y is chosen: disLS + RepSample (the paper), or uniformly with
        client quotas proportional to client sizes (no disLS round).
    embedding_dim : int, default=50
        t, rows of the kernel subspace embedding S. Clipped (with a warning)
        to the number of samples and of random features: the embedded
        points span no more.
    sketch_size : int, default=250
        p, columns of each client's point sketch T_m in disLS. Clients with
        at most p samples send their embedding unsketched (a warning says so
        when p exceeds the number of samples).
    n_random_features : int, default=2000
        D, random Fourier features ("rbf", "laplacian") or TensorSketch
        dimension ("poly") of the embedding z. A D for which a client's
        embedding would allocate more than 1 GiB is refused before the fit
        starts.
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
        Seeds the shared maps, the client sketches and the sampling.
    n_jobs : int, default=None
        Clients run in parallel through joblib.
    verbose : int, default=0
        Print one line per round.

    Attributes
    ----------
    representatives_ : {ndarray, sparse matrix} of shape \
            (`n_representatives_`, n_features)
        Y, the representative points (deduplicated, in a canonical order).
    dual_coef_ : ndarray of shape (`n_representatives_`, n_components)
        C: the components are φ(Y) C, orthonormal in feature space.
    eigenvalues_ : ndarray of shape (n_components,)
        ‖Cᵀ K_{Y,A}‖² per component (centered if ``center``): the energy each
        component captures, i.e. its Rayleigh quotient on the full kernel
        matrix, in decreasing order; exact eigenvalues of K when the span of
        Y contains the top eigenvectors.
    explained_variance_ratio_ : ndarray of shape (n_components,)
        ``eigenvalues_`` divided by the total energy trace(K).
    total_energy_ : float
        trace(K) = Σ κ(a, a) (centered on the projected mean if ``center``).
    approximation_error_ : float
        ‖φ(A) − L Lᵀ φ(A)‖²_F = trace(K) − Σ ``eigenvalues_``, computed
        federatedly.
    offset_ : ndarray of shape (n_components,)
        Subtracted after projection: Cᵀ applied to the projected feature mean
        when ``center``, else zeros.
    gamma_ : float
        γ used (None for "linear").
    rank_ : int
        r, the rank of K_YY kept for the basis of span φ(Y).
    n_representatives_ : int
        ``|Y|`` after removing duplicates.
    n_clients_ : int
    communication_ : CommunicationLog
        Everything sent; see Notes for the per-round formulas.
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
    error                 r · k (W)                      1 + 2k
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
    projects positively. The "error" round carries it (each client's signed
    projection of largest magnitude, k floats).

    Privacy: RepSample uploads raw sampled rows (Y) and the server
    broadcasts them to every client; this is inherent to disKPCA. The
    "error" round sends 2k + 1 floats instead of the paper's 2 so that
    ``eigenvalues_`` are exact per component and the signs are fixed; the
    signed extremes tell the server how far out each client's most extreme
    sample lies along each component.

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

    ``inverse_transform`` is not offered: a pre-image needs a regression
    learned on the training data, which lives on the clients.

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

    _parameter_constraints: dict = {
        "n_components": [StrictInterval(numbers.Integral, 1, None, closed="left")],
        "kernel": [StrOptions({"rbf", "laplacian", "poly", "linear"})],
        "gamma": [StrictInterval(numbers.Real, 0, None, closed="neither"), None],
        "degree": [StrictInterval(numbers.Integral, 1, None, closed="left")],
        "coef0": [StrictInterval(numbers.Real, 0, None, closed="left")],
        "median_factor": [StrictInterval(numbers.Real, 0, None, closed="neither")],
        "n_representatives": [StrictInterval(numbers.Integral, 1, None, closed="left")],
        "leverage_fraction": [StrictInterval(numbers.Real, 0, 1, closed="both")],
        "sampling": [StrOptions({"leverage+adaptive", "uniform"})],
        "embedding_dim": [StrictInterval(numbers.Integral, 1, None, closed="left")],
        "sketch_size": [StrictInterval(numbers.Integral, 1, None, closed="left")],
        "n_random_features": [StrictInterval(numbers.Integral, 1, None, closed="left")],
        "lowrank_upload": [StrOptions({"local_svd", "sketch"})],
        "lowrank_sketch_size": [
            StrictInterval(numbers.Integral, 1, None, closed="left"),
            None,
        ],
        "local_rank": [StrictInterval(numbers.Integral, 1, None, closed="left"), None],
        "center": ["boolean"],
        "random_state": ["random_state"],
        "n_jobs": [None, numbers.Integral],
        "verbose": ["verbose"],
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
        n_random_features=2000,
        lowrank_upload="local_svd",
        lowrank_sketch_size=None,
        local_rank=None,
        center=True,
        random_state=None,
        n_jobs=None,
        verbose=0,
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
        X = validate_data(self, X, accept_sparse="csr", dtype=[np.float64, np.float32])
        check_magnitude(X)
        n_samples, n_features = X.shape
        k = self.n_components
        n_rep = clip_to_data(
            "n_representatives", self.n_representatives, n_samples, "training samples"
        )
        if k >= n_samples:
            raise ValueError(
                f"n_components={k} must be smaller than n_samples={n_samples}: "
                "kernel PCA of N points has at most N - 1 informative "
                "components; lower n_components or pass more samples."
            )
        clip_to_data("sketch_size", self.sketch_size, n_samples, "training samples")
        dim = n_features if self.kernel == "linear" else self.n_random_features
        self._embedding_dim = clip_to_data(
            "embedding_dim",
            self.embedding_dim,
            min(n_samples, dim),
            "training samples or features",
        )
        # The clients' embedding holds a block of up to 4096 rows of D
        # features and the t x D map S (float32): refuse sizes that would
        # allocate gigabytes per client instead of trying.
        if self.kernel != "linear":
            floats = self.n_random_features * (self._embedding_dim + _BLOCK)
            if floats > _MAX_CLIENT_FLOATS:
                raise ValueError(
                    f"n_random_features={self.n_random_features} would make "
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
        spec = {
            "kernel": self.kernel,
            "degree": self.degree,
            "coef0": float(self.coef0),
        }
        with fed:
            gamma = self._server_gamma(fed, rng, n_features)
            spec["gamma"] = gamma
            if self.sampling == "uniform":
                Y = self._uniform_sample(fed)
            else:
                Y = self._leverage_adaptive_sample(fed, rng, spec, n_rep)
            Y = _unique_rows(Y)
            if Y.shape[0] == 0:
                raise ValueError(
                    "No representative point could be sampled: κ(x, x) = 0 for "
                    "every sample (all-zero data with a linear kernel or a "
                    "polynomial kernel with coef0=0), so there is no principal "
                    "component. Check the data, or use coef0 > 0."
                )
            R = _span_basis(_kernel(Y, Y, spec))
            rank = R.shape[1]
            if rank == 0:
                # Uniform sampling can draw only such points; the score-based
                # rounds never draw them.
                raise ValueError(
                    f"The {Y.shape[0]} representative point(s) span nothing in "
                    "feature space: κ(y, y) = 0 for each of them (all-zero rows "
                    "with a linear kernel or a polynomial kernel with "
                    "coef0=0). Use sampling='leverage+adaptive', more "
                    "representatives, or coef0 > 0."
                )
            q = 2 * k if self.local_rank is None else self.local_rank
            w = n_rep if self.lowrank_sketch_size is None else self.lowrank_sketch_size
            project = {
                "spec": spec,
                "upload": self.lowrank_upload,
                "local_rank": q,
                "sketch_width": w,
            }
            mean = None
            if self.center:
                sums = fed.run_round(
                    "feature mean", partial(_project_step, **project), (Y, R, gamma)
                )
                mean = np.sum(sums, axis=0) / n_samples
                factors = fed.run_round("disLR", _lowrank_step, mean)
            else:
                factors = fed.run_round(
                    "disLR",
                    partial(_project_and_lowrank_step, project=project),
                    (Y, R, gamma),
                )
            W = _lowrank_solve(factors, k)
            stats = fed.run_round("error", _error_step, W)
            self.n_clients_ = fed.n_clients
        trace, energy, signs = _error_totals(stats)
        # KernelPCA's convention (svd_flip on its eigenvectors): the training
        # sample with the largest |projection| on a component projects
        # positively on it.
        W = W * signs
        if mean is not None:
            # Σ‖φ(a) − Qm‖² = Σ κ(a, a) − N ‖m‖² because Σ Qᵀφ(a) = N m.
            trace -= n_samples * float(mean @ mean)
        order = np.argsort(-energy, kind="stable")
        W, energy = W[:, order], energy[order]
        C = R @ W
        offset = W.T @ mean if mean is not None else np.zeros(W.shape[1])
        if C.shape[1] < k:
            warnings.warn(
                f"Only {C.shape[1]} directions are available in the span of the "
                "representatives (the rank of "
                + ("the centred K_YY" if self.center else "K_YY")
                + f"), fewer than n_components={k}; the remaining components "
                "are zero.",
                UserWarning,
                stacklevel=2,
            )
            pad = k - C.shape[1]
            C = np.hstack([C, np.zeros((C.shape[0], pad))])
            offset = np.concatenate([offset, np.zeros(pad)])
            energy = np.concatenate([energy, np.zeros(pad)])

        self.representatives_ = Y.astype(X.dtype, copy=False)
        self.dual_coef_ = C.astype(X.dtype, copy=False)
        self.offset_ = offset.astype(X.dtype, copy=False)
        self.eigenvalues_ = energy
        self.total_energy_ = float(trace)
        self.approximation_error_ = float(max(trace - energy.sum(), 0.0))
        self.explained_variance_ratio_ = (
            energy / trace if trace > 0 else np.zeros_like(energy)
        )
        self.gamma_ = gamma
        self.rank_ = int(rank)
        self.n_representatives_ = int(Y.shape[0])
        self.communication_ = fed.log
        return self

    def _server_gamma(self, fed, rng, n_features):
        """γ: given, sklearn's 1/d for "poly", or the federated median."""
        if self.kernel == "linear":
            return None
        if self.gamma is not None:
            return float(self.gamma)
        if self.kernel == "poly":
            return 1.0 / n_features
        metric = "manhattan" if self.kernel == "laplacian" else "euclidean"
        sizes = fed.client_sizes
        quota = allocate_quota(_MEDIAN_SAMPLES, sizes, sizes)
        seed = int(rng.randint(_SEED_MAX))
        uploads = fed.run_round(
            "median sample",
            partial(
                median_sample_step,
                metric=metric,
                n_projections=_MEDIAN_PROJECTIONS,
                stream="kernel_pca.median_sample",
            ),
            messages=[(seed, int(s)) for s in quota],
        )
        med = median_distance(uploads, metric=metric)
        sigma = self.median_factor * med
        return 1.0 / (2.0 * sigma**2) if self.kernel == "rbf" else 1.0 / sigma

    def _uniform_sample(self, fed):
        """Y sampled uniformly: client quotas proportional to n_m."""
        sizes = fed.client_sizes
        quota = allocate_quota(self.n_representatives, sizes, sizes)
        rows = fed.run_round(
            "uniform sample",
            partial(_sample_step, scores_key=None, stream="kernel_pca.uniform"),
            messages=[int(s) for s in quota],
        )
        return _stack_rows(rows)

    def _leverage_adaptive_sample(self, fed, rng, spec, n_rep):
        """disLS then RepSample (Algorithms 1 and 2)."""
        seed = int(rng.randint(_SEED_MAX))
        sizes = fed.client_sizes
        m1 = int(np.ceil(self.leverage_fraction * n_rep))
        m2 = n_rep - m1
        P = None
        # With no leverage draws (leverage_fraction=0) disLS is skipped: its
        # embedding round would be paid for nothing.
        if m1 > 0:
            sketches = fed.run_round(
                "embedding",
                partial(
                    _embedding_step,
                    kernel=self.kernel,
                    degree=self.degree,
                    coef0=float(self.coef0),
                    n_random_features=self.n_random_features,
                    embedding_dim=self._embedding_dim,
                    sketch_size=self.sketch_size,
                ),
                (seed, spec["gamma"]),
            )
            Z = _leverage_basis(sketches, self._embedding_dim)
            summaries = fed.run_round(
                "leverage scores", partial(_leverage_step, budget=m1), Z
            )
            quota = _inclusion_quota(summaries, m1, sizes)
            rows = fed.run_round(
                "leverage sample",
                partial(
                    _sample_step,
                    scores_key="kpca_scores",
                    stream="kernel_pca.leverage",
                ),
                messages=[int(s) for s in quota],
            )
            P = _unique_rows(_stack_rows(rows))
        if m2 == 0:
            return P
        # The basis of span φ(P) is computed here once and sent, rather than
        # by every client from P (an eigendecomposition of K_PP each).
        R_P = None
        if P is not None and P.shape[0] > 0:
            R_P = _span_basis(_kernel(P, P, spec))
        summaries = fed.run_round(
            "adaptive residuals",
            partial(_residual_step, spec=spec, budget=m2),
            (P, R_P, spec["gamma"]),
        )
        # Points already taken have zero residual, so they cannot be drawn
        # again and count for nothing in the expected shares.
        quota2 = _inclusion_quota(summaries, m2, sizes)
        rows = fed.run_round(
            "adaptive sample",
            partial(
                _sample_step, scores_key="kpca_scores", stream="kernel_pca.adaptive"
            ),
            messages=[int(s) for s in quota2],
        )
        new = _stack_rows(rows)
        return new if P is None else _vstack([P, new])

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
        check_is_fitted(self)
        X = validate_data(
            self, X, accept_sparse="csr", dtype=[np.float64, np.float32], reset=False
        )
        check_magnitude(X)
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
            out[block] = _kernel(X[block], Y, spec) @ C - self.offset_
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
        return self.dual_coef_.shape[1]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags


# ---------------------------------------------------------------------------
# Shared math (used identically by clients and the server)


def _kernel(X, Y, spec):
    """κ(X, Y) in float64 (float32 kernels would limit the basis' accuracy).

    Shift-invariant kernels are computed on X and Y minus the mean of Y, a
    point every party holding Y gets alike: the squared distances inside
    "rbf" are expanded as ‖x‖² − 2x·y + ‖y‖², which cancels far from the
    origin (at an offset of 1e9 the kernel was noise). "linear" and "poly"
    are not shift-invariant and work on the coordinates as given.
    """
    X = X.astype(np.float64, copy=False)
    Y = Y.astype(np.float64, copy=False)
    kernel = spec["kernel"]
    if kernel in ("rbf", "laplacian") and not (sp.issparse(X) or sp.issparse(Y)):
        reference = Y.mean(axis=0)
        X, Y = X - reference, Y - reference
    if kernel == "linear":
        K = X @ Y.T
        return K.toarray() if sp.issparse(K) else np.asarray(K)
    params = {"gamma": spec["gamma"]}
    if kernel == "poly":
        params.update(degree=spec["degree"], coef0=spec["coef0"])
    return pairwise_kernels(X, Y, metric=kernel, **params)


def _kernel_diag(X, spec):
    """κ(x, x) for every row of X."""
    kernel = spec["kernel"]
    if kernel in ("rbf", "laplacian"):
        return np.ones(X.shape[0])
    if sp.issparse(X):
        sq = np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
    else:
        sq = np.einsum("ij,ij->i", X, X, dtype=np.float64)
    if kernel == "linear":
        return sq
    return (spec["gamma"] * sq + spec["coef0"]) ** spec["degree"]


def _span_basis(K):
    """R with Rᵀ K R = I on the range of K (K = U Λ Uᵀ, R = U_r Λ_r^{-1/2}).

    Eigenvalues below ``_EIG_RTOL`` × the largest are dropped, which is the
    guard against duplicates and rank-deficient kernels. Eigenvector signs
    are fixed (largest entry positive) so that every client computing R from
    the same Y gets the same basis.
    """
    lam, U = np.linalg.eigh(K)
    top = lam.max() if lam.size else 0.0
    keep = lam > _EIG_RTOL * top if top > 0 else np.zeros(lam.shape, dtype=bool)
    lam, U = lam[keep][::-1], U[:, keep][:, ::-1]
    signs = np.sign(U[np.argmax(np.abs(U), axis=0), np.arange(U.shape[1])])
    return U * (signs / np.sqrt(lam))


def _stack_rows(uploads):
    # Every client may send nothing (all residuals zero): keep one empty part
    # so the result still has the right width and format.
    parts = [u for u in uploads if u.shape[0]] or uploads[:1]
    return _vstack(parts)


def _vstack(parts):
    if any(sp.issparse(p) for p in parts):
        return sp.vstack([sp.csr_matrix(p) for p in parts], format="csr")
    return np.vstack(parts)


def _unique_rows(Y):
    """Remove duplicate rows and sort the rest in a canonical order.

    The order depends only on the rows' values (their nonzero positions and
    values, the same key for dense and CSR rows), so the model does not
    depend on the order in which clients sent them nor on the format.
    """
    if sp.issparse(Y):
        Y = sp.csr_matrix(Y, copy=True)
        Y.sum_duplicates()
        Y.eliminate_zeros()
        Y.sort_indices()
        rows = (
            (Y.indices[lo:hi], Y.data[lo:hi])
            for lo, hi in zip(Y.indptr[:-1], Y.indptr[1:])
        )
    else:
        Y = np.ascontiguousarray(Y)
        rows = ((np.flatnonzero(row), row[row != 0]) for row in Y)
    first = {}
    for i, (idx, val) in enumerate(rows):
        key = (
            idx.astype(np.int64).tobytes()
            + b"|"
            + (val.astype(np.float64) + 0.0).tobytes()
        )
        first.setdefault(key, i)
    order = [first[key] for key in sorted(first)]
    return Y[order]


# ---------------------------------------------------------------------------
# Client steps
#
# Per-row quantities (embeddings, scores) are kept in the client's canonical
# row order (sorted by a hash of the row values), and row-indexed randomness
# (sketches, draws) is applied in that order, so that a client's
# contribution depends on which rows it holds, not on how they are stored.


def _row_order(client, state):
    """The client's canonical row order, computed once and kept in state."""
    order = state.get("kpca_order")
    if order is None:
        order = canonical_row_order(client.X)
        state["kpca_order"] = order
    return order


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
    if kernel in ("rbf", "laplacian"):
        omega, offset = sample_fourier_weights(
            shared, n_features, n_random_features, gamma, kernel=kernel
        )

        def features(B):
            # Phases in the data's precision (float32 would overflow on data
            # of magnitude 1e38 and lose the spread far from the origin);
            # only the cosines are kept in float32.
            return random_fourier_features(B, omega, offset).astype(f32)

        dim = n_random_features
    elif kernel == "poly":
        hashes = sample_tensor_sketch(shared, n_features, n_random_features, degree)

        def features(B):
            return tensor_sketch(
                B, hashes, n_random_features, gamma=gamma, coef0=coef0, dtype=f32
            )

        dim = n_random_features
    else:

        def features(B):
            return B.astype(f32)

        dim = n_features
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
    Et = np.empty((X.shape[0], embedding_dim))
    for start in range(0, X.shape[0], _BLOCK):
        block = slice(start, start + _BLOCK)
        Et[block] = np.asarray(features(X[block]) @ S)
    state = dict(state or {})
    Et = Et[_row_order(client, state)]
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
    rows = client.X[_row_order(client, state)[np.sort(idx)]]
    return state, rows


@client_step("kernel_pca.residuals")
def _residual_step(client, state, message, *, spec, budget):
    """RepSample, adaptive part: d_j = κ(a_j, a_j) − ‖R_Pᵀ k_P(a_j)‖², the
    squared feature-space distance of a_j to span φ(P); upload Σ_j d_j and
    the ``budget`` largest d_j."""
    P, R, gamma = message
    spec = dict(spec, gamma=gamma)
    X = client.X
    diag = _kernel_diag(X, spec)
    if P is None or P.shape[0] == 0:
        resid = diag
    else:
        resid = np.empty(X.shape[0])
        for start in range(0, X.shape[0], _BLOCK):
            block = slice(start, start + _BLOCK)
            proj = _kernel(X[block], P, spec) @ R
            resid[block] = diag[block] - np.einsum("ij,ij->i", proj, proj)
    resid[resid <= _RESIDUAL_RTOL * diag] = 0.0
    state = dict(state or {})
    state["kpca_scores"] = resid[_row_order(client, state)]
    return state, _score_summary(resid, budget)


@client_step("kernel_pca.project")
def _project_step(client, state, message, *, spec, upload, local_rank, sketch_width):
    """disLR, worker part 1: Π[m] = Rᵀ K_{Y, X[m]}, kept as what the upload
    needs (the r × r Gram Π Πᵀ, or the right sketch Π T_m), plus the column
    sums of Π for centering; upload the column sums (r floats)."""
    Y, R, gamma = message
    spec = dict(spec, gamma=gamma)
    X = client.X
    n = X.shape[0]
    r = R.shape[1]
    gram = np.zeros((r, r), order="F")
    colsum = np.zeros(r)
    sketch = cs = None
    state = dict(state or {})
    order = _row_order(client, state)
    if upload == "sketch":
        # Sketch [Πᵀ, 1] so that the centred sketch (Π − m1ᵀ)T = ΠT − m(1ᵀT)
        # can be formed once the mean m is known.
        n_mid = 4 * sketch_width
        if n > n_mid:
            buckets, signs = sample_count_sketch(
                client.random_state("kernel_pca.count_sketch"), n, n_mid
            )
            # Buckets belong to canonical positions; map them to storage order.
            rank = np.empty_like(order)
            rank[order] = np.arange(n)
            cs = count_sketch_matrix(buckets[rank], signs[rank], n_mid).T.tocsc()
            sketch = np.zeros((n_mid, r + 1))
        else:
            sketch = np.zeros((n, r + 1))
    # A client with fewer rows than r works on its n × r projections and
    # never forms the r × r Gram matrix (O(r²) per client, the fixed cost
    # that dominated with a thousand small clients); it keeps them, as they
    # are smaller than that Gram matrix. A larger client keeps only the
    # Gram matrix and recomputes its projections for the sign round (a
    # second kernel pass): held until then, n_m · r floats per client add
    # up to N · r over the federation (3.2 GB at N = 1M, r = 400).
    small = n < r
    kept = [] if small else None
    if small:
        gram = None
    for start in range(0, n, _BLOCK):
        block = slice(start, start + _BLOCK)
        Pt = _kernel(X[block], Y, spec) @ R
        if kept is not None:
            kept.append(Pt)
        if not small:
            # Upper triangle only (BLAS syrk): half the flops of Ptᵀ Pt.
            gram = scipy.linalg.blas.dsyrk(
                1.0, Pt.T, beta=1.0, c=gram, overwrite_c=True
            )
        colsum += Pt.sum(axis=0)
        if sketch is not None:
            aug = np.hstack([Pt, np.ones((Pt.shape[0], 1))])
            if cs is None:
                sketch[block] = aug
            else:
                sketch += cs[:, block] @ aug
    if not small:
        gram = np.triu(gram) + np.triu(gram, 1).T
    if cs is None and sketch is not None:
        sketch = sketch[order]
    state["kpca_basis"] = (Y, R, spec)
    if kept is not None:
        state["kpca_projections"] = np.vstack(kept) if kept else np.zeros((0, r))
    state["kpca_gram"] = gram
    state["kpca_colsum"] = colsum
    state["kpca_n"] = n
    state["kpca_trace"] = float(_kernel_diag(X, spec).sum())
    state["kpca_upload"] = (upload, local_rank, sketch_width)
    if sketch is not None:
        state["kpca_sketch"] = sketch_columns(
            sketch.T, sketch_width, client.random_state("kernel_pca.lowrank_sketch")
        )
    return state, colsum


@client_step("kernel_pca.lowrank")
def _lowrank_step(client, state, mean):
    """disLR, worker part 2: upload Π[m] T_m ("sketch") or U_q Σ_q of Π[m]
    ("local_svd"), both centred on ``mean`` when it is not None."""
    state = dict(state)
    gram, colsum, n = state["kpca_gram"], state["kpca_colsum"], state["kpca_n"]
    upload, local_rank, _ = state["kpca_upload"]
    if mean is not None:
        state["kpca_mean"] = mean
        if gram is not None:
            cross = np.outer(colsum, mean)
            gram = gram - cross - cross.T + n * np.outer(mean, mean)
            state["kpca_gram"] = gram
    if upload == "sketch":
        sketch = state.pop("kpca_sketch")
        factor = sketch[:-1]
        if mean is not None:
            factor = factor - np.outer(mean, sketch[-1])
        return state, factor
    if gram is None:
        # A small client: the SVD of its n × r projections (O(n² r)) gives
        # the same U_q Σ_q as the r × r eigenproblem (O(r³)).
        centred = _centred_projections(state)
        r = centred.shape[1]
        q = min(local_rank, n, r)
        _, sv, Vt = np.linalg.svd(centred, full_matrices=False)
        return state, Vt[:q].T * sv[:q]
    r = gram.shape[0]
    q = min(local_rank, n, r)
    if q == 0:
        return state, np.zeros((r, 0))
    # Only the top q eigenpairs are needed (q ≈ 2k ≪ r).
    lam, U = scipy.linalg.eigh(gram, subset_by_index=[r - q, r - 1])
    lam, U = lam[::-1], U[:, ::-1]
    return state, U * np.sqrt(np.clip(lam, 0, None))


@client_step("kernel_pca.project_and_lowrank")
def _project_and_lowrank_step(client, state, message, *, project):
    """disLR in one round when there is no centering."""
    state, _ = _project_step(client, state, message, **project)
    return _lowrank_step(client, state, None)


@client_step("kernel_pca.error")
def _error_step(client, state, W):
    """Approximation error and sign, worker part: trace of the local kernel
    block, the energy ‖w_iᵀ Π[m]‖² captured by each component, and per
    component the client's projection of largest magnitude, signed
    (1 + 2k floats)."""
    mean = state.get("kpca_mean")
    gram = state["kpca_gram"]
    if gram is None:
        energy = np.sum((_centred_projections(state) @ W) ** 2, axis=0)
    else:
        energy = np.einsum("ij,ij->j", W, gram @ W)
    shift = np.zeros(W.shape[1]) if mean is None else mean @ W
    extreme = np.zeros(W.shape[1])
    for proj in _client_projections(client, state):
        extreme = _signed_extreme(np.vstack([extreme, proj @ W - shift]))
    return state, (state["kpca_trace"], energy, extreme)


def _centred_projections(state):
    """A small client's kept Π[m]ᵀ, minus the projected mean if centred."""
    kept, mean = state["kpca_projections"], state.get("kpca_mean")
    return kept if mean is None else kept - mean


def _client_projections(client, state):
    """Blocks of Π[m]ᵀ = K_{X[m], Y} R: kept ones, or recomputed."""
    kept = state.get("kpca_projections")
    if kept is not None:
        yield kept
        return
    Y, R, spec = state["kpca_basis"]
    X = client.X
    for start in range(0, X.shape[0], _BLOCK):
        yield _kernel(X[start : start + _BLOCK], Y, spec) @ R


def _signed_extreme(values):
    """Per column, the entry of largest magnitude with its sign (the first
    one on ties)."""
    if values.shape[0] == 0:
        return np.zeros(values.shape[1])
    rows = np.argmax(np.abs(values), axis=0)
    return values[rows, np.arange(values.shape[1])]


# ---------------------------------------------------------------------------
# Server steps


def _leverage_basis(sketches, embedding_dim):
    """disLS, master: QR of [G[1] … G[M]]ᵀ = U Z; returns Z (t × t)."""
    stacked = np.hstack(sketches).T
    Z = np.linalg.qr(stacked, mode="r")
    if Z.shape[0] < embedding_dim:  # fewer sketched points than t
        Z = np.vstack([Z, np.zeros((embedding_dim - Z.shape[0], Z.shape[1]))])
    return Z[:embedding_dim]


def _lowrank_solve(factors, n_components):
    """disLR, master: W = top-k left singular vectors of [Π[1]T_1 … Π[M]T_M]."""
    stacked = np.hstack(factors)
    U, s, _ = np.linalg.svd(stacked, full_matrices=False)
    rank = int(np.sum(s > _EIG_RTOL * s[0])) if s.size and s[0] > 0 else 0
    return U[:, : min(n_components, rank)]


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


def _error_totals(stats):
    """Σ_m trace(K_m), Σ_m energies (the error is their difference), and
    per component the sign of the training projection of largest
    magnitude over all clients."""
    trace = float(sum(t for t, _, _ in stats))
    energy = np.sum([e for _, e, _ in stats], axis=0)
    signs = np.sign(_signed_extreme(np.vstack([x for _, _, x in stats])))
    signs[signs == 0] = 1.0
    return trace, np.asarray(energy, dtype=np.float64), signs
