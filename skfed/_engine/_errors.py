"""What a federation raises when a client or a worker fails."""

__all__ = ["ClientStepError", "ClientValueError", "WorkerLostError"]


class ClientStepError(RuntimeError):
    """A client step raised; the message names the client and the round.

    The original exception is chained as ``__cause__``.

    Attributes
    ----------
    client_id : hashable
        The client that failed.
    round_name : str
        The round it failed in.
    """

    def __init__(self, message, *, client_id=None, round_name=None):
        super().__init__(message)
        self.client_id = client_id
        self.round_name = round_name


class ClientValueError(ClientStepError, ValueError):
    """A client step rejected its input (a ``ValueError`` on one client)."""


class WorkerLostError(RuntimeError):
    """A dask worker holding clients of a fit left the cluster during it,
    or a task of the fit failed in dask (not in a client's step).

    The clients' rows and what they kept between rounds were in that
    worker's memory, so the fit cannot go on with the same model: fit
    again.

    Attributes
    ----------
    workers : list of str
        The addresses of the lost workers.
    client_ids : list
        The clients they held.
    """

    def __init__(self, message, *, workers=(), client_ids=()):
        super().__init__(message)
        self.workers = list(workers)
        self.client_ids = list(client_ids)
