"""The pages quote the estimators' defaults as the code has them.

Wherever a page (the release notes included), the gallery or the README
says that ``name=value`` is a default ("``center=True`` (the default)",
"the default ``n_init=10``"), some estimator that has the parameter
``name`` must have ``value`` as its default, read from ``get_params()``.
"""

import ast
import inspect
import re
from pathlib import Path

import pytest

import skfed

ROOT = Path(__file__).resolve().parents[1]

_PAIR = r"``(?P<name>[a-z_]+)=(?P<value>[^`]+)``"
_QUOTED_DEFAULT = re.compile(
    rf"{_PAIR},?\s+(?:\(the defaults?\)|the default\b|(?:its|our) default\b"
    r"|is the default\b)"
    rf"|\b[Dd]efault:?\s+{_PAIR.replace('name', 'name2').replace('value', 'value2')}",
)


def _pages():
    pages = [ROOT / "README.md", *sorted((ROOT / "doc").rglob("*.rst"))]
    pages += sorted((ROOT / "doc" / "examples").glob("*.py"))
    return [
        p for p in pages if not {"_build", "generated", "auto_examples"} & set(p.parts)
    ]


def quoted_defaults(text):
    """``(name, value)`` for every default the text quotes (across line
    breaks)."""
    flat = re.sub(r"\s+", " ", text)
    found = []
    for match in _QUOTED_DEFAULT.finditer(flat):
        name = match.group("name") or match.group("name2")
        value = match.group("value") or match.group("value2")
        found.append((name, value))
    return found


def _defaults():
    """Parameter name -> the set of reprs of its defaults over the
    exported estimators."""
    defaults = {}
    for name in skfed.__all__:
        obj = getattr(skfed, name)
        if inspect.isclass(obj) and hasattr(obj, "get_params"):
            for param, value in obj().get_params(deep=False).items():
                defaults.setdefault(param, set()).add(repr(value))
    return defaults


def _same(value, reprs):
    try:
        value = repr(ast.literal_eval(value))
    except (ValueError, SyntaxError):
        pass
    return value in reprs


def test_quoted_defaults_are_found():
    # The scan must see the forms the pages use, or it checks nothing.
    text = (
        "``center=True`` (the default) keeps; with ``n_init=10``, the default,\n"
        "and the default ``solver='active-set'``; ``gamma=None`` is the default"
    )
    assert quoted_defaults(text) == [
        ("center", "True"),
        ("n_init", "10"),
        ("solver", "'active-set'"),
        ("gamma", "None"),
    ]
    assert _same('"auto"', {"'auto'"}) and not _same("1000", {"'auto'"})


def _cases():
    for page in _pages():
        for name, value in quoted_defaults(page.read_text(encoding="utf-8")):
            yield pytest.param(name, value, id=f"{page.relative_to(ROOT)}:{name}")


CASES = list(_cases())


def test_the_pages_quote_defaults():
    assert len(CASES) >= 5


@pytest.mark.parametrize("name, value", CASES)
def test_a_quoted_default_is_the_codes(name, value):
    defaults = _defaults()
    if name not in defaults:
        pytest.skip(f"{name} is not an estimator's parameter")
    assert _same(value, defaults[name]), (
        f"a page says {name}={value} is the default; the estimators with "
        f"{name} default to {sorted(defaults[name])}"
    )
