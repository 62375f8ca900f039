"""The server side: fit an estimator over the Flower nodes a grid reaches,
as a function to call in a ServerApp (:func:`fit_on_grid`), as a ServerApp
(:func:`server_app`) or in Flower's simulation engine (:func:`simulate`).
The nodes' data and the transport are in :mod:`skfed.flower._nodes`.
"""

import math
import os
import tempfile
from pathlib import Path

from flwr.serverapp import ServerApp
from sklearn.base import clone, is_classifier

from ._client import client_app
from ._nodes import NodeData

__all__ = ["fit_on_grid", "server_app", "simulate"]


def fit_on_grid(
    estimator,
    grid,
    *,
    n_nodes,
    timeout=600.0,
    round_timeout=60.0,
    straggler_timeout=20.0,
    **fit_params,
):
    """Fit ``estimator`` on the data of the Flower nodes ``grid`` reaches.

    Call it in a ServerApp's ``main``; the nodes run
    :func:`~skfed.flower.client_app`. A classifier is fitted with the
    nodes' labels. Sample indices in the fitted attributes number the
    nodes' rows stacked in client order (see ``NodeData.first_rows`` and
    :func:`locate_rows`).

    Parameters
    ----------
    estimator : skfed estimator
        Fitted in place.
    grid : flwr.serverapp.Grid
    n_nodes : int
        Nodes to wait for; every connected node takes part.
    timeout : float, default=600.0
        Seconds to wait for the nodes to connect.
    round_timeout : float, default=60.0
        Seconds to wait for each round's answers; see :class:`NodeData`.
    straggler_timeout : float or None, default=20.0
        When a node that has not answered is taken as lost; see
        :class:`NodeData`.
    **fit_params
        Passed to ``fit``.

    Returns
    -------
    estimator
        The fitted estimator.
    """
    data = NodeData(
        grid,
        n_nodes=n_nodes,
        timeout=timeout,
        round_timeout=round_timeout,
        straggler_timeout=straggler_timeout,
    )
    if is_classifier(estimator):
        if data.y is None:
            raise ValueError("A classifier needs labels; the nodes hold none.")
        return estimator.fit(data.X, data.y, **fit_params)
    return estimator.fit(data.X, **fit_params)


# Run config keys server_app reads itself; every other key names a
# parameter of the estimator, with dashes for underscores.
_APP_KEYS = ("n-nodes", "model-path", "round-timeout", "straggler-timeout")


def configured(estimator, run_config):
    """A copy of ``estimator`` with the parameters ``run_config`` sets.

    Every key of the run config other than ``n-nodes``, ``model-path`` and
    ``round-timeout`` names a parameter of the estimator, spelled with
    dashes (``n-clusters`` sets ``n_clusters``); its value (a TOML string,
    number or boolean) is checked as the estimator checks its parameters.

    Raises
    ------
    ValueError
        For a key that is no parameter (naming the valid keys), or a value
        the parameter does not accept.
    """
    estimator = clone(estimator)
    valid = {name.replace("_", "-"): name for name in estimator.get_params(deep=False)}
    params = {}
    for key, value in run_config.items():
        if key in _APP_KEYS:
            continue
        if key not in valid:
            raise ValueError(
                f"The run config's {key!r} is not a parameter of "
                f"{type(estimator).__name__}; valid keys: "
                f"{', '.join(sorted(valid) + list(_APP_KEYS))}."
            )
        params[valid[key]] = value
    estimator.set_params(**params)
    # Check now, before waiting for nodes: a bad value from the command
    # line should not cost a connection and the setup rounds.
    estimator._validate_params()
    return estimator


def _writable_path(path):
    """``path`` as a Path whose directory exists (created if missing) and
    accepts a new file; raises ``ValueError`` saying why not."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise ValueError(f"model-path {str(path)!r} is a directory; name a file.")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".skfed-check-"):
            pass
    except OSError as exc:
        raise ValueError(
            f"Cannot save the fitted model at {str(path)!r}: {exc}. Give a "
            "model-path in a directory this ServerApp may write to."
        ) from exc
    return path


def save_model(estimator, path):
    """``joblib.dump`` the fitted ``estimator`` at ``path``; if that fails,
    keep it in a temporary file and raise ``OSError`` naming both."""
    import joblib

    try:
        joblib.dump(estimator, path)
    except Exception as exc:
        fd, kept = tempfile.mkstemp(prefix="skfed-model-", suffix=".joblib")
        os.close(fd)
        joblib.dump(estimator, kept)
        raise OSError(
            f"Could not save the fitted model at {str(path)!r} ({exc}); it is "
            f"kept at {kept!r}."
        ) from exc
    return path


def server_app(
    estimator,
    *,
    n_nodes=None,
    save_to=None,
    timeout=600.0,
    round_timeout=None,
    straggler_timeout=None,
):
    """A Flower ServerApp that fits a copy of ``estimator`` over its grid.

    The run config (``[tool.flwr.app.config]`` of the app's
    ``pyproject.toml``, overridden by ``flwr run --run-config``) says:

    ``n-nodes``
        how many nodes to wait for (unless ``n_nodes`` is given);
    ``model-path``
        where to save the fitted estimator (unless ``save_to`` is given);
    ``round-timeout``
        seconds to wait for each round's answers (unless ``round_timeout``
        is given);
    ``straggler-timeout``
        when a silent node is taken as lost (unless ``straggler_timeout``
        is given);
    any other key
        a parameter of the estimator, with dashes for underscores:
        ``n-clusters = 8`` sets ``n_clusters=8``. Flower accepts on the
        command line only keys the ``pyproject.toml`` lists, so list there
        every parameter a run may change.

    Unknown keys and bad values raise ``ValueError`` before any node is
    contacted, as does a save path whose directory cannot be created or
    written to. If saving fails after the fit, the fitted estimator is
    kept in a temporary file and the ServerApp fails with an ``OSError``
    naming it (Flower then marks the run failed).

    Parameters
    ----------
    estimator : skfed estimator
        Cloned, configured from the run config, then fitted with
        :func:`fit_on_grid`.
    n_nodes : int, default=None
        Nodes to wait for; when None, the run config's ``n-nodes``.
    save_to : str or path, default=None
        Where to save the fitted estimator (``joblib.dump``); when None, the
        run config's ``model-path`` if it has one. Its directory is
        created if missing. A simulation keeps the fitted estimator in
        ``app.fitted_estimator`` as well.
    timeout : float, default=600.0
        Seconds to wait for the nodes to connect.
    round_timeout : float, default=None
        Seconds to wait for each round's answers; when None, the run
        config's ``round-timeout``, else 60. See :class:`NodeData`.
    straggler_timeout : float, default=None
        When None, the run config's ``straggler-timeout``, else 20. See
        :class:`NodeData`.

    Returns
    -------
    app : flwr.serverapp.ServerApp
    """
    app = ServerApp()
    app.fitted_estimator = None
    app.save_error = None

    @app.main()
    def main(grid, context):
        config = context.run_config
        est = configured(estimator, config)
        nodes = n_nodes if n_nodes is not None else config.get("n-nodes")
        if nodes is None:
            raise ValueError(
                "Say how many nodes hold the data: server_app(..., n_nodes=) "
                "or the run config's n-nodes."
            )
        waits = {}
        for key, given, default in (
            ("round-timeout", round_timeout, 60.0),
            ("straggler-timeout", straggler_timeout, 20.0),
        ):
            wait = config.get(key, default) if given is None else given
            if (
                isinstance(wait, bool)
                or not isinstance(wait, (int, float))
                or not wait > 0
            ):
                raise ValueError(f"{key} must be a positive number; got {wait!r}.")
            waits[key] = wait
        path = save_to if save_to is not None else config.get("model-path")
        if path:
            path = _writable_path(path)
        fitted = fit_on_grid(
            est,
            grid,
            n_nodes=int(nodes),
            timeout=timeout,
            round_timeout=waits["round-timeout"],
            straggler_timeout=waits["straggler-timeout"],
        )
        app.fitted_estimator = fitted
        if path:
            try:
                save_model(fitted, path)
            except OSError as exc:
                app.save_error = exc
                raise

    return app


def simulate(
    estimator,
    load_data,
    n_nodes,
    *,
    client_id=None,
    save_to=None,
    backend_config=None,
    timeout=600.0,
    round_timeout=60.0,
    straggler_timeout=20.0,
):
    """Fit ``estimator`` through Flower's simulation engine.

    The same ServerApp and ClientApp as a deployment, with the nodes
    simulated in this machine's Ray workers: check the model here against
    an in-memory fit before deploying. Needs ``pip install 'skfed[flower]'``
    (Flower with its simulation engine).

    Parameters
    ----------
    estimator : skfed estimator
        Cloned, then fitted.
    load_data : callable
        ``load_data(context) -> X`` or ``(X, y)`` for the node of
        ``context.node_config["partition-id"]`` (0 to ``n_nodes - 1``);
        runs in the simulation's worker processes, so it must pickle
        (cloudpickle: closures are fine).
    n_nodes : int
        Simulated nodes.
    client_id : callable, default=None
        See :func:`client_app`.
    save_to : str or path, default=None
        Where to save the fitted estimator, as :func:`server_app` does.
    backend_config : dict, default=None
        Flower's simulation backend config; by default one CPU per node.
    timeout : float, default=600.0
        Seconds to wait for the nodes to connect.
    round_timeout : float, default=60.0
        Seconds to wait for each round's answers; see :class:`NodeData`.
    straggler_timeout : float or None, default=20.0
        When a node that has not answered is taken as lost; see
        :class:`NodeData`.

    Returns
    -------
    estimator
        A fitted copy of ``estimator``.
    """
    from flwr.simulation import run_simulation

    server = server_app(
        estimator,
        n_nodes=n_nodes,
        save_to=save_to,
        timeout=timeout,
        round_timeout=round_timeout,
        # server_app reads None as "from the run config".
        straggler_timeout=math.inf if straggler_timeout is None else straggler_timeout,
    )
    client = client_app(load_data, client_id=client_id)
    run_simulation(
        server_app=server,
        client_app=client,
        num_supernodes=n_nodes,
        backend_config=backend_config or {"client_resources": {"num_cpus": 1}},
    )
    if server.save_error is not None:
        raise server.save_error
    if server.fitted_estimator is None:
        raise RuntimeError("The simulated fit did not finish; see Flower's log.")
    return server.fitted_estimator
