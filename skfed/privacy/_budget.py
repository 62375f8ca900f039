"""A privacy budget shared by several private fits on the same rows.

Each private fit is (epsilon, delta)-differentially private for each row on
its own, and its noise is fresh: two fits on the same rows are two
releases, and their guarantees compose. A search over a private estimator
(five values of epsilon, five folds, then the refit) releases every row
up to 26 times. :class:`PrivacyBudget` adds them up: every private fit
charges the budgets that are open when it starts, before its first round,
and a fit that would take a budget past its cap raises
:class:`~skfed.privacy.PrivacyBudgetError` before it sends anything.

Composition is sequential (basic composition): k fits at (eps_i, delta_i)
are together (sum eps_i, sum delta_i)-differentially private, whatever the
fits are and whichever rows they see. It is the safe bound for fits on
overlapping rows (folds of one data set share most of their rows); it is
loose for many fits, which a tighter accountant over the fits' Gaussian
releases would improve on.

Where a budget is seen: in its own process, by every thread (joblib's
threading backend, skfed's own threads). A fit in another process (a
search with ``n_jobs > 1`` runs its fits in loky worker processes) cannot
charge it; an estimator pickled while a budget is open carries a handle to
it, and a private fit of that estimator in another process refuses, as does
a private fit in a process forked while a budget was open, instead of
running uncharged.
"""

import math
import os
import threading
import uuid
import warnings
import weakref
from typing import NamedTuple

from ._errors import PrivacyBudgetError

__all__ = ["BudgetEntry", "PrivacyBudget"]

# The budgets open in this process, innermost last: a fit charges them all.
_OPEN = []
_LOCK = threading.RLock()
# Every budget of this process by id, so that one unpickled where it lives
# is the budget itself, not a copy no fit would charge.
_LIVE = weakref.WeakValueDictionary()
# Relative slack of the cap's comparison: ten fits at epsilon 0.1 reach
# 1.0 up to rounding and must fit a cap of 1.
_RTOL = 1e-9


class BudgetEntry(NamedTuple):
    """One charge of a :class:`PrivacyBudget`.

    Attributes
    ----------
    label : str
        What was charged (the estimator and its requested budget).
    epsilon, delta : float
        The charge: the fit's requested (epsilon, delta), raised to what it
        spent if a rerun spent more.
    """

    label: str
    epsilon: float
    delta: float


class PrivacyBudget:
    """An (epsilon, delta) budget shared by the private fits on the same rows.

    Open it with ``with``: every private fit started in this process while
    it is open (a search's fits, a pipeline's, ``partial_fit``) charges it
    its requested ``(epsilon, delta)`` before its first round, and a fit
    that would take the total past the cap raises
    :class:`~skfed.privacy.PrivacyBudgetError` before sending anything.
    Fits compose sequentially: the total is the sum of the charges, which
    holds for any fits on any rows. Open budgets nest: a fit charges every
    open budget, or none of them.

    The budget lives in the process that made it. An estimator pickled
    while it is open (as a search with ``n_jobs > 1`` sends its fits to
    worker processes) carries a handle to it, and a private fit of that
    estimator in another process raises ``PrivacyBudgetError`` instead of
    running uncharged: run the search with ``n_jobs=1`` or joblib's
    threading backend. Copies of the budget in this process (``copy``,
    ``clone`` of a parameter holding it, pickling) are the budget itself.

    Parameters
    ----------
    epsilon : float, default=inf
        The cap on the fits' total epsilon; ``inf`` only records the spend.
    delta : float, default=1.0
        The cap on the fits' total delta; 1.0 only records it.

    Attributes
    ----------
    entries : list of BudgetEntry
        One entry per charge, in order.

    See Also
    --------
    DifferentialPrivacy : The settings of one private fit.

    Examples
    --------
    >>> from sklearn.datasets import make_blobs
    >>> from skfed import KFed
    >>> from skfed.privacy import DifferentialPrivacy, PrivacyBudget
    >>> X, _ = make_blobs(600, centers=3, random_state=0)
    >>> dp = DifferentialPrivacy(epsilon=1.0, delta=1e-6, bounds=(-15, 15))
    >>> with PrivacyBudget(epsilon=2.5, delta=1e-5) as budget:
    ...     for _ in range(2):
    ...         _ = KFed(3, privacy=dp).fit(X, partitions=3)
    >>> budget.spent()
    (2.0, 2e-06)
    >>> len(budget.entries)
    2
    """

    def __init__(self, epsilon=math.inf, delta=1.0):
        epsilon, delta = float(epsilon), float(delta)
        if not epsilon > 0:
            raise ValueError(
                f"PrivacyBudget's epsilon must be positive (inf for no cap); "
                f"got {epsilon!r}."
            )
        if not 0 <= delta <= 1:
            raise ValueError(
                f"PrivacyBudget's delta must be in [0, 1] (1 for no cap); got "
                f"{delta!r}."
            )
        self.epsilon = epsilon
        self.delta = delta
        self.entries = []
        self._id = uuid.uuid4().hex
        self._pid = os.getpid()
        self._lock = threading.RLock()
        _LIVE[self._id] = self

    # -- reporting -------------------------------------------------------------

    def spent(self):
        """The total ``(epsilon, delta)`` of every charge (sequential
        composition)."""
        with self._lock:
            return _total(self.entries)

    def remaining(self):
        """``(epsilon, delta)`` left under the cap."""
        epsilon, delta = self.spent()
        return max(self.epsilon - epsilon, 0.0), max(self.delta - delta, 0.0)

    def __repr__(self):
        epsilon, delta = self.spent()
        return (
            f"PrivacyBudget(epsilon={self.epsilon:g}, delta={self.delta:g}; "
            f"spent epsilon={epsilon:g}, delta={delta:g} in "
            f"{len(self.entries)} charge(s))"
        )

    # -- charging --------------------------------------------------------------

    def charge(self, epsilon, delta, label=""):
        """Charge one (epsilon, delta)-private release, or refuse it.

        Fits charge themselves; call this for another release of the same
        rows (a private statistic computed elsewhere) so that the total
        covers it.

        Parameters
        ----------
        epsilon, delta : float
            The release's guarantee.
        label : str, default=""
            Names the release in ``entries`` and in errors.

        Returns
        -------
        entry : BudgetEntry

        Raises
        ------
        PrivacyBudgetError
            If the charge would take the total past the cap (nothing is
            charged then), or if this budget lives in another process.
        """
        _charge_all([self], float(epsilon), float(delta), str(label))
        return self.entries[-1]

    def _check_process(self):
        if os.getpid() != self._pid:
            raise PrivacyBudgetError(
                f"This process ({os.getpid()}) holds a copy of a PrivacyBudget "
                f"that lives in process {self._pid} (it was pickled into a "
                "worker process, or the process was forked while it was "
                "open): a private fit here would spend privacy that the "
                "budget never counts, so it is refused. Fit in the budget's "
                "process: a search with n_jobs=1, or with joblib's threading "
                'backend (joblib.parallel_config(backend="threading")).'
            )

    def _room(self, epsilon, delta):
        """The message refusing (epsilon, delta), or "" if it fits."""
        spent_epsilon, spent_delta = _total(self.entries)
        total_epsilon = spent_epsilon + epsilon
        total_delta = spent_delta + delta
        over_epsilon = total_epsilon > self.epsilon * (1 + _RTOL)
        over_delta = total_delta > self.delta * (1 + _RTOL)
        if not (over_epsilon or over_delta):
            return ""
        return (
            f"it would take {self!r} to epsilon={total_epsilon:g}, "
            f"delta={total_delta:g}, past its cap (epsilon={self.epsilon:g}, "
            f"delta={self.delta:g})"
        )

    # -- the with block --------------------------------------------------------

    def __enter__(self):
        self._check_process()
        with _LOCK:
            _OPEN.append(self)
        return self

    def __exit__(self, *exc_info):
        with _LOCK:
            # The innermost occurrence: a budget may be opened twice.
            for i in range(len(_OPEN) - 1, -1, -1):
                if _OPEN[i] is self:
                    del _OPEN[i]
                    break
        return False

    # -- copies ----------------------------------------------------------------

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        # clone() deep-copies parameters that are not estimators: a copy
        # would be an account that no fit charges.
        return self

    def __reduce__(self):
        return _restore, (self._id, self._pid, self.epsilon, self.delta)


def _restore(budget_id, pid, epsilon, delta):
    """Unpickle a budget: the live one in its own process, elsewhere a
    copy whose every charge refuses (see ``PrivacyBudget._check_process``)."""
    if pid == os.getpid():
        live = _LIVE.get(budget_id)
        if live is not None:
            return live
    copy = PrivacyBudget.__new__(PrivacyBudget)
    copy.epsilon, copy.delta, copy.entries = epsilon, delta, []
    copy._id, copy._pid, copy._lock = budget_id, pid, threading.RLock()
    return copy


def _total(entries):
    return (
        math.fsum(e.epsilon for e in entries),
        min(math.fsum(e.delta for e in entries), 1.0),
    )


def _charge_all(budgets, epsilon, delta, label):
    """Charge every budget, or none: refuse if one of them is full or
    lives in another process."""
    if not budgets:
        return []
    if not (epsilon >= 0 and 0 <= delta <= 1):
        raise ValueError(
            f"A charge is epsilon >= 0 and delta in [0, 1]; got ({epsilon!r}, "
            f"{delta!r})."
        )
    for budget in budgets:
        budget._check_process()
    # One lock at a time, in a fixed order: a fit charging two nested
    # budgets and another charging one of them cannot deadlock.
    locks = sorted({id(b._lock): b._lock for b in budgets}.items())
    for _, lock in locks:
        lock.acquire()
    try:
        for budget in budgets:
            reason = budget._room(epsilon, delta)
            if reason:
                raise PrivacyBudgetError(
                    f"{label or 'The release'} at epsilon={epsilon:g}, "
                    f"delta={delta:g} is refused before anything is sent: "
                    f"{reason}. Raise the budget, lower the fits' epsilon, "
                    "or run fewer fits (fewer candidates or folds)."
                )
        entry = BudgetEntry(label, epsilon, delta)
        for budget in budgets:
            budget.entries.append(entry)
    finally:
        for _, lock in reversed(locks):
            lock.release()
    return [(budget, entry) for budget in budgets]


def open_budgets():
    """The budgets open in this process, outermost first.

    Raises ``PrivacyBudgetError`` for a budget inherited from the process
    that forked this one.
    """
    with _LOCK:
        budgets = list(dict.fromkeys(_OPEN))
    for budget in budgets:
        budget._check_process()
    return budgets


# -- the estimators' side -------------------------------------------------------

# The attribute an estimator pickled while budgets were open carries them in.
_CARRIED = "_skfed_privacy_budgets"


def carry_open_budgets(estimator, state):
    """``state`` (an estimator's pickled ``__dict__``) with handles to the
    budgets open now, when the estimator fits privately: unpickled in
    another process, its private fits refuse instead of spending uncharged."""
    if getattr(estimator, "privacy", None) is None:
        return state
    with _LOCK:
        budgets = list(dict.fromkeys(_OPEN))
    carried = [*state.get(_CARRIED, ()), *budgets]
    if carried:
        state = dict(state)
        state[_CARRIED] = tuple(dict.fromkeys(carried))
    return state


def charge_fit(estimator, privacy):
    """Charge a private fit of ``estimator`` to the open budgets, before its
    first round.

    Returns
    -------
    charges : list of (PrivacyBudget, BudgetEntry)
        What :func:`settle_fit` corrects once the fit knows what it spent.
    """
    carried = getattr(estimator, _CARRIED, ())
    for budget in carried:
        # A handle to a budget of another process: this fit cannot charge it.
        budget._check_process()
    budgets = open_budgets()
    if not budgets:
        return []
    label = (
        f"{type(estimator).__name__} fit (epsilon={privacy.epsilon:g}, "
        f"delta={privacy.delta:g})"
    )
    return _charge_all(budgets, float(privacy.epsilon), float(privacy.delta), label)


def settle_fit(charges, spent):
    """Raise a fit's charges to what it spent, if it spent more than it
    asked (a rerun after a client failed late adds releases): the releases
    happened, so the budget counts them even past its cap, and warns."""
    if not charges or spent is None:
        return
    epsilon, delta = spent
    for budget, entry in charges:
        if epsilon <= entry.epsilon * (1 + _RTOL) and delta <= entry.delta:
            continue
        with budget._lock:
            i = next(j for j, e in enumerate(budget.entries) if e is entry)
            budget.entries[i] = entry._replace(
                epsilon=max(epsilon, entry.epsilon), delta=max(delta, entry.delta)
            )
        total = _total(budget.entries)
        if total[0] > budget.epsilon * (1 + _RTOL) or total[1] > budget.delta:
            warnings.warn(
                f"{entry.label} spent epsilon={epsilon:g}, delta={delta:g}, "
                f"more than it was charged; {budget!r} is now past its cap.",
                UserWarning,
                stacklevel=3,
            )
