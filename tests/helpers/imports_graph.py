"""The import graph of the jtc package, read from its sources (the modules are not imported):
which jtc modules each module's import statements name, at its top level (`if TYPE_CHECKING:`
blocks included) or also inside its functions, and the first line naming each (a statement
resolved as code tracking resolves it, jtc.pipeline.tracking); and a cycle finder. Shared by
tests/package/test_import_cycles.py and tests/package/test_layering.py."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from jtc.pipeline.tracking import _imported

SRC = Path(__file__).parents[2] / "src"


def package_modules() -> dict[str, tuple[Path, bool]]:
    """{module name: (file, whether it is a package's __init__)} of every module of jtc."""
    found = {}
    for path in sorted((SRC / "jtc").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def _statements(tree: ast.Module, in_functions: bool) -> Iterator[ast.AST]:
    """Every node of a module, or (not `in_functions`) those outside function bodies."""
    if in_functions:
        yield from ast.walk(tree)
        return
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            todo += list(ast.iter_child_nodes(node))


def import_lines(in_functions: bool) -> dict[str, dict[str, int]]:
    """{module: {jtc module its import statements name: the first line that names it}}."""
    modules = package_modules()
    lines: dict[str, dict[str, int]] = {}
    for name, (path, package) in modules.items():
        found: dict[str, int] = {}
        for node in _statements(ast.parse(path.read_text()), in_functions):
            named = _imported(SRC, node, name, package) & modules.keys()  # as code tracking
            for target in named - {name}:
                found[target] = min(found.get(target, node.lineno), node.lineno)
        lines[name] = found
    return lines


def import_graph(in_functions: bool) -> dict[str, set[str]]:
    """{module: the jtc modules its import statements name}."""
    return {name: set(found) for name, found in import_lines(in_functions).items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph, as the nodes along it (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None
