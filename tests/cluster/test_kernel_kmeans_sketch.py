"""Tests for the sketched statistic of FederatedKernelKMeans' one-shot solver
(``sketch_size``: a Nyström sketch of the summed random-feature Gram matrix
instead of its triangle)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_array_equal
from scipy import ndimage
from sklearn.datasets import load_digits, make_blobs
from sklearn.metrics import adjusted_rand_score as ari
from sklearn.metrics import normalized_mutual_info_score as nmi

from skfed import FederatedKernelKMeans
from skfed.cluster._kernel_kmeans import one_shot_features, one_shot_sketch
from skfed.privacy import DifferentialPrivacy


def _digits(n=400):
    X, y = load_digits(return_X_y=True)
    return X[:n], y[:n]


def test_repeated_rows_give_the_triangles_model():
    # Six distinct rows: the features' covariance has rank 5 <= l, so the
    # fitted sketch gives the triangle's eigenvalues and embedding.
    X = np.repeat(make_blobs(6, n_features=4, random_state=0)[0], 40, axis=0)
    params = {"n_random_features": 80, "n_components": 5, "random_state": 0}
    tri = FederatedKernelKMeans(3, sketch_size=None, **params).fit(X, partitions=3)
    sk = FederatedKernelKMeans(3, sketch_size=10, **params).fit(X, partitions=3)
    assert tri.sketch_size_ is None and sk.sketch_size_ == 10
    np.testing.assert_allclose(sk.eigenvalues_, tri.eigenvalues_, rtol=1e-6)
    # The sketch's features are taken around the mean, the triangle's
    # around the origin: the same embedding up to each column's sign (the
    # sign convention reads the basis, which the centring rotates).
    scale = np.abs(tri.embedding_).max()
    signs = np.sign(np.sum(sk.embedding_ * tri.embedding_, axis=0))
    np.testing.assert_allclose(sk.embedding_ * signs, tri.embedding_, atol=1e-6 * scale)
    assert ari(sk.labels_, tri.labels_) == 1.0


@pytest.mark.parametrize("n_random_features", [40, 41])
def test_ledger_upload_is_d_l_plus_d_in_one_sum_only_round(n_random_features):
    # Every client uploads n_m and Σ x (d + 1 floats), then Zᵀ(ZΩ) and Zᵀ1,
    # D l + D floats, once; the server sends the seed, γ, l and x̄ (3 + d
    # floats), then V and z̄ᵀV.
    X, _ = _digits(300)
    D, width = n_random_features, 12
    km = FederatedKernelKMeans(
        3, n_random_features=D, sketch_size=width, random_state=0
    )
    km.fit(X, partitions=np.arange(300) % 3)
    assert km.n_random_features_ == D and km.sketch_size_ == width
    log = km.communication_
    uploads = [
        r
        for r in log.records
        if r.name == "random feature statistics" and r.direction == "upload"
    ]
    assert len(uploads) == 1
    assert uploads[0].floats == (D * width + D,) * 3
    up, down = log.floats_by_name("upload"), log.floats_by_name("download")
    assert up["random feature statistics"] == 3 * (D * width + D)
    assert down["random feature statistics"] == 3 * (3 + X.shape[1])
    assert up["kernel centre"] == 3 * (1 + X.shape[1])
    s = km.n_components_
    assert down["embedding"] == 3 * (D * s + s)
    rounds = [
        r
        for r in log.disclosure()
        if r["name"] in ("random feature statistics", "kernel centre")
    ]
    assert rounds and all(r["disclosure"] == "sum_only" for r in rounds)


def test_masked_sketch_is_the_unmasked_one():
    # Secure aggregation sums the sketches in fixed point: the same model
    # to that precision.
    X, _ = make_blobs(600, centers=3, cluster_std=0.6, random_state=0)
    params = {"n_random_features": 60, "sketch_size": 20, "random_state": 0}
    plain = FederatedKernelKMeans(3, **params).fit(X, partitions=3)
    masked = FederatedKernelKMeans(3, secure_aggregation=True, **params).fit(
        X, partitions=3
    )
    np.testing.assert_allclose(masked.eigenvalues_, plain.eigenvalues_, rtol=1e-6)
    scale = np.abs(plain.embedding_).max()
    np.testing.assert_allclose(masked.embedding_, plain.embedding_, atol=1e-6 * scale)
    assert ari(masked.labels_, plain.labels_) == 1.0


def test_same_seed_same_model_whatever_n_jobs():
    X, _ = _digits(300)
    params = {"n_random_features": 90, "sketch_size": 24, "random_state": 0}
    one = FederatedKernelKMeans(4, n_jobs=1, **params).fit(X, partitions=4)
    two = FederatedKernelKMeans(4, n_jobs=2, **params).fit(X, partitions=4)
    np.testing.assert_allclose(two.eigenvalues_, one.eigenvalues_, rtol=1e-10)
    np.testing.assert_allclose(two.transform(X), one.transform(X), atol=1e-10)
    np.testing.assert_array_equal(two.labels_, one.labels_)


@settings(max_examples=4, deadline=None)
@given(shift=st.floats(-1e3, 1e3), scale=st.floats(1e-2, 1e2))
def test_translated_and_scaled_data_give_the_same_clusters(shift, scale):
    # The sketched features are taken around the global mean: a
    # translation changes nothing but rounding, and the default γ follows
    # the scale (the eigenvalues of the features' covariance do not scale).
    X, y = make_blobs(300, centers=3, cluster_std=0.6, random_state=1)
    params = {"n_random_features": 80, "sketch_size": 20, "random_state": 0}
    ref = FederatedKernelKMeans(3, **params).fit(X, partitions=3)
    km = FederatedKernelKMeans(3, **params).fit(scale * (X + shift), partitions=3)
    assert ari(km.labels_, ref.labels_) == 1.0
    np.testing.assert_allclose(km.eigenvalues_, ref.eigenvalues_, rtol=1e-6)
    signs = np.sign(np.sum(km.embedding_ * ref.embedding_, axis=0))
    np.testing.assert_allclose(
        km.embedding_ * signs, ref.embedding_, atol=1e-6 * np.abs(ref.embedding_).max()
    )


def test_translation_changes_nothing_when_the_sketch_is_exact():
    # Rank <= l: the Nyström approximation does not depend on Ω.
    X = np.repeat(make_blobs(6, n_features=4, random_state=0)[0], 40, axis=0)
    params = {"n_random_features": 80, "n_components": 5, "sketch_size": 10}
    ref = FederatedKernelKMeans(3, random_state=0, **params).fit(X, partitions=3)
    km = FederatedKernelKMeans(3, random_state=0, **params).fit(X + 1e3, partitions=3)
    np.testing.assert_allclose(km.eigenvalues_, ref.eigenvalues_, rtol=1e-5)
    signs = np.sign(np.sum(km.embedding_ * ref.embedding_, axis=0))
    np.testing.assert_allclose(
        km.embedding_ * signs, ref.embedding_, atol=1e-5 * np.abs(ref.embedding_).max()
    )


def test_privacy_refuses_an_explicit_sketch_and_auto_keeps_the_triangle():
    X, _ = make_blobs(3000, n_features=400, centers=3, random_state=0)
    dp = DifferentialPrivacy(epsilon=2.0)
    with pytest.raises(ValueError, match="sketch_size=40 cannot be used under"):
        FederatedKernelKMeans(3, gamma=1e-3, sketch_size=40, privacy=dp).fit(
            X, partitions=2
        )
    # Wide data whose plain default sketches...
    plain = FederatedKernelKMeans(3, n_init=2, random_state=0)
    assert plain._sketch_size(3000, 400, 2) is not None
    # ...keeps the triangle under privacy, with a D the noise decides (300
    # without noise).
    km = FederatedKernelKMeans(3, gamma=1e-3, privacy=dp, random_state=0)
    km.fit(X, partitions=2)
    D = km.n_random_features_
    assert km.sketch_size_ is None and 3 * 3 + 2 <= D < 300
    up = km.communication_.floats_by_name("upload")
    assert up["random feature statistics"] == 2 * (D * (D + 1) // 2 + D + 1)
    free = DifferentialPrivacy(epsilon=float("inf"))
    km = FederatedKernelKMeans(3, gamma=1e-3, privacy=free, random_state=0)
    assert km.fit(X, partitions=2).n_random_features_ == 300


def test_bad_sketch_sizes_are_refused():
    X, _ = _digits(200)
    with pytest.raises(ValueError, match="must be at least n_components=9"):
        FederatedKernelKMeans(3, n_random_features=50, sketch_size=8).fit(X)
    with pytest.raises(ValueError, match="option of the one-shot solver"):
        FederatedKernelKMeans(3, algorithm="dspgd", sketch_size=20).fit(X)


def test_a_sketch_wider_than_the_features_is_the_exact_one_with_a_warning():
    # As Nystroem clips n_components to the rows: l = D sketches exactly.
    X, _ = _digits(200)
    params = {"n_random_features": 50, "random_state": 0}
    with pytest.warns(UserWarning, match="sketch_size=50 was used"):
        wide = FederatedKernelKMeans(3, sketch_size=80, **params).fit(X)
    exact = FederatedKernelKMeans(3, sketch_size=50, **params).fit(X)
    assert wide.sketch_size_ == 50
    np.testing.assert_allclose(wide.eigenvalues_, exact.eigenvalues_, rtol=1e-10)
    assert_array_equal(wide.labels_, exact.labels_)


def test_auto_sketches_only_wide_data_within_a_fifth_of_its_floats():
    # Narrow data (digits, wine, the circles): the triangle, as before.
    for n, d, m in [(1797, 64, 10), (1797, 64, 5), (178, 13, 5), (20_000, 2, 10)]:
        assert FederatedKernelKMeans(10)._sketch_size(n, d, m) is None
    # The image set over 10 clients: l = 2s = 60 and the largest even D
    # with M (D l + D) <= N d / 5, larger than the triangle's 394.
    km = FederatedKernelKMeans(10)
    width = km._sketch_size(5000, 784, 10)
    D = km._n_random_features(5000, 784, 10, width)
    assert width == 60 and D == one_shot_sketch(5000, 784, 10, 60) == 1284
    assert 10 * (D * width + D) <= 5000 * 784 / 5 < 10 * ((D + 2) * width + D + 2)
    assert D > one_shot_features(5000, 784, 10)
    assert one_shot_sketch(10**7, 784, 10, 60) == 2000  # at most 2,000
    # An explicit D, DSPGD or privacy keep the triangle.
    assert (
        FederatedKernelKMeans(10, n_random_features=400)._sketch_size(5000, 784, 10)
        is None
    )
    assert (
        FederatedKernelKMeans(10, algorithm="dspgd")._sketch_size(5000, 784, 10) is None
    )
    # An explicit l with "auto" D: D from the budget for that l.
    km = FederatedKernelKMeans(10, sketch_size=40)
    assert km._n_random_features(5000, 784, 10, 40) == 1912


def _digit_images(n, seed=0):
    """n digits drawn at 26 x 26 in a 28 x 28 frame (d = 784) at random
    offsets, with pixel noise: wide rows, as handwritten-digit images."""
    rng = np.random.RandomState(seed)
    base, target = load_digits(return_X_y=True)
    idx = rng.randint(len(base), size=n)
    out = np.zeros((n, 28, 28))
    for row, i in enumerate(idx):
        dx, dy = rng.randint(0, 3, size=2)
        img = ndimage.zoom(base[i].reshape(8, 8) / 16.0, 26 / 8, order=1)
        out[row, dy : dy + 26, dx : dx + 26] = img
    out += 0.05 * rng.standard_normal(out.shape)
    return out.reshape(n, -1), target[idx]


def test_auto_sketch_beats_the_triangle_on_wide_data():
    # 1,500 x 784 digit images over 4 clients, statistics within a fifth of
    # the raw data either way: the triangle affords D = 340, the sketch
    # D = 962 with l = 60, and one map's kernel estimate is what limits
    # the one-shot there (measured on the benchmark's images, 4 seeds:
    # 0.562 against 0.615).
    X, y = _digit_images(1500)
    parts = np.arange(1500) % 4
    old, new = [], []
    for seed in range(3):
        tri = FederatedKernelKMeans(10, sketch_size=None, random_state=seed)
        old.append(nmi(y, tri.fit(X, partitions=parts).labels_))
        sk = FederatedKernelKMeans(10, random_state=seed).fit(X, partitions=parts)
        new.append(nmi(y, sk.labels_))
    assert sk.sketch_size_ == 60 and sk.n_random_features_ > tri.n_random_features_
    up = sk.communication_.floats_by_name("upload")["random feature statistics"]
    assert up <= X.size / 5
    assert np.mean(new) >= np.mean(old) + 0.02


def test_any_split_of_the_rows_gives_the_same_sketched_model():
    # The server reads only the sum of the sketches: clients relabelled,
    # rows reordered or split otherwise give the same basis (to the
    # rounding of the sum).
    X, _ = _digits(240)
    params = {"n_random_features": 60, "sketch_size": 20, "random_state": 0}
    ref = FederatedKernelKMeans(4, **params).fit(X, partitions=np.arange(240) % 2)
    rng = np.random.RandomState(0)
    order = rng.permutation(240)
    km = FederatedKernelKMeans(4, **params).fit(
        X[order], partitions=rng.randint(5, size=240) * 7
    )
    np.testing.assert_allclose(km.eigenvalues_, ref.eigenvalues_, rtol=1e-9)
    scale = np.abs(ref.embedding_).max()
    np.testing.assert_allclose(km.transform(X), ref.transform(X), atol=1e-9 * scale)
