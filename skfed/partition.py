"""Client assignments used in federated-learning papers.

Every helper returns an integer array of shape ``(n_samples,)`` giving each
sample's client id in ``0 .. n_clients - 1``, ready to pass as ``partitions``
to any skfed estimator. Every sample is assigned to exactly one client and no
client is left empty. Each helper is seeded by ``random_state``.

=========================  =================================================
helper                     used by
=========================  =================================================
:func:`iid`                the IID baseline of most FL papers
:func:`label_dirichlet`    label skew, Hsu, Qi & Brown (2019); Yurochkin et
                           al. (2019); NIID-Bench (Li et al., 2022)
:func:`power_law`          client sizes ∝ rank^(-exponent): disKPCA (Balcan
                           et al., 2016, exponent 2); LEAF-style size skew
:func:`labels_per_client`  at most k' labels/clusters per client: k-FED
                           (Dennis, Li & Smith, 2021), its Table 1 split
:func:`shards`             sort by label, deal shards: FedAvg's pathological
                           non-IID split (McMahan et al., 2017)
=========================  =================================================
"""

import numbers

import numpy as np
from sklearn.utils import check_random_state

from ._sklearn_compat import Interval, validate_params

__all__ = ["iid", "label_dirichlet", "labels_per_client", "power_law", "shards"]


def _n_samples(n_samples_or_X):
    if isinstance(n_samples_or_X, numbers.Integral):
        return int(n_samples_or_X)
    return (
        len(n_samples_or_X)
        if not hasattr(n_samples_or_X, "shape")
        else (n_samples_or_X.shape[0])
    )


def _check_n_clients(n_clients, n_samples):
    if n_clients > n_samples:
        raise ValueError(
            f"n_clients={n_clients} is more than the {n_samples} samples; "
            "every client needs at least one sample, so use at most "
            f"{n_samples} clients."
        )


def _labels_1d(y):
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"y must be 1-dimensional, got shape {y.shape}.")
    if y.shape[0] == 0:
        raise ValueError("y is empty; there is nothing to partition.")
    classes, codes = np.unique(y, return_inverse=True)
    return classes, codes


def _sizes_to_ids(sizes, order):
    """Give the first sizes[0] samples of ``order`` to client 0, and so on."""
    ids = np.empty(len(order), dtype=np.intp)
    ids[order] = np.repeat(np.arange(len(sizes)), sizes)
    return ids


@validate_params(
    {
        "n_samples": [Interval(numbers.Integral, 1, None, closed="left"), "array-like"],
        "n_clients": [Interval(numbers.Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    },
    prefer_skip_nested_validation=True,
)
def iid(n_samples, n_clients, *, random_state=None):
    """Split samples uniformly at random into clients of equal size.

    Parameters
    ----------
    n_samples : int or array-like
        Number of samples, or the data itself (its length is used).
    n_clients : int
        Number of clients; sizes differ by at most one.
    random_state : int, RandomState instance or None, default=None
        Seed of the shuffle.

    Returns
    -------
    partitions : ndarray of shape (n_samples,)
        Client id of each sample.

    Examples
    --------
    >>> from skfed.partition import iid
    >>> import numpy as np
    >>> np.bincount(iid(10, 3, random_state=0))
    array([4, 3, 3])
    """
    n = _n_samples(n_samples)
    _check_n_clients(n_clients, n)
    rng = check_random_state(random_state)
    sizes = np.full(n_clients, n // n_clients)
    sizes[: n % n_clients] += 1
    return _sizes_to_ids(sizes, rng.permutation(n))


@validate_params(
    {
        "n_samples": [Interval(numbers.Integral, 1, None, closed="left"), "array-like"],
        "n_clients": [Interval(numbers.Integral, 1, None, closed="left")],
        "exponent": [Interval(numbers.Real, 0, None, closed="left")],
        "min_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    },
    prefer_skip_nested_validation=True,
)
def power_law(n_samples, n_clients, *, exponent=2.0, min_size=1, random_state=None):
    """Split samples into clients whose sizes follow a power law.

    Client ``j`` (``j = 1 .. n_clients``) receives a share proportional to
    ``j ** -exponent``, after every client has received ``min_size`` samples.
    The disKPCA paper (Balcan et al., KDD 2016) uses ``exponent=2``;
    ``exponent=0`` gives equal sizes. Which samples go where is random.

    Parameters
    ----------
    n_samples : int or array-like
        Number of samples, or the data itself (its length is used).
    n_clients : int
        Number of clients.
    exponent : float, default=2.0
        Power-law exponent of the client sizes.
    min_size : int, default=1
        Samples every client receives before the power-law shares.
    random_state : int, RandomState instance or None, default=None
        Seed of the shuffle.

    Returns
    -------
    partitions : ndarray of shape (n_samples,)
        Client id of each sample; client 0 is the largest.

    Examples
    --------
    >>> from skfed.partition import power_law
    >>> import numpy as np
    >>> np.bincount(power_law(100, 4, random_state=0))
    array([68, 18,  9,  5])
    """
    n = _n_samples(n_samples)
    if n_clients * min_size > n:
        raise ValueError(
            f"{n_clients} clients with min_size={min_size} need at least "
            f"{n_clients * min_size} samples, but there are {n}; lower "
            "n_clients or min_size."
        )
    rng = check_random_state(random_state)
    shares = np.arange(1, n_clients + 1, dtype=float) ** -exponent
    sizes = min_size + _largest_remainder(
        shares / shares.sum(), n - n_clients * min_size
    )
    return _sizes_to_ids(sizes, rng.permutation(n))


def _largest_remainder(proportions, total):
    """Round ``proportions * total`` to integers summing to ``total``."""
    raw = proportions * total
    sizes = np.floor(raw).astype(np.intp)
    short = total - sizes.sum()
    # Stable tie-break by position keeps the result deterministic.
    sizes[np.argsort(-(raw - sizes), kind="stable")[:short]] += 1
    return sizes


@validate_params(
    {
        "y": ["array-like"],
        "n_clients": [Interval(numbers.Integral, 1, None, closed="left")],
        "alpha": [Interval(numbers.Real, 0, None, closed="neither")],
        "min_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    },
    prefer_skip_nested_validation=True,
)
def label_dirichlet(y, n_clients, *, alpha=0.5, min_size=1, random_state=None):
    """Label skew: each label's samples spread over clients by Dirichlet(α).

    For every label, proportions ``p ~ Dirichlet(alpha * 1)`` over the clients
    decide how that label's samples are divided (Hsu, Qi & Brown, 2019;
    Yurochkin et al., 2019; NIID-Bench, Li et al., 2022). Small ``alpha``
    concentrates each label on few clients; large ``alpha`` approaches IID.
    Draws are repeated until every client holds at least ``min_size``
    samples, as in NIID-Bench.

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        Labels (any values).
    n_clients : int
        Number of clients.
    alpha : float, default=0.5
        Concentration of the Dirichlet distribution.
    min_size : int, default=1
        Smallest client size accepted.
    random_state : int, RandomState instance or None, default=None
        Seed of the draws.

    Returns
    -------
    partitions : ndarray of shape (n_samples,)
        Client id of each sample.

    Raises
    ------
    ValueError
        If ``n_clients * min_size`` exceeds the number of samples, or if no
        draw gives every client ``min_size`` samples in 1000 attempts (raise
        ``alpha`` or lower ``n_clients``).

    Examples
    --------
    >>> from skfed.partition import label_dirichlet
    >>> y = [0] * 50 + [1] * 50
    >>> ids = label_dirichlet(y, 4, alpha=0.1, random_state=0)
    >>> ids.shape
    (100,)
    """
    classes, codes = _labels_1d(y)
    n = codes.shape[0]
    if n_clients * min_size > n:
        raise ValueError(
            f"{n_clients} clients with min_size={min_size} need at least "
            f"{n_clients * min_size} samples, but there are {n}."
        )
    rng = check_random_state(random_state)
    members = [np.flatnonzero(codes == c) for c in range(len(classes))]
    for _ in range(1000):
        ids = np.empty(n, dtype=np.intp)
        for idx in members:
            idx = rng.permutation(idx)
            p = rng.dirichlet(np.full(n_clients, alpha))
            ids[idx] = np.repeat(np.arange(n_clients), _largest_remainder(p, len(idx)))
        if np.bincount(ids, minlength=n_clients).min() >= min_size:
            return ids
    raise ValueError(
        f"No Dirichlet(alpha={alpha}) draw gave all {n_clients} clients at least "
        f"{min_size} samples in 1000 attempts; raise alpha, lower n_clients or "
        "lower min_size."
    )


@validate_params(
    {
        "y": ["array-like"],
        "labels_per_client": [Interval(numbers.Integral, 1, None, closed="left")],
        "clients_per_group": [Interval(numbers.Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    },
    prefer_skip_nested_validation=True,
)
def labels_per_client(y, labels_per_client, *, clients_per_group=5, random_state=None):
    """At most k' labels (or clusters) per client: k-FED's structured split.

    The labels are shuffled and cut into groups of ``labels_per_client``
    (k'); the samples of each group are shuffled and split evenly over
    ``clients_per_group`` (m0) clients, so every client sees only the k'
    labels of its group. With k labels this makes ``ceil(k / k') * m0``
    clients. This is the split of the k-FED paper's Table 1 (Dennis, Li &
    Smith, ICML 2021: k' = √k, m0 = 5); pass cluster assignments as ``y`` to
    split by component.

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        Labels or cluster ids.
    labels_per_client : int
        k', the number of labels each client sees (the last group may have
        fewer).
    clients_per_group : int, default=5
        m0, the number of clients sharing each group of labels.
    random_state : int, RandomState instance or None, default=None
        Seed of the grouping and of the split.

    Returns
    -------
    partitions : ndarray of shape (n_samples,)
        Client id of each sample.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.partition import labels_per_client
    >>> y = np.repeat(np.arange(4), 10)
    >>> ids = labels_per_client(y, 2, clients_per_group=2, random_state=0)
    >>> [len(np.unique(y[ids == c])) for c in range(4)]
    [2, 2, 2, 2]
    """
    classes, codes = _labels_1d(y)
    rng = check_random_state(random_state)
    label_order = rng.permutation(len(classes))
    n_groups = -(-len(classes) // labels_per_client)
    ids = np.empty(codes.shape[0], dtype=np.intp)
    for g in range(n_groups):
        group = label_order[g * labels_per_client : (g + 1) * labels_per_client]
        idx = rng.permutation(np.flatnonzero(np.isin(codes, group)))
        if len(idx) < clients_per_group:
            raise ValueError(
                f"A group of {len(group)} label(s) has only {len(idx)} samples, "
                f"fewer than clients_per_group={clients_per_group}; lower "
                "clients_per_group or raise labels_per_client."
            )
        sizes = np.full(clients_per_group, len(idx) // clients_per_group)
        sizes[: len(idx) % clients_per_group] += 1
        ids[idx] = g * clients_per_group + np.repeat(
            np.arange(clients_per_group), sizes
        )
    return ids


@validate_params(
    {
        "y": ["array-like"],
        "n_clients": [Interval(numbers.Integral, 1, None, closed="left")],
        "shards_per_client": [Interval(numbers.Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    },
    prefer_skip_nested_validation=True,
)
def shards(y, n_clients, *, shards_per_client=2, random_state=None):
    """FedAvg's pathological non-IID split: sorted by label, dealt in shards.

    Samples are sorted by label (ties in random order), cut into
    ``n_clients * shards_per_client`` contiguous shards of (almost) equal
    size, and every client receives ``shards_per_client`` shards at random
    (McMahan et al., AISTATS 2017: 100 clients, 2 shards of 300 MNIST digits
    each). A client therefore sees about ``shards_per_client`` labels.

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        Labels.
    n_clients : int
        Number of clients.
    shards_per_client : int, default=2
        Shards dealt to each client.
    random_state : int, RandomState instance or None, default=None
        Seed of the tie order and of the deal.

    Returns
    -------
    partitions : ndarray of shape (n_samples,)
        Client id of each sample.

    Examples
    --------
    >>> import numpy as np
    >>> from skfed.partition import shards
    >>> y = np.repeat(np.arange(5), 20)
    >>> np.bincount(shards(y, 5, random_state=0))
    array([20, 20, 20, 20, 20])
    """
    _, codes = _labels_1d(y)
    n = codes.shape[0]
    n_shards = n_clients * shards_per_client
    if n_shards > n:
        raise ValueError(
            f"{n_clients} clients x {shards_per_client} shards need at least "
            f"{n_shards} samples, but there are {n}; lower n_clients or "
            "shards_per_client."
        )
    rng = check_random_state(random_state)
    order = np.lexsort((rng.permutation(n), codes))
    shard_sizes = np.full(n_shards, n // n_shards)
    shard_sizes[: n % n_shards] += 1
    shard_of_sample = _sizes_to_ids(shard_sizes, order)
    owner = np.repeat(np.arange(n_clients), shards_per_client)[
        rng.permutation(n_shards)
    ]
    return owner[shard_of_sample]
