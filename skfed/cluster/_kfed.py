"""k-FED: one-shot federated k-means (Dennis, Li & Smith, ICML 2021).

Every client clusters its own data once (Algorithm 1, the Awasthi–Sheffet
variant of Lloyd's method, or plain k-means where that is cheaper) and
uploads its local centers in a single round; the server clusters the pooled
centers into k (weighted k-means by default; the paper's farthest-point
selection and one Lloyd round, Algorithm 2, as an option) and sends each
client the global centers and the global cluster of each of its local
centers. A training point's label is its nearest global center, as
``predict`` gives it; the global cluster of its local cluster (the
*induced* clustering, Definition 3.3) is kept as ``induced_labels_``.
Optional distributed Lloyd rounds (``refine_iter``) move the merged
centers to the means of the rows they label.

The protocol (client steps, server steps, :func:`run_kfed`) lives in
:mod:`skfed.cluster._protocols._kfed`; this module is the estimator. It is
long for its documentation: the parameters, attributes and examples of a
one-shot protocol with options for the local step, the merge, the
refinement, new clients and privacy take two thirds of it.
"""

# Long module: the estimator's documentation (parameters, attributes and
# examples of the local step, the merge, refinement, new clients and
# privacy) is two thirds of it.

import numbers
import warnings
from collections.abc import Mapping
from functools import partial
from numbers import Integral, Real

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
from .._engine._remote import is_remote
from .._engine._shared_params import shared_constraints, shared_parameter_docs
from .._engine._validation import StrictInterval
from .._sklearn_compat import Hidden, StrOptions
from .._sklearn_compat import check_sample_weight as _check_sample_weight
from .._sklearn_compat import fit_context as _fit_context
from ..privacy import check_privacy, feature_bounds
from ._centers import KMeansCentersMixin, labels_where_held
from ._protocols._kfed import (
    KFedLocalOptions,
    KFedPrivateOptions,
    kfed_rounds,
    run_kfed,
    run_kfed_update,
)

__all__ = ["KFed"]


@shared_parameter_docs()
class KFed(
    KMeansCentersMixin,
    FederatedMixin,
    ClassNamePrefixFeaturesOutMixin,
    TransformerMixin,
    ClusterMixin,
    BaseEstimator,
):
    """One-shot federated k-means (k-FED).

    Each client runs the Awasthi–Sheffet variant of Lloyd's method on its
    own data with k(z) local clusters (keeping plain k-means++/Lloyd instead
    when that is cheaper, or improving it by split-and-merge moves on large
    clients, ``local_step``) and uploads its local centers Θ(z) once. The
    server pools the centers and clusters them into ``n_clusters`` by
    weighted k-means (or, with ``merge="farthest"``, the paper's
    farthest-point traversal and one Lloyd round) and sends each client the
    global centers and the global cluster of each of its local centers.
    Each client labels its training points with their nearest global center
    (``labels_``, what :meth:`predict` gives on the same rows), and keeps
    the global cluster of each point's local cluster too (the k-FED induced
    clustering, ``induced_labels_``). With ``refine_iter`` > 0, up to that
    many distributed Lloyd rounds follow the merge, each one sum of
    per-cluster sums and counts (maskable by ``secure_aggregation``).

    The algorithm needs one upload round. It suits heterogeneous (non-IID)
    networks where every client holds data from only a few (k' ≤ k) of the
    k clusters; on IID splits the default's finer local clusters keep the
    one-shot labels as good as ``KMeans(n_init=1)``'s.

    Parameters
    ----------
    n_clusters : int, default=8
        k, the number of global clusters. At most the number of samples;
        when the clients hold fewer distinct samples than k, centers are
        duplicated and the fit warns, as in :class:`~sklearn.cluster.KMeans`.

    n_local_clusters : int, mapping or None, default=None
        k(z) (k' in the paper when equal for all clients), the number of
        clusters each client finds locally. An int applies to every client; a
        mapping gives client id -> k(z) and must cover every client. None
        over-clusters where it is cheap: a client of n(z) ≤ 2,048 rows finds
        min(2k, max(k, ⌊n(z)/4⌋)) local clusters (four rows or more behind
        each on average), a larger one k (its local Lloyd work, which
        decides a fit's time, grows with k(z)); the clusters beyond k are
        never rows: a local cluster of fewer than two distinct rows is
        merged into the nearest while the client has more than k. A local
        cluster's rows share one global cluster in the merge, so finer
        local clusters bring the merged centers closer to k-means on the
        pooled rows: over 10 IID clients of digits the one-shot labels'
        NMI is then 0.010 above ``KMeans(n_init=1)``'s, where k(z) = k left
        it 0.027 below (``benchmarks/bench_kfed.py``'s labels section; the
        user guide quotes it). The upload grows with k(z), up to twice
        k(z) = k's floats. Under ``privacy`` None means 2k.

    center_weighting : {"size", "uniform"}, default="size"
        How the server's Lloyd round averages the local centers of a global
        cluster τ_r. ``"size"`` weights each local center by the number of
        points (total sample weight) in its local cluster: the global center
        is then exactly the mean of the points the induced clustering puts in
        that cluster (``induced_labels_``), and clients with few points do
        not pull centers as much as large ones. It costs k(z) more floats
        per client (the sizes). ``"uniform"`` is the paper's
        unweighted mean of the local centers and uploads only k(z)·d floats.

    merge : {"kmeans", "farthest"}, default="kmeans"
        How the server turns the pooled local centers into k global ones.
        ``"kmeans"`` (ours): weighted k-means++ and weighted Lloyd over the
        pooled centers, weighted as ``center_weighting`` says, best of
        ``server_n_init`` restarts. ``"farthest"``: the paper's Algorithm 2,
        farthest-point selection from one client's centers and one Lloyd
        round. Both use the same upload. Farthest-point selection takes
        outlying local centers as global seeds: on label-skewed clients the
        k-means merge reaches a higher NMI and a cost closer to
        ``KMeans(n_init=10)``'s (``benchmarks/bench_kfed.py``'s label-skew
        section).

    server_n_init : int, default=10
        Restarts of the server's weighted k-means (``merge="kmeans"``);
        server-side work only, no communication. At most the number of
        pooled local centers, or 10 when fewer (more only repeat
        seedings): a larger value is clipped with a warning.

    local_step : {"auto", "best", "awasthi-sheffet"}, default="auto"
        The clients' local clustering (local work only: the upload is the
        same whichever). ``"awasthi-sheffet"`` is the paper's Algorithm 1
        alone. ``"best"`` (ours) also runs plain k-means++ and Lloyd on the
        client's rows and keeps whichever of the two has the lower weighted
        local cost, which raises the accuracy on mixtures and the induced
        labels' NMI on label-skewed clients (``benchmarks/bench_kfed.py``).
        ``"auto"``
        (ours) is ``"best"`` on clients of at most 2,048 rows and on sparse
        ones; a larger dense client runs Algorithm 1 with one seeding
        (``n_init`` at most 1, on 4,096 draws of its rows, at least 32 per
        local cluster, when it holds more; Lloyd from θ runs on all of
        them) and then split-and-merge moves: the two
        local clusters whose merge costs least are merged and the cluster
        whose split saves most is split in two, when the split saves more,
        and Lloyd settles; a round of moves is kept only if it lowers the
        weighted local cost, so no draw is made and the result is never
        worse than Algorithm 1's. Restarts find a better local optimum by
        chance, the moves directly: on large clients they end at a local
        cost at or below ``"best"``'s in a fraction of its time
        (``benchmarks/bench_vs_lloyd.py`` measures the cost, the NMI and
        the time against ``KMeans(n_init=1)``; the user guide has the
        table).

    n_init : int, default=3
        Number of k-means++ seedings, each refined by Lloyd iterations, that
        a client runs on its k(z)-dimensional projection (step 2 of
        Algorithm 1), and of plain k-means restarts under
        ``local_step="best"``; the one with the lowest cost there seeds the
        pruning. The paper only asks for a constant-factor approximation on
        the projection; several runs there are cheap next to the SVD and
        avoid most bad local seedings. ``local_step="auto"`` runs at most
        one on clients above 2,048 rows (its moves replace the restarts).
        0 means a single k-means++ seeding without Lloyd refinement. A
        client runs at most as many seedings as it has samples (of
        positive weight); the fit warns when that clips ``n_init``.

    max_iter : int, default=300
        Maximum number of Lloyd iterations, on the projection and in the
        full space (step 4 of Algorithm 1), as in
        :class:`~sklearn.cluster.KMeans`.

    tol : float, default=1e-4
        Relative tolerance of the local Lloyd iterations, as in
        :class:`~sklearn.cluster.KMeans`.

    allow_raw_upload : bool, default="deprecated"
        A client holding at most k(z) distinct samples cannot summarise them:
        its local centers *are* its (distinct) samples, so it uploads raw
        rows. With True such clients take part (listed in
        ``raw_upload_clients_``); with False the fit raises a ``ValueError``
        naming them, and every other client merges each local cluster of
        fewer than two distinct rows into the nearest one before uploading.
        Unset, it is True.

        .. deprecated:: 0.1.0
           ``allow_raw_upload`` will be removed in 0.3.0. Use
           ``raw_rows="refuse"`` for ``allow_raw_upload=False`` (it also
           keeps per-row outputs on the clients), and ``raw_rows="allow"``
           for True.

    client_dropout : float in [0, 1), default=0.0
        Simulated partial participation: each client independently skips the
        upload round with this probability, drawn from its own random stream
        (so which clients drop depends on ``random_state`` and the data, not
        on client names or order). Dropped clients are listed in
        ``failed_clients_`` whatever ``on_client_error`` says.

    on_client_error : {"raise", "drop"}, default="raise"
        A client whose sample weights are all zero fails its local step.
        With ``"drop"`` a dropped client's samples get label -1, and a
        client that fails in the cluster map round has its local centers
        merged again without it. ``partial_fit`` follows the same rules.

    n_jobs : int, default=None

    random_state : int, RandomState instance or None, default=None
        Seeds the clients' randomized SVDs, k-means++ seedings and dropout,
        and the server's choice of the starting client. Pass an int for
        reproducible results: the model then does not depend on ``n_jobs``,
        on the joblib backend, or on the names or order of the clients.
        Under ``privacy`` with a finite epsilon the noise does not follow
        it (each client draws it from fresh entropy), so a private fit is
        not reproducible.

    verbose : int, default=0

    raw_rows : {"allow", "refuse"}, default="allow"
        k-FED uploads local centers; the center of a local cluster of fewer
        than two distinct rows (an outlier alone, or copies of one row) is
        a row, and a client holding at most k(z) distinct samples has only
        such centers. With "refuse" each client merges such a cluster into
        the cluster of the nearest center before it uploads (so it may send
        fewer than k(z) centers), and a client of at most k(z) distinct
        samples uploads nothing and the fit raises ``ValueError``.

    secure_aggregation : bool, default=False
        k-FED's own round has no such upload (its server needs each
        client's centers): only the ``refine_iter`` rounds are masked.

    privacy : :class:`~skfed.privacy.DifferentialPrivacy` or None, \
            default=None
        Each client replaces the local step by DP Lloyd: its rows are clipped
        into ``privacy.bounds``, ``private_iter`` Lloyd iterations start
        from centers drawn uniformly in that box, and each iteration
        releases the per-cluster sums and counts with Gaussian noise
        calibrated by the fit's accountant. The uploaded local centers and
        their weights (the noisy counts, whatever ``center_weighting``
        says) come from the last release only; the server's merge and the
        cluster map are post-processing. ``n_local_clusters=None`` then
        means 2·``n_clusters`` (over-clustering takes the losses of random
        starts; the merge brings them back to k); ``local_step``,
        ``n_init``, ``max_iter``, ``tol`` and ``allow_raw_upload`` are
        unused (no client uploads raw rows) and ``sample_weight`` is
        refused (a weight would scale a row's influence). ``partial_fit``
        spends a new budget on the rows it is given. ``refine_iter`` must
        be 0 (its sums are not noised).

    private_iter : int, default=5
        T, the number of DP Lloyd iterations each client runs under
        ``privacy``, each one noisy release: the budget is split over T
        releases, so more iterations mean more noise in each. Unused
        without ``privacy``. Fewer iterations suit small budgets; with
        little noise, too few leave the centers short of the non-private
        fit's (``benchmarks/bench_dp.py`` measures the NMI against
        epsilon).

    compute_labels : bool, default=True
        Whether ``fit`` and ``partial_fit`` gather the clients' labels into
        ``labels_`` and ``induced_labels_``, as
        :class:`~sklearn.cluster.MiniBatchKMeans` computes its labels for
        the complete dataset. With False the labels stay on the clients
        and neither is set: a fit on dask-resident data then holds a few
        numbers per client in this process, whatever the number of rows,
        instead of 8 bytes per row. The rounds and ``communication_`` are
        the same either way (the cluster map is how the clients receive
        the model), and ``inertia_`` is still set: it is the sum of one
        number per client. :meth:`fit_predict` returns the labels in both
        cases (gathered for its return value).

    refine_iter : int, default=0
        Largest number of distributed Lloyd rounds after the merge
        (``"lloyd refinement"`` in ``communication_``): the server sends
        the k centers, each client uploads the weighted sum of its rows'
        displacements from their nearest center and their weight per
        cluster (k(d + 1) floats, a sum-only round that
        ``secure_aggregation`` masks), and the centers move to the means.
        The rounds stop early once the centers move by at most ``tol``
        times the pooled local centers' weighted variance. 0 keeps k-FED
        one-shot. Lloyd's steps from the merged centers help where the
        merge is rough (few local clusters per client on label-skewed
        data); each costs a round trip. Refused with ``privacy``.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        Global centers μ(τ_r).

    labels_ : ndarray of shape (n_samples,)
        Index of the nearest global center of each sample passed to the
        last ``fit`` or ``partial_fit`` (what :meth:`predict` returns on
        these samples), computed by its client from the downloaded centers;
        -1 for samples of clients that did not take part. Labels stay on
        the clients in a deployment; the simulation gathers them. Not set
        with ``compute_labels=False``.

    induced_labels_ : ndarray of shape (n_samples,)
        The k-FED induced clustering (Definition 3.3): the global cluster
        of each sample's local cluster, from the cluster map; -1 as in
        ``labels_``. It can differ from ``labels_`` where a local cluster
        straddles two global ones. Not set with ``compute_labels=False``.

    inertia_ : float
        Sum of squared distances (weighted by ``sample_weight`` if given) of
        the samples with a label to their nearest global center, as in
        :class:`~sklearn.cluster.KMeans`. Each client computes its share
        from the downloaded model; the simulation adds the shares (not
        uploaded).

    n_iter_ : int
        Largest number of local Lloyd iterations over the clients (the
        server itself runs exactly one Lloyd round).

    n_refine_iter_ : int
        Distributed Lloyd rounds run after the merge (at most
        ``refine_iter``; 0 after ``partial_fit``).

    n_clients_ : int
        Number of clients whose local centers are in the model.

    local_centers_ : dict
        Client id -> ndarray of shape (k(z), n_features), the local centers
        Θ(z) the client uploaded (fewer rows if it had fewer distinct
        samples, or, when rows may not leave, merged local clusters of
        fewer than two distinct rows).

    local_center_labels_ : dict
        Client id -> ndarray of shape (k(z),), the global cluster of each
        local center (the map downloaded by that client).

    raw_upload_clients_ : list
        Ids of clients whose uploaded centers are raw rows because they hold
        at most k(z) distinct samples.

    failed_clients_ : dict
        Client id -> reason (a sentence), for clients that dropped out
        (``client_dropout``) or failed with ``on_client_error="drop"``;
        ``{}`` when none. Their samples get label -1.

    communication_ : CommunicationLog
        What crossed the network. Round ``"local centers"`` uploads, per
        client, k(z)·d floats (+ k(z) sizes with
        ``center_weighting="size"``); round ``"cluster map"`` downloads k(z)
        ints (the global cluster of each local center) and the k·d global
        centers. One upload round per ``fit`` or ``partial_fit``, plus
        ``n_refine_iter_`` rounds ``"lloyd refinement"`` (k·d floats down,
        k(d + 1) up per client, sum-only).

    privacy_spent_ : tuple (epsilon, delta) or None
        What the last ``fit`` or ``partial_fit`` spent under ``privacy``,
        from its accountant (at most the requested budget); None without
        ``privacy``.

    n_features_in_ : int
        Number of features seen during ``fit``.

    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during ``fit``. Defined only when `X`
        has feature names that are all strings.

    See Also
    --------
    sklearn.cluster.KMeans : Centralized k-means on the pooled data.

    Notes
    -----
    Local step on client z (Algorithm 1), on its rows minus their weighted
    mean (dense data only; the centers are uploaded in global coordinates):
    V = top-k(z) right singular vectors of these rows (randomized SVD; the
    paper's SVD is of the uncentered rows); the best of ``n_init``
    k-means++ + Lloyd runs on the projection P = X V gives ν; pruning keeps
    S_r = {i : ‖P_i − ν_r‖ ≤ ⅓ ‖P_i − ν_s‖ for all s ≠ r} and sets θ_r =
    mean(P[S_r]) Vᵀ, the mean of S_r in the projection mapped back (ν_r Vᵀ if S_r is
    empty), as the authors' code does; Lloyd's method from θ in the full
    space gives Θ(z) (``local_step="auto"`` on a client above 2,048 dense
    rows: from one seeding, on 4,096 draws of its rows when it holds
    more, then rounds of split-and-merge moves, each kept
    if Lloyd then ends at a lower local cost). A client with at most k(z)
    distinct samples uses them as its centers. Samples of zero weight take
    no part (as if removed) and then join their nearest local center. Each
    client processes its rows in a canonical (content-defined) order, so the
    result does not depend on the order of the samples either.

    Server, ``merge="kmeans"``: weighted k-means++ and weighted Lloyd over
    the pooled centers, best of ``server_n_init``. ``merge="farthest"``
    (Algorithm 2): M starts as the centers of the client with the
    most local centers (among ties, one drawn with ``random_state`` from an
    order defined by the centers' values); the pooled center farthest from M
    joins M until M has k centers; one Lloyd round assigns every pooled center to
    its nearest member of M (groups τ_r) and sets the global centers to the
    (weighted) means of the τ_r. The server computes all this relative to
    the mean of the pooled centers, and ``predict``, ``transform`` and
    ``score`` relative to the mean of the global centers, so that data far
    from the origin (e.g. at 1e9) is clustered as it would be near it.

    ``partial_fit`` adds new clients (Theorem 3.2): they run the local step,
    their local centers join the nearest global center, and the global
    centers become the (weighted) means of the enlarged τ_r. No earlier
    client is contacted and earlier labels do not change (so they can
    differ from what :meth:`predict` now gives on the earlier rows).

    References
    ----------
    Dennis, D. K., Li, T. & Smith, V. (2021). Heterogeneity for the Win:
    One-Shot Federated Clustering. ICML.

    Awasthi, P. & Sheffet, O. (2012). Improved spectral-norm bounds for
    clustering. APPROX/RANDOM.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed import KFed
    >>> X = np.array([[1, 2], [1, 4], [1, 0], [10, 2], [10, 4], [10, 0]])
    >>> partitions = [0, 0, 0, 1, 1, 1]
    >>> kfed = KFed(n_clusters=2, n_local_clusters=1, random_state=0)
    >>> kfed.fit(X, partitions=partitions).labels_
    array([1, 1, 1, 0, 0, 0], dtype=int32)
    >>> kfed.cluster_centers_
    array([[10.,  2.],
           [ 1.,  2.]])
    >>> kfed.communication_.n_upload_rounds
    1
    """

    def _rounds(self):
        # The server needs each client's local centers; only the
        # refinement's sums can be masked.
        private = getattr(self, "privacy", None) is not None
        return kfed_rounds(
            refine_iter=self.refine_iter,
            private_iter=self.private_iter if private else None,
        )

    _private_alternative = (
        "Pass refine_iter=0 (the DP Lloyd iterations are private_iter), or "
        "fit without privacy."
    )

    _parameter_constraints: dict = {
        "n_clusters": [StrictInterval(Integral, 1, None, closed="left")],
        "n_local_clusters": [
            StrictInterval(Integral, 1, None, closed="left"),
            Mapping,
            None,
        ],
        "center_weighting": [StrOptions({"size", "uniform"})],
        "merge": [StrOptions({"kmeans", "farthest"})],
        "local_step": [StrOptions({"auto", "best", "awasthi-sheffet"})],
        "server_n_init": [StrictInterval(Integral, 1, None, closed="left")],
        "n_init": [StrictInterval(Integral, 0, None, closed="left")],
        "max_iter": [StrictInterval(Integral, 1, None, closed="left")],
        "tol": [StrictInterval(Real, 0, None, closed="left")],
        "allow_raw_upload": ["boolean", Hidden(StrOptions({"deprecated"}))],
        "client_dropout": [StrictInterval(Real, 0, 1, closed="left")],
        "random_state": ["random_state"],
        "private_iter": [StrictInterval(Integral, 1, None, closed="left")],
        "compute_labels": ["boolean"],
        "refine_iter": [StrictInterval(Integral, 0, None, closed="left")],
        **shared_constraints(),
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        n_local_clusters=None,
        center_weighting="size",
        merge="kmeans",
        server_n_init=10,
        local_step="auto",
        n_init=3,
        max_iter=300,
        tol=1e-4,
        allow_raw_upload="deprecated",
        client_dropout=0.0,
        on_client_error="raise",
        n_jobs=None,
        random_state=None,
        verbose=0,
        raw_rows="allow",
        secure_aggregation=False,
        privacy=None,
        private_iter=5,
        compute_labels=True,
        refine_iter=0,
    ):
        self.n_clusters = n_clusters
        self.n_local_clusters = n_local_clusters
        self.center_weighting = center_weighting
        self.merge = merge
        self.server_n_init = server_n_init
        self.local_step = local_step
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.allow_raw_upload = allow_raw_upload
        self.client_dropout = client_dropout
        self.on_client_error = on_client_error
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.verbose = verbose
        self.raw_rows = raw_rows
        self.secure_aggregation = secure_aggregation
        self.privacy = privacy
        self.private_iter = private_iter
        self.compute_labels = compute_labels
        self.refine_iter = refine_iter

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, *, partitions=None, sample_weight=None):
        """Cluster the clients' data with one round of communication.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data of all clients (CSR for sparse data).

        y : Ignored
            Not used, present here for API consistency by convention.

        partitions : None, int or array-like of shape (n_samples,), \
                default=None
            Client id of each sample; an int n splits the samples uniformly
            at random into n clients; None means one client.

        sample_weight : array-like of shape (n_samples,), default=None
            Weight of each sample in the k-means objective; equal weights
            when None. Each client uses its own samples' weights.

        Returns
        -------
        self : object
            Fitted estimator.
        """
        self._fit(X, partitions, sample_weight)
        return self

    @_fit_context(prefer_skip_nested_validation=True)
    def fit_predict(self, X, y=None, *, partitions=None, sample_weight=None):
        """Fit and return the nearest global center of each training sample.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data of all clients (CSR for sparse data).

        y : Ignored
            Not used, present here for API consistency by convention.

        partitions : None, int or array-like of shape (n_samples,), \
                default=None
            Client id of each sample, see :meth:`fit`.

        sample_weight : array-like of shape (n_samples,), default=None
            Weight of each sample, see :meth:`fit`.

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            The nearest global center of each sample, computed by its
            client (-1 for samples of clients that did not take part):
            ``labels_`` with ``compute_labels=True``. With
            ``compute_labels=False`` they are gathered for this return
            value only (for a dask X, an array of n_samples in this
            process) and ``labels_`` is not set; for labels that stay on
            the workers, call :meth:`fit` and then :meth:`predict` on the
            dask array (the same labels).
        """
        return self._fit(X, partitions, sample_weight, gather_labels=True)

    def _fit(self, X, partitions, sample_weight, *, gather_labels=None):
        """Fit; return the labels when gathered (``compute_labels``, or
        ``gather_labels=True``), else None."""
        X, partitions, sample_weight = self._training_data(
            X, partitions, sample_weight, reset=True
        )
        if X.shape[0] < self.n_clusters:
            raise ValueError(
                f"n_samples={X.shape[0]} should be >= n_clusters={self.n_clusters}."
            )
        private = self._private_options(X, sample_weight)
        rng = check_random_state(self.random_state)
        fed = self._federation(
            X, None, partitions, random_state=rng, sample_weight=sample_weight
        )
        if private is not None:
            private = private._replace(noise_multiplier=fed.accountant.noise_multiplier)
        with fed:
            # A client that fails in the cluster map round is merged again
            # without (see Federation.run_protocol).
            result = fed.run_protocol(
                partial(
                    run_kfed,
                    fed,
                    random_state=rng,
                    merge=self.merge,
                    server_n_init=self.server_n_init,
                    local=self._local_options(),
                    private=private,
                    gather_labels=self._gathers_labels(gather_labels),
                    refine_iter=self.refine_iter,
                    tol=self.tol,
                    weighted=sample_weight is not None,
                ),
                random_state=rng,
            )
        self.cluster_centers_ = result.cluster_centers
        self._cluster_weights = result.cluster_weights
        self._fitted_weighting = self.center_weighting
        self.local_centers_ = dict(zip(result.client_ids, result.local_centers))
        self.local_center_labels_ = dict(
            zip(result.client_ids, result.local_center_labels)
        )
        self.failed_clients_ = result.failed_clients
        self.raw_upload_clients_ = result.raw_upload_clients
        self.n_clients_ = len(result.client_ids)
        labels = self._kept_labels(result, fed, X, gather_labels)
        self._set_labels(labels, result.induced_labels)
        self._set_inertia(result, fed, X)
        self.n_refine_iter_ = result.n_refine_iter
        self.communication_ = fed.log
        self._record_privacy(fed)
        self._n_features_out = self.cluster_centers_.shape[0]

        n_distinct = np.count_nonzero(result.cluster_weights > 0)
        if n_distinct < self.n_clusters:
            warnings.warn(
                f"Number of distinct clusters ({n_distinct}) found smaller than "
                f"n_clusters ({self.n_clusters}). Possibly due to duplicate "
                "points in X or identical local centers.",
                ConvergenceWarning,
                stacklevel=3,
            )
        if labels is None and gather_labels and not fed.per_row_allowed:
            # fit_predict on rows held elsewhere: labelled where they are.
            return labels_where_held(self, X, returned=True)
        return labels

    def _kept_labels(self, result, fed, X, gather_labels=None):
        """The gathered labels, or under ``raw_rows="refuse"`` or privacy
        (where they stay on the clients) those of the rows held here (None
        for rows held elsewhere)."""
        if result.labels is not None or fed.per_row_allowed:
            return result.labels
        if not self._gathers_labels(gather_labels):
            return None
        return labels_where_held(self, X)

    def _set_inertia(self, result, fed, X):
        """``inertia_`` and ``n_iter_``; under privacy each client's exact
        cost stays on it: the cost of the rows held here, else NaN."""
        self.inertia_ = result.inertia
        self.n_iter_ = result.n_iter
        if fed.accountant is not None:
            self.n_iter_ = self.private_iter
            if not is_remote(X):
                self.inertia_ = -float(self.score(X))

    def _gathers_labels(self, gather_labels=None):
        return self.compute_labels if gather_labels is None else gather_labels

    def _set_labels(self, labels, induced=None):
        """``labels_`` and ``induced_labels_`` from gathered labels (the
        induced ones only where they were gathered); with
        ``compute_labels=False`` none from this fit, and none left from an
        earlier one."""
        if self.compute_labels and labels is not None:
            self.labels_ = labels
            if induced is not None:
                self.induced_labels_ = induced
            else:
                self.__dict__.pop("induced_labels_", None)
        else:
            self.__dict__.pop("labels_", None)
            self.__dict__.pop("induced_labels_", None)

    @_fit_context(prefer_skip_nested_validation=True)
    def partial_fit(self, X, y=None, *, partitions=None, sample_weight=None):
        """Add new clients to a fitted model (paper, Theorem 3.2).

        The new clients run the local step and upload their local centers;
        each center joins its nearest global center, whose mean is updated.
        Earlier clients are not contacted and keep their labels. On an
        unfitted estimator this is :meth:`fit`.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Data of the new clients.

        y : Ignored
            Not used, present here for API consistency by convention.

        partitions : None, int or array-like of shape (n_samples,), \
                default=None
            Client id of each sample. A client already in the model (or one
            that failed earlier) may come back: its data is clustered afresh
            and its new local centers join those it sent before.

        sample_weight : array-like of shape (n_samples,), default=None
            Weight of each sample in the k-means objective; equal weights
            when None. Each client uses its own samples' weights.

        Returns
        -------
        self : object
            Updated estimator. ``labels_`` (unless
            ``compute_labels=False``), ``inertia_`` and ``n_iter_``
            describe the new clients' data.
        """
        if not hasattr(self, "cluster_centers_"):
            self._fit(X, partitions, sample_weight)
            return self
        X, partitions, sample_weight = self._training_data(
            X, partitions, sample_weight, reset=False
        )
        if self.cluster_centers_.shape[0] != self.n_clusters:
            raise ValueError(
                f"n_clusters={self.n_clusters} differs from the "
                f"{self.cluster_centers_.shape[0]} clusters of the fitted model; "
                "call fit to change the number of clusters."
            )
        if self.center_weighting != self._fitted_weighting:
            # The server's running weights of the τ_r are counts of local
            # centers or sums of sizes; they cannot be mixed.
            raise ValueError(
                f"center_weighting={self.center_weighting!r} differs from the "
                f"{self._fitted_weighting!r} the model was fitted with; call "
                "fit to change it."
            )
        private = self._private_options(X, sample_weight)
        rng = check_random_state(self.random_state)
        fed = self._federation(
            X,
            None,
            partitions,
            random_state=rng,
            sample_weight=sample_weight,
            log=self.communication_,
        )
        if private is not None:
            private = private._replace(noise_multiplier=fed.accountant.noise_multiplier)
        with fed:
            result = fed.run_protocol(
                partial(
                    run_kfed_update,
                    fed,
                    cluster_centers=self.cluster_centers_,
                    cluster_weights=self._cluster_weights,
                    local=self._local_options(),
                    private=private,
                    gather_labels=self.compute_labels,
                ),
                random_state=rng,
            )
        self.cluster_centers_ = result.cluster_centers
        self._cluster_weights = result.cluster_weights
        for cid, own, own_labels in zip(
            result.client_ids, result.local_centers, result.local_center_labels
        ):
            # A client already in the model brings new data: its new local
            # centers join those it uploaded before.
            if cid in self.local_centers_:
                own = np.concatenate([self.local_centers_[cid], own])
                own_labels = np.concatenate(
                    [self.local_center_labels_[cid], own_labels]
                )
            self.local_centers_[cid] = own
            self.local_center_labels_[cid] = own_labels
            self.failed_clients_.pop(cid, None)
        self.failed_clients_.update(
            (c, r)
            for c, r in result.failed_clients.items()
            if c not in self.local_centers_
        )
        self.raw_upload_clients_ += [
            c for c in result.raw_upload_clients if c not in self.raw_upload_clients_
        ]
        self.n_clients_ = len(self.local_centers_)
        self._set_labels(self._kept_labels(result, fed, X), result.induced_labels)
        self._set_inertia(result, fed, X)
        self.n_refine_iter_ = 0
        self.communication_ = fed.log
        self._record_privacy(fed)
        return self

    # -- differential privacy ---------------------------------------------------

    def _private_options(self, X, sample_weight):
        """The clients' DP Lloyd options under ``privacy`` (None without);
        the noise multiplier is filled in from the fit's accountant."""
        privacy = check_privacy(self.privacy)
        if privacy is None:
            return None
        if self.refine_iter > 0:
            raise ValueError(
                f"refine_iter={self.refine_iter} cannot run under privacy: "
                "the refinement's cluster sums are not noised. Pass "
                "refine_iter=0 (the DP Lloyd iterations are private_iter), "
                "or fit without privacy."
            )
        if sample_weight is not None:
            raise ValueError(
                "KFed does not take sample_weight under privacy: a weight "
                "scales one row's influence on the noisy sums beyond what the "
                "noise covers. Repeat rows instead, or fit without privacy."
            )
        if is_remote(X) and privacy.bounds is None:
            raise ValueError(
                "KFed with privacy on remote data needs "
                "DifferentialPrivacy(bounds=(lower, upper)): reading them from "
                "the clients' rows would leak them."
            )
        lower, upper = feature_bounds(privacy, X, estimator="KFed")
        return KFedPrivateOptions(lower, upper, self.private_iter, 0.0)

    # -- input checks ----------------------------------------------------------

    def _training_data(self, X, partitions, sample_weight, *, reset):
        """X (validated, or a dask array checked on the clients), the
        partitions and the validated sample weights."""
        if is_remote(X):
            X, _, partitions = self._remote_fit_input(X, None, partitions, reset=reset)
        else:
            X = self._validated(X, reset=reset)
            sample_weight = self._validate_sample_weight(sample_weight, X)
        self._check_n_local_clusters()
        return X, partitions, sample_weight

    def _check_n_local_clusters(self):
        local = self.n_local_clusters
        values = local.values() if isinstance(local, Mapping) else [local]
        for value in values:
            if value is None and not isinstance(local, Mapping):
                continue
            if (
                not isinstance(value, numbers.Integral)
                or isinstance(value, bool)
                or value < 1
            ):
                raise ValueError(
                    "n_local_clusters must map every client to a positive "
                    f"int k(z); got {value!r}."
                )

    @staticmethod
    def _validate_sample_weight(sample_weight, X):
        if sample_weight is None:
            return None
        return _check_sample_weight(
            sample_weight, X, dtype=X.dtype, ensure_non_negative=True
        )

    def _allow_raw_upload(self):
        if self.allow_raw_upload == "deprecated":
            return True
        warnings.warn(
            "allow_raw_upload was deprecated in 0.1.0 and will be removed in "
            "0.3.0: use raw_rows='refuse' instead of allow_raw_upload=False, "
            "and raw_rows='allow' (the default) instead of True.",
            FutureWarning,
            stacklevel=4,
        )
        return bool(self.allow_raw_upload)

    def _local_options(self):
        """The client-side options of :func:`run_kfed`."""
        options = {name: getattr(self, name) for name in KFedLocalOptions._fields}
        if self.privacy is not None and self.n_local_clusters is None:
            # Over-clustering: a uniform start that catches no row, or two
            # blobs caught by one start, still leaves k clusters to merge.
            options["n_local_clusters"] = 2 * self.n_clusters
        # raw_rows="refuse" keeps the rows of a client with at most k(z)
        # distinct samples there, as the deprecated allow_raw_upload=False.
        options["allow_raw_upload"] = (
            self._allow_raw_upload() and getattr(self, "raw_rows", "allow") == "allow"
        )
        return KFedLocalOptions(**options)
