"""Same model, same coordinates: renaming the clients (other ids, in
another sorted order) and masking the sum-only rounds do not change a
model beyond the masking's fixed point."""

import warnings

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.datasets import make_blobs

import skfed

ESTIMATORS = {
    "KFed": lambda: skfed.KFed(n_clusters=3, random_state=0),
    "DistributedKMeans": lambda: skfed.DistributedKMeans(
        n_clusters=3, refine_iter=2, random_state=0
    ),
    "FederatedKernelKMeans": lambda: skfed.FederatedKernelKMeans(
        n_clusters=3, random_state=0
    ),
    "DistributedKernelPCA": lambda: skfed.DistributedKernelPCA(
        n_components=2, n_representatives=20, random_state=0
    ),
    "FederatedRKHSClassifier": lambda: skfed.FederatedRKHSClassifier(random_state=0),
}


def _outputs(name, model, X):
    """What the model computes, in its own coordinates."""
    if name == "FederatedRKHSClassifier":
        return [model.decision_function(X)]
    if name == "DistributedKernelPCA":
        return [model.transform(X)]
    outputs = [model.cluster_centers_, model.labels_]
    if name == "FederatedKernelKMeans":
        outputs.append(model.transform(X))
    return outputs


def _fit(name, X, y, partitions):
    model = ESTIMATORS[name]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "FederatedRKHSClassifier":
            return model.fit(X, y, partitions=partitions)
        return model.fit(X, partitions=partitions)


def _assert_same(a, b, atol):
    for got, expected in zip(a, b):
        if np.issubdtype(np.asarray(expected).dtype, np.integer):
            assert_array_equal(got, expected)
        else:
            scale = max(1.0, float(np.max(np.abs(expected))))
            assert_allclose(got, expected, rtol=0, atol=atol * scale)


@st.composite
def _renamed_split(draw):
    """Data, a split into clients (of equal sizes or not) and new names
    for the clients in another order."""
    n_clients = draw(st.integers(2, 4))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.RandomState(seed)
    X, y = make_blobs(100 * n_clients, centers=3, n_features=3, random_state=seed)
    if draw(st.booleans()):
        # Clients of one size: the server's rounding of shares ties.
        partitions = rng.permutation(np.arange(len(X)) % n_clients)
    else:
        partitions = rng.randint(0, n_clients, len(X))
        partitions[:n_clients] = np.arange(n_clients)  # none empty
    names = draw(
        st.lists(
            st.integers(0, 1000), min_size=n_clients, max_size=n_clients, unique=True
        )
    )
    return X, (y == 0).astype(int), partitions, np.array(names)[partitions]


def _check_renaming(name, split):
    X, y, partitions, renamed = split
    a = _fit(name, X, y, partitions)
    b = _fit(name, X, y, renamed)
    _assert_same(_outputs(name, b, X), _outputs(name, a, X), 1e-12)


@settings(max_examples=4, deadline=None)
@given(split=_renamed_split())
def test_renaming_clients_keeps_the_kfed_model(split):
    _check_renaming("KFed", split)


@settings(max_examples=4, deadline=None)
@given(split=_renamed_split())
def test_renaming_clients_keeps_the_distributed_kmeans_model(split):
    _check_renaming("DistributedKMeans", split)


@settings(max_examples=4, deadline=None)
@given(split=_renamed_split())
def test_renaming_clients_keeps_the_kernel_kmeans_model(split):
    _check_renaming("FederatedKernelKMeans", split)


@settings(max_examples=4, deadline=None)
@given(split=_renamed_split())
def test_renaming_clients_keeps_the_kernel_pca_model(split):
    _check_renaming("DistributedKernelPCA", split)


@settings(max_examples=3, deadline=None)
@given(split=_renamed_split())
def test_renaming_clients_keeps_the_rkhs_model(split):
    _check_renaming("FederatedRKHSClassifier", split)


def test_renaming_equal_clients_keeps_the_kernel_pca_model():
    # Three clients of 100 rows: the median sample's 256 draws split
    # 85.33 each, and which client drew the extra rows was its position.
    X, _ = make_blobs(300, centers=3, n_features=4, random_state=0)
    partitions = np.arange(300) % 3
    a = _fit("DistributedKernelPCA", X, None, partitions)
    b = _fit("DistributedKernelPCA", X, None, np.array([7, 2, 5])[partitions])
    _assert_same([b.transform(X)], [a.transform(X)], 1e-12)


# Masked sums carry each number to 2^-64 and are decoded with one
# rounding, plain ones are compensated, and the default width is computed
# from the clients' moments as the masked fit's two sums give it: the same
# model to rounding (measured over 8 seeds: centers within 9e-15,
# ``transform`` within 5e-14). With the sums rounded to 2^-32 the centers
# moved by up to 2.2e-8, the smallest kept eigenvalue gaps amplifying the
# rounding; a sign flip or another numbering of the clusters moves them by
# 0.1 to 1.
_MASKING_ATOL = 1e-12


@settings(max_examples=4, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    n_clusters=st.integers(2, 5),
    algorithm=st.sampled_from(["one_shot", "one_shot_sketch"]),
    width=st.sampled_from(["given", "estimated"]),
)
def test_masked_kernel_kmeans_has_the_plain_centers_and_labels(
    seed, n_clusters, algorithm, width
):
    X, _ = make_blobs(90, centers=3, n_features=3, random_state=seed)
    partitions = np.random.RandomState(seed).randint(0, 3, len(X))
    partitions[:3] = np.arange(3)
    params = {"n_clusters": n_clusters, "random_state": seed}
    if algorithm == "one_shot_sketch":
        params["sketch_size"] = 40
    if width == "given":
        params["gamma"] = 0.05
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = skfed.FederatedKernelKMeans(**params).fit(X, partitions=partitions)
        masked = skfed.FederatedKernelKMeans(secure_aggregation=True, **params).fit(
            X, partitions=partitions
        )
    # The same clusters, numbered alike, in the same coordinates (the
    # embedding's signs are fixed).
    assert_array_equal(masked.labels_, plain.labels_)
    _assert_same(
        [masked.cluster_centers_, masked.transform(X), masked.eigenvalues_],
        [plain.cluster_centers_, plain.transform(X), plain.eigenvalues_],
        _MASKING_ATOL,
    )
    kinds = {r["name"]: r["disclosure"] for r in masked.communication_.disclosure()}
    assert "secure aggregation keys" in kinds
