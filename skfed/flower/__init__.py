"""Fit skfed estimators across Flower nodes.

Each node runs :func:`client_app` with a function that loads its own data;
the server runs :func:`server_app` (or calls :func:`fit_on_grid` in its own
ServerApp), which fits an skfed estimator over the grid round by round:
client steps travel by registered name with plain-data options, payloads as
Flower records without pickle, and each node keeps its state in its
``context.state``. :func:`simulate` runs the same apps in Flower's
simulation engine. ``python -m skfed.flower.superexec`` runs beside a
SuperNode started with ``--isolation process``: Flower's SuperExec, with
each message's ClientApp process forked with Flower and skfed already
imported.

Needs Flower: ``pip install 'skfed[flower]'``.
"""

try:
    import flwr  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "skfed.flower needs Flower: pip install 'skfed[flower]'."
    ) from exc

from ._client import client_app
from ._nodes import FlowerTransport, NodeData, locate_rows
from ._server import fit_on_grid, server_app, simulate

__all__ = [
    "FlowerTransport",
    "NodeData",
    "client_app",
    "fit_on_grid",
    "locate_rows",
    "server_app",
    "simulate",
]
