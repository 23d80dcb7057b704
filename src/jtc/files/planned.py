"""Outputs a run would read that it should not, found while the workflow plans (before any job
runs): made with other settings than the run's (`stale_outputs`), put back by hand from another
run (`replaced_outputs`), left from a job that did not finish (`leftovers`), or damaged
(`damaged_outputs`), each read from the stamps of jtc.files.stamps. Standard library only."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jtc.files.stamps import (
    INSIDE,
    StampError,
    check,
    config_digest,
    output_of,
    read_stamp,
    rebuild_hint,
    required_stamp,
    settings_digest,
    stamped,
)


def settings_problem(path: str | Path, settings: str) -> str | None:
    """Why an existing output cannot be used by a run that would make it with `settings` (its
    stamp is missing, names another output, or was made with other settings); None if it can."""
    try:
        stamp = required_stamp(path)
    except StampError as err:
        return str(err)
    if stamp.get("settings") != settings:
        return (
            f"{path} was made with other settings than this run's (by another config in the same "
            f"folder, or copied or restored from another run), so what reads it would mix "
            f"experiments; {rebuild_hint(path)}"
        )
    return None


# --- before a run: what it will use as it is, and what it will replace ----------------------


@dataclass(frozen=True)
class PlannedJob:
    """A job of a planned run, as the workflow's DAG describes it."""

    rule: str
    wildcards: Mapping[str, Any]
    params: Mapping[str, Any]
    outputs: list[str]
    runs: bool  # whether the run executes it (else its outputs are used as they are)
    reason: str = ""


def stale_outputs(jobs: Iterable[PlannedJob]) -> list[str]:
    """Outputs the run would read as they are although they are not what it would make them
    with its settings (left by another config in the same folder, copied or restored by hand),
    or not the outputs they are at all: one message each."""
    problems = []
    for job in jobs:
        if job.runs:
            continue
        settings = settings_digest(job.rule, job.wildcards, job.params)
        for path in job.outputs:
            if stamped(path) and Path(path).exists():
                problem = settings_problem(path, settings)
                if problem:
                    problems.append(problem)
    return problems


# what Snakemake puts in a param whose function reads the output of a checkpoint that the run
# makes first (its TBDString): e.g. replace_parts' jump layers, read off the model cache's
# info.json, while the model is cached again. The value is known once the checkpoint has run.
UNDETERMINED = "<TBD>"


def undetermined(value: Any) -> bool:
    """Whether a param value (a mapping or sequence: any value in it) is not known yet while
    the run plans (UNDETERMINED: it waits for a checkpoint the run makes first)."""
    if isinstance(value, Mapping):
        return any(undetermined(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(undetermined(v) for v in value)
    return isinstance(value, str) and value == UNDETERMINED


def replaced_outputs(jobs: Iterable[PlannedJob]) -> list[str]:
    """Existing outputs that the run will remake because the config asks for other settings
    than those they were made with (not those remade for new code or new inputs alone). A job
    whose params are not all known yet (`undetermined`: they wait for a checkpoint the run
    remakes, such as a model cache deleted to rebuild it) is not named: its digest would be of
    the placeholder, not of its settings, and differ from its stamp's whatever the config."""
    replaced = []
    for job in jobs:
        if not job.runs or undetermined(job.params):
            continue
        wanted = config_digest(job.rule, job.wildcards, job.params)
        for path in job.outputs:
            if not (stamped(path) and Path(path).exists()):
                continue
            try:
                stamp = read_stamp(path)
            except StampError:
                continue
            if stamp is not None and stamp.get("config") not in (None, wanted):
                replaced.append(path)
    return replaced


def leftovers(results: str | Path, outputs: Iterable[str]) -> list[str]:
    """Outputs under `results` that no job of the planned run makes: left by a run with another
    config (other models, corpora or methods). Nothing of this run reads them."""
    planned = {str(Path(o)) for o in outputs}
    found = []
    root = Path(results)
    if not root.is_dir():
        return []
    for path in sorted(root.rglob("*")):
        if path.name.startswith(".") or any(p.name.startswith(".") for p in path.parents):
            continue
        if path.suffix not in INSIDE or output_of(path) != path:
            folder = output_of(path)
            if folder != path and str(folder) not in planned and str(folder) not in found:
                found.append(str(folder))
            continue
        if str(path) not in planned:
            found.append(str(path))
    return found


def listing(paths: list[str], most: int = 8) -> str:
    shown = ", ".join(paths[:most])
    return shown + (f" and {len(paths) - most} more" if len(paths) > most else "")


def damaged_outputs(paths: Iterable[str]) -> list[str]:
    """Outputs that are not what they say (a file copied over another, a file whose sha256
    differs from its record, an unreadable stamp), and outputs of one job made with different
    settings (one of them put back from another run): checked while a run plans, cheaply
    (stamps and small files' digests; of a folder output each file's size, and its sha256 where
    its mtime is not the one recorded, jtc.files.digests; the values of a Parquet or map file,
    the bytes of a cached model are checked when read)."""
    problems = []
    jobs: dict[str, dict[str, list[str]]] = {}  # job -> {settings: its outputs}
    for path in paths:
        if not (stamped(path) and Path(path).exists()):
            continue
        try:
            stamp = read_stamp(path)
            check(path, stamp)
        except StampError as err:
            problems.append(str(err))
            continue
        if stamp and stamp.get("settings"):
            job = json.dumps([stamp.get("rule"), stamp.get("wildcards")], sort_keys=True)
            jobs.setdefault(job, {}).setdefault(stamp["settings"], []).append(str(path))
    for made in jobs.values():
        if len(made) > 1:
            groups = sorted(made.values(), key=len)
            odd = [path for group in groups[:-1] for path in group]
            problems += [
                f"{path} was made by the same job as {groups[-1][0]} but with other settings "
                f"(put back from another run?); {rebuild_hint(path)}"
                for path in odd
            ]
    return problems
