"""Tests for the declared rounds of the private random-feature statistics
(skfed.kernel._private_features): their noise follows the sensitivities
they declare, one per release."""

import math

import pytest

from skfed.classification._protocols._random_features import (
    PRIVATE_FEATURE_STATISTICS,
)
from skfed.kernel._private_features import (
    FEATURE_STATISTICS,
    PRIVATE_STATISTICS,
    count_sum_sensitivity,
    feature_norm_bound,
    feature_sum_sensitivity,
    gram_sensitivity,
    statistics_noise,
)
from skfed.privacy import Accountant, DifferentialPrivacy


@pytest.mark.parametrize("D", [7, 50])
@pytest.mark.parametrize(
    "declared, sums",
    [
        (PRIVATE_STATISTICS, feature_sum_sensitivity),
        (PRIVATE_FEATURE_STATISTICS, count_sum_sensitivity),
    ],
)
def test_each_release_is_noised_at_its_declared_sensitivity(declared, sums, D):
    accountant = Accountant(DifferentialPrivacy(epsilon=1.0), 2, estimator="test")
    z = accountant.noise_multiplier
    assert z > 0
    radius, gram_std, sum_std = statistics_noise(declared, accountant, D)
    R = feature_norm_bound(D)
    assert radius == R
    assert gram_std == z * gram_sensitivity(R, D)
    assert sum_std == z * sums(R)
    # Two releases, one round, the same name as the un-noised statistics.
    assert declared.disclosure.noised == 2 and declared.kind == "sum_only"
    assert declared.name == "random feature statistics"
    assert declared.masked_by_secure_aggregation and declared.private
    assert not FEATURE_STATISTICS.private
    # The norm bound of D features: 1 for even D, a little above for odd.
    assert R >= 1.0 and (D % 2 or math.isclose(R, 1.0, rel_tol=1e-5))
