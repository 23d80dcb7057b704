"""Planning and the small jobs stay torch-free: every module of jtc.pipeline, and every jtc module
the Snakefile and its rule files import, loads neither torch nor transformers; planning imports
no stage module; and the stage functions of the rules that need no model reach no module that
imports torch at its top level (jtc.pipeline.tracking's closures, read from the sources)."""

from __future__ import annotations

import ast
import json
import os
import re
import sys
from pathlib import Path

import waits

from jtc.pipeline.tracking import function_imports, module_path, script_closure

ROOT = Path(__file__).parents[2]
SRC = ROOT / "src"
WORKFLOW = ROOT / "workflow"
SCRIPTS = WORKFLOW / "scripts"
HEAVY = {"torch", "transformers", "accelerate", "safetensors.torch"}
# the rules whose jobs load no model (and so never need torch)
TORCH_FREE = [
    "download_corpus",
    "prepare_corpus",
    "r2_table",
    "parameter_table",
    "prediction_table",
    "fit_parts",
    "part_r2_table",
    "submodule_table",
    "headline_table",
    "plot_r2",
    "plot_prediction",
    "plot_early_exit",
    "plot_part_r2",
    "plot_submodules",
]
# their code hashes also cover jtc.model.headchain (torch), imported only inside the function of
# jtc.model.adapters that builds a model's head, which no plot calls: checked for what importing
# the stage function's modules loads, not for everything the hash covers
PLOTS = [rule for rule in TORCH_FREE if rule.startswith("plot_")]


def _run(code: str) -> dict:
    """Run `code` in a fresh interpreter that imports jtc from this checkout; its last line of
    output, read as JSON."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), *filter(None, [env.get("PYTHONPATH")])])
    proc = waits.run([sys.executable, "-c", code], 300, "a fresh interpreter", env=env, text=True)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _loaded_after(modules: list[str]) -> dict:
    """The heavy modules (and jtc.stages modules) loaded after importing `modules`."""
    code = f"""
import importlib, json, sys
for name in {modules!r}:
    importlib.import_module(name)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers", "accelerate"))
stages = sorted(m for m in sys.modules if m.startswith("jtc.stages"))
print(json.dumps({{"heavy": heavy, "stages": stages, "src": sys.modules["jtc"].__file__}}))
"""
    return _run(code)


def _runs_modules() -> list[str]:
    package = SRC / "jtc" / "pipeline"
    return sorted(
        "jtc.pipeline" if path.stem == "__init__" else f"jtc.pipeline.{path.stem}"
        for path in package.glob("*.py")
    )


def _planning_imports() -> list[str]:
    """The jtc modules the Snakefile and the rule files (and their input functions) import (read
    while planning)."""
    files = [WORKFLOW / "Snakefile", *sorted((WORKFLOW / "rules").rglob("*.smk"))]
    found = set()
    for path in files:
        found |= set(re.findall(r"^\s*from (jtc(?:\.\w+)*) import", path.read_text(), re.M))
        found |= set(re.findall(r"^\s*import (jtc(?:\.\w+)*)", path.read_text(), re.M))
    return sorted(found)


def test_planning_and_the_runs_package_load_no_torch():
    modules = _runs_modules()
    assert {"jtc.pipeline.planning", "jtc.pipeline.tracking", "jtc.pipeline.keep"} <= set(modules)
    planning = _planning_imports()
    assert {"jtc.pipeline.planning", "jtc.report.headline"} <= set(planning)
    assert not [m for m in planning if m.startswith("jtc.stages")], planning
    loaded = _loaded_after(modules + planning)
    assert Path(loaded["src"]).is_relative_to(SRC)  # this checkout's jtc
    assert loaded["heavy"] == []
    assert loaded["stages"] == []


def _top_level_imports(path: Path) -> set[str]:
    """The modules a file imports when it is imported: outside function bodies and `if
    TYPE_CHECKING:` blocks, relative imports left out."""
    found: set[str] = set()

    def visit(nodes):
        for node in nodes:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            for field in ("body", "orelse", "finalbody", "handlers"):
                visit(getattr(node, field, None) or [])

    visit(ast.parse(path.read_text()).body)
    return found


def _heavy(name: str) -> bool:
    return name in HEAVY or name.split(".")[0] in HEAVY


def _imports_torch(module: str) -> list[str]:
    """The heavy modules `module` (a jtc module) imports at its top level."""
    return sorted(i for i in _top_level_imports(module_path(SRC, module)) if _heavy(i))


def _stage_of(rule: str) -> str:
    """The stage module a rule's script calls (`from jtc.stages.<family> import <rule>`)."""
    script = (SCRIPTS / f"{rule}.py").read_text()
    return re.search(rf"^from (jtc\.stages\.\w+) import {rule}$", script, re.M).group(1)


def _loaded_on_import(names: set[str]) -> set[str]:
    """The jtc modules that importing `names` loads: their top-level jtc imports and parent
    packages, at any depth; not the imports inside functions."""
    todo, seen = list(names), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        path = module_path(SRC, name)
        if path is not None:
            todo += [i for i in _top_level_imports(path) if i.split(".")[0] == "jtc"]
    return {name for name in seen if module_path(SRC, name) is not None}


def test_the_torch_free_stages_reach_no_module_that_imports_torch():
    # the check finds torch where it is: the model-loading stages
    assert _imports_torch("jtc.model.headchain") == ["torch", "torch.nn"]
    assert any(_imports_torch(m) for m in script_closure(SRC, SCRIPTS / "extract_hidden.py"))
    for rule in TORCH_FREE:
        if rule in PLOTS:
            continue
        # everything the rule's code hash covers, imports inside functions included
        closure = script_closure(SRC, SCRIPTS / f"{rule}.py")
        assert _stage_of(rule) in closure, rule
        heavy = {m: _imports_torch(m) for m in sorted(closure) if _imports_torch(m)}
        assert not heavy, f"{rule} reaches modules that import torch: {heavy}"
    for rule in PLOTS:
        stage = _stage_of(rule)
        loaded = _loaded_on_import(function_imports(SRC, stage, rule) | {stage})
        assert "jtc.report.figures.common" in loaded, rule
        heavy = {m: _imports_torch(m) for m in sorted(loaded) if _imports_torch(m)}
        assert not heavy, f"{rule} loads modules that import torch: {heavy}"


def test_importing_what_the_torch_free_stages_import_loads_no_torch():
    modules = {"jtc.pipeline.jobs"}  # every script runs its stage inside jtc.pipeline.jobs.job
    for rule in TORCH_FREE:
        stage = _stage_of(rule)
        modules |= function_imports(SRC, stage, rule) | {stage}
    loaded = _loaded_after(sorted(modules))
    assert loaded["heavy"] == []
