import numpy as np
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from skfed._numerics._rows import rounded_row_hashes, row_hashes

_VALUES = st.sampled_from([0.0, -0.0, 1.5, -2.25, 1e-30, 3.4e38, 1e39, -1e300, np.inf])


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 9000),
    st.integers(1, 5),
    st.lists(st.tuples(st.integers(0, 8999), st.integers(0, 4), _VALUES), max_size=8),
)
def test_rounded_hashes_are_the_hashes_of_the_float32_rows(n, d, edits):
    # The rows are rounded to float32 a block at a time (4,096 rows): the
    # same hashes as rounding them all first, beyond float32's range too
    # (to +-inf, without a warning), dense or CSR.
    X = np.random.RandomState(n).standard_normal((n, d)) * 10.0 ** (n % 7 - 3)
    for row, col, value in edits:
        X[row % n, col % d] = value
    with np.errstate(over="ignore"):
        expected = row_hashes(X.astype(np.float32))
    with np.errstate(all="raise"):
        got = rounded_row_hashes(X)
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_array_equal(rounded_row_hashes(sp.csr_matrix(X)), expected)
    with np.errstate(over="ignore"):
        X32 = X.astype(np.float32)
    np.testing.assert_array_equal(rounded_row_hashes(X32), expected)
