"""The engine, the privacy package, Flower's modules and the numerics import
one another without cycles, and the privacy package imports nothing of the
engine (the engine applies privacy, never the other way round)."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2] / "skfed"
# The packages whose imports this file checks.
CHECKED = ("skfed._engine", "skfed.privacy", "skfed.flower", "skfed._numerics")


def _modules():
    """Module name -> (path, the package its relative imports start from)."""
    modules = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
            package = ".".join(parts)
        else:
            package = ".".join(parts[:-1])
        modules[".".join(parts)] = (path, package)
    return modules


def _imports(path, package, known):
    """The skfed modules a module imports, at its top or in its functions,
    except in a module-level ``__getattr__`` (a name kept importable from
    where it used to live, loaded only when asked for)."""
    tree = ast.parse(path.read_text())
    skipped = {
        id(node)
        for top in tree.body
        if isinstance(top, ast.FunctionDef) and top.name == "__getattr__"
        for node in ast.walk(top)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] + [f"{target}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found.update(name for name in names if name in known)
    return found


def _graph():
    modules = _modules()
    return {
        name: _imports(path, package, modules) - {name}
        for name, (path, package) in modules.items()
    }


def _cycles(graph):
    """The strongly connected components of more than one module."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def _checked(name):
    return any(name == p or name.startswith(p + ".") for p in CHECKED)


def test_the_engine_privacy_flower_and_numerics_have_no_import_cycle():
    cycles = [c for c in _cycles(_graph()) if any(map(_checked, c))]
    assert cycles == []


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize("package", ["skfed.privacy", "skfed._numerics"])
def test_privacy_and_numerics_import_nothing_of_the_engine(package):
    graph = _graph()
    # The audit runs the estimators' client steps on an engine client: it
    # sits above them, and nothing in skfed imports it.
    reaching = {
        name: sorted(d for d in deps if d.startswith("skfed._engine"))
        for name, deps in graph.items()
        if name.startswith(package) and name != "skfed._dp_audit"
    }
    assert {name: deps for name, deps in reaching.items() if deps} == {}
    assert not any("skfed._dp_audit" in deps for deps in graph.values())
