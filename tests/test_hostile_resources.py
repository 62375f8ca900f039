"""Hostile input that costs resources, shifts or scales the data, or pushes
a float parameter to its extremes, for every estimator.

What a fit may start or allocate is bounded by its work, not by a
parameter alone (``n_jobs``, ``widths``, size parameters); translation and
scale do not change the model (dense or CSR); a float parameter at either
end of its range fits or raises a ``ValueError`` naming it.
"""

import contextlib
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import example, given, settings
from hypothesis import strategies as st
from sklearn.metrics import adjusted_rand_score

import skfed._engine._transports._joblib as transport_module
from skfed._engine._transports._common import worker_count
from skfed._engine._transports._processes import resident_workers
from skfed._testing import HOSTILE_MINIMUM
from skfed._testing import hostile_blobs as _blobs
from skfed._testing import hostile_estimator as _make
from skfed._testing import hostile_fit as _fit

MINIMUM = HOSTILE_MINIMUM
NAMES = list(MINIMUM)


# --- workers bounded by the clients -------------------------------------


class _CountingThreads(ThreadPoolExecutor):
    """A ThreadPoolExecutor that records the most threads it started."""

    started = []

    def shutdown(self, *args, **kwargs):
        _CountingThreads.started.append(len(self._threads))
        super().shutdown(*args, **kwargs)


def test_worker_count_is_bounded_by_the_tasks():
    assert worker_count(32, 3) == 3
    assert worker_count(10_000, 3) == 3
    assert worker_count(2, 3) == 2
    assert worker_count(-1, 1) == 1
    assert worker_count(32, 0) == 1


def test_resident_workers_are_bounded_by_the_clients():
    # 40 clients of 100 rows can keep two workers busy (16 clients each at
    # least), not 32.
    sizes = [1000] * 40
    assert resident_workers(2, sizes) == 2
    assert resident_workers(32, sizes) == 2
    assert resident_workers(32, [1000] * 20) == 0


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("n_jobs", [32, 10_000])
def test_n_jobs_beyond_the_clients_starts_a_worker_per_client(
    name, n_jobs, monkeypatch
):
    # n_jobs=32 over 3 clients started 32 worker processes (22-27 s for a
    # fit of 0.02 s); n_jobs=10000 did not return. At most one worker per
    # client, and no worker processes for a fit of 150 rows.
    requested = []
    real_parallel = transport_module.Parallel

    def parallel(*args, **kwargs):
        requested.append(kwargs.get("n_jobs", args[0] if args else None))
        return real_parallel(*args, **kwargs)

    _CountingThreads.started = []
    monkeypatch.setattr(transport_module, "Parallel", parallel)
    monkeypatch.setattr(transport_module, "ThreadPoolExecutor", _CountingThreads)
    X, y, ids = _blobs(name)
    reference = _fit(name, X, y, ids, n_jobs=1)
    model = _fit(name, X, y, ids, n_jobs=n_jobs)
    assert all(n is None or 0 < n <= 3 for n in requested), requested
    assert all(n <= 3 for n in _CountingThreads.started), _CountingThreads.started
    if MINIMUM[name][1] == "cluster":
        np.testing.assert_array_equal(model.labels_, reference.labels_)


# --- size parameters bounded by the data ---------------------------------


def test_int_widths_beyond_the_samples_are_clipped_with_a_warning():
    # widths=100000 on 150 rows allocated 1.3 GB and ran 200 s: more widths
    # than samples give linearly dependent atoms.
    X, y, ids = _blobs("FederatedRKHSClassifier")
    with pytest.warns(UserWarning, match="widths=100000 exceeds the 150"):
        model = _make("FederatedRKHSClassifier", widths=100_000).fit(
            X, y, partitions=ids
        )
    assert len(model.widths_) == 150


def test_a_list_of_more_widths_than_samples_is_refused():
    X, y, ids = _blobs("FederatedRKHSClassifier", n=30)
    widths = np.geomspace(0.1, 10, 31)
    with pytest.raises(ValueError, match="31 distinct widths for 30"):
        _make("FederatedRKHSClassifier", widths=widths).fit(X, y, partitions=ids)


# --- the data scale does not depend on where the data sit ------------------


@pytest.mark.parametrize("sparse", [False, True])
@settings(max_examples=10, deadline=None)
@given(
    offset=st.floats(1e3, 1e11),
    scale=st.floats(1e-8, 1e8),
)
@example(offset=2e10, scale=1.0)
def test_gamma_from_moments_is_translation_invariant(sparse, offset, scale):
    # Rows of spread `scale` at `offset` times it from the origin: one pass
    # around the rounded mean called rows of unit spread at 2e10 "identical"
    # (a threshold of 1e-10 of the offset).
    from skfed._engine._federation import Federation
    from skfed._engine._validation import check_partitions
    from skfed.kernel import gamma_from_moments, moments_step

    X = np.random.RandomState(0).standard_normal((40, 3)) * scale
    ids = np.arange(40) % 4

    def gamma(Z):
        Z = sp.csr_matrix(Z) if sparse else Z
        p = check_partitions(ids, Z.shape[0])
        with Federation.from_arrays(Z, None, p, random_state=0) as fed:
            return gamma_from_moments(fed.run_round("moments", moments_step))

    # The shifted data are themselves rounded: about 1e-16 of the offset
    # over the spread, relative.
    rtol = 1e-13 + 1e-14 * offset
    np.testing.assert_allclose(gamma(X + offset * scale), gamma(X), rtol=rtol)


@pytest.mark.parametrize("sparse", [False, True])
def test_identical_rows_are_refused_at_any_offset(sparse):
    from skfed._engine._federation import Federation
    from skfed._engine._validation import check_partitions
    from skfed.kernel import gamma_from_moments, moments_step

    for offset in [0.0, 0.1, 3.7e9, 1e140]:
        Z = np.full((30, 3), offset) + np.array([1.0, 0.0, -2.0])
        Z = sp.csr_matrix(Z) if sparse else Z
        p = check_partitions(np.arange(30) % 3, 30)
        with Federation.from_arrays(Z, None, p, random_state=0) as fed:
            uploads = fed.run_round("moments", moments_step)
        with pytest.raises(ValueError, match="identical"):
            gamma_from_moments(uploads)


def test_server_restarts_beyond_the_pooled_centers_are_clipped():
    # server_n_init=10**6 over 9 pooled centers ran for minutes.
    X, y, ids = _blobs("KFed")
    with pytest.warns(UserWarning, match="server_n_init=1000000 exceeds"):
        model = _make("KFed", server_n_init=10**6).fit(X, partitions=ids)
    reference = _fit("KFed", X, y, ids, server_n_init=10)
    np.testing.assert_array_equal(model.labels_, reference.labels_)


# --- translation and scale do not change the model -------------------------


def _model_output(name, model, X):
    """What must not change: labels, decision values, or components."""
    kind = MINIMUM[name][1]
    if kind == "cluster":
        return model.labels_
    if kind == "classify":
        return model.decision_function(X)
    return model.transform(X)


def _assert_same_model(name, reference, moved, rtol):
    kind = MINIMUM[name][1]
    if kind == "cluster":
        assert adjusted_rand_score(reference, moved) == 1.0
    elif kind == "classify":
        np.testing.assert_allclose(
            moved, reference, atol=rtol * np.abs(reference).max()
        )
    else:
        # Components are defined up to sign.
        moved = moved * np.sign(np.sum(moved * reference, axis=0))
        np.testing.assert_allclose(
            moved, reference, atol=rtol * np.abs(reference).max()
        )


# The scaler, as StandardScaler, centers by default and so refuses CSR.
_SPARSE_OK = [
    n for n in NAMES if n not in ("FederatedRKHSClassifier", "FederatedStandardScaler")
]


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, sparse",
    [(n, False) for n in NAMES] + [(n, True) for n in _SPARSE_OK],
)
@settings(max_examples=4, deadline=None)
@given(
    offset=st.floats(-1e10, 1e10).filter(lambda v: abs(v) >= 1),
    scale=st.sampled_from([1e-8, 1e-3, 1.0, 1e3, 1e8]),
)
@example(offset=1e9, scale=1.0)
@example(offset=2e10 / 8, scale=1e-2)
def test_translation_and_scale_do_not_change_the_model(name, sparse, offset, scale):
    # An offset of up to 1e10 times the data's spread, and scales from 1e-8
    # to 1e8: CSR data at 1e9 were clustered at random (dense exact), and
    # rows of spread 0.01 at 2e10 were refused as identical. The moved data
    # are themselves rounded, by about 1e-16 of the offset over the spread:
    # that is the tolerance on decision values and components.
    X, y, ids = _blobs(name)
    moved = (X + offset) * scale

    def fit(Z):
        Z = sp.csr_matrix(Z) if sparse else Z
        return _model_output(name, _fit(name, Z, y, ids), Z)

    rtol = 1e-6 + 1e-13 * abs(offset)
    _assert_same_model(name, fit(X), fit(moved), rtol)


# --- float parameters at their extremes ---------------------------------------


@pytest.mark.parametrize(
    "name, params, match",
    [
        # The phases X Ω overflowed float32 after their reduction: the
        # eigen-solver then refused "infs or NaNs".
        ("FederatedKernelKMeans", {"gamma": 1e300}, "gamma"),
        ("DistributedKernelPCA", {"gamma": 1e300}, "gamma"),
        ("DistributedKernelPCA", {"gamma": 1e30}, "gamma"),
        # 1/(2σ²): ZeroDivisionError and OverflowError.
        ("DistributedKernelPCA", {"median_factor": 1e-300}, "median_factor"),
        ("DistributedKernelPCA", {"median_factor": 1e300}, "median_factor"),
        # (γ<x, y> + c)^q overflowed: "SVD did not converge".
        ("DistributedKernelPCA", {"kernel": "poly", "coef0": 1e300}, "coef0"),
    ],
)
def test_extreme_float_parameters_raise_a_value_error_naming_them(name, params, match):
    X, y, ids = _blobs(name, n=60)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(ValueError, match=match):
            _make(name, **params).fit(X, y, partitions=np.arange(60) % 3)


@pytest.mark.parametrize(
    "name, params",
    [
        ("FederatedKernelKMeans", {"gamma": 1e-300}),
        ("DistributedKernelPCA", {"gamma": 1e-300}),
        ("DistributedKernelPCA", {"median_factor": 1e-3}),
        ("DistributedKernelPCA", {"median_factor": 1e3}),
        ("DistributedKernelPCA", {"kernel": "poly", "coef0": 1e3}),
        ("KFed", {"tol": 1e300}),
        ("DistributedKMeans", {"tol": 1e-300}),
        ("FederatedRKHSClassifier", {"C": 1e300}),
        ("FederatedRKHSClassifier", {"solver": "fista", "step_size": 1e300}),
    ],
)
def test_extreme_float_parameters_within_range_give_finite_output(name, params):
    X, y, ids = _blobs(name, n=60)
    # Duals bounded by C = 1e300 overflow the float32 kernel products (NumPy
    # says so, and the test holds it to that); the fit must still end finite.
    overflows = params.get("C") == 1e300
    with pytest.warns(RuntimeWarning) if overflows else contextlib.nullcontext():
        model = _fit(name, X, y, np.arange(60) % 3, **params)
    out = model.predict(X) if hasattr(model, "predict") else model.transform(X)
    assert np.all(np.isfinite(out))


@pytest.mark.parametrize(
    "widths, match",
    [([1e-300], "below"), ([1e-150], "below"), ([1e-11, 1e30], "spans")],
)
def test_kernel_widths_beyond_the_data_resolution_are_refused(widths, match):
    # They ended in "Input X contains NaN" from the clients' SVC.
    X, y, ids = _blobs("FederatedRKHSClassifier", n=60)
    with pytest.raises(ValueError, match=f"widths (has|spans).*{match}|{match}"):
        _make("FederatedRKHSClassifier", widths=widths).fit(
            X, y, partitions=np.arange(60) % 3
        )
