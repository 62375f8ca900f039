"""The transports, and the one place that chooses a transport for a fit.

A transport holds the clients of a fit and runs their steps (the interface
is described in ``_common``, with what every transport shares):

* :class:`~skfed._engine._transports._joblib.JoblibTransport`: clients in
  this process, steps in one joblib pool per fit (the default);
* :class:`~skfed._engine._transports._processes.ProcessTransport`: many
  small clients held by worker processes for the whole fit;
* :class:`~skfed._engine._transports._dask.DaskTransport`: clients on dask
  workers (dask collections, joblib's dask backend);
* ``skfed.flower``'s transport: clients on Flower nodes, opened by the
  nodes' :class:`~skfed._engine._remote.RemoteArray`.

:func:`make_transport` chooses for clients made here from in-memory arrays,
:func:`remote_transport` for data that lives elsewhere.
"""

from joblib.parallel import get_active_backend

from .._remote import RemoteArray, is_dask_collection
from ._joblib import JoblibTransport
from ._processes import ProcessTransport, resident_workers

__all__ = ["make_transport", "remote_transport"]


def make_transport(clients, *, n_jobs=None, in_processes=True):
    """The transport for clients cut from in-memory arrays.

    Parameters
    ----------
    clients : list of ClientData
        In canonical order.
    n_jobs : int, default=None
        See :class:`~skfed._engine._federation.Federation`.
    in_processes : bool, default=True
        Whether many small clients may be held by worker processes for the
        fit (see ``skfed._engine._transports._processes``); False keeps them
        in this process, for a protocol whose uploads are large beside the
        clients' work (a worker process sends each upload back as a copy).

    Returns
    -------
    transport : DaskTransport, ProcessTransport or JoblibTransport
        A dask transport under joblib's dask backend (each client sent to a
        worker once, every round run where it is); resident worker processes
        for many small clients with ``n_jobs`` > 1; else this process's pool.
    """
    backend, _ = get_active_backend()
    if type(backend).__name__ == "DaskDistributedBackend":
        from ._dask import DaskTransport

        return DaskTransport.scatter(backend.client, clients)
    sizes = [c.n_samples for c in clients]
    n_workers = resident_workers(n_jobs, sizes) if in_processes else 0
    if n_workers:
        return ProcessTransport(clients, n_jobs=n_workers)
    return JoblibTransport(clients, n_jobs=n_jobs)


def remote_transport(X, y, partitions, *, seed, spec):
    """The transport for data held elsewhere: the clients are built where
    ``X`` lives, on the dask workers that hold its chunks or on the Flower
    nodes that hold it.

    Parameters
    ----------
    X : dask.array.Array or RemoteArray of shape (n_samples, n_features)
    y : dask.array.Array or RemoteArray of shape (n_samples,), or None
    partitions : None or dask.array.Array of shape (n_samples,)
        None: each chunk of rows (each node) is a client; a dask array: the
        client id of each row.
    seed : int
        The fit's seed for every client's streams.
    spec : dict
        What each client checks on its rows, and its own configuration
        (see ``skfed._engine._client.make_client``).
    """
    if isinstance(X, RemoteArray):
        if partitions is not None:
            raise ValueError(
                "With data on Flower nodes each node is a client; pass "
                f"partitions=None, got {type(partitions).__name__}."
            )
        return X.open_transport(y, seed=seed, spec=spec)
    from ._dask import DaskTransport, dask_client

    if partitions is not None and not is_dask_collection(partitions):
        raise ValueError(
            "With a dask X, partitions must be None (each chunk of rows "
            "a client), a dask array or series aligned with X, or the "
            "name of a client column of a dask dataframe; got "
            f"{type(partitions).__name__}."
        )
    return DaskTransport.from_dask(
        dask_client(), X, y=y, partitions=partitions, seed=seed, spec=spec
    )
