"""Messages, uploads and kept state without pickle (skfed._engine._codec)."""

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from sklearn.datasets import make_blobs

import skfed
from skfed._engine import _transports
from skfed._engine._codec import dumps, loads
from skfed._engine._protocol import StepCall
from skfed._engine._transports._common import StepFailure
from skfed._engine._transports._joblib import JoblibTransport
from skfed._testing import INTEGRATION_CASES


def _round_trip(value):
    text, arrays = dumps(value)
    assert isinstance(text, str)
    assert all(isinstance(a, np.ndarray) and not a.dtype.hasobject for a in arrays)
    return loads(text, [a.copy() for a in arrays])


def _assert_same(a, b):
    assert type(a) is type(b) or (isinstance(a, tuple) and type(b) is tuple)
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    elif sp.issparse(a):
        assert a.format == b.format and a.shape == b.shape
        np.testing.assert_array_equal(a.toarray(), b.toarray())
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _assert_same(a[k], b[k])
    elif isinstance(a, float) and np.isnan(a):
        assert np.isnan(b)
    else:
        assert a == b


arrays = hnp.arrays(
    dtype=st.sampled_from([np.float64, np.float32, np.int64, np.int32, np.bool_]),
    shape=hnp.array_shapes(min_dims=0, max_dims=3, max_side=4),
)
leaves = (
    st.none()
    | st.booleans()
    | st.integers(-(2**62), 2**62)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=5)
    | arrays
)
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=3) | st.integers(0, 9), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=60, deadline=None)
@given(values)
def test_every_payload_type_survives_the_round_trip(value):
    _assert_same(value, _round_trip(value))


def test_layouts_sparse_matrices_and_scalars():
    F = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    back = _round_trip(F)
    assert back.flags.f_contiguous and np.array_equal(back, F)
    for fmt in ("csr", "csc", "coo"):
        m = sp.random(5, 4, density=0.4, format=fmt, random_state=0)
        _assert_same(m, _round_trip(m))
    assert _round_trip(np.float32(1.5)).dtype == np.float32
    assert _round_trip(float("inf")) == float("inf")
    assert _round_trip({(1, "a"): None}) == {(1, "a"): None}


@pytest.mark.parametrize("value", [print, np.array([object()]), {1, 2}])
def test_code_and_objects_are_refused(value):
    with pytest.raises(TypeError):
        dumps(value)


class _ThroughCodec(JoblibTransport):
    """The joblib transport with everything that would cross a boundary --
    the step call, messages, uploads and the clients' kept state -- passed
    through the codec each round."""

    rounds = 0

    def run(self, call, client_ids, messages):
        type(self).rounds += 1
        call = StepCall(*_round_trip(tuple(call)))
        messages = [_round_trip(m) for m in messages]
        out = super().run(call, client_ids, messages)
        for c in client_ids:
            self._storage[c] = _round_trip(self._storage[c])
        return [u if isinstance(u, StepFailure) else _round_trip(u) for u in out]


@pytest.mark.parametrize("name", [n for n in INTEGRATION_CASES if n in skfed.__all__])
def test_every_protocol_runs_through_the_codec(name, monkeypatch):
    # What a Flower deployment needs: every round of every estimator can be
    # carried as plain data and arrays, with the same model.
    X, y = make_blobs(n_samples=240, centers=3, n_features=4, random_state=1)
    y = (y == 0).astype(int) if INTEGRATION_CASES[name][2] == "classify" else y
    partitions = np.arange(240) % 6
    params = INTEGRATION_CASES[name][0]
    expected = getattr(skfed, name)(**params).fit(X, y, partitions=partitions)
    monkeypatch.setattr(_transports, "JoblibTransport", _ThroughCodec)
    monkeypatch.setattr(_ThroughCodec, "rounds", 0)
    got = getattr(skfed, name)(**params).fit(X, y, partitions=partitions)
    assert _ThroughCodec.rounds == got.communication_.n_rounds
    for method in ("predict", "transform", "decision_function"):
        if hasattr(expected, method):
            np.testing.assert_array_equal(
                getattr(got, method)(X), getattr(expected, method)(X)
            )
    assert got.communication_.to_records() == expected.communication_.to_records()


def test_secure_aggregation_runs_through_the_codec(monkeypatch):
    # The mask option, the key exchange and the masked uploads are plain
    # data and arrays too; the sums are exact in the ring, so the model is
    # the masked in-memory one.
    X, _ = make_blobs(n_samples=240, centers=3, n_features=4, random_state=1)
    partitions = np.arange(240) % 6
    params = dict(
        INTEGRATION_CASES["DistributedKMeans"][0],
        refine_iter=2,
        secure_aggregation=True,
    )
    expected = skfed.DistributedKMeans(**params).fit(X, partitions=partitions)
    monkeypatch.setattr(_transports, "JoblibTransport", _ThroughCodec)
    got = skfed.DistributedKMeans(**params).fit(X, partitions=partitions)
    np.testing.assert_array_equal(got.cluster_centers_, expected.cluster_centers_)
    assert got.inertia_ == expected.inertia_
    assert got.communication_.to_records() == expected.communication_.to_records()
    assert "secure aggregation keys" in got.communication_.floats_by_name()
