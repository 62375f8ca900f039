"""The package's layout keeps the rules DEVELOPING.md states: no import
cycle, private names shared across packages only from the numerics and the
scikit-learn compatibility modules, and no long module without a reason at
its top."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "skfed"

# Modules whose private names any package may import.
SHARED = ("skfed._numerics", "skfed._sklearn_compat")
MAX_LINES = 800
LONG_REASON = "# Long module:"


def _module_name(path):
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _package_of(name):
    path = MODULES[name]
    return name if path.name == "__init__.py" else name.rsplit(".", 1)[0]


def _imports(name):
    """``(module imported, names taken from it, line)`` for every import
    statement of module ``name``, in functions too, resolved to skfed's
    modules (a name that is a submodule counts as importing it)."""
    tree = ast.parse(MODULES[name].read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES:
                    yield alias.name, (), node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(name).split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("skfed"):
                continue
            names = []
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in MODULES:
                    yield sub, (), node.lineno
                else:
                    names.append(alias.name)
            if names and target in MODULES:
                yield target, tuple(names), node.lineno


def _graph():
    return {
        name: sorted({target for target, _, _ in _imports(name) if target != name})
        for name in MODULES
    }


def _cycles(graph):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_module_list_is_read():
    # The checks below would pass on an empty list.
    assert "skfed._engine._federation" in MODULES
    assert "skfed.cluster" in MODULES
    assert len(MODULES) > 40


def test_no_import_cycle():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}
    assert _cycles(graph) == [["a", "b", "c"]]


def _top_package(name):
    parts = name.split(".")
    return ".".join(parts[:2])


def test_private_names_cross_packages_only_from_shared_modules():
    crossings = []
    for name in MODULES:
        for target, names, line in _imports(name):
            if _top_package(target) == _top_package(name):
                continue
            if target.startswith(SHARED):
                continue
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                crossings.append(f"{name}:{line} takes {private} from {target}")
    assert crossings == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_long_modules_say_why(name):
    text = MODULES[name].read_text()
    if text.count("\n") <= MAX_LINES:
        return
    top = "\n".join(text.split("\n")[:60])
    assert LONG_REASON in top, (
        f"{name} has {text.count(chr(10))} lines: split it, or say at its top "
        f"why it is one module ({LONG_REASON!r} ...)."
    )


def _sklearn_private_imports(name):
    tree = ast.parse(MODULES[name].read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.split(".")[0] != "sklearn":
                continue
            private_module = any(p.startswith("_") for p in node.module.split("."))
            names = [a.name for a in node.names if a.name.startswith("_")]
            if private_module or names:
                yield f"{name}:{node.lineno} from {node.module} import {names or '...'}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "sklearn" and any(p.startswith("_") for p in parts):
                    yield f"{name}:{node.lineno} import {alias.name}"


def test_private_sklearn_names_come_through_the_compatibility_module():
    # scikit-learn's private modules change without notice: one file to
    # read when a release moves one.
    found = [
        line
        for name in MODULES
        if name != "skfed._sklearn_compat"
        for line in _sklearn_private_imports(name)
    ]
    assert found == []
    assert list(_sklearn_private_imports("skfed._sklearn_compat"))


@pytest.mark.parametrize("package", ["skfed.privacy", "skfed._numerics"])
def test_privacy_and_numerics_import_nothing_of_the_engine(package):
    # The engine applies privacy, never the other way round.
    reaching = {
        name: [d for d in deps if d.startswith("skfed._engine")]
        for name, deps in _graph().items()
        if name.startswith(package)
    }
    assert {name: deps for name, deps in reaching.items() if deps} == {}


def test_nothing_in_the_package_imports_the_audit():
    # The DP audit runs the estimators' steps: it sits above them.
    assert not any("skfed._dp_audit" in deps for deps in _graph().values())
