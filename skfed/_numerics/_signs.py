"""The sign convention of every eigenvector or component skfed reports.

An eigenvector's sign is arbitrary: a solver's start vector, the order of
a sum, or secure aggregation's rounding of it can flip it, and with it the
model's coordinates (``transform``, centers in a spectral space). One rule
fixes it, scikit-learn's (``svd_flip`` on the eigenvectors, as
``KernelPCA`` applies it): the entry of largest magnitude is positive. Two
entries whose magnitudes tie up to rounding would let rounding decide, so
then the first significant entry, in an order that does not depend on the
clients, is made positive instead.
"""

import numpy as np

__all__ = ["SIGN_TIE", "extreme_signs", "vector_signs"]

# Extremes within this relative distance of each other tie (rounding, 1e-15
# of the sum's scale, 2^-32 of it for a noised sum, must not decide);
# coefficients below _SIGNIFICANT of a column's largest are passed over in
# the fallback.
SIGN_TIE = 1e-9
_SIGNIFICANT = 1e-6


def extreme_signs(top, bottom, tiebreak):
    """±1 per column from its largest and smallest entries.

    Parameters
    ----------
    top, bottom : ndarray of shape (n_columns,)
        The largest and the smallest entry of each column (they may come
        from rows the caller never holds together, e.g. the training
        projections of every client).
    tiebreak : ndarray of shape (n_rows, n_columns)
        Entries in an order that does not depend on the clients, whose
        first significant one decides a column whose extremes tie.

    Returns
    -------
    signs : ndarray of shape (n_columns,)
        Multiplying column j by ``signs[j]`` makes its entry of largest
        magnitude positive.
    """
    top, bottom = np.asarray(top, dtype=float), np.asarray(bottom, dtype=float)
    signs = np.where(top >= -bottom, 1.0, -1.0)
    tied = np.abs(top + bottom) <= SIGN_TIE * np.maximum(top, -bottom)
    for j in np.flatnonzero(tied):
        column = tiebreak[:, j]
        scale = np.max(np.abs(column), initial=0.0)
        significant = np.flatnonzero(np.abs(column) > _SIGNIFICANT * scale)
        if significant.size:
            signs[j] = 1.0 if column[significant[0]] > 0 else -1.0
    return signs


def vector_signs(V):
    """±1 per column of V (eigenvectors, rows in a fixed order) under the
    convention: :func:`extreme_signs` of its own entries."""
    if V.shape[1] == 0:
        return np.ones(0)
    return extreme_signs(V.max(axis=0), V.min(axis=0), V)
