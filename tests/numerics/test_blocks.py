import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sklearn.utils import gen_batches

from skfed._engine import _remote as remote_module
from skfed._numerics._blocks import row_blocks


@given(n_rows=st.integers(1, 10_000), size=st.integers(1, 5_000))
def test_row_blocks_are_gen_batches_slices(n_rows, size):
    assert list(row_blocks(n_rows, size)) == list(gen_batches(n_rows, size))


def test_no_rows_no_blocks():
    assert list(row_blocks(0, 10)) == []


@pytest.mark.parametrize("n", [0, 1, 6, 7, 8, 50])
def test_distinct_values_block_by_block_are_np_unique(n, monkeypatch):
    # Large per-sample outputs are sorted a block at a time (a copy of one
    # block, not of a fit's labels): the same values as np.unique.
    monkeypatch.setattr(remote_module, "_DISTINCT_BLOCK", 7)
    values = np.random.RandomState(n).randint(-1, 5, n).astype(np.int32)
    got = remote_module.distinct_values(values)
    np.testing.assert_array_equal(got, np.unique(values))
    assert got.dtype == np.int32
