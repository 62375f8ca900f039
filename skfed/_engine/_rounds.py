"""Rounds declared once, by the protocol that runs them.

A protocol module names each of its rounds at its top as a :class:`Round`
constant: the name the ledger shows, what the uploads reveal (a
:class:`~skfed._engine._ledger.Disclosure`), and, for a noised release, the
L2 sensitivity its noise is calibrated to. The federation applies the
policy from that declaration alone: the raw-row refusal, the differential
privacy safety net and accounting, secure aggregation's masking, and the
ledger (:meth:`~skfed._engine._federation.Federation.run_round`). An
estimator lists the rounds a fit with its parameters runs
(``FederatedMixin._rounds``), so that what it refuses is decided before the
first round, from the same constants.
"""

from collections.abc import Callable
from typing import NamedTuple

from ._ledger import NO_UPLOAD, PER_CLIENT, RAW_ROWS, SUM_ONLY, Disclosure


class Round(NamedTuple):
    """One round of a protocol, as declared at the protocol's top.

    Parameters
    ----------
    name : str
        The round's name in the ledger, in errors and in ``verbose`` output.
    disclosure : Disclosure
        What the uploads reveal to the server.
    sensitivity : callable, default=None
        For a noised release: ``sensitivity(*bounds) -> float``, the L2
        distance one client's upload can move when one of its rows is
        replaced by any other row within the clip bounds (replace-one
        adjacency, client sizes public); for a round of several releases,
        a tuple of one such distance per release. :meth:`noise_std`
        calibrates the Gaussian noise to it.
    determines_rows : bool, default=False
        The uploads are not rows, but a server that knows the protocol
        solves them back to rows (kernel k-means' embedded coreset points):
        ``raw_rows="refuse"`` refuses the round as it refuses raw rows.
    """

    name: str
    disclosure: Disclosure
    sensitivity: Callable = None
    determines_rows: bool = False

    @property
    def kind(self):
        return self.disclosure.kind

    @property
    def uploads(self):
        """Whether the clients answer with anything."""
        return not self.disclosure.empty

    @property
    def sends_rows(self):
        """Whether the round is one ``raw_rows="refuse"`` forbids."""
        return self.kind == RAW_ROWS or self.determines_rows

    @property
    def masked_by_secure_aggregation(self):
        """Whether ``secure_aggregation`` masks the uploads."""
        return self.kind == SUM_ONLY and self.uploads

    @property
    def private(self):
        """Whether the uploads may leave a client under differential
        privacy: noised, data-free, or nothing at all."""
        d = self.disclosure
        return d.empty or d.data_free or d.noised > 0

    def noised(self, releases):
        """This round, holding ``releases`` noised releases per client (a
        count the fit decides, e.g. the iterations of a local solve)."""
        return self._replace(disclosure=self.disclosure._replace(noised=releases))

    def noise_std(self, accountant, *bounds):
        """The Gaussian noise's standard deviation for this round's
        release: the fit's noise multiplier times the declared sensitivity
        at ``bounds`` (a tuple, one per release, for a round of several).
        Under distributed noise, a masked round's clients add it in shares
        (a ``DistributedNoise``, see ``skfed.privacy._distributed``)."""
        if self.sensitivity is None:
            raise TypeError(f"Round {self.name!r} declares no sensitivity.")
        sensitivity = self.sensitivity(*bounds)
        shared = self.masked_by_secure_aggregation
        if isinstance(sensitivity, tuple):
            return tuple(accountant.noise_std(s, shared) for s in sensitivity)
        return accountant.noise_std(sensitivity, shared)


def download(name):
    """A round in which the server only sends (the clients keep it)."""
    return Round(name, NO_UPLOAD)


def per_client(name, **disclosure):
    """A round whose uploads the server sees one by one."""
    return Round(name, Disclosure(PER_CLIENT, **disclosure))


def sum_only(name, *, sensitivity=None, **disclosure):
    """A round whose uploads the server only ever sums (maskable)."""
    return Round(name, Disclosure(SUM_ONLY, **disclosure), sensitivity=sensitivity)


def raw_rows(name, **disclosure):
    """A round whose uploads carry rows of X or y as they are."""
    return Round(name, Disclosure(RAW_ROWS, **disclosure))


def refused_rounds(rounds):
    """The names of ``rounds`` that ``raw_rows="refuse"`` forbids, in order."""
    return _names(r for r in rounds if r.sends_rows)


def unnoised_rounds(rounds):
    """The names of ``rounds`` that differential privacy cannot cover."""
    return _names(r for r in rounds if not r.private)


def masked_rounds(rounds):
    """The names of ``rounds`` that ``secure_aggregation`` masks."""
    return _names(r for r in rounds if r.masked_by_secure_aggregation)


def releases(rounds):
    """Noised releases per client over ``rounds`` (a repeated round is
    listed once per time it runs)."""
    return sum(r.disclosure.noised for r in rounds)


def _names(rounds):
    return tuple(dict.fromkeys(r.name for r in rounds))
