"""The kernel widths an int ``widths`` asks for, log-spaced around the
federated data scale (the root mean squared distance between samples)."""

import numpy as np

from ...kernel import ZeroSpreadError, federated_gamma, width_rounds

__all__ = ["DATA_SCALE", "data_scale", "server_widths"]

# Each client's moments, or their masked sums under secure aggregation.
DATA_SCALE = width_rounds("data scale")

# Log-spaced widths for an int ``widths``, as multiples of the root mean
# squared distance between samples (the federated data scale).
_WIDTH_RANGE = (0.2, 1.0)


def server_widths(gamma, n_widths):
    """Server: widths log-spaced around the root mean squared distance
    √(1 / (2γ)), γ from :func:`data_scale`."""
    return np.sqrt(0.5 / gamma) * np.geomspace(*_WIDTH_RANGE, num=n_widths)


def data_scale(fed):
    """Round(s) :data:`DATA_SCALE`: γ = 1 / (2 · mean squared distance).

    ``federated_gamma`` sums the clients' moments in an order fixed by
    their values, so renaming clients cannot move the widths by a rounding
    error.
    """
    try:
        return federated_gamma(fed, DATA_SCALE)
    except ZeroSpreadError as exc:
        # The shared message speaks of ``gamma``; here the knob is ``widths``.
        raise ValueError(
            "All samples are identical, so the data scale that an int "
            "``widths`` derives the kernel widths from is zero; pass widths "
            "as a list of positive floats or check the data."
        ) from exc
