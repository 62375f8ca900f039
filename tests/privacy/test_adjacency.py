"""Replace-one adjacency (one row of one client replaced by any other, the
clients' sizes public): each release's sensitivity by formula, and the
settings' defects fixed at their cause."""

import math
import warnings

import numpy as np
import pytest
from numpydoc.docscrape import ClassDoc
from sklearn.datasets import make_blobs

from skfed import DistributedKernelPCA, FederatedKernelKMeans, KFed
from skfed.cluster._protocols import _kfed_private
from skfed.kernel._private_features import (
    count_sum_sensitivity,
    feature_gram_statistics,
    feature_norm_bound,
    feature_sum_sensitivity,
    gram_sensitivity,
    paired_fourier_map,
)
from skfed.privacy import (
    Accountant,
    DifferentialPrivacy,
    PrivacyBudgetError,
    box_radius,
    clip_to_box,
)


def _blobs(n=300, d=2):
    X, _ = make_blobs(n, n_features=d, centers=3, cluster_std=0.5, random_state=0)
    return X


# -- sensitivities by formula ---------------------------------------------------


def test_kfed_release_sensitivity_is_the_box_diameter():
    lower, upper = np.array([-1.0, 0.0, 2.0]), np.array([1.0, 10.0, 2.5])
    R = box_radius(lower, upper)
    count_scale, sensitivity, std = _kfed_private.release_scales(lower, upper, 3.0)
    # max(2R, sqrt(2(R² + c²))) with c = R: 2R, the box's diameter.
    assert count_scale == pytest.approx(R)
    assert sensitivity == pytest.approx(2 * R)
    assert std == pytest.approx(3.0 * 2 * R)
    # Tight: two opposite corners nearest one center move its sum by 2R.
    centers = np.array([[0.0, 0.0, 0.0], [50.0, 50.0, 50.0]])
    X = np.array([[-1.0, 0.0, 2.0], [0.5, 5.0, 2.2]])
    changed = np.array([[1.0, 10.0, 2.5], [0.5, 5.0, 2.2]])

    def release(rows):
        sums, counts, _ = _kfed_private.release_statistics(
            clip_to_box(rows, lower, upper), centers, count_scale
        )
        return np.concatenate([sums.ravel(), counts])

    assert np.linalg.norm(release(X) - release(changed)) == pytest.approx(2 * R)


@pytest.mark.parametrize("D", [2, 7, 40])
def test_gram_and_sum_sensitivities_bound_every_replacement(D):
    rng = np.random.default_rng(0)
    R = feature_norm_bound(D)
    m2 = min(R**2, 2.0 / D * (1 + 1e-6))
    assert gram_sensitivity(R, D) == pytest.approx(R * math.sqrt(R**2 + m2))
    assert feature_sum_sensitivity(R) == 2 * R
    assert count_sum_sensitivity(R) == max(2 * R, math.sqrt(2 * (R**2 + 1)))
    omega, offset = paired_fourier_map(1, 3, D, 0.5)
    X = rng.normal(size=(6, 3))
    upper, sums = feature_gram_statistics(X, omega, offset, radius=R)
    worst_gram = worst_sum = 0.0
    for row in rng.normal(scale=5.0, size=(300, 3)):
        changed = X.copy()
        changed[2] = row
        upper2, sums2 = feature_gram_statistics(changed, omega, offset, radius=R)
        worst_gram = max(worst_gram, np.linalg.norm(upper2 - upper))
        worst_sum = max(worst_sum, np.linalg.norm(sums2 - sums))
    assert worst_gram <= gram_sensitivity(R, D) * (1 + 1e-9)
    assert worst_sum <= feature_sum_sensitivity(R) * (1 + 1e-9)
    # Replacing moves more than adding did (R²/√2 and R): the old bounds
    # would not hold.
    assert worst_gram > R**2 / math.sqrt(2) or worst_sum > R


def test_a_private_fit_spends_its_budget_under_replace_one_noise(monkeypatch):
    # The fit's noise is the calibrated multiplier times the replace-one
    # sensitivity, and privacy_spent_ is the budget asked for.
    stds = []
    noise = _kfed_private.gaussian_noise

    def recording(value, std):
        stds.append(std)
        return noise(value, std)

    monkeypatch.setattr(_kfed_private, "gaussian_noise", recording)
    dp = DifferentialPrivacy(epsilon=1.0, delta=1e-5, bounds=(-12.0, 12.0))
    model = KFed(3, privacy=dp, private_iter=2, random_state=0)
    model.fit(_blobs(), partitions=2)
    z = Accountant(dp, 2, estimator="KFed").noise_multiplier
    R = box_radius(np.full(2, -12.0), np.full(2, 12.0))
    assert len(stds) == 2 * 2 * 2  # sums and counts, 2 iterations, 2 clients
    np.testing.assert_allclose(stds, z * 2 * R, rtol=1e-12)
    assert model.privacy_spent_[0] == pytest.approx(1.0, rel=1e-5)
    assert model.privacy_spent_[0] <= 1.0 + 1e-9


# -- point defects ---------------------------------------------------------------


@pytest.mark.parametrize(
    "privacy",
    [
        DifferentialPrivacy(epsilon=1e-6, bounds=(-12.0, 12.0)),
        DifferentialPrivacy(epsilon=1.0, noise_multiplier=1e6, bounds=(-12.0, 12.0)),
        DifferentialPrivacy(epsilon=1e-6, bounds=(-12.0, 12.0), accountant="rdp"),
    ],
)
def test_tiny_spend_is_reported_never_zero(privacy):
    model = KFed(3, privacy=privacy, private_iter=2, random_state=0)
    model.fit(_blobs(), partitions=2)
    epsilon, delta = model.privacy_spent_
    assert 0 < epsilon <= privacy.epsilon * (1 + 1e-6)
    if privacy.noise_multiplier:
        # (0, delta)-private: reported as the Gaussian-DP mu, sqrt(T) / z.
        assert epsilon == pytest.approx(math.sqrt(2) / 1e6)
    assert delta == privacy.delta


@pytest.mark.parametrize("delta", [0.5, 1 / 300, 0.01])
def test_delta_of_one_over_n_or_more_is_refused(delta):
    dp = DifferentialPrivacy(delta=delta, bounds=(-12.0, 12.0))
    with pytest.raises(ValueError, match=r"at least 1/N .* N=300 rows"):
        KFed(3, privacy=dp, random_state=0).fit(_blobs(300), partitions=2)
    # Below 1/N is accepted.
    dp.set_params(delta=1 / 3000)
    KFed(3, privacy=dp, private_iter=1, random_state=0).fit(_blobs(300), partitions=2)


def test_bounds_of_the_wrong_length_name_n_features():
    dp = DifferentialPrivacy(bounds=(np.zeros(3), np.ones(3)))
    with pytest.raises(ValueError, match="n_features=2 values; got one of shape"):
        KFed(3, privacy=dp).fit(_blobs(), partitions=2)


def test_bounds_that_overflow_are_refused_with_the_fix():
    dp = DifferentialPrivacy(bounds=(-1e200, 1e200))
    with pytest.raises(ValueError, match="privacy.bounds reach 1e\\+200 .* overflow"):
        KFed(3, privacy=dp).fit(_blobs(), partitions=2)


def test_bounds_that_miss_every_row_of_a_client_are_refused_on_it():
    X = _blobs()
    # The blobs lie in [-12, 12]; a box beside them misses every row.
    dp = DifferentialPrivacy(bounds=(20.0, 30.0))
    with pytest.raises(ValueError, match="miss every row of this client"):
        KFed(3, privacy=dp, random_state=0).fit(X, partitions=2)
    # A box that clips some rows (the usual case) is fine.
    dp.set_params(bounds=(-2.0, 30.0))
    KFed(3, privacy=dp, private_iter=1, random_state=0).fit(X, partitions=2)


@pytest.mark.parametrize(
    "make",
    [
        lambda: DistributedKernelPCA(
            2, gamma=0.3, n_random_features=20, solver="random_features"
        ),
        lambda: FederatedKernelKMeans(2, gamma=0.3, n_random_features=20),
    ],
)
def test_secure_aggregation_over_one_client_warns(make):
    X = _blobs(120)
    with pytest.warns(UserWarning, match="no effect .* with one client"):
        make().set_params(secure_aggregation=True).fit(X, partitions=1)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*with one client")
        make().set_params(secure_aggregation=True).fit(X, partitions=2)


def test_pld_is_the_default_and_needs_less_noise_than_rdp():
    assert DifferentialPrivacy().accountant == "pld"
    for n_releases in (2, 5, 23):
        pld = Accountant(DifferentialPrivacy(), n_releases, estimator="t")
        rdp = Accountant(
            DifferentialPrivacy(accountant="rdp"), n_releases, estimator="t"
        )
        assert pld.noise_multiplier < 0.96 * rdp.noise_multiplier
    # RDP stays available and is refused nothing.
    with pytest.raises(PrivacyBudgetError):
        Accountant(
            DifferentialPrivacy(noise_multiplier=0.1, accountant="rdp"),
            5,
            estimator="t",
        )


def test_settings_docstring_renders_no_literal_markup_as_a_type():
    # numpydoc renders a parameter's or attribute's type in italics, where
    # reST inline literals are not parsed: backticks there print as is.
    doc = ClassDoc(DifferentialPrivacy)
    for section in ("Parameters", "Attributes"):
        for item in doc[section]:
            assert "`" not in item.type, (section, item.name, item.type)
            assert item.name != "None"
