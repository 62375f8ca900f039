"""Differential privacy of the kernel estimators: FederatedKernelKMeans'
one-shot solver with a private Lloyd, and DistributedKernelPCA's
random-feature solver."""

import math
import pickle
from functools import partial

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from sklearn.base import clone
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer

from skfed import DistributedKernelPCA, FederatedKernelKMeans
from skfed._engine._federation import ClientData, Federation
from skfed._testing import blobs
from skfed.cluster._protocols import _kernel_kmeans_private
from skfed.cluster._protocols._kernel_kmeans_private import private_sums_step
from skfed.decomposition._protocols._random_features import statistics_step
from skfed.kernel._private_features import (
    count_sum_sensitivity,
    feature_gram_statistics,
    feature_norm_bound,
    feature_sum_sensitivity,
    gram_sensitivity,
    paired_fourier_map,
    private_statistics,
)
from skfed.kernel._random_features import random_fourier_features
from skfed.privacy import Accountant, DifferentialPrivacy, PrivacyBudgetError


def _blobs(n=2000, seed=0):
    return blobs(n, seed=seed)


def _kmeans(**params):
    base = {"gamma": 0.2, "n_random_features": 60, "random_state": 0}
    return FederatedKernelKMeans(3, **{**base, **params})


def _kpca(**params):
    base = {"gamma": 0.2, "n_random_features": 60, "random_state": 0}
    return DistributedKernelPCA(3, **{**base, **params})


def test_infinite_epsilon_is_a_valid_setting():
    # The settings' docstring offers float("inf") for the clipped,
    # non-private algorithm; the constraint used to refuse it.
    DifferentialPrivacy(epsilon=math.inf)._validate_params()


# --------------------------------------------------------------------------
# scikit-learn citizenship


@pytest.mark.parametrize("make", [_kmeans, _kpca])
def test_privacy_parameter_clone_pickle_and_privacy_spent(make):
    X, _ = _blobs(600)
    est = make(privacy=DifferentialPrivacy(epsilon=2.0))
    twin = clone(est)
    assert twin.privacy is not est.privacy
    assert twin.privacy.get_params() == est.privacy.get_params()
    est.fit(X, partitions=3)
    eps, delta = est.privacy_spent_
    assert 0 < eps <= 2.0 * (1 + 1e-6) and delta == 1e-5
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.transform(X[:20]), est.transform(X[:20]))
    assert again.privacy_spent_ == est.privacy_spent_
    # Without privacy the attribute is there, and None.
    assert make().fit(X, partitions=3).privacy_spent_ is None


@pytest.mark.parametrize("make", [_kmeans, _kpca])
def test_grid_search_tunes_the_nested_epsilon(make):
    X, _ = _blobs(400)
    pipe = Pipeline(
        [
            ("scale", FunctionTransformer()),
            ("est", make(privacy=DifferentialPrivacy())),
        ]
    )

    def spent(estimator, X, y=None):
        # The search's score: the epsilon the fitted model spent.
        return estimator[-1].privacy_spent_[0]

    search = GridSearchCV(
        pipe, {"est__privacy__epsilon": [0.5, 4.0]}, scoring=spent, cv=2
    ).fit(X)
    assert search.best_params_ == {"est__privacy__epsilon": 4.0}
    assert search.best_estimator_[-1].privacy.epsilon == 4.0
    scores = search.cv_results_["mean_test_score"]
    np.testing.assert_allclose(scores, [0.5, 4.0], rtol=1e-5)


def test_privacy_constraint_names_the_settings_object():
    with pytest.raises(ValueError, match="privacy"):
        _kmeans(privacy={"epsilon": 1.0}).fit(_blobs(100)[0])


# --------------------------------------------------------------------------
# Refusals, each naming what to use instead


def test_kernel_kmeans_refuses_dspgd_under_privacy():
    X, _ = _blobs(200)
    with pytest.raises(ValueError, match="algorithm='one_shot'"):
        _kmeans(algorithm="dspgd", privacy=DifferentialPrivacy()).fit(X)
    # "auto" asked for DSPGD by a DSPGD-only option is refused the same way.
    with pytest.raises(ValueError, match="algorithm='one_shot'"):
        _kmeans(eigen_solver="lanczos", privacy=DifferentialPrivacy()).fit(X)


@pytest.mark.parametrize("make", [_kmeans, _kpca])
def test_default_kernel_width_is_refused_under_privacy(make):
    with pytest.raises(ValueError, match="explicit gamma"):
        make(gamma=None, privacy=DifferentialPrivacy()).fit(_blobs(200)[0])


def test_kernel_pca_refuses_representatives_and_other_kernels_under_privacy():
    X, _ = _blobs(200)
    with pytest.raises(ValueError, match="solver='random_features'"):
        _kpca(solver="representatives", privacy=DifferentialPrivacy()).fit(X)
    with pytest.raises(ValueError, match="kernel='rbf' or 'laplacian'"):
        _kpca(kernel="poly", privacy=DifferentialPrivacy()).fit(X)
    # Without privacy "auto" keeps the representatives.
    assert _kpca().fit(X, partitions=2).solver_ == "representatives"


@pytest.mark.parametrize("make", [_kmeans, _kpca])
def test_uncoverable_noise_multiplier_is_refused_before_any_round(make, monkeypatch):
    rounds = []
    original = Federation.run_round

    def counting(self, name, *args, **kwargs):
        rounds.append(name)
        return original(self, name, *args, **kwargs)

    monkeypatch.setattr(Federation, "run_round", counting)
    dp = DifferentialPrivacy(epsilon=1.0, noise_multiplier=0.5)
    with pytest.raises(PrivacyBudgetError, match="more than the requested"):
        make(privacy=dp).fit(_blobs(200)[0], partitions=2)
    assert rounds == []


# --------------------------------------------------------------------------
# The mechanism: sensitivities and noise


@settings(max_examples=30, deadline=None)
@given(
    arrays(np.float64, (7, 3), elements=st.floats(-1e6, 1e6)),
    arrays(np.float64, 3, elements=st.floats(-1e6, 1e6)),
    st.floats(1e-3, 10.0),
    st.integers(1, 41),
    st.integers(0, 6),
)
def test_one_row_moves_the_feature_statistics_by_at_most_the_sensitivity(
    X, row, gamma, D, which
):
    # Replace-one DP (the sizes are public): one row replaced by any other
    # moves the triangle of Σ z zᵀ and Σ z by at most their stated
    # sensitivities, whatever the rows, near the origin or far from it.
    omega, offset = paired_fourier_map(3, 3, D, gamma)
    R = feature_norm_bound(D)
    upper, sums = feature_gram_statistics(X, omega, offset, radius=R)
    changed = X.copy()
    changed[which] = row
    upper2, sums2 = feature_gram_statistics(changed, omega, offset, radius=R)
    moved = np.linalg.norm(upper2 - upper)
    m2 = min(R**2, 2.0 / D * (1 + 1e-6))
    assert gram_sensitivity(R, D) == pytest.approx(R * math.sqrt(R**2 + m2))
    assert moved <= gram_sensitivity(R, D) * (1 + 1e-9)
    assert feature_sum_sensitivity(R) == 2 * R
    assert np.linalg.norm(sums2 - sums) <= feature_sum_sensitivity(R) * (1 + 1e-9)
    # The bound is tight for even D: the pair map's norm is 1 exactly.
    Z = random_fourier_features(np.vstack([X, row]), omega, offset)
    assert np.all(np.linalg.norm(Z, axis=1) <= R)
    if D % 2 == 0:
        np.testing.assert_allclose(np.linalg.norm(Z, axis=1), 1.0, rtol=1e-6)


@settings(max_examples=30, deadline=None)
@given(
    arrays(np.float64, (9, 4), elements=st.floats(-1e8, 1e8)),
    arrays(np.float64, 4, elements=st.floats(-1e8, 1e8)),
    st.integers(0, 8),
)
def test_one_row_moves_the_lloyd_sums_by_at_most_the_sensitivity(H, shift, which):
    # Whatever the embedding rows (clipped to R on the client), replacing
    # one row moves [per-cluster sums, counts] by at most
    # max(2R, √(2(R² + 1))).
    R = feature_norm_bound(30)
    assert count_sum_sensitivity(R) == pytest.approx(
        max(2 * R, math.sqrt(2 * (R**2 + 1)))
    )
    centers = np.random.RandomState(0).normal(size=(3, 4))
    client = ClientData("a", np.zeros((9, 1)), None, np.arange(9), (0,))
    step = partial(private_sums_step, radius=R, std=0.0)
    _, full = step(client, {"H": H}, (centers, shift))
    for other in (-H[which], centers[0] - shift, H[(which + 1) % 9]):
        changed = H.copy()
        changed[which] = other
        _, moved = step(client, {"H": changed}, (centers, shift))
        assert np.linalg.norm(full - moved) <= count_sum_sensitivity(R) * (1 + 1e-9)


def _one_client_federation(X, accountant):
    client = ClientData("a", X, None, np.arange(X.shape[0]), (0, 1))
    fed = Federation([client])
    fed.accountant = accountant
    return fed


def test_statistics_noise_is_the_multiplier_times_the_sensitivity():
    X, _ = _blobs(300)
    D, gamma = 200, 0.2
    dp = DifferentialPrivacy(epsilon=3.0)
    accountant = Accountant(dp, 2, estimator="t")
    message = (5, gamma, "rbf")
    with _one_client_federation(X, accountant) as fed:
        total, n = private_statistics(fed, statistics_step, message, D)
    omega, offset = paired_fourier_map(5, X.shape[1], D, gamma, "rbf")
    upper, sums = feature_gram_statistics(X, omega, offset)
    R = feature_norm_bound(D)
    z = accountant.noise_multiplier
    n_upper = D * (D + 1) // 2
    gram_noise = total[:n_upper] - upper
    # 20,100 draws: their spread is within 3% of the prescribed one.
    assert gram_noise.std() == pytest.approx(z * gram_sensitivity(R, D), rel=0.03)
    sum_noise = total[n_upper:] - sums
    # 200 draws; the count is public and exact.
    assert np.sqrt(np.mean(sum_noise**2)) == pytest.approx(
        z * feature_sum_sensitivity(R), rel=0.2
    )
    assert n == X.shape[0]
    assert accountant.events == [("random feature statistics", z, 2, False)]


def test_lloyd_rounds_noise_at_the_multiplier_times_the_sensitivity(monkeypatch):
    seen = []
    original = _kernel_kmeans_private._noised_sums

    def recording(fed, declared, centers, **options):
        radius, std = options["radius"], options["std"]
        seen.append((declared.name, radius, std, fed.accountant.noise_multiplier))
        return original(fed, declared, centers, **options)

    monkeypatch.setattr(_kernel_kmeans_private, "_noised_sums", recording)
    km = _kmeans(refine_iter=2, privacy=DifferentialPrivacy(epsilon=5.0))
    km.fit(_blobs(600)[0], partitions=3)
    assert [s[0] for s in seen] == ["private cells", "private lloyd", "private lloyd"]
    R = feature_norm_bound(60)
    for _, radius, std, z in seen:
        assert radius == R
        expected = z * max(2 * R, math.sqrt(2 * (R**2 + 1)))
        assert std == pytest.approx(expected, rel=1e-12)


def test_ledger_marks_every_upload_as_noised_and_accounts_for_it():
    km = _kmeans(refine_iter=3, privacy=DifferentialPrivacy(epsilon=5.0))
    km.fit(_blobs(600)[0], partitions=3)
    rounds = [r for r in km.communication_.disclosure() if r["floats"]]
    assert [(r["name"], r["noised"]) for r in rounds] == [
        ("random feature statistics", 2),
        ("private cells", 1),
        ("private lloyd", 1),
        ("private lloyd", 1),
        ("private lloyd", 1),
    ]
    assert all(r["disclosure"] == "sum_only" for r in rounds)
    assert km._privacy_releases() == sum(r["noised"] for r in rounds)
    # All the budget is spent, none beyond it.
    assert km.privacy_spent_[0] == pytest.approx(5.0, rel=1e-3)
    assert math.isnan(km.inertia_)

    pca = _kpca(privacy=DifferentialPrivacy(epsilon=5.0)).fit(
        _blobs(600)[0], partitions=3
    )
    rounds = [r for r in pca.communication_.disclosure() if r["floats"]]
    assert [(r["name"], r["noised"]) for r in rounds] == [
        ("random feature statistics", 2)
    ]
    # D(D+1)/2 + D + 1 floats from each of the three clients.
    assert rounds[0]["floats"] == 3 * (60 * 61 // 2 + 61)


# --------------------------------------------------------------------------
# The model


@pytest.mark.parametrize("make", [_kmeans, _kpca])
def test_same_seed_reproduces_the_clipped_fit_but_never_the_noise(make):
    X, _ = _blobs(900)
    # epsilon = inf: the private path without noise follows the seed alone,
    # whatever n_jobs.
    free = DifferentialPrivacy(epsilon=math.inf)
    one = make(privacy=free, n_jobs=1).fit(X, partitions=4)
    two = make(privacy=free, n_jobs=2).fit(X, partitions=4)
    np.testing.assert_allclose(one.transform(X), two.transform(X), atol=1e-10)
    np.testing.assert_allclose(one.eigenvalues_, two.eigenvalues_, rtol=1e-10)
    if hasattr(one, "labels_"):
        np.testing.assert_array_equal(one.labels_, two.labels_)
    # With noise, the same seed never draws the same noise twice.
    dp = DifferentialPrivacy(epsilon=1.0)
    first = make(privacy=dp).fit(X, partitions=4)
    again = make(privacy=dp).fit(X, partitions=4)
    assert not np.allclose(first.eigenvalues_, again.eigenvalues_)


_NOISING_MODULES = (
    "skfed.cluster._protocols._kernel_kmeans_one_shot",
    "skfed.cluster._protocols._kernel_kmeans_private",
    "skfed.decomposition._protocols._random_features",
)


@pytest.mark.parametrize("make", [_kmeans, _kpca])
def test_clients_share_the_noise_under_secure_aggregation(make, monkeypatch):
    # Distributed noise: under masks each client adds a share of the noise,
    # so that the masked sum carries the central mechanism's noise, not
    # √M times it as when each client adds all of it.
    import importlib

    from skfed import privacy
    from skfed.privacy._distributed import DistributedNoise

    stds = []

    def recording(value, std):
        stds.append((np.shape(value), std))
        return privacy.gaussian_noise(value, std)

    for name in _NOISING_MODULES:
        monkeypatch.setattr(importlib.import_module(name), "gaussian_noise", recording)
    X, _ = _blobs(900)
    dp = DifferentialPrivacy(epsilon=2.0)
    plain = make(privacy=dp).fit(X, partitions=3)
    unmasked, stds[:] = list(stds), []
    masked = make(privacy=dp, secure_aggregation=True).fit(X, partitions=3)
    assert len(stds) == len(unmasked) >= 6
    assert not any(isinstance(std, DistributedNoise) for _, std in unmasked)
    for (shape, std), (plain_shape, plain_std) in zip(stds, unmasked):
        # (The cells follow the summed noise: more of them under masks.)
        assert len(shape) == len(plain_shape)
        assert isinstance(std, DistributedNoise) and std.honest == 3
        # The sum's noise is one client's central figure, composed in Rényi
        # DP (a few percent above the PLD accountant's), against √3 times
        # it without the masks.
        summed = privacy.summed_noise_std(std, 3)
        assert summed == pytest.approx(float(std))
        assert plain_std <= summed < 1.2 * plain_std
        assert privacy.summed_noise_std(plain_std, 3) > 1.4 * summed
    assert masked.privacy_spent_[0] <= 2.0 * (1 + 1e-9)
    rounds = [r for r in masked.communication_.disclosure() if r["noised"]]
    assert rounds and all(r["disclosure"] == "sum_only" for r in rounds)
    # Without noise the masks change nothing (to their fixed point).
    free = DifferentialPrivacy(epsilon=math.inf)
    plain = make(privacy=free).fit(X, partitions=3)
    masked = make(privacy=free, secure_aggregation=True).fit(X, partitions=3)
    np.testing.assert_allclose(masked.eigenvalues_, plain.eigenvalues_, rtol=1e-6)


def _same_up_to_column_signs(A, B):
    signs = np.sign(np.sum(A * B, axis=0))
    return A, B * signs


def test_infinite_epsilon_kernel_kmeans_is_the_non_private_embedding():
    X, y = _blobs(1500)
    private = _kmeans(privacy=DifferentialPrivacy(epsilon=math.inf))
    private.fit(X, partitions=5)
    plain = _kmeans().fit(X, partitions=5)
    # The same map and statistics (clipping changes only the float32
    # cosines' rounding): the same spectrum and embedding.
    np.testing.assert_allclose(private.eigenvalues_, plain.eigenvalues_, rtol=1e-6)
    A, B = _same_up_to_column_signs(private.embedding_, plain.embedding_)
    np.testing.assert_allclose(A, B, atol=1e-6)
    # Noise-free Lloyd from the cells finds the coreset k-means' clusters.
    assert adjusted_rand_score(plain.labels_, private.labels_) > 0.99
    assert normalized_mutual_info_score(y, private.labels_) > 0.95


def test_infinite_epsilon_kernel_pca_is_the_non_private_random_feature_pca():
    X, _ = _blobs(1500)
    private = _kpca(privacy=DifferentialPrivacy(epsilon=math.inf))
    private.fit(X, partitions=5)
    plain = _kpca(solver="random_features").fit(X, partitions=5)
    assert private.solver_ == plain.solver_ == "random_features"
    np.testing.assert_allclose(private.eigenvalues_, plain.eigenvalues_, rtol=1e-6)
    np.testing.assert_allclose(private.components_, plain.components_, atol=1e-6)
    np.testing.assert_allclose(private.transform(X), plain.transform(X), atol=1e-6)
    np.testing.assert_allclose(private.total_energy_, plain.total_energy_, rtol=1e-6)


def test_random_feature_pca_matches_a_centralized_pca_of_the_features():
    X, _ = _blobs(1000)
    pca = _kpca(solver="random_features").fit(X, partitions=4)
    omega, offset = paired_fourier_map(pca._feature_seed, 2, 60, 0.2)
    Z = random_fourier_features(X, omega, offset)
    Z -= Z.mean(axis=0)
    mu, V = np.linalg.eigh(Z.T @ Z)
    np.testing.assert_allclose(pca.eigenvalues_, mu[::-1][:3], rtol=1e-8)
    A, B = _same_up_to_column_signs(pca.transform(X), Z @ V[:, ::-1][:, :3])
    np.testing.assert_allclose(A, B, atol=1e-8)
    np.testing.assert_allclose(pca.total_energy_, np.trace(Z.T @ Z), rtol=1e-10)


# --------------------------------------------------------------------------
# Utility at epsilon = 10 (measured values in the comments)


@pytest.mark.slow
def test_private_kernel_kmeans_finds_blobs():
    X, y = make_blobs(20_000, centers=10, n_features=10, random_state=1)
    km = FederatedKernelKMeans(
        10,
        gamma=7e-4,
        refine_iter=5,
        random_state=0,
        privacy=DifferentialPrivacy(epsilon=10.0),
    ).fit(X, partitions=10)
    # Measured: NMI 1.0 at epsilon 10 over three seeds (0.74 to 0.97 at
    # epsilon 1).
    assert normalized_mutual_info_score(y, km.labels_) > 0.9


@pytest.mark.slow
def test_private_kernel_pca_captures_most_of_the_variance():
    X, _ = make_blobs(20_000, centers=5, n_features=8, random_state=0)
    gamma = 0.02
    dp = DifferentialPrivacy(epsilon=10.0)
    private = DistributedKernelPCA(
        5, gamma=gamma, n_random_features=300, random_state=0, privacy=dp
    ).fit(X, partitions=10)
    plain = DistributedKernelPCA(
        5,
        gamma=gamma,
        n_random_features=300,
        random_state=0,
        solver="random_features",
    ).fit(X, partitions=10)
    omega, offset = paired_fourier_map(plain._feature_seed, 8, 300, gamma)
    Z = random_fourier_features(X, omega, offset)
    Z -= Z.mean(axis=0)

    def captured(pca):
        return float(np.sum((Z @ pca.components_.T) ** 2))

    # Measured: 0.9993 to 0.9995 over three seeds.
    assert captured(private) / captured(plain) > 0.95
