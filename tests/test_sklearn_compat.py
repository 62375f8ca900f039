"""The same behaviour on every supported scikit-learn (1.6 to the newest)."""

import numpy as np
import pytest

from skfed import DistributedKMeans, KFed
from skfed._sklearn_compat import check_sample_weight


def test_all_zero_weights_are_refused_whatever_the_version():
    X = np.ones((4, 2))
    with pytest.raises(ValueError, match="at least one non-zero"):
        check_sample_weight(np.zeros(4), X, ensure_non_negative=True)
    with pytest.raises(ValueError, match="at least one non-zero"):
        check_sample_weight(np.zeros(4), X)
    np.testing.assert_array_equal(check_sample_weight(None, X), np.ones(4))


@pytest.mark.parametrize("Estimator", [KFed, DistributedKMeans])
def test_estimators_refuse_all_zero_weights_before_fitting(Estimator):
    # scikit-learn 1.6 let all-zero weights through its check: the fit then
    # failed later, in a client's step or after the coreset, with another
    # message, or score() returned 0.
    X = np.random.RandomState(0).standard_normal((60, 2))
    with pytest.raises(ValueError, match="at least one non-zero"):
        Estimator(n_clusters=2, random_state=0).fit(X, sample_weight=np.zeros(60))
    est = Estimator(n_clusters=2, random_state=0).fit(X)
    with pytest.raises(ValueError, match="at least one non-zero"):
        est.score(X, sample_weight=np.zeros(60))
