"""Row-free k-means: k-means on a federation under ``raw_rows="refuse"``,
from k-FED's local centers and distributed Lloyd rounds on summed
per-cluster statistics (:mod:`skfed.cluster._protocols._kfed`'s rounds), so
that no upload is, or determines, a row.

``DistributedKMeans(raw_rows="refuse")`` runs it on X, and
``FederatedKernelKMeans(raw_rows="refuse")`` on its clients' spectral
embedding.
"""

import warnings

from ...privacy._refusal import MIN_ROWS
from ._kfed import KFedLocalOptions, run_kfed

__all__ = ["run_row_free_kmeans"]

# Local k-means restarts of a client in row-free k-means (KFed's default).
_ROW_FREE_LOCAL_N_INIT = 3


def run_row_free_kmeans(
    fed,
    *,
    n_clusters,
    random_state,
    server_n_init,
    refine_iter,
    tol,
    local_max_iter,
    weighted=False,
    rows=None,
    min_rows=MIN_ROWS,
    dtype=None,
):
    """k-means that sends no row, on an open federation under
    ``raw_rows="refuse"``: k-FED's local centers (each of at least
    ``min_rows`` distinct rows) merged by the server's weighted k-means,
    then up to ``refine_iter`` distributed Lloyd rounds on the clients'
    summed per-cluster statistics (:func:`run_kfed`; the clients keep
    their labels).

    A client of n_m <= k rows asks for n_m - 1 local centers: with k of
    them its centers would be its rows, which it refuses to send; with
    fewer, its clusters of too few rows are merged on it. ``rows`` and
    ``dtype`` as in :func:`run_kfed`.
    """
    n_local = {
        cid: min(n_clusters, max(int(n) - 1, 1))
        for cid, n in zip(fed.client_ids, fed.client_sizes)
    }
    local = KFedLocalOptions(
        n_clusters=n_clusters,
        n_local_clusters=n_local,
        center_weighting="size",
        local_step="auto",
        n_init=_ROW_FREE_LOCAL_N_INIT,
        max_iter=max(local_max_iter, 1),
        tol=tol,
        allow_raw_upload=False,
        client_dropout=0.0,
    )
    with warnings.catch_warnings():
        # The local restarts are ours, not the user's n_init: a client of
        # fewer rows runs fewer, without a warning.
        warnings.filterwarnings(
            "ignore", message="n_init=.* exceeds the number of samples"
        )
        return run_kfed(
            fed,
            local=local,
            random_state=random_state,
            merge="kmeans",
            server_n_init=server_n_init,
            dtype=dtype,
            gather_labels=False,
            refine_iter=refine_iter,
            tol=tol,
            weighted=weighted,
            rows=rows,
            min_rows=min_rows,
        )
