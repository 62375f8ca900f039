"""The parameters every federated estimator shares, declared once.

``on_client_error``, ``n_jobs``, ``verbose``, ``raw_rows``,
``secure_aggregation`` and ``privacy`` mean the same in every estimator:
their constraints and the first paragraph of their documentation live
here. An estimator takes the constraints with :func:`shared_constraints`
and documents each such parameter by its header line alone, followed by
what is particular to it (which rounds are masked, what "refuse" changes);
:func:`shared_parameter_docs` puts the common paragraph under the header.
"""

import re
import textwrap
from numbers import Integral

from .._sklearn_compat import StrOptions
from ..privacy import DifferentialPrivacy

__all__ = ["SHARED_PARAMETERS", "shared_constraints", "shared_parameter_docs"]

_CONSTRAINTS = {
    "on_client_error": [StrOptions({"raise", "drop"})],
    "n_jobs": [Integral, None],
    "verbose": ["verbose"],
    "raw_rows": [StrOptions({"allow", "refuse"})],
    "secure_aggregation": ["boolean"],
    "privacy": [DifferentialPrivacy, None],
}

_DOCS = {
    "on_client_error": """\
What the fit does when a client's step raises. ``"raise"``: a
:class:`~skfed.ClientStepError` (a :class:`~skfed.ClientValueError` for a
``ValueError``) naming the client and the round. ``"drop"``: the client is
left out of the model and listed with the reason in ``failed_clients_``;
a client that fails after it has answered a round makes the server run
the protocol again without it, so that nothing it sent shapes the model
(the ledger counts both runs), also when it fails in a round masked by
``secure_aggregation`` (its masks are rebuilt from its neighbours'
shares). When every client fails the fit raises a
:class:`~skfed.ClientStepError` saying so.""",
    "n_jobs": """\
Number of clients run in parallel (joblib). ``None`` means 1 unless in a
:func:`joblib.parallel_config` context. With an int ``random_state`` the
model does not depend on it.""",
    "verbose": """\
Print one line per round when positive.""",
    "raw_rows": """\
Whether rows of X may leave a client as they are, or inside uploads from
which the server could solve for them. With ``"refuse"``, a fit whose
rounds would send such uploads raises ``ValueError`` before the first
round, naming the rounds and what to use instead, and each client checks
every upload it makes, raising rather than sending a statistic of too few
distinct rows. With ``"allow"`` the rows sent are counted in
``communication_``. See the privacy page of the documentation.""",
    "secure_aggregation": """\
Whether the clients mask the uploads of the rounds whose server step
needs only their sum (``"sum_only"`` in ``communication_``) with pairwise
masks that cancel in the sum, so that the server learns the sum and
nothing of any one client's upload. Adds a key exchange (4 floats up per
client, 4 per client down to each) and, around each masked round, a round
key and self-mask seed per client, Shamir-shared among its k neighbours,
and the unmasking (6 + 10 k floats up per client), and sends each summed
number as two 64-bit words (its fixed point to 2^-64: the sums, and the
model, are the unmasked ones to rounding; one word, to 2^-32, for a
noised number under ``privacy``). A client that drops out of a
masked round has its masks rebuilt from more than half of the shares it
made (round ``"secure aggregation unmasking"``); with fewer the fit fails
before the round's sum is released. A fit with no such round ignores it,
with a warning. Under ``privacy`` each client adds a share of a masked
release's noise (distributed noise), so that the sum
carries the central mechanism's noise rather than √M times it; the
guarantee then assumes that at least ``privacy.honest_clients`` clients of
each sum keep their shares from the server, and a sum of fewer uploads is
never unmasked.""",
    "privacy": """\
Sample-level (ε, δ)-differential privacy for the whole fit, for rows
replaced one at a time with the clients' sizes public (see the privacy
page of the documentation). Every upload computed from the rows is noised
on its client (with ``secure_aggregation``, a masked one with its share of
the sum's noise), with noise drawn from fresh operating-system entropy,
never from ``random_state``: a private fit is not reproducible. What was
spent is in ``privacy_spent_``. None: no noise.""",
}

#: The names of the shared parameters.
SHARED_PARAMETERS = tuple(_CONSTRAINTS)


def shared_constraints(*names):
    """The ``_parameter_constraints`` entries of the shared parameters
    ``names`` (all of them by default), to merge into an estimator's."""
    names = names or SHARED_PARAMETERS
    return {name: list(_CONSTRAINTS[name]) for name in names}


def shared_parameter_docs(*names):
    """Class decorator: under the header line of each shared parameter in
    ``names`` (all of them by default) that the class docstring documents,
    put that parameter's common paragraph, before what the estimator says
    of it."""
    names = names or SHARED_PARAMETERS

    def decorate(cls):
        doc = cls.__doc__
        for name in names:
            header = re.search(rf"^( *){name} : .*$", doc, flags=re.MULTILINE)
            if header is None:
                raise ValueError(
                    f"{cls.__name__}'s docstring does not document {name!r}."
                )
            indent = header.group(1) + "    "
            paragraph = textwrap.indent(_DOCS[name], indent)
            rest = doc[header.end() :]
            # What the estimator adds follows as a paragraph of its own.
            if (
                rest.startswith("\n")
                and rest[1:].strip()
                and not rest.startswith("\n\n")
            ):
                following = rest.split("\n", 2)[1]
                if following.startswith(indent):
                    paragraph += "\n"
            doc = doc[: header.end()] + "\n" + paragraph + rest
        cls.__doc__ = doc
        return cls

    return decorate
