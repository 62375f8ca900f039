"""Run the examples in the public docstrings."""

import doctest
import importlib
import pkgutil

import pytest

import skfed

MODULES = sorted(
    m.name
    for m in pkgutil.walk_packages(skfed.__path__, "skfed.")
    if not m.name.endswith("__main__")
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(
        module, optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS
    )
    assert result.failed == 0
