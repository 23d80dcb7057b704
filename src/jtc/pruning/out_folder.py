"""Where `jtc prune --out` may write: never where the workflow keeps its outputs, never over the
model cache it reads, and with `--force` never over a folder jtc made. Each check names the
paths and what they are, before anything is loaded or written.

A folder is a jtc output when it holds a `stamp.json` (jtc.files.stamps: every folder a workflow
job writes, a states folder, a cached model, a pruned checkpoint; `jtc prune` writes one too,
without a job's path, rule or settings: `own_stamp`) or a model cache's `info.json` or
`manifest.json` (jtc.model.manifest: cached outside a workflow too). A folder is the results
folder of a jtc workflow run when it is named `results` (jtc.paths.RESULTS, as every stamp
names its outputs) and it holds jtc's stamp records (`.stamps`), has Snakemake's `.snakemake`
beside it, or holds a jtc output where the workflow puts its folder outputs
(results/models/NAME, results/hidden/M/C/SPLIT, ...: jtc.files.stamps.FOLDER_DEPTHS).
Standard library only."""

from __future__ import annotations

import json
import os
from pathlib import Path

from jtc import paths
from jtc.files.stamps import FOLDER_DEPTHS, FOLDER_STAMP, MADE_BY, RECORDS, describe

PRUNE = "jtc prune"  # its stamp's MADE_BY
CACHE_FILES = ("info.json", "manifest.json")  # jtc.model.manifest: INFO, MANIFEST
SNAKEMAKE = ".snakemake"
INSTEAD = (
    "write it to a new folder outside the workflow's results, e.g. --out shared/NAME (the "
    "run's own pruned checkpoint is `snakemake pruned`'s: results/pruned/MODEL/CORPUS)"
)


def own_stamp(folder: Path) -> bool:
    """Whether a folder's stamp.json is one `jtc prune` wrote (no workflow output's)."""
    try:
        stamp = json.loads((folder / FOLDER_STAMP).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(stamp, dict) and stamp.get(MADE_BY) == PRUNE and "rule" not in stamp


def jtc_output(folder: Path) -> str | None:
    """What jtc output `folder` is (a workflow output, by its stamp; a model cache), else
    None: not one, or a checkpoint `jtc prune` wrote (its own, which --force may replace)."""
    stamp_file = folder / FOLDER_STAMP
    if stamp_file.is_file() and not own_stamp(folder):
        try:
            stamp = json.loads(stamp_file.read_text())
        except (OSError, ValueError):
            stamp = None
        if isinstance(stamp, dict) and isinstance(stamp.get("path"), str):
            return f"the workflow output {describe(stamp)} (its {stamp_file})"
        return f"a jtc workflow output (it holds {stamp_file})"
    found = [name for name in CACHE_FILES if (folder / name).is_file()]
    if found:
        return f"a jtc model cache (it holds {' and '.join(found)})"
    return None


def run_results_mark(folder: Path) -> str | None:
    """Why `folder` is the results folder of a jtc workflow run (see the module's docstring),
    else None."""
    if folder.name != paths.RESULTS or not folder.is_dir():
        return None
    if (folder / RECORDS).is_dir():
        return f"it holds jtc's stamp records {folder / RECORDS}"
    if (folder.parent / SNAKEMAKE).is_dir():
        return f"Snakemake's {folder.parent / SNAKEMAKE} is beside it"
    for first, depth in FOLDER_DEPTHS.items():
        for candidate in sorted(folder.glob("/".join([first] + ["*"] * (depth - 1)))):
            what = candidate.is_dir() and jtc_output(candidate)
            if what:
                return f"{candidate} is {what}"
    return None


def held_output(folder: Path) -> str | None:
    """The first jtc output or workflow run found under `folder` (itself included), what it
    is; None when it holds none."""
    for root, dirs, _files in os.walk(folder):
        here = Path(root)
        what = jtc_output(here)
        if what:
            return f"{here} is {what}"
        mark = run_results_mark(here)
        if mark:
            return f"{here} is the results folder of a jtc workflow run ({mark})"
        if SNAKEMAKE in dirs:
            return f"{here} is a Snakemake workflow run's folder (it holds {here / SNAKEMAKE})"
        dirs.sort()
    return None


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def out_problem(model_dir: str | Path, out: str | Path, force: bool = False) -> str | None:
    """Why `jtc prune` must not write `out` (its --out) from the model cache `model_dir` (its
    --model-dir): `out` is inside the results folder of a jtc workflow run or inside a jtc
    output, it is `model_dir`, inside it or holds it, or (`force`) it is a folder that holds a
    jtc output. None when it may (a new folder, or one of the user's own)."""
    given, model = Path(out), Path(model_dir)
    where, cache = given.resolve(), model.resolve()
    if where == cache:
        return (
            f"--out {given} is --model-dir {model}: the pruned checkpoint would replace the model "
            f"cache it is made from, and every later stage of that model would read a pruned "
            f"model; {INSTEAD}"
        )
    if _inside(where, cache):
        return (
            f"--out {given} is inside --model-dir {model}: it would be written into the model "
            f"cache it is made from (which the workflow checks file by file); {INSTEAD}"
        )
    if _inside(cache, where):
        return (
            f"--model-dir {model} is inside --out {given}: writing --out would replace the model "
            f"cache being pruned; {INSTEAD}"
        )
    for folder in (where, *where.parents):
        mark = run_results_mark(folder)
        if mark:
            return (
                f"--out {given} is inside {folder}, the results folder of a jtc workflow run "
                f"({mark}): the workflow owns every path there, and a checkpoint written there "
                f"could replace one of its outputs or be read as one; {INSTEAD}"
            )
        what = folder != where and jtc_output(folder)
        if what:
            return (
                f"--out {given} is inside {folder}, {what}: a folder the workflow writes whole "
                f"and checks file by file; {INSTEAD}"
            )
    return replace_problem(given) if force else None


def replace_problem(out: str | Path, label: str = "--out") -> str | None:
    """Why the existing folder `out` must not be replaced (--force; force=True): it is or holds
    a jtc output or a workflow run (`held_output`). None when it may be: it does not exist, or
    is a folder of the user's own or a checkpoint `jtc prune` wrote."""
    folder = Path(out)
    held = held_output(folder) if folder.is_dir() else None
    if held is None:
        return None
    return (
        f"{label} {folder} is not replaced even with --force: {held}. --force replaces only a "
        f"folder of your own or a checkpoint `jtc prune` wrote; {INSTEAD}"
    )
