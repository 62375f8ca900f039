"""Sketching matrices: CountSketch, TensorSketch, a CountSketch→Gaussian
subspace embedding of the columns of a matrix, and the Gaussian test
matrix of a Nyström sketch.

All maps are drawn from a seed so that every client holding the same seed
applies the same map (shared randomness costs one float on the network).
Sparse inputs are never densified: a CountSketch is a sparse matrix product,
so its cost follows nnz(X).
"""

import numpy as np
import scipy.fft
import scipy.sparse as sp
from sklearn.utils import check_random_state

__all__ = [
    "count_sketch_matrix",
    "sample_count_sketch",
    "sample_tensor_sketch",
    "sketch_columns",
    "sketch_matrix",
    "tensor_sketch",
]

# The stream of a Nyström sketch's test matrix beside its map's seed:
# another stream than the map's frequencies, drawn by the server and every
# client.
_SKETCH_STREAM = 1


def sample_count_sketch(random_state, n_in, n_out):
    """Draw the hash h : [n_in] → [n_out] and signs s of a CountSketch.

    Parameters
    ----------
    random_state : int or RandomState
        Shared seed.
    n_in : int
        Input dimension.
    n_out : int
        Number of buckets.

    Returns
    -------
    buckets : ndarray of shape (n_in,), dtype intp
    signs : ndarray of shape (n_in,), values ±1.0
    """
    rng = check_random_state(random_state)
    buckets = rng.randint(n_out, size=n_in).astype(np.intp)
    signs = rng.choice(np.array([-1.0, 1.0]), size=n_in)
    return buckets, signs


def count_sketch_matrix(buckets, signs, n_out, *, dtype=np.float64):
    """The CountSketch as a sparse (n_in, n_out) matrix Cᵀ (one ±1 per row).

    ``X @ count_sketch_matrix(...)`` sketches the columns (features) of X and
    ``count_sketch_matrix(...).T @ X`` sums the rows (samples) of X into
    buckets; both cost O(nnz(X)).
    """
    n_in = buckets.shape[0]
    return sp.csr_matrix(
        (signs.astype(dtype, copy=False), (np.arange(n_in), buckets)),
        shape=(n_in, n_out),
    )


def sample_tensor_sketch(random_state, n_features, n_components, degree):
    """Draw the ``degree`` independent CountSketches of a TensorSketch.

    Each hash covers ``n_features + 1`` coordinates: the extra one carries
    √coef0, which turns (γ xᵀy + c)^q into a homogeneous polynomial kernel
    of the augmented vector.

    Parameters
    ----------
    random_state : int or RandomState
        Shared seed.
    n_features : int
        d, the input dimension.
    n_components : int
        D, the sketch dimension.
    degree : int
        q, the polynomial degree.

    Returns
    -------
    hashes : list of (buckets, signs)
    """
    rng = check_random_state(random_state)
    return [
        sample_count_sketch(rng, n_features + 1, n_components) for _ in range(degree)
    ]


def tensor_sketch(X, hashes, n_components, *, gamma=1.0, coef0=0.0, dtype=np.float64):
    """TensorSketch (Pham & Pagh, 2013) of the polynomial kernel.

    Maps rows x to z(x) ∈ R^D with E[z(x)ᵀz(y)] = (γ xᵀy + c)^q: the q
    CountSketches of the augmented vector [√γ x, √c] are multiplied in the
    Fourier domain (a circular convolution). Sparse X is sketched without
    densifying it, in O(q · nnz(X) + n D log D).

    Parameters
    ----------
    X : {ndarray, sparse matrix} of shape (n_samples, n_features)
    hashes : list of (buckets, signs)
        From :func:`sample_tensor_sketch`; its length is the degree q.
    n_components : int
        D, the sketch dimension.
    gamma, coef0 : float
        Kernel parameters γ and c.
    dtype : {np.float64, np.float32}, default=np.float64
        Precision of the FFTs (float32 halves time and memory).

    Returns
    -------
    Z : ndarray of shape (n_samples, n_components) of ``dtype``
    """
    n_samples, n_features = X.shape
    root_gamma, root_coef0 = np.sqrt(gamma), np.sqrt(max(coef0, 0.0))
    if sp.issparse(X):
        X = sp.csr_matrix(X)
    product = None
    for buckets, signs in hashes:
        if sp.issparse(X):
            # Each nonzero moved to its bucket: a CSR matrix with the same
            # row pointers, whose densification sums the collisions; O(nnz)
            # with no sparse-sparse product.
            P = sp.csr_matrix(
                (
                    (signs[X.indices] * X.data).astype(dtype),
                    buckets[X.indices],
                    X.indptr,
                ),
                shape=(n_samples, n_components),
            ).toarray()
        else:
            C = count_sketch_matrix(
                buckets[:n_features], signs[:n_features], n_components
            )
            P = np.asarray(X @ C)
        P = P.astype(dtype, copy=False) * dtype(root_gamma)
        P[:, buckets[n_features]] += dtype(signs[n_features] * root_coef0)
        F = scipy.fft.rfft(P, axis=1)
        product = F if product is None else product * F
    return scipy.fft.irfft(product, n=n_components, axis=1)


def sketch_columns(M, n_out, random_state, *, oversampling=4):
    """A subspace embedding of the columns of M: M T with T ∈ R^{n × n_out}.

    T is a CountSketch into ``oversampling * n_out`` buckets followed by a
    Gaussian map to ``n_out`` columns (variance 1/n_out, so E[T Tᵀ] = I);
    the CountSketch makes the cost linear in n, the Gaussian keeps the
    output small. A matrix with at most ``n_out`` columns is returned as is:
    sending it unsketched is both cheaper and exact.

    Parameters
    ----------
    M : ndarray of shape (n_rows, n)
    n_out : int
        Number of columns of the sketch (p or w in the paper).
    random_state : int or RandomState
        The sketch may be private to the caller (T_m of client m).
    oversampling : int, default=4

    Returns
    -------
    MT : ndarray of shape (n_rows, min(n, n_out))
    """
    n = M.shape[1]
    if n <= n_out:
        return M
    rng = check_random_state(random_state)
    n_mid = oversampling * n_out
    if n > n_mid:
        buckets, signs = sample_count_sketch(rng, n, n_mid)
        M = np.asarray(M @ count_sketch_matrix(buckets, signs, n_mid))
    gauss = rng.standard_normal((M.shape[1], n_out)) / np.sqrt(n_out)
    return M @ gauss


def sketch_matrix(seed, n_random_features, sketch_size):
    """Ω, a Nyström sketch's D x l standard Gaussian test matrix, drawn from
    the seed of the random-feature map it sketches, on a stream of its own
    (the server and every client draw the same one; no float of it is
    sent)."""
    rng = np.random.default_rng([int(seed), _SKETCH_STREAM])
    return rng.standard_normal((n_random_features, sketch_size))
