"""Distributed k-means on a coreset (Balcan, Ehrlich & Liang, NeurIPS 2013).

Each client summarises its rows by a small weighted set — its own k local
centers plus points drawn in proportion to their squared distance to those
centers — and the server clusters the union of the summaries with weighted
k-means. The weights on one client add up to that client's total weight (its
n_m), so the union is an unbiased stand-in for the whole data set whatever
the split; a local center's weight may be negative (it corrects for the
points drawn from its cluster), which the server's weighted k-means handles.

This is the coreset of Balcan, Ehrlich & Liang (NeurIPS 2013).
:func:`federated_coreset_kmeans` runs the protocol on any open
:class:`~skfed._engine._federation.Federation` and any per-client rows
(``FederatedKernelKMeans`` runs it on its spectral embedding);
:class:`DistributedKMeans` is the estimator around it.
"""

import math
import numbers
import sys
import warnings
from functools import partial
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    ClusterMixin,
    TransformerMixin,
    _fit_context,
)
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.extmath import row_norms, safe_sparse_dot

from .._engine._federation import FederatedMixin
from .._engine._ledger import NO_UPLOAD, PER_CLIENT, RAW_ROWS, SUM_ONLY, Disclosure
from .._engine._protocol import PER_ROW, client_step, collectable
from .._engine._remote import distinct_values, is_remote
from .._engine._validation import StrictInterval, as_id_array, clip_to_data
from .._numerics._blocks import row_blocks
from .._numerics._rows import canonical_row_order, row_hashes, rows_equal
from .._numerics._seeds import SEED_MAX
from .._numerics._shift import shift_point, shifted_rows
from .._sklearn_compat import check_sample_weight as _check_sample_weight
from ..privacy import DifferentialPrivacy
from ..privacy._refusal import n_distinct_rows
from ._batched_kmeans import (
    SMALL_ROWS,
    WEIGHT_EPS,
    KMeansProblem,
    kmeans_restarts,
)
from ._centers import KMeansCentersMixin, labels_where_held

# The clients' labels from the final centers: one value per row.
collectable("coreset", "labels", PER_ROW)

__all__ = [
    "CoresetKMeansResult",
    "DistributedKMeans",
    "federated_coreset_kmeans",
]


# Rows per block when computing distances to the centers, so that memory
# stays O(block * k) instead of O(n_m * k).
_CHUNK = 4096

# Relative cost difference below which two restarts count as equally good.
_SAME_COST = 1e-12
# The server's k-means runs its restarts side by side (batched k-means)
# on points of at most this many features, if restarts times points times
# max(k, features) is at most _BATCHED_RESTARTS_FLOATS (arrays of about
# that many floats, 32 MB); otherwise one after another. With more features
# the arithmetic outweighs the per-restart overhead that batching saves, and
# CSR points would be densified.
_BATCHED_RESTARTS_FEATURES = 128
_BATCHED_RESTARTS_FLOATS = 2**22


class DistributedKMeans(
    KMeansCentersMixin,
    FederatedMixin,
    ClassNamePrefixFeaturesOutMixin,
    ClusterMixin,
    TransformerMixin,
    BaseEstimator,
):
    """K-means over clients through a distributed coreset.

    Every client computes a local k-means solution B_m on its own samples and
    sends the server one number, its local cost. The server splits a budget
    of ``coreset_size`` sample points between clients in proportion to those
    costs; each client then draws its share by D² sampling against B_m and
    uploads the drawn points and its local centers with weights that sum to
    its number of samples. The server runs weighted k-means (k-means++ and
    Lloyd with ``n_init`` restarts, then up to ``n_swaps`` swaps of one
    center) on the union of these coresets (Balcan, Ehrlich & Liang, 2013).
    Then, by default, three rounds of distributed Lloyd on the clients' rows
    (``refine_iter``: per-cluster sums, k(d + 1) floats per client and
    round, a sum-only round), and the clients label their own samples
    against the final centers. At most six rounds (three when the coreset
    is the data itself), and the upload does not grow with the number of
    samples.

    Under ``raw_rows="refuse"`` no row leaves a client: the clients'
    local k-means centers (as :class:`~skfed.KFed`'s, one upload) seed the
    server's weighted k-means, and distributed Lloyd rounds on the
    clients' summed per-cluster statistics run until the centers settle
    to ``tol`` (at most ``max_iter`` rounds).

    The coreset stands for the data, so the result approximates, rather
    than equals, :class:`sklearn.cluster.KMeans`'s: Lloyd on a coreset
    whose local centers weigh hundreds can settle with two centers in one
    cluster, which the swaps and the Lloyd rounds repair.
    ``benchmarks/bench_coreset.py`` measures the cost against KMeans' and
    the upload against the data's N·d floats; the user guide quotes its
    figures.

    Read more in the :ref:`User Guide <user_guide_distributed_kmeans>`.

    Parameters
    ----------
    n_clusters : int, default=8
        k, the number of clusters (and of local centers per client).

    coreset_size : int or "auto", default="auto"
        t, the number of points drawn over all clients (with replacement).
        The server clusters t + Σ_m min(k, n_m) weighted points. A budget
        above the number of samples is clipped to it, with a warning: the
        coreset would then be larger than the data it summarises. ``"auto"``
        means t = max(1000, 125 k) (at most the number of samples, without
        a warning): the paper's bound on t grows linearly in k, and a
        fixed t leaves the cost further above
        :class:`~sklearn.cluster.KMeans`'s as k grows. The bound's second
        term grows with the number of clients too, but a larger t buys
        little there; the swaps (``n_swaps``) and the Lloyd rounds
        (``refine_iter``) close that gap for less
        (``benchmarks/bench_coreset.py``'s coreset-size sweep).

    n_init : int, default=10
        Restarts of the server's weighted k-means (each from its own weighted
        k-means++ seeding); the run with the lowest weighted coreset cost
        wins (under ``raw_rows="refuse"``, over the pooled local centers).
        At most one restart per coreset point is run (a larger value is
        clipped, with a warning unless it is the default).

    max_iter : int, default=300
        Largest number of weighted Lloyd iterations of one server restart;
        under ``raw_rows="refuse"`` also the largest number of distributed
        Lloyd rounds of ``refine_iter="auto"``.

    tol : float, default=1e-4
        Relative tolerance on the center shift between two Lloyd iterations,
        scaled by the mean (weighted) variance of the coreset's features as in
        :class:`sklearn.cluster.KMeans`. Also stops the clients' local Lloyd.

    local_max_iter : int, default=20
        Lloyd iterations after k-means++ for the clients' local solutions B_m
        (0: k-means++ only). The coreset is valid for any B_m; a better local
        solution only makes the same ``coreset_size`` more accurate.

    refine_iter : int or "auto", default="auto"
        Rounds of distributed Lloyd after the coreset solution (ours, not
        the paper's; 0: the protocol of the paper). Each round the server
        broadcasts the centers and every client uploads, per cluster, the
        weighted sum of its rows' displacements from the center and their
        weight, k(d + 1) floats, a sum-only round (masked under
        ``secure_aggregation``); the server moves each center to the exact
        weighted mean of its cluster. Stops early when the centers move
        less than ``tol`` allows. ``"auto"`` means 3 rounds, and none when
        every client's upload was its data itself (its rows, or centers of
        local cost 0): the server's Lloyd then already ran on the data.
        The coreset's sampling moves each center a little, and the rounds
        bring the cost closer to KMeans' for 3 k(d + 1) floats per client,
        a small share of the data's floats on large clients
        (``benchmarks/bench_coreset.py`` measures both). Under
        ``raw_rows="refuse"``, ``"auto"`` runs rounds until the centers
        move by at most ``tol`` (as :class:`~sklearn.cluster.KMeans`'
        Lloyd), at most ``max_iter`` of them: the local centers only seed
        the rounds, which carry the cost to KMeans'.

    n_swaps : int, default=32
        Largest number of swap trials of the server after its restarts
        (ours, not the paper's; 0: none). A trial removes the center whose
        points cost least to hand to their second closest center, puts it
        on the best of 2 + log(k) coreset points drawn ∝ w⁺ D², reruns
        weighted Lloyd and keeps the result if it lowers the weighted
        coreset cost; the trials stop after 8 rejected in a row. Server
        work only (no round): each trial costs about one restart. Lloyd
        cannot move a center from one cluster to another, so on a mixture
        of many clusters the restarts can leave two centers in one of
        them; the swaps find what the restarts miss.

    random_state : int, RandomState instance or None, default=None
        Seeds the server's restarts and, through the federation, every
        client's local solution and sampling. The fitted model depends
        neither on ``n_jobs``, the joblib backend, the names or order of the
        clients, nor on the order of the samples within a client. The
        clients' draws follow the values of their rows: data translated far
        from the origin gets the same clustering on well-separated data and
        the same accuracy in general, but other draws, hence centers that
        differ within the coreset's sampling error.

    on_client_error : {"raise", "drop"}, default="raise"
        What a client step that raises does to the fit: ``"raise"`` stops it
        with a :class:`~skfed.ClientStepError` naming the client and the
        round; ``"drop"`` leaves that client out (the coreset, the centers
        and ``inertia_`` then describe the other clients' data), lists it
        in ``failed_clients_``, and labels its samples -1. A client that
        fails after its first round makes the server run the protocol again
        without it, so its cost and rows take no part (the ledger counts
        both runs); when every client fails, the fit raises a
        :class:`~skfed.ClientStepError` saying so.

    n_jobs : int, default=None
        Clients run in parallel through joblib; ``None`` lets an enclosing
        ``joblib.parallel_config`` decide.

    verbose : int, default=0
        1 prints one line per round; 2 also a summary of the server's
        k-means restarts on the coreset and each refinement's center shift.

    raw_rows : {"allow", "refuse"}, default="allow"
        Whether rows of X may leave a client as they are. The coreset is
        made of rows of X (round ``"coreset sampling"``), so "refuse"
        fits without it: round ``"local centers"``, each client's local
        k-means centers and cluster sizes (k-FED's local step, with
        ``local_max_iter`` Lloyd iterations; a local cluster of fewer than
        two distinct rows is merged into its nearest one on the client,
        and a client of n_m <= k rows asks for n_m - 1 centers), merged
        by the server's weighted k-means (``n_init`` restarts); then rounds
        ``"lloyd refinement"`` (see ``refine_iter``), in which a client
        leaves out a cluster it holds fewer than two distinct rows of. A
        client of one row cannot take part: ``ValueError`` before the
        first round. ``coreset_size`` and ``n_swaps`` play no part. See the
        privacy page of the documentation.

    secure_aggregation : bool, default=False
        Whether the clients mask the uploads of the rounds whose server
        step needs only their sum (``"sum_only"`` in ``communication_``)
        with pairwise masks that cancel in the sum, so that the server
        learns the sum and nothing of any one client's upload. Adds a key
        exchange (4 floats up per client, 4 per client down to each), and
        rounds each summed number to a multiple of 2^-32 (the model is the
        unmasked one within that precision); a client that fails in a
        masked round fails the fit. Masked here: the Lloyd refinement's
        sums (``refine_iter``) and the total cost (under
        ``raw_rows="refuse"`` the Lloyd rounds' sums only: the local
        centers and each client's cost are per-client uploads).

    privacy : :class:`~skfed.privacy.DifferentialPrivacy` or None, \
            default=None
        Differential privacy is refused: a ``DifferentialPrivacy`` raises
        ``ValueError`` before the first round, naming the alternative. The
        coreset is made of rows of X drawn by D² sampling, and a row has no
        noisy version of bounded sensitivity; the noisy analogue of a
        client's local solution is :class:`~skfed.KFed` with ``privacy``
        (DP Lloyd's noisy local centers and counts), whose utility the
        privacy page of the documentation reports. Only None is accepted
        in a fit; the parameter exists so that one search or pipeline can
        hold every estimator.

    compute_labels : bool, default=True
        Whether ``fit`` gathers the labels the clients compute against the
        final centers into ``labels_``, as
        :class:`~sklearn.cluster.MiniBatchKMeans` computes its labels for the
        complete dataset. With False the labels stay on the clients and
        ``labels_`` is not set: a fit on dask-resident data then holds a few
        numbers per client in this process, whatever the number of rows,
        instead of 4 bytes per row. The rounds and ``communication_`` are
        the same either way (the labelling round also brings ``inertia_``,
        one float per client, which is still set). :meth:`fit_predict` then
        returns :meth:`predict` on the training samples: the same labels
        (the clients label with the same nearest-center rule), except that
        samples of clients dropped by ``on_client_error="drop"`` get their
        nearest center rather than -1; for a dask X, a lazy dask array.
        The warning about fewer distinct clusters than ``n_clusters`` then
        counts distinct centers instead of distinct labels.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        The centers the server found, in the dtype of ``X``.

    labels_ : ndarray of shape (n_samples,)
        Label of each training sample, computed by the client holding it
        against ``cluster_centers_``. Not set with ``compute_labels=False``.
        Under ``raw_rows="refuse"`` or differential privacy the clients keep
        their labels: rows held in this process are labelled here with
        :meth:`predict`, and for rows held elsewhere (dask, Flower) it is
        not set (label them where they are with :meth:`predict`).

    inertia_ : float
        Exact (weighted) sum of squared distances of the training samples to
        their closest center: each client uploads its own share in the
        labelling round (one float per client).

    coreset_inertia_ : float
        Not set under ``raw_rows="refuse"`` (nor are the other
        ``coreset_*`` attributes: no coreset is drawn). The weighted cost
        of the server's solution on the coreset (after the swaps, before
        any Lloyd round), its estimate of ``inertia_``.

    n_iter_ : int
        Weighted Lloyd iterations of the winning server restart; under
        ``raw_rows="refuse"``, the distributed Lloyd rounds run
        (``n_refine_iter_``), the iterations over the data as in
        :class:`~sklearn.cluster.KMeans`.

    n_refine_iter_ : int
        Rounds of distributed Lloyd run (at most ``refine_iter``, or 3 for
        ``"auto"``).

    n_clients_ : int
        Number of clients.

    client_ids_ : ndarray of shape (`n_clients_`,)
        The ids of the clients in the model, as given in ``partitions``
        (an object array when they are not all ints or all strings), in
        canonical order; the per-client diagnostics below are aligned with
        it.

    failed_clients_ : dict
        Client id -> reason, for the clients dropped by
        ``on_client_error="drop"`` (empty otherwise). Their samples have
        label -1 and take no part in ``inertia_``.

    coreset_sample_counts_ : ndarray of shape (`n_clients_`,)
        t_m, the number of points each client drew (they sum to
        ``coreset_size``, unless every local cost was 0 or clients with
        exactly equal costs could not all get a leftover sample).

    coreset_client_weight_sums_ : ndarray of shape (`n_clients_`,)
        Sum of the coreset weights each client uploaded: its n_m (its total
        ``sample_weight``), up to floating-point rounding.

    coreset_weights_ : ndarray of shape (`coreset_size_`,)
        The weights of the coreset the server clustered. Local centers may
        carry negative weights.

    coreset_size_ : int
        Number of weighted points the server clustered.

    privacy_spent_ : None
        Always None: the estimator fits without differential privacy.

    communication_ : CommunicationLog
        What crossed the network. Client m uploads 1 float (its local cost),
        then (t_m + k_m)(d + 1) floats for a dense ``X`` (t_m points, k_m =
        min(k, n_m) local centers, their weights; n_m(d + 1) floats, its
        rows and their weights, when t_m ≥ n_m), then k(d + 1) floats per
        refinement round, then 1 float (its cost against the final centers);
        it downloads t_m as 1 float and the k·d center coordinates once per
        refinement round and once for labelling. Under
        ``raw_rows="refuse"``: k_m(d + 1) floats (k_m <= min(k, n_m - 1)
        local centers and their sizes), then k(d + 1) per Lloyd round (k·d
        down), then k·d + k_m down (the cluster map), and 3 floats
        collected: its cost against the final centers, its local Lloyd
        iterations and whether it sent rows (never, here).

    n_features_in_ : int
        Number of features seen during ``fit``.

    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during ``fit``, when ``X`` has string column
        names.

    See Also
    --------
    sklearn.cluster.KMeans : The centralized algorithm.
    skfed.cluster._coreset.federated_coreset_kmeans : The protocol on its own,
        for any per-client rows.

    Notes
    -----
    What the server sees: each client's local cost, t_m of its samples
    (exactly, as rows), its k local centers and the weights. This protocol
    reduces communication; it is not a privacy mechanism. Under
    ``raw_rows="refuse"`` the server sees each client's local centers
    (means of at least two distinct rows) and their sizes, each client's
    cost, and per Lloyd round per-cluster sums over at least two distinct
    rows (only their total under ``secure_aggregation``).

    A client holding at most k samples uses them as its local centers (local
    cost 0), so it draws nothing and uploads its samples with their weights.
    A client whose local cost is 0 likewise uploads only its centers and the
    (weighted) number of samples in each.

    ``sample_weight`` is honoured throughout: local solutions, D² sampling
    (probability ∝ w_p d(p, B_m)²) and weights summing to the client's total
    weight. As with :class:`sklearn.cluster.KMeans`, an integer weight is not
    equivalent to repeating a sample, because the random draws differ.

    References
    ----------
    M.-F. Balcan, S. Ehrlich and Y. Liang. Distributed k-means and k-median
    clustering on general topologies. NeurIPS 2013.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed import DistributedKMeans
    >>> X = np.array([[1, 2], [1, 4], [1, 0], [10, 2], [10, 4], [10, 0]])
    >>> km = DistributedKMeans(n_clusters=2, random_state=0)
    >>> km = km.fit(X, partitions=[0, 0, 1, 1, 2, 2])
    >>> sorted(km.cluster_centers_[:, 0].round(3).tolist())
    [1.0, 10.0]
    >>> km.communication_.n_rounds
    3
    """

    @property
    def _raw_row_rounds(self):
        # Under raw_rows="refuse" the fit takes its row-free path.
        return () if self.raw_rows == "refuse" else ("coreset sampling",)

    _privacy_refusal = (
        "its coreset is made of rows of X drawn by D² sampling (round "
        "'coreset sampling'), and a row has no noisy version of bounded "
        "sensitivity. Use KFed(privacy=DifferentialPrivacy(...)): its clients "
        "upload noisy local centers and counts (DP Lloyd)."
    )

    def _has_sum_only_rounds(self):
        # The row-free path masks only its Lloyd rounds' sums.
        return self.raw_rows != "refuse" or self.refine_iter != 0

    _parameter_constraints: dict = {
        "n_clusters": [StrictInterval(numbers.Integral, 1, None, closed="left")],
        "coreset_size": [
            StrictInterval(numbers.Integral, 1, None, closed="left"),
            StrOptions({"auto"}),
        ],
        "n_init": [StrictInterval(numbers.Integral, 1, None, closed="left")],
        "max_iter": [StrictInterval(numbers.Integral, 1, None, closed="left")],
        "tol": [StrictInterval(numbers.Real, 0, None, closed="left")],
        "local_max_iter": [StrictInterval(numbers.Integral, 0, None, closed="left")],
        "refine_iter": [
            StrictInterval(numbers.Integral, 0, None, closed="left"),
            StrOptions({"auto"}),
        ],
        "n_swaps": [StrictInterval(numbers.Integral, 0, None, closed="left")],
        "random_state": ["random_state"],
        "on_client_error": [StrOptions({"raise", "drop"})],
        "n_jobs": [numbers.Integral, None],
        "verbose": ["verbose"],
        "raw_rows": [StrOptions({"allow", "refuse"})],
        "secure_aggregation": ["boolean"],
        "privacy": [DifferentialPrivacy, None],
        "compute_labels": ["boolean"],
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        coreset_size="auto",
        n_init=10,
        max_iter=300,
        tol=1e-4,
        local_max_iter=20,
        refine_iter="auto",
        n_swaps=32,
        random_state=None,
        on_client_error="raise",
        n_jobs=None,
        verbose=0,
        raw_rows="allow",
        secure_aggregation=False,
        privacy=None,
        compute_labels=True,
    ):
        self.n_clusters = n_clusters
        self.coreset_size = coreset_size
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.local_max_iter = local_max_iter
        self.refine_iter = refine_iter
        self.n_swaps = n_swaps
        self.random_state = random_state
        self.on_client_error = on_client_error
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.raw_rows = raw_rows
        self.secure_aggregation = secure_aggregation
        self.privacy = privacy
        self.compute_labels = compute_labels

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, *, partitions=None, sample_weight=None):
        """Cluster the clients' samples.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training samples; CSR is kept sparse on the clients (drawn rows
            are uploaded as CSR).
        y : Ignored
            Not used, present for API consistency.
        partitions : None, int or array-like of shape (n_samples,), default=None
            Client of each sample; ``None`` for one client, an int for a
            uniform random split into that many clients.
        sample_weight : array-like of shape (n_samples,), default=None
            Non-negative weight of each sample (not all zero); stays on the
            client that holds the sample.

        Returns
        -------
        self : object
            Fitted estimator.
        """
        if is_remote(X):
            X, _, partitions = self._remote_fit_input(X, None, partitions)
        else:
            X = self._validated(X, reset=True)
        n_samples = X.shape[0]
        if n_samples < self.n_clusters:
            raise ValueError(
                f"n_samples={n_samples} should be >= n_clusters={self.n_clusters}; "
                "ask for fewer clusters or pass more samples."
            )
        # A coreset larger than the data summarises nothing; more restarts
        # than coreset points only repeat seedings.
        if self.coreset_size == "auto":
            # The rule's size is ours, not the user's: no warning when the
            # data are smaller.
            coreset_size = min(auto_coreset_size(self.n_clusters), n_samples)
        else:
            coreset_size = clip_to_data(
                "coreset_size", self.coreset_size, n_samples, "samples"
            )
        n_init = clip_to_data(
            "n_init",
            self.n_init,
            coreset_size + n_samples,
            "points of the coreset",
            estimator=self,
        )
        weighted = sample_weight is not None
        if weighted:
            sample_weight = _check_sample_weight(
                sample_weight, X, dtype=np.float64, ensure_non_negative=True
            )
        rng = check_random_state(self.random_state)
        # The federation cuts the weights with the data: each client's
        # weights stay with its samples.
        fed = self._federation(
            X, None, partitions, random_state=rng, sample_weight=sample_weight
        )
        if self.raw_rows == "refuse":
            return self._fit_row_free(X, fed, rng, n_init, weighted)
        with fed:
            # A client that fails after its first round takes no part (see
            # Federation.run_protocol).
            result = fed.run_protocol(
                partial(
                    federated_coreset_kmeans,
                    fed,
                    n_clusters=self.n_clusters,
                    coreset_size=coreset_size,
                    random_state=rng,
                    n_init=n_init,
                    max_iter=self.max_iter,
                    tol=self.tol,
                    local_max_iter=self.local_max_iter,
                    refine_iter=self.refine_iter,
                    n_swaps=self.n_swaps,
                    weighted=weighted,
                    verbose=self.verbose,
                ),
                random_state=rng,
            )
            if self.compute_labels and fed.per_row_allowed:
                self.labels_ = fed.assemble(
                    "coreset", "labels", n_samples, dtype=np.int32
                )
            else:
                # The labels stay on the clients; none is left from an
                # earlier fit either.
                self.__dict__.pop("labels_", None)
            self.client_ids_ = as_id_array(fed.client_ids)
            self.failed_clients_ = dict(fed.failed_clients)
        self.cluster_centers_ = result.cluster_centers.astype(fed.dtype, copy=False)
        if self.compute_labels and not fed.per_row_allowed:
            # The labels stayed on the clients: rows held here are labelled
            # here, with the model.
            labels = labels_where_held(self, X)
            if labels is not None:
                self.labels_ = labels
        self.inertia_ = result.inertia
        self.coreset_inertia_ = result.coreset_inertia
        self.n_iter_ = result.n_iter
        self.n_refine_iter_ = result.n_refine_iter
        if result.n_iter >= self.max_iter:
            warnings.warn(
                f"The server's weighted Lloyd stopped at max_iter={self.max_iter} "
                "iterations before the centers settled to tol; raise max_iter.",
                ConvergenceWarning,
                stacklevel=2,
            )
        self.n_clients_ = len(self.client_ids_)
        self.coreset_sample_counts_ = result.sample_counts
        self.coreset_client_weight_sums_ = result.weight_sums
        self.coreset_weights_ = result.coreset_weights
        self.coreset_size_ = result.coreset_size
        self.communication_ = fed.log
        self._record_privacy(fed)
        self._n_features_out = self.n_clusters

        self._warn_few_clusters()
        return self

    def _warn_few_clusters(self):
        if hasattr(self, "labels_"):
            distinct = len(distinct_values(self.labels_))
        else:
            # Without the labels: duplicated centers, which is what fewer
            # distinct points than clusters leaves on the coreset.
            distinct = len(np.unique(self.cluster_centers_, axis=0))
        if distinct < self.n_clusters:
            warnings.warn(
                f"Number of distinct clusters ({distinct}) found smaller than "
                f"n_clusters ({self.n_clusters}). Possibly due to duplicate "
                "points in X.",
                ConvergenceWarning,
                stacklevel=3,
            )

    def _fit_row_free(self, X, fed, rng, n_init, weighted):
        """Fit under ``raw_rows="refuse"``: k-FED's local centers merged by
        the server's weighted k-means, then distributed Lloyd on the
        clients' summed per-cluster statistics; no round sends a row."""
        # Imported here: the k-FED protocol builds on this module.
        from ._kfed_protocol import KFedLocalOptions, run_kfed

        single = [c for c, n in zip(fed.client_ids, fed.client_sizes) if n < 2]
        if single:
            shown = ", ".join(repr(c) for c in single[:5])
            raise ValueError(
                f"Client(s) {shown} hold one sample: whatever it sends of it "
                "(a center, a sum) is that row, which raw_rows='refuse' "
                "forbids. Merge such clients with others, leave them out, or "
                "allow raw rows."
            )
        with fed:
            # A client of n_m <= k rows asks for n_m - 1 local centers: with
            # k of them its centers would be its rows, which it refuses to
            # send; with fewer, its clusters of one row are merged on it.
            n_local = {
                cid: min(self.n_clusters, max(int(n) - 1, 1))
                for cid, n in zip(fed.client_ids, fed.client_sizes)
            }
            local = KFedLocalOptions(
                n_clusters=self.n_clusters,
                n_local_clusters=n_local,
                center_weighting="size",
                local_step="auto",
                n_init=_ROW_FREE_LOCAL_N_INIT,
                max_iter=max(self.local_max_iter, 1),
                tol=self.tol,
                allow_raw_upload=False,
                client_dropout=0.0,
            )
            refine_iter = (
                self.max_iter if self.refine_iter == "auto" else self.refine_iter
            )
            with warnings.catch_warnings():
                # The local restarts are ours, not the user's n_init: a
                # client of fewer rows runs fewer, without a warning.
                warnings.filterwarnings(
                    "ignore", message="n_init=.* exceeds the number of samples"
                )
                result = fed.run_protocol(
                    partial(
                        run_kfed,
                        fed,
                        local=local,
                        random_state=rng,
                        merge="kmeans",
                        server_n_init=n_init,
                        gather_labels=False,
                        refine_iter=refine_iter,
                        tol=self.tol,
                        weighted=weighted,
                    ),
                    random_state=rng,
                )
            self.client_ids_ = as_id_array(fed.client_ids)
            self.failed_clients_ = dict(fed.failed_clients)
        self.cluster_centers_ = result.cluster_centers.astype(fed.dtype, copy=False)
        # The labels stay on the clients: rows held here are labelled here,
        # with the model; none is left from an earlier fit either.
        self.__dict__.pop("labels_", None)
        if self.compute_labels:
            labels = labels_where_held(self, X)
            if labels is not None:
                self.labels_ = labels
        self.inertia_ = result.inertia
        self.n_iter_ = result.n_refine_iter
        self.n_refine_iter_ = result.n_refine_iter
        if self.refine_iter == "auto" and result.n_refine_iter >= refine_iter:
            warnings.warn(
                f"The distributed Lloyd rounds stopped at max_iter={self.max_iter} "
                "before the centers settled to tol; raise max_iter.",
                ConvergenceWarning,
                stacklevel=3,
            )
        self.n_clients_ = len(self.client_ids_)
        # No coreset: none of its attributes, and none left from an earlier
        # fit.
        for name in _CORESET_ATTRIBUTES:
            self.__dict__.pop(name, None)
        self.communication_ = fed.log
        self._record_privacy(fed)
        self._n_features_out = self.n_clusters
        self._warn_few_clusters()
        return self


# Local k-means restarts of a client under raw_rows="refuse" (KFed's
# default).
_ROW_FREE_LOCAL_N_INIT = 3
# What only the coreset path sets.
_CORESET_ATTRIBUTES = (
    "coreset_inertia_",
    "coreset_sample_counts_",
    "coreset_client_weight_sums_",
    "coreset_weights_",
    "coreset_size_",
)


class CoresetKMeansResult(NamedTuple):
    """What :func:`federated_coreset_kmeans` returns (server-side results).

    Attributes
    ----------
    cluster_centers : ndarray of shape (k, s)
        The final centers (float64).
    inertia : float
        Exact weighted cost of the clients' rows against the final centers
        (summed from one float per client) when ``exact_inertia=True``;
        otherwise equal to ``coreset_inertia``.
    coreset_inertia : float
        Weighted cost of the coreset solution on the coreset (before any
        refinement).
    n_iter : int
        Weighted Lloyd iterations of the winning server restart.
    n_refine_iter : int
        Rounds of distributed Lloyd run after the coreset solution.
    coreset_size : int
        Number of weighted points the server clustered (Σ t_m + Σ k_m).
    sample_counts : ndarray of int
        t_m per client, aligned with ``fed.client_ids`` after the protocol.
    weight_sums : ndarray
        Sum of the coreset weights uploaded by each client (its n_m, or its
        total sample weight), aligned like ``sample_counts``.
    coreset_weights : ndarray of shape (coreset_size,)
        The weights of the coreset points.
    """

    cluster_centers: np.ndarray
    inertia: float
    coreset_inertia: float
    n_iter: int
    n_refine_iter: int
    coreset_size: int
    sample_counts: np.ndarray
    weight_sums: np.ndarray
    coreset_weights: np.ndarray


def federated_coreset_kmeans(
    fed,
    *,
    n_clusters,
    coreset_size,
    random_state,
    n_init=10,
    max_iter=300,
    tol=1e-4,
    rows=None,
    weighted=False,
    local_max_iter=20,
    refine_iter=0,
    n_swaps=0,
    exact_inertia=True,
    verbose=0,
):
    """Distributed coreset k-means (Balcan–Ehrlich–Liang 2013) on a federation.

    Three rounds on an open federation (call it inside ``with fed:``), plus
    optional refinement rounds:

    1. ``"coreset local cost"`` — client m computes a local solution B_m
       (k-means++ then Lloyd, k_m = min(k, n_m) centers) on its rows and
       uploads cost_m = Σ_p w_p d(p, B_m)²: 1 float up.
    2. ``"coreset sampling"`` — the server splits t = ``coreset_size``
       between clients ∝ cost_m (largest remainder) and sends t_m: 1 float
       down. Client m draws t_m rows with replacement with probability
       w_p d(p, B_m)² / cost_m and uploads them, its k_m centers and their
       weights: (t_m + k_m)(s + 1) floats up for dense rows (CSR rows are
       uploaded as CSR and counted as data + indices + indptr); a client
       with t_m ≥ n⁺_m (its rows of positive weight) uploads those rows and
       their weights instead, n⁺_m (s + 1) floats, exact. The server runs
       weighted k-means on the union, then up to ``n_swaps`` swap trials.
    3. ``"lloyd refinement"`` (only with ``refine_iter > 0``, at most that
       many times) — the server broadcasts the centers (k·s floats down);
       each client uploads, per cluster, the weighted sum of its rows'
       displacements from the center and their weight (k(s + 1) floats up,
       sum-only); the server moves the centers to the means.
    4. ``"coreset labels"`` — the server broadcasts the k final centers:
       k·s floats down. Each client labels its rows and keeps the labels in
       its ``"coreset"`` state as ``"labels"``; with ``exact_inertia`` it uploads its
       cost against the centers: 1 float up.

    Parameters
    ----------
    fed : Federation
        Open federation (inside its ``with`` block).
    n_clusters : int
        k, the number of clusters.
    coreset_size : int
        t, points drawn over all clients.
    random_state : RandomState
        The server's generator (the fit's ``rng``); seeds the restarts.
    n_init : int, default=10
        Restarts of the server's weighted k-means.
    max_iter : int, default=300
        Weighted Lloyd iterations per restart.
    tol : float, default=1e-4
        Relative center-shift tolerance (times the mean weighted variance).
    rows : (str, str), default=None
        Where each client finds the rows it clusters: ``(namespace, key)``
        of another protocol's client state (an (n_m, s) array or CSR
        matrix, e.g. FederatedKernelKMeans' spectral embedding); ``None``
        means the client's own ``X``.
    weighted : bool, default=False
        Whether the clients weigh their rows by their own sample weights
        (``client.sample_weight``); unit weights otherwise.
    local_max_iter : int, default=20
        Lloyd iterations of the local solutions B_m.
    refine_iter : int or "auto", default=0
        Largest number of distributed Lloyd rounds after the coreset
        solution; ``"auto"``: 3, or none when every client's upload was its
        data itself.
    n_swaps : int, default=0
        Largest number of the server's swap trials (``swap_centers``)
        after its restarts.
    exact_inertia : bool, default=True
        Whether clients upload their exact cost against the final centers in
        round 3 (1 float each).
    verbose : int, default=0
        At 2 and above, a summary of the server's restarts and the center
        shift of each refinement round (the federation prints one line per
        round when its own ``verbose`` is positive).

    Returns
    -------
    result : CoresetKMeansResult
        Centers, inertia, Lloyd iterations and coreset diagnostics. Labels
        stay on the clients: ``fed.assemble("coreset", "labels", n_samples)``.
    """
    common = {"rows": None if rows is None else tuple(rows), "weighted": weighted}
    # The drawn rows are rows of X, or per-sample rows of another protocol's
    # output (kernel k-means' spectral embedding: not X, but one row per
    # sample, so a statistic of one client seen alone).
    # Embedded rows of at least d columns determine their rows of X for a
    # server that made the embedding (it solves z(x)ᵀV = h for x): counted.
    sampled = Disclosure(
        RAW_ROWS if rows is None else PER_CLIENT,
        rows=_coreset_rows
        if rows is None
        else partial(_embedded_rows, n_features=fed.n_features),
    )

    # The allocation t_m ∝ cost_m needs each client's cost.
    costs = fed.run_round(
        "coreset local cost",
        partial(
            _local_solution_step,
            n_clusters=n_clusters,
            max_iter=local_max_iter,
            tol=tol,
            **common,
        ),
        disclosure=PER_CLIENT,
    )
    sample_counts = allocate_samples(np.asarray(costs, dtype=np.float64), coreset_size)
    asked = list(fed.client_ids)
    coresets = fed.run_round(
        "coreset sampling",
        partial(_coreset_step, **common),
        messages=[int(t) for t in sample_counts],
        disclosure=sampled,
    )
    # A client dropped in this round (on_client_error="drop") sent nothing.
    answered = [c in fed.client_ids for c in asked]
    sample_counts = np.array(
        [t for t, kept in zip(sample_counts, answered) if kept], dtype=int
    )
    costs = [cost for cost, kept in zip(costs, answered) if kept]
    points, coreset_weights = merge_coresets(coresets)
    weight_sums = np.array([math.fsum(c[2]) for c in coresets])
    distinct, distinct_weights = _distinct_points(
        points, coreset_weights, by_value=rows is not None
    )
    centers, coreset_inertia, n_iter = weighted_kmeans(
        distinct,
        distinct_weights,
        n_clusters,
        random_state=random_state,
        n_init=n_init,
        max_iter=max_iter,
        tol=tol,
        verbose=verbose > 1,
    )
    if n_swaps > 0:
        centers, coreset_inertia = swap_centers(
            distinct,
            distinct_weights,
            centers,
            coreset_inertia,
            n_swaps=n_swaps,
            random_state=random_state,
            max_iter=max_iter,
            tol=tol,
            verbose=verbose > 1,
        )
    if refine_iter == "auto":
        refine_iter = 0 if _coreset_is_exact(costs, coresets) else _AUTO_REFINE_ITER
    # A move of the centers' rounding noise is none: the displacement sums
    # of a fixed point are rounding, not 0 (without this, tol=0 would never
    # stop).
    tol_abs = max(
        _tolerance(points, coreset_weights, tol),
        n_clusters * _rounding_noise(centers),
    )
    n_refine_iter = 0
    for _ in range(refine_iter):
        stats = fed.run_round(
            "lloyd refinement",
            partial(_cluster_sums_step, **common),
            centers,
            disclosure=SUM_ONLY,
        )
        centers, shift = lloyd_update(centers, stats)
        n_refine_iter += 1
        if verbose > 1:
            print(
                f"[skfed] lloyd refinement {n_refine_iter}: center shift {shift:.3g}",
                file=sys.stderr,
            )
        if shift <= tol_abs:
            break
    # The total cost is a sum (of exact floats, fsum'd: order-free). Each
    # client sends its cost over the coreset's mean cost per row, a scale
    # the server already holds: about its row count, whatever the data's
    # units, so that a masked sum fits the fixed point (a sum of squares of
    # unscaled data did not) and keeps its precision relative to the cost.
    scale = float(coreset_inertia) / max(fed.n_samples, 1)
    scale = scale if np.isfinite(scale) and scale > 0 else 1.0
    inertia = fed.run_round(
        "coreset labels",
        partial(_label_step, exact_inertia=exact_inertia, cost_scale=scale, **common),
        centers,
        disclosure=SUM_ONLY if exact_inertia else NO_UPLOAD,
    )
    inertia = inertia * scale if exact_inertia else coreset_inertia
    return CoresetKMeansResult(
        cluster_centers=centers,
        inertia=inertia,
        coreset_inertia=coreset_inertia,
        n_iter=n_iter,
        n_refine_iter=n_refine_iter,
        coreset_size=int(points.shape[0]),
        sample_counts=sample_counts,
        weight_sums=weight_sums,
        coreset_weights=coreset_weights,
    )


# --------------------------------------------------------------------------
# Client steps


def _rows(client, rows):
    """The rows a client clusters: its X, or another protocol's output."""
    return client.X if rows is None else client.read(*rows)


def _client_weights(client, weighted, n_rows):
    if not weighted:
        return np.ones(n_rows)
    return np.asarray(client.sample_weight, dtype=np.float64)


# Over small clients in the server's thread: 1,000 clients of 100 rows took
# 0.26 s there, 0.43 s on two threads (the interpreter's work around the
# batched k-means) and 0.30 s in two processes, which receive the rows first.
@client_step("coreset.local_solution", python_bound=True, in_processes=False)
def _local_solution_step(
    client, state, message, *, rows, weighted, n_clusters, max_iter, tol
):
    """Client: local solution B_m and its cost (step 1 of §5).

    Upload: cost_m = Σ_p w_p d(p, B_m)², 1 float. A small dense client's
    k-means is handed over to be solved with other clients' (a generator
    step, see :mod:`skfed._engine._protocol`).
    """
    X = _rows(client, rows)
    n = X.shape[0]
    w = _client_weights(client, weighted, n)
    # Work on the rows in an order fixed by their values alone, so that
    # neither the client's random choices nor the rounding of its sums (and
    # hence its upload, bit for bit) depend on how its samples are stored.
    # Rows another protocol computed from X (kernel k-means' embedding)
    # carry the rounding of the sums they came from (2^-32 under secure
    # aggregation), which moves their hashes: X's own rows order them.
    order = canonical_row_order(X if rows is None else client.X, w)
    X, w = X[order], w[order]
    # Around the client's own mean: expanded squared distances on raw
    # coordinates cancel on data far from the origin.
    X, shift = _centered(X, w)
    noise = _rounding_noise(X)
    x_sq = _sq_norms(X)
    if n <= n_clusters:
        centers = _dense_rows(X, np.arange(n)).astype(np.float64)
        labels = np.arange(n)
        d2 = np.zeros(n)
    elif not np.any(w > 0):
        # Nothing of positive weight: any centers will do, the cost is 0.
        centers = _dense_rows(X, np.arange(n_clusters)).astype(np.float64)
        labels, d2 = _assign(X, x_sq, centers)
    else:
        rng = client.random_state("coreset.local_solution")
        if sp.issparse(X) or n > SMALL_ROWS:
            centers = _weighted_kmeans_plusplus(
                X, w, n_clusters, x_sq, rng, noise=noise
            )
            centers, labels, d2, _ = _weighted_lloyd(
                X, w, centers, x_sq, max_iter, _tolerance(X, w, tol), tie=noise
            )
        else:
            # Handed over: the transport solves many small clients' k-means
            # together (see skfed._engine._protocol).
            centers, labels, d2, _ = yield KMeansProblem(
                X,
                w,
                n_clusters,
                n_init=1,
                max_iter=max_iter,
                tol_abs=_tolerance(X, w, tol),
                random_state=rng,
                tie=noise,
            )
    cost = float(w @ d2)
    # Everything below is in canonical row order; the centers are kept (and
    # later uploaded) in the data's own coordinates.
    state = {
        "order": order,
        "centers": centers + shift,
        "labels": labels,
        "d2": d2,
        "cost": cost,
    }
    return state, cost


@client_step("coreset.sample")
def _coreset_step(client, state, message, *, rows, weighted):
    """Client: D² sampling of t_m rows and the weights (step 3 of §5).

    Upload: (local centers, drawn rows, weights) — (t_m + k_m)(s + 1) floats
    for dense rows. Weights sum to Σ_p w_p (n_m for unit weights). When
    t_m is at least the number of rows of positive weight n⁺_m, those rows
    and their weights are uploaded instead (n⁺_m (s + 1) floats): the exact
    data, no larger than a coreset.
    """
    X = _rows(client, rows)
    order, centers, labels = state["order"], state["centers"], state["labels"]
    d2, cost = state["d2"], state["cost"]
    w = _client_weights(client, weighted, X.shape[0])[order]
    t = int(message)
    kept = order[w > 0]
    if t >= kept.shape[0]:
        # A budget that covers the client's rows: the rows themselves, each
        # with its own weight, are an exact summary and no larger.
        sample = X[kept]
        return {}, (centers[:0].astype(X.dtype), sample, w[w > 0])
    k_m = centers.shape[0]
    center_weights = np.bincount(labels, weights=w, minlength=k_m)
    if t > 0 and cost > 0:
        p = w * d2
        rng = client.random_state("coreset.sample")
        drawn = _draw(rng, p, t)
        sample_weights = cost / (t * d2[drawn])
        # Each drawn point stands for part of its local cluster; the center
        # keeps the rest, negative when the draws over-represent the cluster.
        center_weights = center_weights - np.bincount(
            labels[drawn], weights=sample_weights, minlength=k_m
        )
        sample = X[order[drawn]]
    else:
        sample_weights = np.zeros(0)
        sample = X[:0]
    upload = (
        centers.astype(X.dtype, copy=False),
        sample,
        np.concatenate([center_weights, sample_weights]),
    )
    return {}, upload


@client_step("coreset.cluster_sums", sum_only=True)
def _cluster_sums_step(client, state, message, *, rows, weighted, min_rows=None):
    """Client: per-cluster weighted sums and weights (distributed Lloyd).

    Upload: Σ_p w_p (p − c_j) over the rows p closest to each center c_j,
    and Σ_p w_p: k(s + 1) floats. Sums of the rows' displacements from
    their centers, not of the rows: they do not grow with the data's
    distance from the origin, which keeps them exact far from it and
    within the range of secure aggregation's fixed point (2^31 / M).

    With ``min_rows`` (``raw_rows="refuse"``) a cluster this client holds
    fewer distinct rows of is left out of its upload (zero sum and
    weight): its sum and weight would give its rows away. The server's
    update then moves that center with the other clients' rows only.
    """
    X = _rows(client, rows)
    centers = np.asarray(message, dtype=np.float64)
    tie = _rounding_noise(centers)
    X, centers = _around_centers(X, centers)
    labels, _ = _assign(X, _sq_norms(X), centers, d2=None, tie=tie)
    w = _client_weights(client, weighted, X.shape[0])
    sums, totals = _cluster_sums(X, w, labels, centers.shape[0])
    if min_rows:
        for j in np.flatnonzero(totals > 0):
            held = labels == j
            if n_distinct_rows(X[held], w[held]) < min_rows:
                sums[j], totals[j] = 0.0, 0.0
    return state, (sums - totals[:, None] * centers, totals)


@client_step("coreset.labels", sum_only=True)
def _label_step(
    client, state, message, *, rows, weighted, exact_inertia, cost_scale=1.0
):
    """Client: label own rows against the server's centers (step 4 of §5).

    Upload: the client's weighted cost against the centers divided by
    ``cost_scale`` (1 float) when ``exact_inertia``, else nothing.
    """
    X = _rows(client, rows)
    # Label with the centers in the rows' precision, as the estimator stores
    # them, so that predict on the training rows reproduces these labels.
    centers = np.asarray(message, dtype=X.dtype)
    labels, d2 = _assign_around_centers(X, centers)
    state = {"labels": labels.astype(np.int32, copy=False)}
    if not exact_inertia:
        return state, None
    w = _client_weights(client, weighted, X.shape[0])
    return state, float(w @ d2) / cost_scale


# --------------------------------------------------------------------------
# Server steps


# Swap trials of swap_centers stop after this many rejected in a row.
_SWAP_PATIENCE = 8

# Distributed Lloyd rounds of refine_iter="auto" (none when the coreset is
# the data itself).
_AUTO_REFINE_ITER = 3

# t = max(_AUTO_CORESET_MIN, _AUTO_CORESET_PER_CLUSTER * k) for
# coreset_size="auto" (DistributedKMeans).
_AUTO_CORESET_MIN = 1000
_AUTO_CORESET_PER_CLUSTER = 125


def auto_coreset_size(n_clusters):
    """t for ``coreset_size="auto"``: max(1000, 125 k).

    Balcan, Ehrlich & Liang's sample size is O(ε⁻⁴ (k d + log 1/δ) + m k
    log(m k / δ)), linear in k. The constant keeps t = 1000 up to k = 8
    and, at k = 64 (t = 8,000), a cost close to KMeans'
    (``benchmarks/bench_coreset.py``).
    """
    return max(_AUTO_CORESET_MIN, _AUTO_CORESET_PER_CLUSTER * int(n_clusters))


def allocate_samples(costs, coreset_size):
    """Server: split the sample budget t ∝ cost_m (step 2 of §5).

    Largest-remainder rounding so that Σ t_m = t, with one exception that
    keeps the split independent of the order and names of the clients:
    clients with exactly equal costs are indistinguishable to the server, so
    they get one leftover sample each or none; a group that does not fit
    in what is left gets none, and Σ t_m may then fall short of t by less
    than the size of that group. A client with cost 0 gets no samples; if
    every cost is 0 nobody samples (the local centers with their counts are
    then exact).

    Parameters
    ----------
    costs : ndarray of shape (n_clients,)
        cost_m.
    coreset_size : int
        t.

    Returns
    -------
    t_m : ndarray of int of shape (n_clients,)
    """
    costs = np.maximum(np.asarray(costs, dtype=np.float64), 0.0)
    total = costs.sum()
    if not total > 0:
        return np.zeros(len(costs), dtype=np.intp)
    raw = costs / total * coreset_size
    counts = np.floor(raw).astype(np.intp)
    short = int(coreset_size - counts.sum())
    remainder = raw - counts
    # Only clients with a positive cost may receive the leftover samples:
    # largest remainder first, a group of equal costs all at once.
    candidates = np.unique(costs[costs > 0])[::-1]
    for cost in sorted(candidates, key=lambda c: -remainder[costs == c][0]):
        group = costs == cost
        size = int(group.sum())
        if size <= short:
            counts[group] += 1
            short -= size
    return counts


def _coreset_is_exact(costs, coresets):
    """Whether every client's upload is its data itself: its rows (a budget
    that covered them) or its centers with local cost 0. The server's
    weighted Lloyd then already ran on the data, and a distributed Lloyd
    round would repeat it."""
    return all(
        cost == 0 or centers.shape[0] == 0
        for cost, (centers, _, _) in zip(costs, coresets)
    )


def _coreset_rows(upload):
    """Rows of X in a coreset upload (local centers, sample, weights)."""
    return int(upload[1].shape[0])


def _embedded_rows(upload, n_features):
    """Rows of X determined by a coreset upload of embedded rows: the drawn
    rows, when they have at least as many columns as X (see
    :func:`federated_coreset_kmeans`)."""
    drawn = upload[1]
    return int(drawn.shape[0]) if drawn.shape[1] >= n_features else 0


def merge_coresets(coresets):
    """Server: the union of the clients' coresets, in a canonical order.

    Clients are taken in an order fixed by the content of their uploads, so
    that renaming or reordering clients does not change the server's random
    restarts.

    Parameters
    ----------
    coresets : list of (centers, sample, weights)
        The uploads of the ``"coreset sampling"`` round.

    Returns
    -------
    points : ndarray or CSR matrix of shape (n_points, s)
        Float64; CSR when any client uploaded CSR rows.
    weights : ndarray of shape (n_points,)
    """
    blocks = [block for centers, sample, _ in coresets for block in (centers, sample)]
    if any(sp.issparse(b) for b in blocks):
        points = sp.vstack([sp.csr_matrix(b) for b in blocks], format="csr")
        points = points.astype(np.float64)
    else:
        points = np.vstack(blocks).astype(np.float64)
    weights = [np.asarray(w, dtype=np.float64) for _, _, w in coresets]
    # Every uploaded row hashed in one call (a call per client cost 40 us
    # of a 1,000-client fit's server time), then cut by client.
    stops = np.cumsum([len(w) for w in weights])
    hashes = np.split(row_hashes(points, np.concatenate(weights)), stops[:-1])
    keys = [_content_key(w, h) for w, h in zip(weights, hashes)]
    order = sorted(range(len(keys)), key=keys.__getitem__)
    rows = np.concatenate(
        [np.arange(stops[i] - len(weights[i]), stops[i]) for i in order]
    )
    return points[rows], np.concatenate([weights[i] for i in order])


def _distinct_points(points, weights, *, by_value=False):
    """Equal points as one point with their total weight, in an order set
    by the points' values.

    Weighted k-means is the same problem either way. The server's input,
    and hence its draws, are then the same for a weighted sample as for
    the sample repeated (a coreset that is the whole data), as scikit-learn
    asks of ``sample_weight``. The order is that of the points rounded to
    float32 (:func:`~skfed._numerics._rows.canonical_row_order`), so that points that
    differ by rounding only (centers summed in another order, dense or CSR
    rows) keep their places. With ``by_value`` (dense points computed from
    sums, kernel k-means' embedding) it is the lexicographic order of the
    values themselves: secure aggregation's rounding (2^-32) moves a value
    across a float32 rounding boundary often enough to reorder hashes, and
    the values' order only where two points' coordinates nearly tie.
    """
    hashes = row_hashes(points)
    _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    # Equal hashes almost surely mean equal rows; if not, keep every point.
    if rows_equal(points[first[inverse]], points):
        points = points[first]
        weights = np.bincount(inverse, weights=weights, minlength=len(first))
    if by_value and not sp.issparse(points):
        order = np.lexsort(points.T[::-1])
    else:
        order = canonical_row_order(points)
    return points[order], weights[order]


def lloyd_update(centers, stats):
    """Server: one distributed Lloyd update from the clients' cluster sums.

    Parameters
    ----------
    centers : ndarray of shape (k, s)
        The centers the clients assigned against.
    stats : (displacements, totals)
        The ``(k, s)`` weighted sums of the rows' displacements from their
        centers, Σ_p w_p (p − c_j), and the ``(k,)`` weights, summed over
        clients (a sum-only round).

    Returns
    -------
    centers : ndarray of shape (k, s)
        Weighted means; a cluster with no weight keeps its center.
    shift : float
        Squared distance moved, summed over centers.
    """
    displacements, totals = stats
    movable = totals > 0
    step = np.zeros_like(centers)
    step[movable] = displacements[movable] / totals[movable, None]
    return centers + step, float((step**2).sum())


def weighted_kmeans(
    X,
    sample_weight,
    n_clusters,
    *,
    random_state,
    n_init=10,
    max_iter=300,
    tol=1e-4,
    verbose=0,
):
    """Server: weighted k-means on the coreset, weights of any sign (step 4).

    ``n_init`` restarts of weighted k-means++ (drawing only points of
    positive weight) followed by weighted Lloyd; a cluster whose total
    weight is not positive keeps its previous center. The restart with the
    lowest weighted cost wins. On points of few features the restarts run
    side by side (:func:`~skfed.cluster._batched_kmeans.kmeans_restarts`,
    see ``_BATCHED_RESTARTS_FLOATS``), otherwise one after another; which
    depends on the shape alone, not on dense or CSR storage.

    Parameters
    ----------
    X : ndarray or CSR matrix of shape (n_points, s)
    sample_weight : ndarray of shape (n_points,)
        May contain negative values; must have some positive ones.
    n_clusters : int
    random_state : RandomState
    n_init, max_iter, tol, verbose
        As in :class:`DistributedKMeans`.

    Returns
    -------
    centers : ndarray of shape (n_clusters, s)
    inertia : float
        Weighted cost Σ_i w_i min_j ‖x_i − c_j‖² (may be negative).
    n_iter : int
    """
    if not np.any(sample_weight > 0):
        raise ValueError(
            "The coreset has no point of positive weight; give some samples a "
            "positive sample_weight."
        )
    rng = check_random_state(random_state)
    # Around the points' mean (their order is fixed by their content, so
    # the mean does not depend on the clients' names): see _centered.
    noise = _rounding_noise(X)
    n_points, n_features = X.shape
    if (
        n_features <= _BATCHED_RESTARTS_FEATURES
        and n_init * n_points * max(n_clusters, n_features) <= _BATCHED_RESTARTS_FLOATS
    ):
        # The restarts side by side, the same algorithm: half the time of
        # one after another on the 10,000 points of 1,000 clients. The
        # choice depends on the shape alone, so CSR points (densified,
        # small by these bounds) get the dense points' model.
        dense = X.toarray() if sp.issparse(X) else X
        X, shift = _centered(np.asarray(dense, dtype=np.float64))
        centers, _, d2, n_iter, (costs, iters) = kmeans_restarts(
            X,
            sample_weight,
            n_clusters,
            n_init=n_init,
            max_iter=max_iter,
            tol_abs=_tolerance(X, sample_weight, tol),
            random_state=rng,
            tie=noise,
            same_cost=_SAME_COST,
            return_runs=True,
        )
        if verbose:
            _report_restarts(iters, costs)
        return centers + shift, float(sample_weight @ d2), n_iter
    X, shift = _centered(X)
    x_sq = _sq_norms(X)
    tol_abs = _tolerance(X, sample_weight, tol)
    best, runs = None, []
    for seed in rng.randint(SEED_MAX, size=n_init):
        init = _weighted_kmeans_plusplus(
            X, sample_weight, n_clusters, x_sq, np.random.RandomState(seed), noise=noise
        )
        centers, _, d2, n_iter = _weighted_lloyd(
            X, sample_weight, init, x_sq, max_iter, tol_abs, tie=noise
        )
        inertia = float(sample_weight @ d2)
        runs.append((n_iter, inertia))
        # Restarts that reach one solution (its centers in another order)
        # differ in cost by rounding only, which depends on how the arrays
        # lie in memory (a client's rows after transport, say): the first
        # of them is kept, so that the model does not.
        if best is None or inertia < best[1] - _SAME_COST * abs(best[1]):
            best = (centers + shift, inertia, n_iter)
    if verbose:
        _report_restarts(*zip(*runs))
    return best


def swap_centers(
    X,
    sample_weight,
    centers,
    inertia,
    *,
    n_swaps,
    random_state,
    max_iter=300,
    tol=1e-4,
    verbose=0,
):
    """Server: swap local search on the coreset after the restarts.

    Lloyd cannot move a center across the data: on a mixture of many
    clusters it leaves two centers in one cluster and one center over two,
    and on a coreset, whose local centers carry large (and negative)
    weights, it settles after a few iterations. Each trial removes the
    center whose points cost least to hand to their second closest center,
    puts it on the best of 2 + log(k) points drawn ∝ w⁺ D² (as in k-means++),
    runs weighted Lloyd from there and keeps the result if it lowers the
    weighted coreset cost. At most ``n_swaps`` trials, and none after
    ``_SWAP_PATIENCE`` rejected ones in a row.

    Parameters
    ----------
    X : ndarray or CSR matrix of shape (n_points, s)
        The coreset's points.
    sample_weight : ndarray of shape (n_points,)
        Their weights (any sign).
    centers : ndarray of shape (k, s)
        The restarts' best centers.
    inertia : float
        Their weighted cost on the coreset.
    n_swaps : int
        Largest number of trials.
    random_state : RandomState
        The server's generator.
    max_iter, tol, verbose
        As in :func:`weighted_kmeans`.

    Returns
    -------
    centers : ndarray of shape (k, s)
    inertia : float
        Their weighted cost on the coreset. Both are the given ones, as
        given, when no trial lowered the cost.
    """
    start = (centers, inertia)
    n_clusters = centers.shape[0]
    noise = _rounding_noise(X)
    X, shift = _centered(X)
    centers = centers - shift
    x_sq = _sq_norms(X)
    tol_abs = _tolerance(X, sample_weight, tol)
    positive = np.maximum(sample_weight, 0.0)
    n_trials = 2 + int(np.log(n_clusters))
    rows = np.arange(X.shape[0])
    d2 = _sq_dist(X, x_sq, centers)
    cost = float(sample_weight @ d2.min(axis=1))
    rejected = accepted = trials = 0
    while n_clusters > 1 and trials < n_swaps and rejected < _SWAP_PATIENCE:
        trials += 1
        # What removing each center costs: its points go to their second
        # closest center.
        closest = np.argpartition(d2, 1, axis=1)[:, :2]
        first, second = d2[rows, closest[:, 0]], d2[rows, closest[:, 1]]
        loss = np.bincount(
            closest[:, 0],
            weights=sample_weight * (second - first),
            minlength=n_clusters,
        )
        removed = int(np.argmin(loss))
        rest = np.delete(d2, removed, axis=1).min(axis=1)
        potential = positive * np.where(rest > noise, rest, 0.0)
        if not potential.sum() > 0:
            break
        candidates = np.minimum(
            _draw(random_state, potential, n_trials), X.shape[0] - 1
        )
        candidate_d2 = np.minimum(
            rest[None, :], _sq_dist(X, x_sq, _dense_rows(X, candidates)).T
        )
        trial = centers.copy()
        trial[removed] = _dense_rows(
            X, [candidates[np.argmin(candidate_d2 @ sample_weight)]]
        )[0]
        trial, _, _, _ = _weighted_lloyd(
            X, sample_weight, trial, x_sq, max_iter, tol_abs, tie=noise
        )
        trial_d2 = _sq_dist(X, x_sq, trial)
        trial_cost = float(sample_weight @ trial_d2.min(axis=1))
        if trial_cost < cost - _SAME_COST * abs(cost):
            centers, d2, cost = trial, trial_d2, trial_cost
            accepted += 1
            rejected = 0
        else:
            rejected += 1
    if verbose:
        print(
            f"[skfed] coreset k-means: {trials} swap trials, {accepted} kept, "
            f"weighted cost {cost:.6g}",
            file=sys.stderr,
        )
    if not accepted:
        return start
    # The cost from exact distances, as the restarts report theirs.
    _, d2 = _assign(X, x_sq, centers, tie=noise)
    return centers + shift, float(sample_weight @ d2)


def _report_restarts(iters, costs):
    """One line for the server's restarts: restarts that reach one solution
    would otherwise print the same line again and again."""
    costs = np.asarray(costs, dtype=float)
    best = costs.min()
    n_best = int(np.sum(costs <= best + _SAME_COST * abs(best)))
    print(
        f"[skfed] coreset k-means: {len(costs)} restarts, "
        f"{min(iters)}-{max(iters)} iterations, best weighted cost "
        f"{best:.6g} (reached by {n_best})",
        file=sys.stderr,
    )


# --------------------------------------------------------------------------
# Weighted k-means pieces, plain functions of arrays (used by the clients for
# B_m with their sample weights and by the server on the coreset).


def _weighted_kmeans_plusplus(X, w, n_clusters, x_sq, rng, *, noise=0.0):
    """Weighted k-means++ seeding over the points of positive weight.

    Greedy, like scikit-learn's: each new center is the best of
    2 + log(k) candidates drawn ∝ w_i D(x_i)². When every positive-weight
    point already sits on a center -- within ``noise``, a squared distance
    that is rounding of the data's own magnitude, since the rows may arrive
    centered (see :func:`_centered`) -- the remaining centers repeat an
    existing center: a copy of a point that differs from a center only by
    rounding would split identical data into clusters.
    """
    idx = np.flatnonzero(w > 0)
    Xp, wp, xp_sq = X[idx], w[idx], x_sq[idx]
    n_local_trials = 2 + int(np.log(n_clusters))
    centers = np.empty((n_clusters, X.shape[1]))
    first = _draw(rng, wp, None)
    centers[0] = _dense_rows(Xp, [first])[0]
    d2 = _sq_dist(Xp, xp_sq, centers[:1])[:, 0]
    for c in range(1, n_clusters):
        weighted = wp * np.where(d2 > noise, d2, 0.0)
        potential = weighted.sum()
        if not potential > 0:
            centers[c] = centers[rng.randint(c)]
            continue
        draws = rng.uniform(size=n_local_trials) * potential
        candidates = np.searchsorted(np.cumsum(weighted), draws)
        candidates = np.minimum(candidates, len(idx) - 1)
        cand_centers = _dense_rows(Xp, candidates)
        cand_d2 = np.minimum(d2[None, :], _sq_dist(Xp, xp_sq, cand_centers).T)
        best = int(np.argmin(cand_d2 @ wp))
        centers[c] = cand_centers[best]
        d2 = cand_d2[best]
    return centers


def _weighted_lloyd(X, w, centers, x_sq, max_iter, tol_abs, *, tie=0.0):
    """Weighted Lloyd iterations; weights of any sign.

    A cluster with no point, or with non-positive total weight, keeps its
    previous center (its weighted mean is undefined or would be pushed away
    from its points). With negative weights an update may raise the weighted
    cost, and plain Lloyd can then cycle between two labellings without
    ever meeting the tolerance; so an update that does not lower the cost
    is rejected and the iterations stop. With non-negative weights this
    never happens before convergence (Lloyd's cost cannot increase), so the
    iterations are those of ordinary weighted Lloyd: they stop on unchanged
    labels or a squared center shift of at most ``tol_abs``.

    Returns
    -------
    centers, labels, d2, n_iter
        ``labels`` and ``d2`` are consistent with the returned centers.
    """
    n_clusters = centers.shape[0]
    # A cluster of (nearly) no total weight keeps its center (WEIGHT_EPS).
    scale = WEIGHT_EPS * np.abs(w).sum()
    labels, d2 = _assign(X, x_sq, centers, d2="expanded", tie=tie)
    cost = w @ d2
    n_iter = 0
    for iteration in range(1, max_iter + 1):
        n_iter = iteration
        sums, totals = _cluster_sums(X, w, labels, n_clusters)
        movable = totals > scale
        new_centers = centers.copy()
        new_centers[movable] = sums[movable] / totals[movable, None]
        new_labels, d2 = _assign(X, x_sq, new_centers, d2="expanded", tie=tie)
        new_cost = w @ d2
        if new_cost > cost:
            break
        shift = float(((new_centers - centers) ** 2).sum())
        converged = shift <= tol_abs or np.array_equal(new_labels, labels)
        centers, labels, cost = new_centers, new_labels, new_cost
        if converged:
            break
    labels, d2 = _assign(X, x_sq, centers, tie=tie)
    return centers, labels, d2, n_iter


def _cluster_sums(X, w, labels, n_clusters):
    """Weighted sum of the rows of each cluster, and its total weight."""
    totals = np.bincount(labels, weights=w, minlength=n_clusters)
    if not sp.issparse(X) and X.shape[0] <= SMALL_ROWS:
        # A weighted one-hot product: no sparse-matrix set-up, which costs
        # more than the sums themselves on a small client.
        member = (labels == np.arange(n_clusters)[:, None]) * w
        return np.asarray(member @ X, dtype=np.float64), totals
    # One entry per column: built directly in CSC form, no COO sort.
    indicator = sp.csc_matrix(
        (w, labels, np.arange(X.shape[0] + 1)), shape=(n_clusters, X.shape[0])
    )
    sums = indicator @ X
    sums = sums.toarray() if sp.issparse(sums) else np.asarray(sums)
    return sums.astype(np.float64, copy=False), totals


def _assign(X, x_sq, centers, *, d2="exact", tie=0.0):
    """Closest center of each row and the squared distance to it.

    Centers within ``tie`` (a squared distance, rounding noise of the data's
    magnitude: see :func:`_rounding_noise`) of the closest count as equally
    close, and the one of lowest index wins: points that differ from one
    another only by rounding then get one label, not labels split by the
    last bits.

    ``d2`` is ``"exact"`` (computed from the difference for dense rows;
    CSR rows have no cheaper exact form and use the expanded one),
    ``"expanded"`` (‖x‖² − 2 x·c + ‖c‖², free but with rounding noise) or
    None.
    """
    n = X.shape[0]
    labels = np.empty(n, dtype=np.intp)
    sparse_exact = d2 == "exact" and sp.issparse(X)
    out = np.empty(n, dtype=np.float64) if d2 == "expanded" or sparse_exact else None
    c_sq = _sq_norms(centers)
    for batch in row_blocks(n, _CHUNK):
        cross = _dot(X[batch], centers.T)
        # ‖x‖² is the same for every center: not needed for the argmin.
        dist = c_sq - 2.0 * cross
        if tie > 0:
            near = dist <= dist.min(axis=1, keepdims=True) + tie
            labels[batch] = np.argmax(near, axis=1)
        else:
            labels[batch] = np.argmin(dist, axis=1)
        rows = np.arange(dist.shape[0])
        if d2 == "expanded":
            closest = dist[rows, labels[batch]]
            out[batch] = np.maximum(closest + x_sq[batch], 0.0)
        elif sparse_exact:
            # From the products already at hand: a CSR row has no cheaper
            # exact form, and gathering each row's center as a dense (n, s)
            # array would cost as much memory as densifying X.
            own = labels[batch]
            out[batch] = np.maximum(
                x_sq[batch] - 2.0 * cross[rows, own] + c_sq[own], 0.0
            )
    if d2 != "exact" or sparse_exact:
        return labels, out
    d2 = np.empty(n, dtype=np.float64)
    # Subtracting directly makes a point that sits on its center cost exactly
    # 0 (the expanded form leaves rounding noise, which would make D²
    # sampling draw duplicates of centers).
    for batch in row_blocks(n, _CHUNK):
        diff = X[batch] - centers[labels[batch]]
        d2[batch] = np.einsum("ij,ij->i", diff, diff)
    return labels, d2


def _rounding_noise(X):
    """A squared distance that is rounding noise for rows of X's magnitude
    (taken before centering): ~1e-24 of the largest squared entry."""
    values = X.data if sp.issparse(X) else X
    if values.size == 0:
        return 0.0
    return (1e-12 * float(np.max(np.abs(values)))) ** 2


def _centered(X, w=None):
    """Rows minus their (weighted) mean, and that mean.

    Squared distances are expanded (‖x‖² − 2 x·c + ‖c‖²) for speed; on raw
    coordinates far from the origin the terms cancel (at an offset of 1e9,
    distances of order 1 are lost entirely). Around a point inside the data
    they are as exact as the data. CSR rows are shifted on the columns
    every row stores (see ``skfed._numerics._shift``): they stay CSR, with the same
    entries, and data moved far from the origin (which fills those
    columns) is centred as dense data is.
    """
    if sp.issparse(X):
        w = None if w is None or not np.any(w > 0) else np.maximum(w, 0)
        total = X.shape[0] if w is None else w.sum()
        mean = np.asarray(X.sum(axis=0) if w is None else w @ X).ravel() / total
        shift = shift_point(mean, X)
        return shifted_rows(X, shift), shift
    X64 = np.asarray(X, dtype=np.float64)
    if w is None or not np.any(w > 0):
        shift = X64.mean(axis=0)
    else:
        w = np.maximum(w, 0)
        shift = (w @ X64) / w.sum()
    return X - shift.astype(X.dtype, copy=False), shift


def _assign_around_centers(X, centers, *, d2="exact"):
    """:func:`_assign` with rows and centers taken around the centers' mean
    (see :func:`_centered`; CSR rows on the columns they all store)."""
    tie = _rounding_noise(centers)
    X, centers = _around_centers(X, centers)
    return _assign(X, _sq_norms(X), centers, d2=d2, tie=tie)


def _around_centers(X, centers):
    """Rows and centers minus the centers' mean (CSR rows shifted on the
    columns they all store, see :func:`_centered`)."""
    # The mean, without np.mean's dispatch (the same sum and division).
    reference = shift_point(centers.sum(axis=0) / len(centers), X)
    return shifted_rows(X, reference), centers - reference


def _sq_dist(X, x_sq, centers, c_sq=None):
    """Squared distances ‖x − c‖² of rows to centers, clipped at 0."""
    if c_sq is None:
        c_sq = _sq_norms(centers)
    dist = -2.0 * _dot(X, centers.T)
    dist += x_sq[:, None]
    dist += c_sq[None, :]
    return np.maximum(dist, 0.0, out=dist)


def _draw(rng, p, size):
    """``size`` indices drawn with replacement ∝ ``p`` (non-negative, some
    positive): ``rng.choice(len(p), size, p=p / p.sum())``, the same
    numbers, without its checks of ``p`` (20 us, half a small client's
    sampling step)."""
    cdf = np.cumsum(p / p.sum())
    cdf /= cdf[-1]
    return cdf.searchsorted(rng.random_sample(size), side="right")


def _sq_norms(X):
    """‖x‖² of every row, as ``row_norms(X, squared=True)``: dense rows
    take its einsum directly (its array-namespace dispatch costs 10 us a
    call, more than the arithmetic on a small client's rows)."""
    if sp.issparse(X):
        return row_norms(X, squared=True)
    return np.einsum("ij,ij->i", X, X)


def _dot(A, B):
    """A @ B, dense: ``safe_sparse_dot(A, B, dense_output=True)``, whose
    checks two dense arrays skip."""
    if sp.issparse(A) or sp.issparse(B):
        return safe_sparse_dot(A, B, dense_output=True)
    return A @ B


def _tolerance(X, w, tol):
    """tol times the mean weighted variance of the features (as KMeans)."""
    if tol == 0:
        return 0.0
    total = w.sum()
    if not total > 0:
        return 0.0
    mean = np.asarray(_dot(w, X)).ravel() / total
    if sp.issparse(X):
        sq = np.asarray(_dot(w, X.multiply(X))).ravel() / total
    else:
        # No (n, d) temporary: on a client of 10,000 rows its page faults
        # cost ten times the sum.
        sq = np.einsum("i,ij,ij->j", w, X, X) / total
    return float(np.mean(np.maximum(sq - mean**2, 0.0)) * tol)


def _dense_rows(X, idx):
    rows = X[np.asarray(idx)]
    return rows.toarray() if sp.issparse(rows) else np.asarray(rows)


def _content_key(weights, hashes):
    """Order-free sort key of one client's upload: its weights and the
    exact hashes of its weighted rows.

    The weights' summaries come first, rounded to 10 significant digits so
    that uploads equal up to rounding (e.g. the same rows held dense or
    sparse) sort alike. They tie for clients whose weights are all alike
    (e.g. clients of at most k rows with unit weights); the hashes then
    decide, never the clients' order.
    """
    return (
        len(weights),
        float(f"{float(weights @ weights):.10g}"),
        float(f"{float(weights.sum()):.10g}"),
        np.sort(hashes).tobytes(),
    )
