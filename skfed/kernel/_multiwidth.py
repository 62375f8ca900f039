"""The multi-width Gaussian kernel of :class:`~skfed.FederatedRKHSClassifier`:
its atoms k_w(x, s) = exp(−‖x − s‖² / (2 w²)) evaluated exactly
(:func:`gaussian_atoms`, the dictionary :class:`AtomDictionary` of the
critical samples' dual) and its shared random-feature map
(:func:`multiwidth_map`, the row-free path's).
"""

import math
from functools import lru_cache

import numpy as np
from sklearn import get_config

from .._numerics._seeds import SEED_MAX
from ._private_features import paired_fourier_map

__all__ = [
    "AtomDictionary",
    "features_per_width",
    "gaussian_atoms",
    "multiwidth_map",
]


# --------------------------------------------------------------------------
# The dictionary of atoms and its products


def gaussian_atoms(X, centers, widths, *, dtype=np.float32):
    """Φ restricted to one width per center: exp(−‖x − s_j‖² / (2 w_j²)).

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    centers : ndarray of shape (n_atoms, n_features)
        s_a, one row per atom.
    widths : ndarray of shape (n_atoms,)
        w_a, one per atom.
    dtype : dtype, default=np.float32

    Returns
    -------
    Phi : ndarray of shape (n_samples, n_atoms)
    """
    widths = np.asarray(widths, dtype=np.float64)
    scale = _length_scale(widths)
    sq = _sq_distances(X, centers, dtype, scale)
    sq *= (-0.5 / (widths / scale) ** 2).astype(dtype)
    np.exp(sq, out=sq)
    return sq


def _length_scale(widths):
    """A power of two near the largest width, to measure lengths in.

    ‖x − s‖² / (2w²) does not change when x, s and w are divided by the
    same number; dividing by a power of two is exact. In those units the
    squared distances of data at any magnitude (1e±30 and beyond) neither
    overflow nor underflow float32.
    """
    top = float(np.max(widths, initial=0.0))
    if not (np.isfinite(top) and top > 0):
        return 1.0
    return float(2.0 ** np.round(np.log2(top)))


def _sq_distances(X, centers, dtype, scale=1.0):
    # ‖x‖² − 2 x·s + ‖s‖² cancels when the norms are large next to the
    # distances (data far from the origin, above all in float32: an offset
    # of 1000 cost 3 accuracy points). Distances do not move with the
    # origin, so measure them from the centres' mean, shifted in float64.
    centers = np.asarray(centers)
    shift = np.mean(centers, axis=0, dtype=np.float64) if len(centers) else 0.0
    X = np.asarray((np.asarray(X) - shift) / scale, dtype=dtype)
    centers = np.asarray((centers - shift) / scale, dtype=dtype)
    sq = X @ centers.T
    sq *= -2
    sq += np.einsum("ij,ij->i", X, X)[:, None]
    sq += np.einsum("ij,ij->i", centers, centers)[None, :]
    np.maximum(sq, 0, out=sq)
    return sq


class AtomDictionary:
    """Φ for atoms at every (center, width) pair; atom a = k · n_centers + j.

    Holds Φ in memory when it fits in scikit-learn's ``working_memory``;
    otherwise every product recomputes it in column chunks, so memory stays
    at one chunk.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        The samples of the constraints (rows of Φ).
    centers : ndarray of shape (n_centers, n_features)
        s_j; the training points.
    widths : ndarray of shape (n_widths,)
        w_k.
    dtype : dtype, default=np.float32
        Φ lies in [0, 1]; float32 halves memory and time at ~1e-7 relative
        error, far below the solver tolerance. The rows are stored in this
        precision relative to the centres' mean (the kernels only see
        differences), so an offset in the data costs no precision;
        :meth:`atom_centers` returns the centres as given.
    """

    def __init__(self, X, centers, widths, *, dtype=np.float32):
        self._given_centers = np.asarray(centers)
        self.widths = np.asarray(widths, dtype=np.float64)
        # Held shifted to the centres' mean and in units of _scale (see
        # _sq_distances and _length_scale): the kernels do not change.
        self._scale = _length_scale(self.widths)
        shift = np.mean(self._given_centers, axis=0, dtype=np.float64)
        self.X = np.asarray((np.asarray(X) - shift) / self._scale, dtype=dtype)
        self.centers = np.asarray(
            (self._given_centers - shift) / self._scale, dtype=dtype
        )
        self.dtype = dtype = np.dtype(dtype)
        self.n_centers = self.centers.shape[0]
        self.n_atoms = self.n_centers * len(self.widths)
        budget = get_config()["working_memory"] * 2**20
        itemsize = np.dtype(dtype).itemsize
        n = self.X.shape[0]
        self._full = None
        if n * self.n_atoms * itemsize <= budget:
            # One distance matrix serves every width.
            sq = _sq_distances(self.X, self.centers, dtype)
            self._full = np.empty((n, self.n_atoms), dtype=dtype)
            for k, w in enumerate(self.widths / self._scale):
                block = self._full[:, k * self.n_centers : (k + 1) * self.n_centers]
                np.multiply(sq, dtype.type(-0.5 / w**2), out=block)
                np.exp(block, out=block)
        # Column chunk: the distances and one exponentiated block take half
        # the budget, leaving the rest for the caller's arrays (at a chunk
        # of the whole budget a server pool of 13,000 samples peaked at
        # 2.7 GB with scikit-learn's default 1 GB working memory).
        self._chunk = max(1, int(budget // (4 * max(n, 1) * itemsize)))

    def atom_centers(self, atoms):
        return self._given_centers[np.asarray(atoms) % self.n_centers]

    def atom_widths(self, atoms):
        return self.widths[np.asarray(atoms) // self.n_centers]

    def columns(self, atoms=None):
        """Φ[:, atoms] as a dense array; every atom when ``atoms`` is None
        (Φ itself when held, not a copy: do not modify it)."""
        if atoms is None:
            if self._full is not None:
                return self._full
            atoms = np.arange(self.n_atoms)
        atoms = np.asarray(atoms, dtype=np.intp)
        if self._full is not None:
            return self._full[:, atoms]
        return gaussian_atoms(
            self.X,
            self.centers[atoms % self.n_centers],  # shifted like self.X
            self.atom_widths(atoms) / self._scale,  # in self.X's units
            dtype=self.dtype,
        )

    def rmatvec(self, v):
        """c = Φᵀ v over every atom, without storing Φ.

        Parameters
        ----------
        v : ndarray of shape (n_samples,) or (n_samples, n_vectors)

        Returns
        -------
        c : ndarray of shape (n_atoms,) or (n_atoms, n_vectors), float64
        """
        v = np.asarray(v)
        vv = v.astype(self.dtype)
        if self._full is not None:
            return (self._full.T @ vv).astype(np.float64)
        out = np.empty((self.n_atoms,) + v.shape[1:], dtype=np.float64)
        scales = (-0.5 / (self.widths / self._scale) ** 2).astype(self.dtype)
        for start in range(0, self.n_centers, self._chunk):
            stop = min(start + self._chunk, self.n_centers)
            sq = _sq_distances(self.X, self.centers[start:stop], self.dtype)
            block = np.empty_like(sq)
            for k, scale in enumerate(scales):
                np.multiply(sq, scale, out=block)
                np.exp(block, out=block)
                out[k * self.n_centers + start : k * self.n_centers + stop] = (
                    block.T @ vv
                )
        return out


# --------------------------------------------------------------------------
# The shared random-feature map


def features_per_width(n_random_features, n_widths):
    """D_w, the features of each width: an even share of D (so that the
    map's norm is exactly 1), at least 2."""
    return 2 * max(1, math.ceil(n_random_features / (2 * n_widths)))


@lru_cache(maxsize=2)
def multiwidth_map(seed, n_features, n_random_features, widths):
    """Ω and b of the shared multi-width map, read-only.

    ``widths`` is a tuple; width i draws its paired features from seed
    ``seed + i`` (independent frequencies per width). Scaled by √(2/D) as a
    whole, z(x)ᵀz(x') estimates the mean of the widths' Gaussian kernels.
    """
    per_width = features_per_width(n_random_features, len(widths))
    omegas, offsets = [], []
    for i, width in enumerate(widths):
        omega, offset = paired_fourier_map(
            (int(seed) + i) % SEED_MAX, n_features, per_width, 0.5 / width**2
        )
        omegas.append(omega)
        offsets.append(offset)
    omega, offset = np.hstack(omegas), np.concatenate(offsets)
    omega.flags.writeable = offset.flags.writeable = False
    return omega, offset
