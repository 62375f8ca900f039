"""What a client applies around every step it runs, from its own settings.

As Flower's mods wrap a ClientApp, these wrap a client step when
:meth:`skfed._engine._protocol.StepCall.start` calls it, on the client:

* the **raw-row refusal** (``raw_rows="refuse"``, the client's own setting):
  a step that can apply the refusal must be asked with it;
* **secure aggregation**: in a masked round (the round's reserved option
  :data:`~skfed.privacy._secure_aggregation.MASK_OPTION`) the client masks
  the step's upload before it leaves, adding its share of the noise of a
  release under distributed noise (:mod:`skfed.privacy._distributed`); a
  client whose own setting says it masks refuses to send a sum-only upload
  unmasked;
* **local noise**: on a private client, a statistic whose noise was to be
  shared in a masked sum gets the whole noise if it leaves unmasked.

The step itself knows of none of them. The cryptography and the refusal's
arithmetic are the privacy package's (:mod:`skfed.privacy`); this module
only decides which wrapper a call gets.
"""

import inspect
from functools import partial

from ..privacy._distributed import add_noise_locally
from ..privacy._mechanisms import noise_generator
from ..privacy._secure_aggregation import MASK_OPTION, mask_upload, refuse_unmasked

__all__ = ["call_wrapped"]


def call_wrapped(step, name, client, state, message, options):
    """Call the resolved client ``step`` registered as ``name`` under the
    mods the client's settings and the round's options call for: its
    ``(new_state, upload)``, or a generator step (see
    ``skfed._engine._protocol``)."""
    check_refusal_kept(step, options, client, name)
    if MASK_OPTION in options:
        # A sum-only round under secure aggregation.
        # The message carries the round's keys for the mask beside the
        # step's own message.
        options = dict(options)
        spec = options.pop(MASK_OPTION)
        message, setup = message
        started = step(client, state, message, **options)
        return with_upload(started, partial(_mask, client, spec, setup))
    if step.sum_only and masks(client):
        started = step(client, state, message, **options)
        return with_upload(started, partial(refuse_unmasked, step_name=name))
    if private(client):
        # A statistic whose noise the masking would share leaves unmasked
        # with the whole noise.
        started = step(client, state, message, **options)
        return with_upload(started, _noised_locally)
    return step(client, state, message, **options)


def _noised_locally(upload):
    return add_noise_locally(upload, noise_generator())


def _mask(client, spec, setup, upload):
    return mask_upload(client, upload, spec, setup)


def with_upload(started, transform):
    """The called step's ``(new_state, transform(upload))``, as a generator
    step so that shared work the step hands over still passes."""
    if inspect.isgenerator(started):
        new_state, upload = yield from started
    else:
        new_state, upload = started
    return new_state, transform(upload)


def private(client):
    """Whether the client's own configuration says its fit is private."""
    config = getattr(client, "config", None) or {}
    return bool(config.get("private", False))


def masks(client):
    """Whether the client's own configuration says it masks its sum-only
    uploads (set when the client was made, never by a round)."""
    config = getattr(client, "config", None) or {}
    return bool(config.get("secure_aggregation", False))


# A step's options that carry raw-row refusal: ``min_rows`` (a minimum of
# distinct rows behind each statistic; any positive value keeps it) and
# ``allow_raw_upload`` (k-FED's rows of a small client; False keeps it).
_REFUSAL_OPTIONS = {"min_rows": lambda v: bool(v), "allow_raw_upload": lambda v: not v}


def check_refusal_kept(step, options, client, name):
    """A client whose own configuration refuses raw rows refuses a call of
    a step that can apply the refusal but was asked not to (the server left
    out its minimum): the refusal is the client's setting, not a round's."""
    config = getattr(client, "config", None) or {}
    if config.get("raw_rows") != "refuse":
        return
    if config.get("private") and options.get("noise") is not None:
        # A release noised for differential privacy (the client's own
        # setting too) determines no row.
        return
    parameters = _keyword_parameters(step)
    for option, keeps in _REFUSAL_OPTIONS.items():
        if option in parameters and not keeps(options.get(option)):
            raise PermissionError(
                f"This client refuses to send raw rows (raw_rows='refuse' is "
                f"its own setting), and step {name!r} was asked without "
                f"{option!r}, which applies that refusal: refused. Fit with "
                "raw_rows='refuse'."
            )


def _keyword_parameters(step):
    try:
        return step.__refusal_parameters__
    except AttributeError:
        names = frozenset(inspect.signature(step).parameters)
        step.__refusal_parameters__ = names
        return names
