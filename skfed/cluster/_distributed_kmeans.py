"""The distributed k-means estimator on a coreset (Balcan, Ehrlich & Liang,
NeurIPS 2013); its protocol is :mod:`skfed.cluster._protocols._coreset`,
and under ``raw_rows="refuse"`` k-FED's
(:mod:`skfed.cluster._protocols._kfed`).
"""

import numbers
import warnings
from functools import partial

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    ClusterMixin,
    TransformerMixin,
)
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state

from .._engine._estimator import FederatedMixin
from .._engine._remote import distinct_values, is_remote
from .._engine._shared_params import shared_constraints, shared_parameter_docs
from .._engine._validation import StrictInterval, as_id_array, clip_to_data
from .._sklearn_compat import StrOptions
from .._sklearn_compat import check_sample_weight as _check_sample_weight
from .._sklearn_compat import fit_context as _fit_context
from ..privacy import box_radius, feature_bounds
from ._centers import KMeansCentersMixin, labels_where_held
from ._protocols._coreset import (
    auto_coreset_size,
    coreset_rounds,
    federated_coreset_kmeans,
)
from ._protocols._kernel_kmeans_private import private_kmeans, private_rounds
from ._protocols._kfed import kfed_rounds
from ._protocols._row_free_kmeans import run_row_free_kmeans

__all__ = ["DistributedKMeans"]


def clipped_coreset_options(estimator, n_samples, auto_size):
    """An estimator's ``coreset_size`` and ``n_init`` clipped, with a
    warning, to the rows the coreset is drawn from (a coreset larger than
    the data summarises nothing; more restarts than coreset points only
    repeat seedings). ``"auto"`` is ``auto_size``: the rule's size is ours,
    not the user's, so it is clipped without a warning."""
    if estimator.coreset_size == "auto":
        coreset_size = min(auto_size, n_samples)
    else:
        coreset_size = clip_to_data(
            "coreset_size", estimator.coreset_size, n_samples, "samples"
        )
    if estimator.n_init == "auto":
        # Resolved where the coreset's k-means knows its size, within the
        # coreset's points (see FederatedKernelKMeans).
        return coreset_size, "auto"
    n_init = clip_to_data(
        "n_init",
        estimator.n_init,
        coreset_size + n_samples,
        "points of the coreset",
        estimator=estimator,
    )
    return coreset_size, n_init


@shared_parameter_docs(
    "on_client_error", "n_jobs", "verbose", "raw_rows", "secure_aggregation"
)
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
        the rounds, which carry the cost to KMeans'. Under ``privacy``,
        ``"auto"`` runs 5 noised rounds, without early stop (when to stop
        would depend on the data).

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
        With ``"drop"`` the coreset, the centers and ``inertia_`` describe
        the other clients' data, and a dropped client's samples get label
        -1.

    n_jobs : int, default=None

    verbose : int, default=0
        2 also prints a summary of the server's k-means restarts on the
        coreset and each refinement's center shift.

    raw_rows : {"allow", "refuse"}, default="allow"
        The coreset is made of rows of X (round ``"coreset sampling"``), so "refuse"
        fits without it: round ``"local centers"``, each client's local
        k-means centers and cluster sizes (k-FED's local step, with
        ``local_max_iter`` Lloyd iterations; a local cluster of fewer than
        two distinct rows is merged into its nearest one on the client,
        and a client of n_m <= k rows asks for n_m - 1 centers), merged
        by the server's weighted k-means (``n_init`` restarts); then rounds
        ``"lloyd refinement"`` (see ``refine_iter``), in which a client
        leaves out a cluster it holds fewer than two distinct rows of. A
        client of one row cannot take part: ``ValueError`` before the
        first round. ``coreset_size`` and ``n_swaps`` play no part.

    secure_aggregation : bool, default=False
        Masked here: the Lloyd refinement's
        sums (``refine_iter``) and the total cost (under
        ``raw_rows="refuse"`` the Lloyd rounds' sums only: the local
        centers and each client's cost are per-client uploads).

    privacy : :class:`~skfed.privacy.DifferentialPrivacy` or None, \
            default=None
        Differentially private k-means on summed statistics instead of the
        coreset (whose points are rows). The rows are clipped into
        ``privacy.bounds`` (radius R about the box's centre), and every
        round is one Gaussian release per client of per-center sums and
        counts scaled by R (sensitivity 2R): the rows' mean, then cells
        that cut the rows by direction around it (their noised means,
        weighted by their noised counts, seed the server's k-means), then
        ``refine_iter`` Lloyd rounds (``"auto"``: 5), each mean shrunk
        towards its center by the share of the move the noise explains
        (post-processing). With ``secure_aggregation=True`` the clients add
        shares of the noise, and the sums carry the central mechanism's
        (see ``honest_clients`` of
        :class:`~skfed.privacy.DifferentialPrivacy`). ``sample_weight`` is
        refused. The clients keep their labels; ``labels_`` and
        ``inertia_`` are computed here for rows held in this process.

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

    privacy_spent_ : tuple (epsilon, delta) or None
        What the fit's noised releases spent, from the accountant; None
        without ``privacy``. With ``secure_aggregation=True`` the releases
        are noised in shares (distributed noise), and the figure holds as
        long as at least ``privacy.honest_clients`` clients of each masked
        sum keep their shares from the server.

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
    skfed.cluster._protocols._coreset.federated_coreset_kmeans : The
        protocol on its own, for any per-client rows.

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

    def _rounds(self):
        if self.privacy is not None:
            # Noised cells and Lloyd rounds on summed statistics, then the
            # clients label their rows (nothing up).
            return private_rounds(self._private_iter(), box=True)
        if self.raw_rows == "refuse":
            # The row-free path: k-FED's local centers, then distributed
            # Lloyd (the only rounds secure aggregation masks there).
            return kfed_rounds(refine_iter=self._row_free_refine_iter())
        return coreset_rounds(self.refine_iter)

    # The clients' steps are light (one local k-means and a few passes over
    # their rows) against sending 1,000 clients' rows to worker processes
    # and their states back: N = 100,000 over 1,000 clients of 100 rows,
    # d = 20, k = 10, one thread each, took 0.69 s with two resident
    # workers and 0.48 s with n_jobs=1; in this process with two threads
    # (the transport keeps its Python-bound steps in the server's thread)
    # 0.57 s against 0.53 s.
    _clients_in_processes = False

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
        "compute_labels": ["boolean"],
        **shared_constraints(
            "on_client_error",
            "n_jobs",
            "verbose",
            "raw_rows",
            "secure_aggregation",
            "privacy",
        ),
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
        coreset_size, n_init = clipped_coreset_options(
            self, n_samples, auto_coreset_size(self.n_clusters)
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
        if self.privacy is not None:
            return self._fit_private(X, fed, rng, n_init, weighted)
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

    def _private_iter(self):
        """Noised Lloyd rounds under ``privacy``."""
        if self.refine_iter == "auto":
            return _PRIVATE_LLOYD_ROUNDS
        return self.refine_iter

    def _fit_private(self, X, fed, rng, n_init, weighted):
        """Fit under ``privacy``: noised per-cell sums and counts of the
        rows clipped into ``privacy.bounds`` seed the server's weighted
        k-means, then noised Lloyd rounds; every upload is one Gaussian
        release, summed (distributed noise under ``secure_aggregation``)."""
        if weighted:
            raise ValueError(
                "DistributedKMeans under differential privacy does not take "
                "sample_weight: a weight scales what one row can change, which "
                "the noise is calibrated to. Fit without sample_weight, or "
                "repeat rows instead of weighting them."
            )
        lower, upper = feature_bounds(self.privacy, X, estimator="DistributedKMeans")
        radius = box_radius(lower, upper)
        n_samples = float(sum(fed.client_sizes))
        with fed:
            result = fed.run_protocol(
                partial(
                    private_kmeans,
                    fed,
                    n_clusters=self.n_clusters,
                    # The cells are cones around the rows' noised mean.
                    eigenvalues=None,
                    shift=np.zeros(X.shape[1]),
                    n_samples=n_samples,
                    radius=radius,
                    n_iter=self._private_iter(),
                    n_init=n_init,
                    random_state=rng,
                    box=(lower, upper),
                ),
                random_state=rng,
            )
            self.client_ids_ = as_id_array(fed.client_ids)
            self.failed_clients_ = dict(fed.failed_clients)
        self.cluster_centers_ = result.cluster_centers.astype(fed.dtype, copy=False)
        self._set_kept_labels(X)
        # Measuring the cost would be one more release; rows held here are
        # measured here, against the released centers.
        self.inertia_ = float("nan")
        if "labels_" in self.__dict__:
            self.inertia_ = float(-self.score(X))
        self.n_iter_ = self.n_refine_iter_ = result.n_refine_iter
        return self._finish_without_coreset(fed)

    def _set_kept_labels(self, X):
        """``labels_`` where the rows are held (the clients keep theirs)."""
        # None is left from an earlier fit either.
        self.__dict__.pop("labels_", None)
        if self.compute_labels:
            labels = labels_where_held(self, X)
            if labels is not None:
                self.labels_ = labels

    def _finish_without_coreset(self, fed):
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

    def _row_free_refine_iter(self):
        """Distributed Lloyd rounds of the row-free path, at most."""
        return self.max_iter if self.refine_iter == "auto" else self.refine_iter

    def _fit_row_free(self, X, fed, rng, n_init, weighted):
        """Fit under ``raw_rows="refuse"``: k-FED's local centers merged by
        the server's weighted k-means, then distributed Lloyd on the
        clients' summed per-cluster statistics; no round sends a row."""
        single = [c for c, n in zip(fed.client_ids, fed.client_sizes) if n < 2]
        if single:
            shown = ", ".join(repr(c) for c in single[:5])
            raise ValueError(
                f"Client(s) {shown} hold one sample: whatever it sends of it "
                "(a center, a sum) is that row, which raw_rows='refuse' "
                "forbids. Merge such clients with others, leave them out, or "
                "allow raw rows."
            )
        refine_iter = self._row_free_refine_iter()
        with fed:
            result = fed.run_protocol(
                partial(
                    run_row_free_kmeans,
                    fed,
                    n_clusters=self.n_clusters,
                    random_state=rng,
                    server_n_init=n_init,
                    refine_iter=refine_iter,
                    tol=self.tol,
                    local_max_iter=self.local_max_iter,
                    weighted=weighted,
                ),
                random_state=rng,
            )
            self.client_ids_ = as_id_array(fed.client_ids)
            self.failed_clients_ = dict(fed.failed_clients)
        self.cluster_centers_ = result.cluster_centers.astype(fed.dtype, copy=False)
        # The labels stay on the clients: rows held here are labelled here,
        # with the model.
        self._set_kept_labels(X)
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
        return self._finish_without_coreset(fed)


# Noised Lloyd rounds under privacy with refine_iter="auto".
_PRIVATE_LLOYD_ROUNDS = 5

# What only the coreset path sets.
_CORESET_ATTRIBUTES = (
    "coreset_inertia_",
    "coreset_sample_counts_",
    "coreset_client_weight_sums_",
    "coreset_weights_",
    "coreset_size_",
)
