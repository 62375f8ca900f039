"""The privacy package's errors and warnings."""

__all__ = ["PrivacyBudgetError", "PrivacyLeakWarning"]


class PrivacyLeakWarning(UserWarning):
    """A differentially private fit read something from the private data
    that its guarantee does not cover (e.g. data bounds taken from X)."""

    # Named, pickled and printed where users import it from.
    __module__ = "skfed.privacy"


class PrivacyBudgetError(ValueError):
    """The requested privacy budget cannot cover the fit's releases."""

    # Named, pickled and printed where users import it from.
    __module__ = "skfed.privacy"
