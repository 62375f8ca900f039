import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skfed._engine._validation import check_partitions


def test_none_is_one_client():
    p = check_partitions(None, 5)
    assert p.client_ids == (0,)
    np.testing.assert_array_equal(p.indices[0], np.arange(5))


def test_int_splits_uniformly_and_reproducibly():
    p = check_partitions(3, 10, random_state=0)
    assert p.n_clients == 3
    assert sorted(p.sizes) == [3, 3, 4]
    q = check_partitions(3, 10, random_state=0)
    for a, b in zip(p.indices, q.indices):
        np.testing.assert_array_equal(a, b)
    joined = np.sort(np.concatenate(p.indices))
    np.testing.assert_array_equal(joined, np.arange(10))


def test_string_and_mixed_ids():
    p = check_partitions(["b", "a", "b", "c"], 4)
    assert p.client_ids == ("a", "b", "c")
    np.testing.assert_array_equal(p.indices[1], [0, 2])
    mixed = check_partitions(np.array([1, "a", 1, "a"], dtype=object), 4)
    assert mixed.n_clients == 2


def test_pandas_categorical_with_unused_categories():
    pd = pytest.importorskip("pandas")
    ids = pd.Series(pd.Categorical(["x", "y", "x"], categories=["x", "y", "z"]))
    p = check_partitions(ids, 3)
    assert p.client_ids == ("x", "y")


@pytest.mark.parametrize(
    "partitions, n, match",
    [
        ([0, 1], 3, "partitions has 2 entries but X has 3 samples"),
        (np.array([0.0, np.nan, 1.0]), 3, "NaN"),
        (np.array([0, None, 1], dtype=object), 3, "missing"),
        (np.zeros((3, 2)), 3, r"shape \(n_samples,\)"),
        (4, 3, "more clients than there are samples"),
        (0, 3, "asks for no client"),
        ([], 0, "empty dataset"),
    ],
)
def test_bad_partitions_are_explained(partitions, n, match):
    with pytest.raises(ValueError, match=match):
        check_partitions(partitions, n)


def test_clients_below_min_samples_are_named():
    with pytest.raises(ValueError, match=r"Client\(s\) 'b' hold fewer than 2"):
        check_partitions(["a", "a", "b"], 3, min_samples=2)


def test_cv_slice_that_empties_requested_split():
    # 5 clients were asked for, but a CV fold left only 4 samples.
    with pytest.raises(ValueError, match="more clients than there are samples"):
        check_partitions(5, 4, random_state=0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-3, 3), min_size=1, max_size=40))
def test_every_sample_in_exactly_one_client(ids):
    p = check_partitions(ids, len(ids))
    joined = np.sort(np.concatenate(p.indices))
    np.testing.assert_array_equal(joined, np.arange(len(ids)))
    for cid, idx in zip(p.client_ids, p.indices):
        assert all(ids[i] == cid for i in idx)
    assert list(p.client_ids) == sorted(set(ids))


_INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint64]


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(_INT_DTYPES),
    st.sampled_from(["low", "high", "middle"]),
    st.lists(st.integers(0, 250), min_size=64, max_size=120),
    st.booleans(),
)
def test_integer_ids_match_sorting_them(dtype, where, offsets, spread):
    # Integer ids are counted instead of sorted when they span few values:
    # the clients, their order and their samples must be those of np.unique,
    # at the ends of every integer type (an int8 difference would wrap) and
    # for ids spread too far apart to count (at least 64 samples: ids within
    # 4 x n_samples of each other are counted).
    info = np.iinfo(dtype)
    middle = max(int(info.min), -125)
    base = {"low": int(info.min), "high": int(info.max) - 250, "middle": middle}
    values = [base[where] + o for o in offsets]
    if spread and info.max >= 10**6:
        values[0] = 10**6  # more than 4 x n_samples apart: sorted
    ids = np.array(values, dtype=dtype)
    p = check_partitions(ids, len(ids))
    unique, inverse = np.unique(ids, return_inverse=True)
    assert p.client_ids == tuple(unique.tolist())
    assert all(type(c) is int for c in p.client_ids)
    for code, idx in enumerate(p.indices):
        np.testing.assert_array_equal(idx, np.flatnonzero(inverse == code))


def test_strict_interval_refuses_booleans():
    from numbers import Integral, Real

    from skfed._engine._validation import StrictInterval

    ints = StrictInterval(Integral, 1, None, closed="left")
    assert ints.is_satisfied_by(3) and ints.is_satisfied_by(np.int64(3))
    assert not ints.is_satisfied_by(True) and not ints.is_satisfied_by(np.True_)
    assert not StrictInterval(Real, 0, None, closed="left").is_satisfied_by(False)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_check_magnitude_names_the_range_and_the_fix(dtype):
    import scipy.sparse as sp

    from skfed._engine._validation import check_magnitude

    X = np.arange(12, dtype=dtype).reshape(4, 3)
    check_magnitude(X)
    check_magnitude(np.zeros((4, 3), dtype=dtype))
    huge = np.finfo(dtype).max / 10
    tiny = np.finfo(dtype).tiny * 10
    for bad in (X / 12 * huge, X * tiny, sp.csr_matrix(X * tiny)):
        with pytest.raises(
            ValueError, match="overflow or underflow.*Rescale the features"
        ):
            check_magnitude(bad.astype(dtype))
    one_outlier = X.copy()
    one_outlier[0, 0] = huge
    with pytest.raises(ValueError, match="values up to"):
        check_magnitude(one_outlier)


@pytest.mark.parametrize(
    "missing",
    [None, np.nan, float("nan"), "pd.NA", "pd.NaT", "np.datetime64('NaT')"],
)
@pytest.mark.parametrize("container", ["list", "series"])
def test_any_missing_id_is_refused(missing, container):
    pd = pytest.importorskip("pandas")
    named = {"pd.NA": pd.NA, "pd.NaT": pd.NaT, "np.datetime64('NaT')": None}
    if isinstance(missing, str):
        missing = named[missing] if missing.startswith("pd") else np.datetime64("NaT")
    ids = [0, 1, missing, 1, 0, 1]
    if container == "series":
        ids = pd.Series(ids, dtype=object)
    with pytest.raises(ValueError, match="(missing values|NaN|NaT)"):
        check_partitions(ids, 6)


def test_missing_ids_in_typed_arrays_are_refused():
    pd = pytest.importorskip("pandas")
    cases = [
        pd.Series([1, pd.NA, 2, 2], dtype="Int64"),
        pd.Series(["a", None, "b", "b"], dtype="string"),
        pd.Categorical(["a", np.nan, "b", "b"]),
        pd.Series(pd.to_datetime(["2024-01-01", None, "2024-01-02", "2024-01-02"])),
        np.array(["2024-01-01", "NaT", "2024-01-02", "2024-01-02"], "datetime64[D]"),
    ]
    for ids in cases:
        with pytest.raises(ValueError, match="(missing values|NaN|NaT)"):
            check_partitions(ids, 4)


def test_ids_are_taken_as_given():
    # 1 and "1" are two clients; numpy's common-type rules would merge them.
    p = check_partitions([1, "1", 1, "1", "1"], 5)
    assert p.client_ids == (1, "1")
    assert [len(i) for i in p.indices] == [2, 3]
    # Tuples are hashable ids, not a second dimension.
    p = check_partitions([("a", 0), ("b", 1), ("a", 0)], 3)
    assert p.client_ids == (("a", 0), ("b", 1))
    np.testing.assert_array_equal(p.indices[0], [0, 2])
    pd = pytest.importorskip("pandas")
    p = check_partitions(pd.Series([("a", 0), ("b", 1), ("a", 0)]), 3)
    assert p.client_ids == (("a", 0), ("b", 1))


@pytest.mark.parametrize("bad", [3.0, np.float64(3), 2.5, float("nan"), "abc"])
def test_a_scalar_that_is_not_an_int_gets_a_clear_error(bad):
    with pytest.raises(ValueError, match="neither a number of clients nor one"):
        check_partitions(bad, 10)
