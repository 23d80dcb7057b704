"""Imports only point down: the packages of jtc in one order (docs/design.md, "Layering"), and
every import of a module, at its top level or inside a function, names a module of a lower
package, of its own package, or a foundation module; no two packages import each other, even
through others."""

from __future__ import annotations

from imports_graph import SRC, find_cycle, import_lines

# modules outside every package, below all of them; they import only each other
FOUNDATION = {"jtc", "jtc.paths", "jtc.logs", "jtc.devices", "jtc.settings"}
# lowest first; a package imports only from the packages of lower entries (and the foundation)
ORDER = [
    ["foundation"],
    ["files"],
    ["model"],
    ["data"],
    ["shortcuts"],
    ["evaluation"],
    ["pruning"],
    ["measures"],
    ["report"],
    ["stages", "pipeline", "api", "cli"],  # the top: they import none of each other, but cli api
]
SIDEWAYS = {("cli", "api")}  # the only imports allowed within one entry


def package_of(module: str) -> str:
    """`foundation`, or the package (or top-level module: api, cli) a jtc module belongs to."""
    return "foundation" if module in FOUNDATION else module.split(".")[1]


def rank_of(order: list[list[str]]) -> dict[str, int]:
    return {package: rank for rank, entry in enumerate(order) for package in entry}


def upward_imports(
    lines: dict[str, dict[str, int]], order: list[list[str]], sideways: set[tuple[str, str]]
) -> list[str]:
    """'module -> module (line n; package -> package)' for every import of `lines` ({module:
    {imported module: line}}) that names a module of a package not lower in `order` (nor its
    own, nor allowed `sideways`)."""
    rank = rank_of(order)
    found = []
    for module, imported in sorted(lines.items()):
        here = package_of(module)
        for target, line in sorted(imported.items()):
            there = package_of(target)
            if here == there or (here, there) in sideways or rank[there] < rank[here]:
                continue
            found.append(f"{module} -> {target} (line {line}; {here} -> {there})")
    return found


def package_graph(lines: dict[str, dict[str, int]]) -> dict[str, set[str]]:
    """{package: the other packages its modules import}."""
    graph: dict[str, set[str]] = {}
    for module, imported in lines.items():
        here = package_of(module)
        graph.setdefault(here, set()).update(package_of(t) for t in imported)
        graph[here].discard(here)
    return graph


def test_the_check_finds_upward_sideways_and_cyclic_imports():
    order = [["foundation"], ["low"], ["high", "side"]]
    lines = {
        "jtc.low.a": {"jtc.high.b": 7, "jtc.paths": 2},  # up; the foundation is below all
        "jtc.high.b": {"jtc.low.a": 3, "jtc.side": 4},  # down; sideways
        "jtc.side": {"jtc.high.b": 9},  # sideways, allowed
        "jtc.paths": {"jtc.low.a": 5},  # up from the foundation
    }
    assert upward_imports(lines, order, {("side", "high")}) == [
        "jtc.high.b -> jtc.side (line 4; high -> side)",
        "jtc.low.a -> jtc.high.b (line 7; low -> high)",
        "jtc.paths -> jtc.low.a (line 5; foundation -> low)",
    ]
    assert find_cycle(package_graph(lines)) == ["foundation", "low", "foundation"]
    assert find_cycle(package_graph({"jtc.high.b": {"jtc.low.a": 3}})) is None


def test_the_order_names_every_package_once():
    named = [package for entry in ORDER for package in entry]
    assert len(named) == len(set(named))
    present = {package_of(m) for m in import_lines(in_functions=True)}
    assert present == set(named), "packages missing from ORDER or gone from src/jtc"
    assert FOUNDATION <= set(import_lines(in_functions=True))
    for module in FOUNDATION - {"jtc"}:
        assert (SRC / module.replace(".", "/")).with_suffix(".py").exists(), module


def test_imports_only_point_down():
    """Inside functions too: a stage module imports the library there, and code tracking
    follows those imports as much as the top-level ones."""
    upward = upward_imports(import_lines(in_functions=True), ORDER, SIDEWAYS)
    assert not upward, "imports that do not point down:\n" + "\n".join(upward)


def test_no_import_cycle_between_packages():
    cycle = find_cycle(package_graph(import_lines(in_functions=True)))
    assert cycle is None, "packages that import each other: " + " -> ".join(cycle or [])
