"""The user guide's examples run as doctests, so the outputs the pages
print are the ones the code gives."""

import doctest
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "doc"
PAGES = sorted(
    p.relative_to(DOC).as_posix()
    for p in DOC.rglob("*.rst")
    if "_build" not in p.parts and ">>> " in p.read_text(encoding="utf-8")
)


def test_the_user_guide_has_examples():
    assert "user_guide/kfed.rst" in PAGES


@pytest.mark.parametrize("page", PAGES)
def test_page_examples(page):
    result = doctest.testfile(
        str(DOC / page),
        module_relative=False,
        optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
        raise_on_error=False,
        verbose=False,
    )
    assert result.attempted > 0
    assert result.failed == 0, f"{result.failed} example(s) of {page} failed"
