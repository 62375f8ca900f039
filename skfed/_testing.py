"""Helpers shared by the tests and the benchmarks.

Toy client steps live in the package (not in the test modules) because
process-based joblib backends must import a client step by name in a worker
process; the data generators and ledger readers live here so that the tests
and the benchmarks measure the same thing.
"""

__all__ = [
    "HOSTILE_MINIMUM",
    "INTEGRATION_CASES",
    "client_data_received",
    "settled_receipts",
    "blas_threads",
    "exit_on",
    "fail_on",
    "fail_unpicklably_on",
    "gathered_outputs",
    "hold_megabytes",
    "iteration_uploads",
    "joblib_backend",
    "keep_message_as_labels",
    "leak_thread_limits",
    "noisy_sum",
    "SharedSum",
    "shared_sum",
    "rkhs_paper_data",
    "shipped_since",
    "sleep_on",
    "TwoArgumentError",
]

import builtins
import os
import threading
import uuid
from typing import NamedTuple

import numpy as np
from joblib.parallel import get_active_backend
from sklearn import get_config

from ._engine._protocol import PER_ROW, PUBLIC, client_step, collectable

# What tests may collect of the toy steps' state.
collectable("testing", (None, "calls", "held"), PUBLIC)
collectable("testing", "labels", PER_ROW)


@client_step("testing.noisy_sum", sum_only=True)
def noisy_sum(client, state, message):
    """Upload the column sums of the client's rows plus seeded noise.

    Uses the client's own random stream keyed by ``message["round"]`` and
    counts its calls in the client state.
    """
    rng = client.random_state("testing.noise", message["round"])
    noise = rng.standard_normal(client.X.shape[1])
    state = dict(state or {})
    state["calls"] = state.get("calls", 0) + 1
    return state, client.X.sum(axis=0) + noise * message["scale"]


@client_step("testing.fail_on", sum_only=True)
def fail_on(client, state, message, *, bad, exc="RuntimeError"):
    """Raise the built-in exception named ``exc`` on client ``bad``; others
    upload their size."""
    if client.client_id == bad:
        raise getattr(builtins, exc)("disk on fire")
    return state, float(client.n_samples)


@client_step("testing.keep_message_as_labels")
def keep_message_as_labels(client, state, message):
    """Label every sample of the client with ``message[0]``; upload nothing."""
    state = dict(state or {})
    state["labels"] = np.full(client.n_samples, int(message[0]))
    return state, None


@client_step("testing.where", python_bound=True)
def where(client, state, message):
    """Upload the id of the process and thread the step ran in; keep its
    number of calls (a Python-bound step, see ``client_step``)."""
    state = dict(state or {})
    state["calls"] = state.get("calls", 0) + 1
    return state, (os.getpid(), threading.get_ident())


@client_step("testing.where_not_in_processes", python_bound=True, in_processes=False)
def where_not_in_processes(client, state, message):
    """:func:`where` for a Python-bound step that must not run in worker
    processes."""
    return state, (os.getpid(), threading.get_ident())


class TwoArgumentError(Exception):
    """An exception that pickles but cannot be unpickled (its ``__init__``
    takes two arguments, its ``args`` hold one)."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


@client_step("testing.fail_unpicklably_on")
def fail_unpicklably_on(client, state, message, *, bad):
    """Raise a :class:`TwoArgumentError` on client ``bad``; others upload
    their size."""
    if client.client_id == bad:
        raise TwoArgumentError("disk on fire", 7)
    return state, float(client.n_samples)


@client_step("testing.exit_on")
def exit_on(client, state, message, *, bad):
    """End the process that runs client ``bad`` at once (a worker killed
    by the system); others upload their size."""
    if client.client_id == bad:
        os._exit(1)
    return state, float(client.n_samples)


@client_step("testing.sleep_on")
def sleep_on(client, state, message, *, bad, seconds):
    """Client ``bad`` sleeps ``seconds`` (a stalled worker); others upload
    their size."""
    if client.client_id == bad:
        import time

        time.sleep(seconds)
    return state, float(client.n_samples)


@client_step("testing.hold_megabytes")
def hold_megabytes(client, state, message, *, megabytes):
    """Keep ``megabytes`` of memory in the state of client 0, or, with
    ``megabytes=None``, upload how many it keeps."""
    state = dict(state or {})
    if megabytes is None:
        return state, float(state.get("held", np.zeros(0)).nbytes // 2**20)
    if client.client_id == 0:
        state["held"] = np.ones(megabytes * 2**17)
    return state, None


@client_step("testing.blas_threads")
def blas_threads(client, state, message):
    """Upload the number of threads of the process's BLAS pools."""
    from threadpoolctl import threadpool_info

    return state, [
        lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"
    ]


@client_step("testing.blas_threads_large", large_products=True)
def blas_threads_large(client, state, message):
    """:func:`blas_threads` in a step registered with large products."""
    return blas_threads(client, state, message)


class SharedSum(NamedTuple):
    """A toy shared work item: the sum of ``values``, solved for a whole
    batch at once; ``solve_all`` raises on a non-finite value, and records
    the size of every batch it is given (in this process)."""

    values: np.ndarray

    batches = []

    @classmethod
    def solve_all(cls, items):
        cls.batches.append(len(items))
        if not all(np.all(np.isfinite(item.values)) for item in items):
            raise FloatingPointError("a value is not finite")
        return [float(np.sum(item.values)) for item in items]


@client_step("testing.shared_sum")
def shared_sum(client, state, message, *, catch=False):
    """Hand over the sum of the first column, then of the second, as
    shared work; upload both. With ``catch``, an error solving the first
    is caught in the step (uploaded as NaN)."""
    try:
        first = yield SharedSum(client.X[:, 0])
    except FloatingPointError:
        if not catch:
            raise
        first = float("nan")
    second = yield SharedSum(client.X[:, 1])
    return state, (first, second)


@client_step("testing.joblib_backend")
def joblib_backend(client, state, message):
    """Upload the name of the joblib backend a client step sees, and the
    number of jobs it would get (a step must see a sequential one)."""
    backend, n_jobs = get_active_backend()
    return state, (type(backend).__name__, n_jobs)


@client_step("testing.sklearn_config")
def sklearn_config(client, state, message):
    """Upload scikit-learn's ``assume_finite`` as the client step sees it
    (the server's configuration must reach the client threads), and the
    thread's id."""
    return state, (get_config()["assume_finite"], threading.get_ident())


# How many times a ClientData was unpickled in this process, per fit (keyed
# by the first entropy word, which all clients of one fit share). Counted
# only once install_receive_counter has run here: the library itself keeps
# no counter.
_RECEIVED = {}


def install_receive_counter():
    """Count unpicklings of ClientData in this process from now on (run it
    on every dask worker; idempotent)."""
    from ._engine._federation import ClientData

    if getattr(ClientData, "_skfed_counting", False):
        return

    def __setstate__(self, state):
        self.__dict__.update(state)
        key = self.entropy[0]
        _RECEIVED[key] = _RECEIVED.get(key, 0) + 1

    ClientData.__setstate__ = __setstate__
    ClientData._skfed_counting = True


def client_data_received():
    """How many times client data was unpickled in this process, per fit
    (run on a dask worker to measure what was shipped to it); installs the
    counter on first use."""
    install_receive_counter()
    return dict(_RECEIVED)


# Estimator name -> (small, fast constructor params, a grid over the
# estimator for searches, kind: "cluster", "transform" or "classify"); shared
# by the integration and scale-out tests.
# Estimator -> (the minimum a user must pass, kind), for the hostile-input
# tests. Everything else is the public default: the library promises that
# defaults just work. A new estimator is added here.
HOSTILE_MINIMUM = {
    "KFed": ({"n_clusters": 3}, "cluster"),
    "DistributedKMeans": ({"n_clusters": 3}, "cluster"),
    "FederatedKernelKMeans": ({"n_clusters": 3}, "cluster"),
    "DistributedKernelPCA": ({"n_components": 2}, "transform"),
    "FederatedRKHSClassifier": ({}, "classify"),
    "FederatedStandardScaler": ({}, "transform"),
}

INTEGRATION_CASES = {
    "KFed": ({"n_clusters": 3, "random_state": 0}, {"n_clusters": [2, 3]}, "cluster"),
    "DistributedKMeans": (
        {"n_clusters": 3, "coreset_size": 60, "random_state": 0},
        {"n_clusters": [2, 3]},
        "cluster",
    ),
    "FederatedKernelKMeans": (
        {"n_clusters": 3, "n_random_features": 30, "max_iter": 5, "random_state": 0},
        {"n_clusters": [2, 3]},
        "cluster",
    ),
    "DistributedKernelPCA": (
        {"n_components": 2, "n_representatives": 40, "random_state": 0},
        {"n_components": [2, 3]},
        "transform",
    ),
    "FederatedRKHSClassifier": ({"random_state": 0}, {}, "classify"),
    "FederatedStandardScaler": (
        {"random_state": 0},
        {"with_std": [True, False]},
        "transform",
    ),
}


def hostile_estimator(name, **params):
    """The exported estimator ``name`` with its :data:`HOSTILE_MINIMUM`
    parameters, ``random_state=0`` and ``params``."""
    import skfed

    return getattr(skfed, name)(
        **{**HOSTILE_MINIMUM[name][0], "random_state": 0, **params}
    )


def blobs(n=300, d=2, centers=3, cluster_std=0.5, seed=0, **params):
    """``(X, y)`` of ``make_blobs``: the suite's usual small clustered data."""
    from sklearn.datasets import make_blobs

    return make_blobs(
        n_samples=n,
        n_features=d,
        centers=centers,
        cluster_std=cluster_std,
        random_state=seed,
        **params,
    )


def hostile_blobs(name, n=150, seed=0):
    """``(X, y, partitions)``: well-separated blobs over three clients (one
    optimum, so any valid fit finds it), with binary labels for a
    classifier ``name``."""
    X, y = blobs(n, d=4, cluster_std=0.6, seed=seed, center_box=(-8, 8))
    if HOSTILE_MINIMUM[name][1] == "classify":
        y = (y == 0).astype(int)
    return X, y, np.arange(n) % 3


def hostile_fit(name, X, y, ids, **params):
    """:func:`hostile_estimator` fitted, quiet about defaults clipped to
    small data."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return hostile_estimator(name, **params).fit(X, y, partitions=ids)


@client_step("testing.leak_thread_limits")
def leak_thread_limits(client, state, message):
    """Set BLAS/OpenMP to one thread and never undo it (what interleaved
    limits from concurrent client threads can amount to)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)
    return state, None


def settled_receipts(dask_client, *, wait=0.25, tries=40):
    """:func:`client_data_received` on every worker, read once two readings
    ``wait`` seconds apart agree: copies of earlier fits that were still in
    flight (a broadcast scatter does not wait for every worker) have landed
    by then and are not taken for the next fit's."""
    import time

    counts = dask_client.run(client_data_received)
    for _ in range(tries):
        time.sleep(wait)
        again = dask_client.run(client_data_received)
        if again == counts:
            break
        counts = again
    return counts


def shipped_since(before, after):
    """Client-data shipments of the fits that first appear in ``after``.

    ``before`` and ``after`` map each worker to :func:`client_data_received`
    read there; fits already seen in ``before`` (whose late copies may still
    be landing) are left out, so every counted fit needs its own
    ``random_state`` (the key is derived from it).
    """
    seen = {fit for counts in before.values() for fit in counts}
    return sum(
        n for counts in after.values() for fit, n in counts.items() if fit not in seen
    )


def gathered_outputs(monkeypatch):
    """The (namespace, key) of every per-sample output a federation gathers
    into this process from now on (``Federation.assemble`` spied on with
    pytest's ``monkeypatch``)."""
    from ._engine._federation import Federation

    gathered = []
    assemble = Federation.assemble

    def spy(fed, namespace, key, *args, **kwargs):
        gathered.append((namespace, key))
        return assemble(fed, namespace, key, *args, **kwargs)

    monkeypatch.setattr(Federation, "assemble", spy)
    return gathered


def rounds_run(monkeypatch):
    """The names of the rounds every federation runs from now on
    (``Federation.run_round`` spied on with pytest's ``monkeypatch``)."""
    from ._engine._federation import Federation

    names = []
    run_round = Federation.run_round

    def recording(self, name, *args, **kwargs):
        # A declared round (skfed._engine._rounds.Round) by its name.
        names.append(getattr(name, "name", name))
        return run_round(self, name, *args, **kwargs)

    monkeypatch.setattr(Federation, "run_round", recording)
    return names


def assert_runs_its_declared_rounds(est, run, *, optional=()):
    """The rounds ``run`` (names, in order) are the estimator's declared
    ``_rounds()`` in order, up to declared rounds in ``optional`` that the
    data made unnecessary; the ledger records each as declared. The key
    exchange of secure aggregation is the federation's, not the protocol's."""
    declared = est._rounds()
    names = [r.name for r in declared]
    run = [n for n in run if not n.startswith("secure aggregation")]
    i = 0
    for name in run:
        while i < len(names) and names[i] != name and names[i] in optional:
            i += 1
        assert i < len(names) and names[i] == name, (run, names)
        i += 1
    assert all(n in optional for n in names[i:]), (run, names)
    by_name = {r.name: r for r in declared}
    for record in est.communication_.disclosure():
        if record["name"].startswith("secure aggregation"):
            continue
        r = by_name[record["name"]]
        assert record["noised"] == r.disclosure.noised
        # A statistic that degenerated into rows (a round that counts rows
        # in its uploads, its counter set when declared or at fit time) is
        # recorded as raw rows.
        counts_rows = bool(record["raw_rows"]) and r.kind != "raw_rows"
        assert record["disclosure"] == ("raw_rows" if counts_rows else r.kind)


def server_received(monkeypatch):
    """What a curious server sees from now on: every ``(round, client,
    upload)`` it receives and every ``(round, message)`` it sends, one
    message per client and round, as the fits go (each federation's
    transport spied on for the length of each round)."""
    from ._engine._federation import Federation
    from ._engine._transports._common import StepFailure

    log = {"uploads": [], "messages": []}
    original = Federation.run_round

    def spying(self, declared, step, message=None, **kwargs):
        name = getattr(declared, "name", declared)
        transport = self.transport
        answer = type(transport).run.__get__(transport)
        previous = vars(transport).get("run")

        label = getattr(name, "name", name)  # a declared Round by its name

        def recording(call, ids, messages):
            results = answer(call, ids, messages)
            log["messages"].extend((label, m) for m in messages)
            log["uploads"].extend(
                (label, c, r)
                for c, r in zip(ids, results)
                if not isinstance(r, StepFailure)
            )
            return results

        transport.run = recording
        try:
            return original(self, declared, step, message, **kwargs)
        finally:
            if previous is None:
                del transport.run
            else:
                transport.run = previous

    monkeypatch.setattr(Federation, "run_round", spying)
    return log


def _float_arrays(upload):
    """Every float array in an upload (dicts, tuples, arrays), as 2-D."""
    if isinstance(upload, dict):
        upload = list(upload.values())
    if isinstance(upload, (list, tuple)):
        return [a for item in upload for a in _float_arrays(item)]
    if isinstance(upload, np.ndarray) and upload.dtype.kind == "f":
        return [np.atleast_2d(upload)]
    return []


def rows_found(uploads, rows):
    """The indices of the rows of ``rows`` that appear, to 1e-9, as a row of
    an upload among ``uploads`` (``(round, client, upload)`` triples)."""
    found = set()
    for _, _, upload in uploads:
        for array in _float_arrays(upload):
            if array.ndim != 2 or array.shape[1] != rows.shape[1]:
                continue
            gaps = np.abs(array[:, None, :] - rows[None, :, :]).max(axis=2)
            found |= set(np.flatnonzero((gaps <= 1e-9).any(axis=0)).tolist())
    return found


def iteration_uploads(log, names):
    """Floats uploaded per DSPGD iteration of a federated kernel k-means fit
    (an iteration opens with its "random features" round), counting only the
    rounds in ``names``."""
    per_iter = []
    for rec in log.records:
        if rec.direction != "upload":
            continue
        if rec.name == "random features":
            per_iter.append(0)
        if per_iter and rec.name in names:
            per_iter[-1] += rec.total_floats
    return per_iter


def iteration_round_uploads(log, name):
    """Per DSPGD iteration of a federated kernel k-means fit, the floats
    uploaded by each round called ``name`` (e.g. one entry per Lanczos
    round), summed over the clients."""
    per_iter = []
    for rec in log.records:
        if rec.direction != "upload":
            continue
        if rec.name == "random features":
            per_iter.append([])
        if per_iter and rec.name == name:
            per_iter[-1].append(rec.total_floats)
    return per_iter


def rkhs_paper_data(n, *, noise=0.05, n_clients=4, seed=0):
    """The RKHS paper's synthetic set: uniform 2-D signal, a sine boundary,
    clients on overlapping vertical strips, Gaussian noise after labelling.

    Returns
    -------
    X, y, partitions
    """
    rng = np.random.RandomState(seed)
    X = rng.uniform(0, 1, (n, 2))
    y = (X[:, 1] > 0.5 + 0.25 * np.sin(2 * np.pi * X[:, 0])).astype(int)
    width = 2.0 / (n_clients + 1)
    lo = np.arange(n_clients) * width / 2
    inside = (X[:, :1] >= lo) & (X[:, :1] <= lo + width)
    partitions = np.array([rng.choice(np.flatnonzero(row)) for row in inside])
    return X + noise * rng.standard_normal(X.shape), y, partitions


@client_step("testing.statistics", sum_only=True)
def statistics(client, state, message):
    """Upload a column sum (array), a row count (int) and a sum of squares
    (float): a structure a sum-only round adds up."""
    X = np.asarray(client.X, dtype=np.float64)
    return state, (X.sum(axis=0), {"n": int(X.shape[0]), "ss": float((X**2).sum())})


@client_step("testing.first_rows")
def first_rows(client, state, message):
    """Upload the client's first ``message`` rows as they are."""
    return state, client.X[: int(message)]


class InProcessGrid:
    """A grid that hands each message to the real ClientApp in this
    process (no Ray): for the server's checks and failure paths. Replies
    of the nodes in ``silent`` after their ``open`` never come back; the
    nodes in ``vanish`` also leave the grid's nodes then (a SuperNode that
    died mid-fit); the nodes in ``flower_error`` get Flower's error reply
    for an unavailable node instead."""

    def __init__(self, app, data, silent=(), vanish=(), flower_error=()):
        from flwr.app import Context, RecordDict

        self.app = app
        self.silent = set(silent) | set(vanish)
        self.vanish = set(vanish)
        self.flower_error = set(flower_error)
        self.gone = set()
        self.replies = {}
        self.contexts = {
            node: Context(
                run_id=1,
                node_id=node,
                node_config={},
                state=RecordDict(),
                run_config={},
            )
            for node in data
        }

    def get_node_ids(self):
        return [n for n in self.contexts if n not in self.gone]

    def push_messages(self, messages):
        from flwr.app import Error, Message
        from flwr.common.constant import SUPERLINK_NODE_ID

        from .flower._records import from_records

        ids = []
        for message in messages:
            message_id = uuid.uuid4().hex
            message.metadata.__dict__["_message_id"] = message_id
            ids.append(message_id)
            node = message.metadata.dst_node_id
            step = from_records(message.content)["op"] == "step"
            if step and node in self.flower_error:
                # As the SuperLink makes it: from its own node id.
                error = Error(code=5, reason="node unavailable")
                reply = Message(error, reply_to=message)
                reply.metadata.__dict__["_src_node_id"] = SUPERLINK_NODE_ID
                self.replies[message_id] = reply
                continue
            if node in self.gone:
                continue
            reply = self.app(message, self.contexts[node])
            if step and node in self.vanish:
                self.gone.add(node)
            if not (step and node in self.silent):
                self.replies[message_id] = reply
        return ids

    def pull_messages(self, message_ids):
        return [self.replies.pop(m) for m in message_ids if m in self.replies]

    def send_and_receive(self, messages, *, timeout=None):
        return self.pull_messages(self.push_messages(messages))

    def node_config(self, node, **settings):
        """Set entries of a node's config (``--node-config``)."""
        self.contexts[node].node_config.update(settings)


def kernel_kmeans_cost(K, labels):
    """The kernel k-means objective of ``labels`` in the kernel matrix K:
    Σ_c (Σ_{i∈c} K_ii − Σ_{i,j∈c} K_ij / n_c), the squared distances of the
    rows' features to their clusters' means."""
    cost = 0.0
    for c in np.unique(labels):
        m = labels == c
        cost += K.diagonal()[m].sum() - K[np.ix_(m, m)].sum() / m.sum()
    return float(cost)


def exact_kernel_kmeans(K, n_clusters, *, n_init=10, max_iter=100, seed=0):
    """Exact kernel k-means, the centralized reference on small data: Lloyd
    in the kernel matrix K (distances to cluster means in the feature space
    from K alone), from ``n_init`` k-means++ seedings in that space; the
    labels of least cost (:func:`kernel_kmeans_cost`) and the cost."""
    rng = np.random.default_rng(seed)
    n, k = K.shape[0], n_clusters
    diag = K.diagonal().copy()
    best_cost, best = np.inf, None
    for _ in range(n_init):
        # k-means++ on feature-space distances ‖φ_i − φ_j‖² from K.
        centers = [int(rng.integers(n))]
        d2 = np.maximum(diag - 2 * K[:, centers[0]] + diag[centers[0]], 0)
        for _ in range(1, k):
            p = d2 / d2.sum() if d2.sum() > 0 else np.full(n, 1 / n)
            c = int(rng.choice(n, p=p))
            centers.append(c)
            d2 = np.minimum(d2, np.maximum(diag - 2 * K[:, c] + diag[c], 0))
        dist = diag[:, None] - 2 * K[:, centers] + diag[centers][None, :]
        labels = dist.argmin(axis=1)
        for _ in range(max_iter):
            dist = np.full((n, k), np.inf)
            for c in range(k):
                m = labels == c
                if m.any():
                    inner = K[np.ix_(m, m)].sum() / m.sum() ** 2
                    dist[:, c] = diag - 2 * K[:, m].sum(axis=1) / m.sum() + inner
            new = dist.argmin(axis=1)
            if np.array_equal(new, labels):
                break
            labels = new
        cost = kernel_kmeans_cost(K, labels)
        if cost < best_cost:
            best_cost, best = cost, labels
    return best, best_cost
