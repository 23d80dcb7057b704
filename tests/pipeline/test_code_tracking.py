"""Code tracking: each rule's code hash covers its script and every jtc module its stage function
can load (jtc.pipeline.tracking), and the rules, scripts and stage modules mirror one another."""

import re
import shutil
from pathlib import Path

import pytest
from harness import copy_run, rules_run, run_snakemake

from jtc.pipeline.tracking import code_hash, function_closure, module_closure, script_closure

ROOT = Path(__file__).parents[2]
SRC = ROOT / "src"
RULES = ROOT / "workflow" / "rules"
SCRIPTS = ROOT / "workflow" / "scripts"
# fetches bytes by URL: its output is the URL's content, whatever the code
UNTRACKED = {"download_corpus"}


def rule_blocks():
    """{rule name: (rule file stem, rule text)} of every rule with a script."""
    blocks = {}
    for path in sorted(RULES.glob("*.smk")):
        text = path.read_text()
        starts = list(re.finditer(r"^ *(?:rule|checkpoint) (\w+):", text, re.M))
        for i, match in enumerate(starts):
            end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
            body = text[match.start() : end]
            if "script:" in body:
                blocks[match.group(1)] = (path.stem, body)
    return blocks


def test_rules_scripts_and_stage_modules_mirror_one_another():
    blocks = rule_blocks()
    assert len(blocks) == 37
    assert {p.stem for p in SCRIPTS.glob("*.py")} == set(blocks)
    stage_modules = {p.stem for p in (SRC / "jtc" / "stages").glob("*.py")} - {"__init__"}
    assert stage_modules == {family for family, _ in blocks.values()}
    for rule, (family, body) in blocks.items():
        assert f'"../scripts/{rule}.py"' in body, rule
        if rule not in UNTRACKED:
            assert f'code=code_hash("{rule}")' in body, rule
        script = (SCRIPTS / f"{rule}.py").read_text()
        # one hop: the script calls the stage function named after its rule
        assert f"from jtc.stages.{family} import {rule}\n" in script, rule
        assert re.search(rf"^\s+{rule}\(", script, re.M), rule


def closure(rule):
    return script_closure(SRC, SCRIPTS / f"{rule}.py")


# each plot rule's module of jtc.report.figures
FIGURES = {
    "plot_r2": "r2",
    "plot_prediction": "prediction",
    "plot_early_exit": "early_exit",
    "plot_part_r2": "submodules",
    "plot_pruning": "pruning",
    "plot_benchmarks": "benchmarks",
}


def test_each_rule_tracks_the_modules_its_stage_uses_and_no_others():
    for rule, figures in FIGURES.items():
        modules = closure(rule)
        assert {"jtc.report.figures.common", f"jtc.report.figures.{figures}"} <= modules, rule
        # not the other families' figures: editing a pruning figure reruns plot_pruning alone
        others = {f"jtc.report.figures.{f}" for f in FIGURES.values() if f != figures}
        assert not modules & others, rule
        assert not modules & {
            "jtc.shortcuts.closed_form",
            "jtc.shortcuts.train",
            "jtc.data.extract",
            "jtc.model.scoring",
        }, rule
    # every method fitted from the states alone: closed form and trained by MSE (train)
    fit = {
        "jtc.shortcuts.fit",
        "jtc.shortcuts.closed_form",
        "jtc.shortcuts.train",
        "jtc.shortcuts.methods",
        "jtc.shortcuts.maps",
        "jtc.files.io",
        "jtc.logs",
        "jtc.stages.fit",
    }
    assert fit <= closure("fit_map")
    # NJTC, N-NJTC and the one-map methods: a train_map job each, fitted as fit_map fits
    assert fit <= closure("train_map")
    assert not closure("fit_map") & {
        "jtc.report.figures.common",
        "jtc.data.extract",
        "jtc.model.cache",
        "jtc.model.head",
        "jtc.shortcuts.lens",  # the tuned lens: train_map's, through the head
        "jtc.model.scoring",
    }
    # trained through the head: its target rule (methods), the lens and the head tracked
    head = {
        "jtc.shortcuts.train",
        "jtc.shortcuts.lens",
        "jtc.shortcuts.methods",
        "jtc.model.head",
        "jtc.model.scoring",
    }
    assert head <= closure("train_map")
    # the jobs that only decode read the head alone: not the model's sources, its discovery,
    # its hooks, nor the code that caches and loads whole models
    whole_model = {"jtc.model.cache", "jtc.model.discover", "jtc.model.sources", "jtc.model.hooks"}
    for rule in ("decode_predictions", "fit_shortlist", "train_map"):
        assert "jtc.model.head" in closure(rule), rule
        assert not closure(rule) & whole_model, rule
    # (and the closed-form fit its maps start from)
    assert "jtc.shortcuts.closed_form" in closure(
        "train_map"
    ) and "jtc.report.figures.common" not in closure("train_map")
    assert {"jtc.model.cache", "jtc.model.sources", "jtc.model.adapters"} <= closure(
        "resolve_model"
    )
    assert {"jtc.shortcuts.closed_form", "jtc.shortcuts.parts"} <= closure("fit_parts")
    assert "jtc.shortcuts.closed_form" not in closure("extract_hidden")
    # an import for type checkers only (early exit's `Head` annotation) is not code a job runs
    assert "jtc.model.head" not in closure("early_exit")
    for rule in rule_blocks():
        assert {"jtc", "jtc.logs", "jtc.stages"} <= closure(rule), rule


def make_package(src: Path) -> None:
    """A small jtc package: a stage module importing its library lazily, per function."""
    (src / "jtc" / "stages").mkdir(parents=True)
    files = {
        "jtc/__init__.py": "",
        "jtc/io.py": "import numpy\n",
        "jtc/fit.py": "from .io import x\n",
        "jtc/plots.py": "def f():\n    from . import style\n",
        "jtc/style.py": (
            "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from . import typed\nelse:\n    from . import untyped\n"
        ),
        "jtc/typed.py": "",
        "jtc/untyped.py": "",
        "jtc/unused.py": "",
        "jtc/stages/__init__.py": "",
        "jtc/stages/fam.py": (
            "from ..io import read\n\n"
            "def fit_it():\n    from ..fit import solve\n    helper()\n\n"
            "def helper():\n    import jtc.unused\n\n"
            "def plot_it():\n    from .. import plots\n"
        ),
    }
    for name, text in files.items():
        (src / name).write_text(text)


def test_closure_follows_lazy_imports_helpers_and_packages(tmp_path):
    make_package(tmp_path)
    assert function_closure(tmp_path, "jtc.stages.fam", "fit_it") == {
        "jtc",
        "jtc.stages",
        "jtc.stages.fam",
        "jtc.io",
        "jtc.fit",
        "jtc.unused",
    }
    assert function_closure(tmp_path, "jtc.stages.fam", "plot_it") == {
        "jtc",
        "jtc.stages",
        "jtc.stages.fam",
        "jtc.io",
        "jtc.plots",
        "jtc.style",
        "jtc.untyped",  # not jtc.typed: imported for type checkers only
    }
    assert module_closure(tmp_path, ["jtc.plots"]) == {
        "jtc",
        "jtc.plots",
        "jtc.style",
        "jtc.untyped",
    }
    with pytest.raises(AttributeError, match="defines no function nope"):
        function_closure(tmp_path, "jtc.stages.fam", "nope")


def test_editing_a_module_changes_the_hash_of_the_scripts_that_reach_it_only(tmp_path):
    make_package(tmp_path / "src")
    scripts = {}
    for name in ("fit_it", "plot_it"):
        scripts[name] = tmp_path / f"{name}.py"
        scripts[name].write_text(f"from jtc.stages.fam import {name}\n\n{name}()\n")

    def hashes():
        return {name: code_hash(tmp_path / "src", path) for name, path in scripts.items()}

    before = hashes()
    (tmp_path / "src/jtc/style.py").write_text("COLOUR = 'red'\n")
    after_style = hashes()
    assert after_style["plot_it"] != before["plot_it"]
    assert after_style["fit_it"] == before["fit_it"]
    (tmp_path / "src/jtc/fit.py").write_text("from .io import x, y\n")
    after_fit = hashes()
    assert after_fit["fit_it"] != after_style["fit_it"]
    assert after_fit["plot_it"] == after_style["plot_it"]
    (tmp_path / "src/jtc/io.py").write_text("import numpy as np\n")  # shared: both
    assert all(a != b for a, b in zip(hashes().values(), after_fit.values(), strict=True))


def test_the_hash_of_a_copy_equals_the_original(tmp_path):
    shutil.copytree(SRC / "jtc", tmp_path / "src" / "jtc")
    script = SCRIPTS / "fit_map.py"
    assert code_hash(tmp_path / "src", script) == code_hash(SRC, script)


LOADED = re.compile(r"jtc modules loaded: (.*)$", re.M)


@pytest.mark.workflow
def test_every_job_loads_only_modules_its_hash_covers(tiny_run):
    """What each job of a real run imported (its log lists the jtc modules it had loaded when it
    finished) is inside the closure its rule's code hash was computed from."""
    checked = set()
    for log in sorted((tiny_run / "logs").rglob("*.log")):
        rule = log.relative_to(tiny_run / "logs").parts[0]
        found = LOADED.findall(log.read_text())
        assert found, f"{log} does not list the modules the job loaded"
        loaded = set(found[-1].split())
        assert "jtc.stages" in loaded and "jtc.logs" in loaded, log
        assert loaded <= closure(rule), f"{rule}: not tracked: {sorted(loaded - closure(rule))}"
        checked.add(rule)
    assert {"extract_hidden", "fit_map", "decode_predictions", "plot_r2", "early_exit"} <= checked


def edited_copy(tmp_path, tiny_run):
    """A copy of the workflow and the package (a second checkout), and of the finished run."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "workflow", repo / "workflow")
    shutil.copytree(SRC / "jtc", repo / "src" / "jtc", ignore=shutil.ignore_patterns("__pycache__"))
    return repo, copy_run(tiny_run, tmp_path / "work")


@pytest.mark.workflow
def test_editing_a_module_reruns_exactly_the_jobs_that_run_it(tiny_run, tiny_first_run, tmp_path):
    repo, work = edited_copy(tmp_path, tiny_run)
    snakefile = repo / "workflow" / "Snakefile"

    def plan():
        return rules_run(run_snakemake(work, "all", "-n", snakefile=snakefile))

    assert plan() == {}  # the same code, byte for byte: nothing to do
    jobs = rules_run(tiny_first_run)
    for figures, rerun in (("common", "plot_"), ("r2", "plot_r2")):
        # what every figure shares reruns every plot job; one family's figures, its jobs alone
        edited = repo / f"src/jtc/report/figures/{figures}.py"
        with edited.open("a") as handle:
            handle.write("\n# a change to a plotting function\n")
        planned = plan()
        assert planned == {
            rule: n for rule, n in jobs.items() if rule.startswith(rerun) or rule == "all"
        }, figures
        edited.write_text((SRC / f"jtc/report/figures/{figures}.py").read_text())
        assert plan() == {}
    with (repo / "src/jtc/shortcuts/closed_form.py").open("a") as handle:
        handle.write("\n# a change to the least-squares fit\n")
    planned = plan()
    # the fits, and what reads them (each decode job reads mat's maps); not the states
    assert planned["fit_map"] == jobs["fit_map"]
    assert not {"prepare_corpus", "resolve_model", "extract_hidden"} & set(planned)
    assert planned["decode_predictions"] == jobs["decode_predictions"]
    assert planned["r2_table"] == jobs["r2_table"] and planned["plot_r2"] == jobs["plot_r2"]
