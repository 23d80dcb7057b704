"""The package's import graph: no module of jtc imports, directly or through others, a module
that imports it back, counting the imports a module runs when it is loaded (its top level,
`if TYPE_CHECKING:` blocks included) and also those inside its functions."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).parents[2] / "src"


def package_modules() -> dict[str, tuple[Path, bool]]:
    """{module name: (file, whether it is a package's __init__)} of every module of jtc."""
    found = {}
    for path in sorted((SRC / "jtc").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def _statements(tree: ast.Module, in_functions: bool):
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


def import_graph(in_functions: bool) -> dict[str, set[str]]:
    """{module: the jtc modules its import statements name}."""
    modules = package_modules()
    graph = {}
    for name, (path, package) in modules.items():
        edges = set()
        for node in _statements(ast.parse(path.read_text()), in_functions):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in modules}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = name.split(".")
                    keep = len(parts) - node.level + (1 if package else 0)
                    base = ".".join(parts[:keep] + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                if base in modules:
                    edges.add(base)
                edges |= {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in modules}
        graph[name] = edges - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph, as the modules along it (first == last), or None."""
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


def test_the_graph_sees_the_imports_of_the_package():
    top = import_graph(in_functions=False)
    every = import_graph(in_functions=True)
    assert "jtc.model.head" in top["jtc.evaluation.decode"]
    assert "jtc.model.manifest" in top["jtc.model.head"]
    # imported inside a function only
    assert "jtc.model.classes" not in top["jtc.model.head"]
    assert "jtc.model.classes" in every["jtc.model.head"]
    assert "jtc.report.examples" in every["jtc.stages.prediction"]  # `from jtc.report import x`
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("in_functions", [False, True], ids=["top-level", "with-functions"])
def test_no_import_cycle_between_modules_of_the_package(in_functions):
    cycle = find_cycle(import_graph(in_functions))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])
