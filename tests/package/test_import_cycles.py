"""The package's import graph: no module of jtc imports, directly or through others, a module
that imports it back, counting the imports a module runs when it is loaded (its top level,
`if TYPE_CHECKING:` blocks included) and also those inside its functions (the graph:
tests/helpers/imports_graph.py)."""

import pytest
from imports_graph import find_cycle, import_graph


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
