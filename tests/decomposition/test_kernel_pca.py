"""Tests for skfed.DistributedKernelPCA (disKPCA, Balcan et al. KDD 2016)."""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose
from scipy.linalg import subspace_angles
from sklearn import config_context
from sklearn.datasets import load_digits, make_blobs
from sklearn.decomposition import KernelPCA
from sklearn.linear_model import LogisticRegression
from sklearn.metrics.pairwise import (
    euclidean_distances,
    laplacian_kernel,
    linear_kernel,
    manhattan_distances,
    polynomial_kernel,
    rbf_kernel,
)
from sklearn.model_selection import GroupKFold, cross_validate
from sklearn.pipeline import Pipeline
from threadpoolctl import threadpool_limits

from skfed import DistributedKernelPCA
from skfed._testing import assert_runs_its_declared_rounds
from skfed.kernel import allocate_quota
from skfed.partition import power_law
from skfed.privacy import DifferentialPrivacy


def exact_kernel(est, X):
    """The kernel matrix of X under the fitted estimator's kernel."""
    if est.kernel == "rbf":
        return rbf_kernel(X, gamma=est.gamma_)
    if est.kernel == "laplacian":
        return laplacian_kernel(X, gamma=est.gamma_)
    if est.kernel == "poly":
        return polynomial_kernel(
            X, gamma=est.gamma_, degree=est.degree, coef0=est.coef0
        )
    return linear_kernel(X)


def central_error(est, X, K=None):
    """‖φ(A) − LLᵀφ(A)‖² = trace(K) − ‖Cᵀ K_{Y,A}‖²_F, computed centrally."""
    K = exact_kernel(est, X) if K is None else K
    return np.trace(K) - np.sum(est.transform(X) ** 2)


def optimum(K, k):
    """Σ_{i>k} λ_i and Σ_{i≤k} λ_i of the uncentered kernel matrix."""
    lam = np.linalg.eigvalsh(K)[::-1]
    return lam[k:].sum(), lam[:k].sum()


@pytest.fixture(autouse=True, scope="module")
def one_blas_thread():
    # Many small eigendecompositions: BLAS threads only add contention on a
    # shared 2-core machine.
    with threadpool_limits(1):
        yield


@pytest.fixture(scope="module")
def digits():
    X = load_digits().data[:500]
    return X / 16.0


@pytest.fixture(scope="module")
def varying_norms():
    """Sparse data whose row norms vary over orders of magnitude (log-normal
    scales): the polynomial kernel's energy sits on few rows."""
    rng = np.random.RandomState(0)
    X = sp.random(500, 200, density=0.05, random_state=rng, format="csr")
    X = (sp.diags(np.exp(rng.normal(0, 1.0, 500))) @ X).tocsr()
    gamma = 1.0 / np.median(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    return X, gamma


# ---------------------------------------------------------------------------
# Quality against the exact kernel eigendecomposition


def test_error_ratio_near_optimal_and_shrinking_with_representatives(digits):
    X = digits
    k = 10
    parts = power_law(X.shape[0], 5, random_state=0)
    ratios = {}
    for n_rep in (30, 200):
        runs = []
        for seed in range(2):
            est = DistributedKernelPCA(
                k,
                n_representatives=n_rep,
                median_factor=1.0,
                random_state=seed,
                center=False,
            ).fit(X, partitions=parts)
            K = exact_kernel(est, X)
            opt, top = optimum(K, k)
            err = central_error(est, X, K)
            # The federated error (two kinds of scalars per client) is the
            # central one.
            assert est.approximation_error_ == pytest.approx(err, rel=1e-8)
            assert est.approximation_error_ / opt >= 1 - 1e-9
            runs.append(err / opt)
        ratios[n_rep] = np.mean(runs)
    assert ratios[200] <= 1.2
    assert ratios[200] < ratios[30]
    # The lenient ratio hides little here: most of the top-k energy is
    # captured too.
    assert est.eigenvalues_.sum() / top > 0.95


def test_error_ratio_polynomial_kernel_sparse(varying_norms):
    X, gamma = varying_norms
    k = 5
    est = DistributedKernelPCA(
        k,
        kernel="poly",
        degree=3,
        gamma=gamma,
        n_representatives=200,
        random_state=0,
        center=False,
    ).fit(X, partitions=power_law(X.shape[0], 5, random_state=1))
    K = exact_kernel(est, X)
    opt, _ = optimum(K, k)
    assert central_error(est, X, K) / opt <= 1.2
    assert est.approximation_error_ == pytest.approx(central_error(est, X, K), rel=1e-8)
    assert sp.issparse(est.representatives_)


def test_leverage_adaptive_beats_uniform_on_varying_norms(varying_norms):
    X, gamma = varying_norms
    k = 5
    parts = power_law(X.shape[0], 5, random_state=1)
    K = polynomial_kernel(X, gamma=gamma, degree=3, coef0=1.0)
    opt, _ = optimum(K, k)
    ratio = {}
    for sampling in ("leverage+adaptive", "uniform"):
        ratio[sampling] = np.mean(
            [
                DistributedKernelPCA(
                    k,
                    kernel="poly",
                    degree=3,
                    gamma=gamma,
                    n_representatives=40,
                    sampling=sampling,
                    random_state=seed,
                )
                .fit(X, partitions=parts)
                .approximation_error_
                / opt
                for seed in range(2)
            ]
        )
    assert ratio["leverage+adaptive"] < 0.5 * ratio["uniform"]


@pytest.mark.parametrize(
    "sampling, upload",
    [("leverage+adaptive", "local_svd"), ("uniform", "sketch")],
)
def test_all_points_as_representatives_is_exact_kpca(sampling, upload):
    rng = np.random.RandomState(0)
    X = rng.normal(size=(90, 4))
    k = 4
    est = DistributedKernelPCA(
        k,
        gamma=0.3,
        n_representatives=90,
        sampling=sampling,
        lowrank_upload=upload,
        local_rank=90,
        random_state=0,
        center=False,
    ).fit(X, partitions=power_law(90, 3, random_state=0))
    K = rbf_kernel(X, gamma=0.3)
    lam, V = np.linalg.eigh(K)
    Z = est.transform(X)
    assert np.max(subspace_angles(Z, V[:, -k:])) < 1e-6
    assert_allclose(est.eigenvalues_, lam[::-1][:k], rtol=1e-8)
    # The components are orthonormal in feature space: Cᵀ K_YY C = I.
    Y, C = est.representatives_, est.dual_coef_
    assert_allclose(C.T @ rbf_kernel(Y, gamma=0.3) @ C, np.eye(k), atol=1e-8)


@pytest.mark.parametrize("sampling", ["uniform", "leverage+adaptive"])
def test_default_with_all_points_matches_sklearn_kernel_pca(sampling):
    # The defaults centre as KernelPCA does, and the components carry
    # KernelPCA's signs (svd_flip on its eigenvectors), not just its span.
    rng = np.random.RandomState(1)
    X = rng.normal(size=(80, 3))
    k = 4
    est = DistributedKernelPCA(
        k,
        gamma=0.5,
        n_representatives=80,
        sampling=sampling,
        local_rank=80,
        random_state=0,
    )
    Z = est.fit_transform(X, partitions=4)
    ref = KernelPCA(k, kernel="rbf", gamma=0.5, eigen_solver="dense").fit(X)
    assert_allclose(Z, ref.transform(X), atol=1e-7)
    assert_allclose(est.eigenvalues_, ref.eigenvalues_, rtol=1e-7)
    # New points are centred with the training mean as well.
    Xnew = rng.normal(size=(5, 3))
    assert_allclose(est.transform(Xnew), ref.transform(Xnew), atol=1e-7)


@pytest.mark.parametrize("center", [True, False])
def test_sign_convention_largest_training_projection_is_positive(digits, center):
    # With |Y| < N the span is approximate, but the convention is exact: on
    # every component, the training sample of largest |projection| projects
    # positively, however the rows are spread over clients.
    X = digits[:300]
    kw = {"n_representatives": 60, "random_state": 0, "center": center}
    Z = DistributedKernelPCA(5, **kw).fit_transform(X, partitions=5)
    top = np.argmax(np.abs(Z), axis=0)
    assert np.all(Z[top, np.arange(5)] > 0)
    # A client holding the extreme row alone changes nothing.
    parts = np.zeros(300, dtype=int)
    parts[top[0]] = 1
    Z2 = DistributedKernelPCA(5, **kw).fit_transform(X, partitions=parts)
    assert np.all(Z2[np.argmax(np.abs(Z2), axis=0), np.arange(5)] > 0)


def test_linear_kernel_with_all_points_is_uncentered_pca():
    rng = np.random.RandomState(2)
    X = rng.normal(size=(60, 6)) @ rng.normal(size=(6, 6))
    est = DistributedKernelPCA(
        2,
        kernel="linear",
        n_representatives=60,
        local_rank=60,
        random_state=0,
        center=False,
    ).fit(X, partitions=3)
    _, s, Vt = np.linalg.svd(X, full_matrices=False)
    Z = est.transform(X)
    assert_allclose(np.abs(Z), np.abs(X @ Vt[:2].T), atol=1e-8)
    assert_allclose(est.eigenvalues_, s[:2] ** 2, rtol=1e-8)


def test_local_svd_matches_exact_solve_and_beats_sketch_per_float(digits):
    X = digits
    parts = power_law(X.shape[0], 5, random_state=0)
    common = {"n_representatives": 100, "median_factor": 1.0, "random_state": 0}
    exact = DistributedKernelPCA(10, local_rank=100, **common).fit(X, partitions=parts)
    local = DistributedKernelPCA(10, **common).fit(X, partitions=parts)
    sketch = DistributedKernelPCA(10, lowrank_upload="sketch", **common).fit(
        X, partitions=parts
    )
    assert_allclose(exact.representatives_, local.representatives_)
    assert local.approximation_error_ == pytest.approx(
        exact.approximation_error_, rel=1e-3
    )
    assert sketch.approximation_error_ >= local.approximation_error_ * (1 - 1e-6)
    up = {
        name: e.communication_.floats_by_name()["disLR"]
        for name, e in [("local", local), ("sketch", sketch)]
    }
    # Small clients send Π[m] unsketched, so the gap is below the q/w ratio.
    assert up["local"] * 2 < up["sketch"]


# ---------------------------------------------------------------------------
# Communication


def _per_client(log, name, direction):
    (record,) = [r for r in log if r.name == name and r.direction == direction]
    return dict(zip(record.clients, record.floats))


@pytest.mark.parametrize("upload", ["local_svd", "sketch"])
def test_ledger_matches_per_round_formulas(upload):
    rng = np.random.RandomState(0)
    n, d = 700, 5
    X = rng.normal(size=(n, d))
    parts = power_law(n, 6, random_state=0)
    sizes = np.bincount(parts)
    k, n_rep, t, p, w, q = 3, 40, 8, 30, 25, 5
    est = DistributedKernelPCA(
        k,
        n_representatives=n_rep,
        embedding_dim=t,
        sketch_size=p,
        n_random_features=100,
        lowrank_upload=upload,
        lowrank_sketch_size=w,
        local_rank=q,
        random_state=0,
        center=False,
    ).fit(X, partitions=parts)
    log = est.communication_
    r, n_y = est.rank_, est.n_representatives_
    m1 = n_rep // 2
    median_quota = allocate_quota(256, sizes, sizes)
    expected = {
        ("median sample", "download"): [2] * 6,
        ("median sample", "upload"): list(median_quota * min(d, 64)),
        ("embedding", "download"): [2] * 6,
        ("embedding", "upload"): [t * min(s, p) for s in sizes],
        ("leverage scores", "download"): [t * t] * 6,
        ("leverage scores", "upload"): [1 + min(m1, s) for s in sizes],
        ("leverage sample", "download"): [1] * 6,
        # P, its basis R_P (the RBF kernel of distinct rows has full rank,
        # so |P| x |P|) and γ.
        ("adaptive residuals", "download"): [m1 * d + m1 * m1 + 1] * 6,
        ("adaptive residuals", "upload"): [1 + min(n_rep - m1, s) for s in sizes],
        ("adaptive sample", "download"): [1] * 6,
        ("disLR", "download"): [n_y * d + n_y * r + 1] * 6,
        ("disLR", "upload"): [
            r * (min(q, r, s) if upload == "local_svd" else min(w, s)) for s in sizes
        ],
        ("error", "download"): [r * k] * 6,
        ("error", "upload"): [1 + 3 * k] * 6,
    }
    for (name, direction), floats in expected.items():
        got = _per_client(log, name, direction)
        assert [got[c] for c in range(6)] == floats, (name, direction)
    # Sampled rows: d floats each, m₁ and m₂ of them in total.
    assert sum(_per_client(log, "leverage sample", "upload").values()) == m1 * d
    assert sum(_per_client(log, "adaptive sample", "upload").values()) == (
        (n_rep - m1) * d
    )
    assert log.n_rounds == 8 and n_y == n_rep


def test_ledger_uniform_and_centered_rounds():
    rng = np.random.RandomState(0)
    X = rng.normal(size=(300, 4))
    parts = power_law(300, 4, random_state=0)
    sizes = np.bincount(parts)
    est = DistributedKernelPCA(
        2, gamma=0.5, n_representatives=30, sampling="uniform", center=True
    ).fit(X, partitions=parts)
    log, r = est.communication_, est.rank_
    assert [r.name for r in log if r.direction == "upload"] == [
        "uniform sample",
        "feature mean",
        "disLR",
        "error",
    ]
    quota = allocate_quota(30, sizes, sizes)
    assert list(_per_client(log, "uniform sample", "upload").values()) == list(
        quota * 4
    )
    # 30 split as 20.9, 5.3, 2.4 and 1.4: the last two tie for the last
    # draw and both take it (see allocate_quota).
    n_y = est.n_representatives_
    assert n_y == quota.sum() == 31
    assert set(_per_client(log, "feature mean", "download").values()) == {
        n_y * 4 + n_y * r + 1
    }
    assert set(_per_client(log, "feature mean", "upload").values()) == {r}
    assert set(_per_client(log, "disLR", "download").values()) == {r}


def test_communication_does_not_grow_with_n():
    rng = np.random.RandomState(0)
    n_per, d = 150, 6
    X = rng.normal(size=(4 * n_per, d))
    parts = np.repeat(np.arange(4), n_per)
    X2 = np.vstack([X, rng.normal(size=X.shape)])
    parts2 = np.concatenate([parts, parts])
    params = {
        "n_components": 3,
        "n_representatives": 40,
        "embedding_dim": 10,
        "sketch_size": 40,
        "n_random_features": 100,
        "random_state": 0,
    }
    small = DistributedKernelPCA(**params).fit(X, partitions=parts)
    large = DistributedKernelPCA(**params).fit(X2, partitions=parts2)
    assert small.rank_ == large.rank_ == 40
    for direction in ("upload", "download"):
        assert small.communication_.floats_by_name(
            direction
        ) == large.communication_.floats_by_name(direction)
    assert small.communication_.n_rounds == large.communication_.n_rounds


# ---------------------------------------------------------------------------
# Invariances


@settings(max_examples=4, deadline=None)
@given(perm=st.permutations(range(5)))
def test_client_relabelling_invariance(perm):
    rng = np.random.RandomState(3)
    X = rng.normal(size=(250, 4))
    parts = power_law(250, 5, random_state=0)
    params = {"n_components": 3, "n_representatives": 30, "random_state": 0}
    ref = DistributedKernelPCA(**params).fit(X, partitions=parts)
    names = np.array(["a", "b", "c", "d", "e"])[list(perm)]
    est = DistributedKernelPCA(**params).fit(X, partitions=names[parts])
    assert_allclose(est.representatives_, ref.representatives_)
    assert_allclose(est.transform(X), ref.transform(X), atol=1e-8)
    assert est.communication_.total_floats == ref.communication_.total_floats


def test_n_jobs_and_sample_order_do_not_change_the_model():
    rng = np.random.RandomState(4)
    X = rng.normal(size=(200, 3))
    parts = power_law(200, 4, random_state=0)
    params = {"n_components": 2, "n_representatives": 20, "random_state": 0}
    ref = DistributedKernelPCA(**params).fit(X, partitions=parts)
    par = DistributedKernelPCA(n_jobs=2, **params).fit(X, partitions=parts)
    order = rng.permutation(200)
    shuffled = DistributedKernelPCA(**params).fit(X[order], partitions=parts[order])
    for est in (par, shuffled):
        assert_allclose(est.transform(X), ref.transform(X), atol=1e-8)


# ---------------------------------------------------------------------------
# Input types


def test_sparse_input_gives_the_dense_model(varying_norms):
    X, gamma = varying_norms
    params = {
        "n_components": 3,
        "kernel": "poly",
        "gamma": gamma,
        "n_representatives": 30,
        "random_state": 0,
    }
    parts = power_law(X.shape[0], 3, random_state=0)
    sparse = DistributedKernelPCA(**params).fit(X, partitions=parts)
    dense = DistributedKernelPCA(**params).fit(X.toarray(), partitions=parts)
    assert_allclose(sparse.representatives_.toarray(), dense.representatives_)
    assert_allclose(sparse.transform(X), dense.transform(X.toarray()), rtol=1e-6)


@pytest.mark.parametrize("kernel", ["rbf", "laplacian"])
def test_float32_is_kept_and_close_to_float64(kernel):
    rng = np.random.RandomState(5)
    X = rng.normal(size=(150, 5))
    params = {
        "n_components": 3,
        "kernel": kernel,
        "n_representatives": 30,
        "random_state": 0,
    }
    est64 = DistributedKernelPCA(**params).fit(X, partitions=3)
    est32 = DistributedKernelPCA(**params).fit(X.astype(np.float32), partitions=3)
    Z32 = est32.transform(X.astype(np.float32))
    assert Z32.dtype == np.float32
    assert est32.dual_coef_.dtype == np.float32
    assert est32.gamma_ == pytest.approx(est64.gamma_, rel=1e-5)
    # float32 rows hash differently, so the clients' draws (and Y) differ:
    # compare the quality, not the exact fit.
    assert_allclose(est32.approximation_error_, est64.approximation_error_, rtol=0.02)


@pytest.mark.parametrize("n_features", [20, 150])
@pytest.mark.parametrize(
    "params, factor",
    [({"median_factor": 0.2}, 0.2), ({}, 1.0)],
    ids=["paper", "default"],
)
def test_median_heuristic_gamma_matches_the_papers_rule(n_features, params, factor):
    rng = np.random.RandomState(6)
    X = rng.normal(size=(600, n_features)) * rng.uniform(0.5, 2, n_features)
    est = DistributedKernelPCA(2, n_representatives=10, random_state=0, **params).fit(
        X, partitions=power_law(600, 4, random_state=0)
    )
    med = np.median(euclidean_distances(X)[np.triu_indices(600, 1)])
    assert est.gamma_ == pytest.approx(1 / (2 * (factor * med) ** 2), rel=0.15)


def test_laplacian_median_heuristic_on_sparse_input(varying_norms):
    X, _ = varying_norms
    est = DistributedKernelPCA(
        2, kernel="laplacian", n_representatives=10, median_factor=1.0, random_state=0
    ).fit(X, partitions=3)
    med = np.median(manhattan_distances(X)[np.triu_indices(X.shape[0], 1)])
    assert est.gamma_ == pytest.approx(1 / med, rel=0.15)
    # Rows were sent as CSR: the ledger counts nnz + indices + indptr.
    sent = sum(_per_client(est.communication_, "median sample", "upload").values())
    assert sent < 256 * X.shape[1]


def test_feature_names_set_output_and_pipeline_routing(digits):
    pd = pytest.importorskip("pandas")
    X = pd.DataFrame(digits[:200], columns=[f"px{i}" for i in range(64)])
    y = load_digits().target[:200]
    parts = power_law(200, 3, random_state=0)
    est = DistributedKernelPCA(3, n_representatives=30, random_state=0)
    est.set_output(transform="pandas")
    Z = est.fit_transform(X, partitions=parts)
    assert list(Z.columns) == [f"distributedkernelpca{i}" for i in range(3)]
    assert list(est.feature_names_in_) == list(X.columns)
    pipe = Pipeline(
        [
            (
                "kpca",
                DistributedKernelPCA(
                    10, n_representatives=60, median_factor=1.0, random_state=0
                ),
            ),
            ("clf", LogisticRegression(max_iter=200)),
        ]
    )
    pipe.fit(X, y, kpca__partitions=parts)
    assert pipe.named_steps["kpca"].n_clients_ == 3
    assert pipe.score(X, y) > 0.8


# ---------------------------------------------------------------------------
# Bad input


def test_too_many_components_or_representatives():
    X = np.random.RandomState(0).normal(size=(50, 3))
    with pytest.raises(ValueError, match="n_components=50 must be smaller"):
        DistributedKernelPCA(50).fit(X)
    with pytest.raises(ValueError, match="n_components=10 must be smaller"):
        DistributedKernelPCA(10, n_representatives=10).fit(X)
    # More representatives than samples: all of them, with a warning, as
    # scikit-learn's Nystroem does (this raised before, failing the
    # defaults on iris, wine or any data set under 400 rows).
    with pytest.warns(UserWarning, match="n_representatives=60 exceeds the 50"):
        est = DistributedKernelPCA(3, n_representatives=60, random_state=0).fit(X)
    assert est.n_representatives_ == 50


def test_defaults_on_small_data_match_kernel_pca():
    # 400 representatives by default: on 150 rows every row is one, and the
    # fit is kernel PCA of the same centering and kernel width, up to the
    # clients' rank-2k truncation of their share (lowrank_upload). The
    # defaults are sizes for large data: clipped to small data silently.
    import warnings

    from sklearn.datasets import load_iris

    X = load_iris().data
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = DistributedKernelPCA(2, center=True, random_state=0).fit(
            X, partitions=np.arange(150) % 3
        )
    assert est.n_representatives_ == len(np.unique(X, axis=0))  # every row
    # A size other than the default is the user's: clipped with a warning.
    with pytest.warns(UserWarning, match="n_representatives=500 exceeds the 150"):
        DistributedKernelPCA(2, n_representatives=500, random_state=0).fit(X)
    ref = KernelPCA(2, kernel="rbf", gamma=est.gamma_).fit(X)
    np.testing.assert_allclose(est.eigenvalues_, ref.eigenvalues_, rtol=1e-4)
    np.testing.assert_allclose(
        np.abs(est.transform(X)), np.abs(ref.transform(X)), atol=1e-3
    )


def test_sizes_that_would_allocate_gigabytes_are_refused_up_front():
    X = np.random.RandomState(0).normal(size=(120, 4))
    with pytest.warns(UserWarning, match="embedding_dim=10000 exceeds"):
        est = DistributedKernelPCA(2, embedding_dim=10**4, random_state=0).fit(X)
    assert np.all(np.isfinite(est.transform(X)))
    with pytest.raises(ValueError, match="n_random_features=10000000 would make"):
        DistributedKernelPCA(2, n_random_features=10**7).fit(X)


def test_clients_smaller_than_their_quota():
    rng = np.random.RandomState(0)
    X = rng.normal(size=(120, 3))
    parts = power_law(120, 20, random_state=0)  # many clients of 1-2 samples
    for sampling in ("leverage+adaptive", "uniform"):
        est = DistributedKernelPCA(
            3, gamma=0.5, n_representatives=110, sampling=sampling, random_state=0
        ).fit(X, partitions=parts)
        assert est.n_representatives_ == 110
        assert np.isfinite(est.transform(X)).all()
    # Every sample requested: the quotas are the client sizes.
    est = DistributedKernelPCA(
        3, gamma=0.5, n_representatives=120, sampling="uniform", random_state=0
    ).fit(X, partitions=parts)
    assert est.n_representatives_ == 120


def test_duplicated_rows_are_deduplicated_and_exact():
    rng = np.random.RandomState(0)
    base = rng.normal(size=(25, 3))
    X = np.vstack([base] * 6)
    est = DistributedKernelPCA(
        3, gamma=0.5, n_representatives=60, local_rank=30, random_state=0, center=False
    ).fit(X, partitions=4)
    assert est.n_representatives_ <= 25
    assert len(np.unique(est.representatives_, axis=0)) == est.n_representatives_
    K = rbf_kernel(X, gamma=0.5)
    opt, _ = optimum(K, 3)
    assert central_error(est, X, K) / opt == pytest.approx(1.0, abs=1e-3)


def test_constant_columns_and_rank_deficient_kernel():
    rng = np.random.RandomState(0)
    X = np.hstack([rng.normal(size=(80, 2)), np.zeros((80, 3)), np.ones((80, 1))])
    est = DistributedKernelPCA(
        4, n_representatives=30, random_state=0, center=False
    ).fit(X, partitions=3)
    K = exact_kernel(est, X)
    assert central_error(est, X, K) / optimum(K, 4)[0] < 1.2
    # A linear kernel on 2 informative columns has rank 3 < 4 components.
    with pytest.warns(UserWarning, match="Only 3 directions"):
        lin = DistributedKernelPCA(
            4, kernel="linear", n_representatives=30, random_state=0, center=False
        ).fit(X, partitions=3)
    Z = lin.transform(X)
    assert np.isfinite(Z).all() and np.allclose(Z[:, 3], 0)
    assert lin.eigenvalues_[3] == 0


def test_identical_rows():
    X = np.ones((40, 3))
    with pytest.raises(ValueError, match="identical"):
        DistributedKernelPCA(2, n_representatives=5).fit(X)
    with pytest.warns(UserWarning, match="Only 1 directions"):
        est = DistributedKernelPCA(2, gamma=1.0, n_representatives=5, center=False).fit(
            X
        )
    assert est.n_representatives_ == 1
    assert est.approximation_error_ == pytest.approx(0, abs=1e-8)
    # Centred, identical rows have no variance at all.
    with pytest.warns(UserWarning, match="Only 0 directions"):
        est = DistributedKernelPCA(2, gamma=1.0, n_representatives=5).fit(X)
    assert_allclose(est.transform(X), 0, atol=1e-12)
    assert est.approximation_error_ == pytest.approx(0, abs=1e-8)


def test_nan_is_rejected():
    X = np.random.RandomState(0).normal(size=(30, 3))
    X[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        DistributedKernelPCA(2, n_representatives=10).fit(X)


def test_leave_clients_out_cross_validation_with_routing(digits):
    X, y = digits[:300], load_digits().target[:300]
    parts = power_law(300, 4, random_state=0)
    with config_context(enable_metadata_routing=True):
        pipe = Pipeline(
            [
                (
                    "kpca",
                    DistributedKernelPCA(
                        8, n_representatives=40, median_factor=1.0, random_state=0
                    ),
                ),
                ("clf", LogisticRegression(max_iter=200)),
            ]
        )
        cv = GroupKFold(2).set_split_request(groups="partitions")
        scores = cross_validate(
            pipe, X, y, cv=cv, params={"partitions": parts}, return_estimator=True
        )
    # Each client is held out once, so the two training folds together hold
    # every client once.
    assert sum(e.named_steps["kpca"].n_clients_ for e in scores["estimator"]) == 4
    assert np.mean(scores["test_score"]) > 0.5


def test_all_zero_data_in_feature_space():
    X = np.zeros((30, 4))
    with pytest.raises(ValueError, match="κ\\(x, x\\) = 0 for every sample"):
        DistributedKernelPCA(2, kernel="linear", n_representatives=5).fit(X)
    # With coef0 > 0 the polynomial kernel is constant: one direction.
    with pytest.warns(UserWarning, match="Only 1 directions"):
        est = DistributedKernelPCA(
            2, kernel="poly", n_representatives=5, random_state=0, center=False
        ).fit(X, partitions=3)
    assert est.approximation_error_ == pytest.approx(0, abs=1e-9)


def test_uniform_representatives_with_zero_features():
    # Uniform sampling can draw only rows with κ(y, y) = 0 (here all-zero
    # rows under a linear kernel): a clear error, not a failure inside a
    # client's disLR step.
    rng = np.random.RandomState(0)
    X = np.zeros((200, 4))
    X[:4] = rng.normal(size=(4, 4))
    for data in (np.zeros((30, 4)), X):
        with pytest.raises(ValueError, match="span nothing in feature space"):
            DistributedKernelPCA(
                2,
                kernel="linear",
                sampling="uniform",
                n_representatives=3,
                random_state=1,
            ).fit(data, partitions=3)
    # Leverage + adaptive sampling never draws them.
    est = DistributedKernelPCA(
        2, kernel="linear", n_representatives=3, random_state=1
    ).fit(X, partitions=3)
    assert est.rank_ == 3


def test_verbose_reports_each_round(capsys):
    X = np.random.RandomState(0).normal(size=(60, 3))
    DistributedKernelPCA(2, n_representatives=10, verbose=1, random_state=0).fit(
        X, partitions=2
    )
    err = capsys.readouterr().err
    for name in ("median sample", "embedding", "leverage scores", "disLR", "error"):
        assert f"'{name}'" in err


def test_many_clients_still_find_the_dominant_rows(varying_norms):
    X, gamma = varying_norms
    k = 5
    parts = power_law(X.shape[0], 40, random_state=0)
    K = polynomial_kernel(X, gamma=gamma, degree=3, coef0=1.0)
    opt, _ = optimum(K, k)
    for seed in range(2):
        est = DistributedKernelPCA(
            k,
            kernel="poly",
            degree=3,
            gamma=gamma,
            n_representatives=40,
            random_state=seed,
        ).fit(X, partitions=parts)
        assert est.n_clients_ == 40
        assert est.approximation_error_ / opt < 1.1


def test_no_leverage_draws_skip_the_leverage_rounds(digits):
    est = DistributedKernelPCA(
        3, n_representatives=30, leverage_fraction=0.0, random_state=0
    ).fit(digits, partitions=3)
    names = {r.name for r in est.communication_.records}
    assert {"embedding", "leverage scores", "leverage sample"}.isdisjoint(names)
    assert {"adaptive residuals", "adaptive sample"} <= names
    assert est.n_representatives_ <= 30


# --------------------------------------------------------------------------
# The rounds the estimator declares


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"sampling": "uniform", "center": False},
        {"leverage_fraction": 1.0, "kernel": "laplacian"},
        {"leverage_fraction": 0.0, "kernel": "poly", "secure_aggregation": True},
        {"kernel": "linear", "lowrank_upload": "sketch"},
        {"solver": "random_features", "n_random_features": 40},
        {"solver": "random_features", "n_random_features": 40, "gamma": 0.3},
        {
            "n_random_features": 40,
            "gamma": 0.3,
            "privacy": DifferentialPrivacy(epsilon=4.0, delta=1e-6),
        },
    ],
)
def test_a_fit_runs_the_rounds_it_declares(params, rounds_run):
    X = np.random.RandomState(0).normal(size=(240, 4))
    est = DistributedKernelPCA(2, n_representatives=30, random_state=0, **params)
    est.fit(X, partitions=3)
    assert_runs_its_declared_rounds(est, rounds_run)
    noised = sum(r["noised"] for r in est.communication_.disclosure())
    assert est._privacy_releases() == noised


def test_the_declared_rounds_follow_the_parameters():
    est = DistributedKernelPCA(kernel="poly", sampling="uniform", center=False)
    assert [r.name for r in est._rounds()] == ["uniform sample", "disLR", "error"]
    # The median heuristic is declared as rows of X: refused up front
    # (the Laplacian kernel's width has no row-free estimate).
    est.set_params(kernel="laplacian", solver="random_features", raw_rows="refuse")
    assert [r.name for r in est._rounds() if r.sends_rows] == ["median sample"]
    with pytest.raises(ValueError, match="'median sample'.*explicit gamma"):
        est.fit(np.random.RandomState(0).normal(size=(60, 3)), partitions=2)
    # The RBF kernel's takes the clients' moments instead.
    est.set_params(kernel="rbf")
    assert [r.name for r in est._rounds()] == [
        "kernel width",
        "random feature statistics",
    ]


def test_refusing_raw_rows_fits_from_sums_by_default():
    # Under raw_rows="refuse" the defaults send no row: random features,
    # the average-distance width from the clients' moments, and at most
    # the smallest client's rows as features.
    X, _ = make_blobs(1200, centers=3, n_features=4, random_state=0)
    partitions = np.arange(len(X)) % 4
    partitions[:100] = 0  # client 0 the largest, the others 275 rows
    est = DistributedKernelPCA(3, raw_rows="refuse", random_state=0)
    est.fit(X, partitions=partitions)
    assert est.solver_ == "random_features"
    # γ = N² / (2 Σ_ij ‖x_i − x_j‖²) = N / (4 Σ_i ‖x_i − x̄‖²).
    spread = np.sum((X - X.mean(axis=0)) ** 2)
    assert est.gamma_ == pytest.approx(len(X) / (4 * spread), rel=1e-9)
    smallest = np.bincount(partitions).min()
    assert est.n_random_features_ == smallest - smallest % 2
    log = est.communication_
    assert not any(r["raw_rows"] for r in log.disclosure())
    assert [r["name"] for r in log.disclosure()] == [
        "kernel width",
        "random feature statistics",
    ]
    # Masked: the same model, to the fixed point's precision.
    masked = DistributedKernelPCA(
        3, raw_rows="refuse", secure_aggregation=True, random_state=0
    ).fit(X, partitions=partitions)
    np.testing.assert_allclose(masked.gamma_, est.gamma_, rtol=1e-7)
    np.testing.assert_allclose(
        np.abs(masked.transform(X)), np.abs(est.transform(X)), atol=1e-5
    )
