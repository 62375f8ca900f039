from hypothesis import given
from hypothesis import strategies as st
from sklearn.utils import gen_batches

from skfed._blocks import row_blocks


@given(n_rows=st.integers(1, 10_000), size=st.integers(1, 5_000))
def test_row_blocks_are_gen_batches_slices(n_rows, size):
    assert list(row_blocks(n_rows, size)) == list(gen_batches(n_rows, size))


def test_no_rows_no_blocks():
    assert list(row_blocks(0, 10)) == []
