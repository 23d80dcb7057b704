"""What an output is: every file a workflow job writes under results/ carries a stamp, and every
reader checks it.

A stamp says which output the file was written as (its path under results/, hence the model,
corpus, split, method or table it is), the rule that made it with the job's wildcards, and a
digest of the settings it was made with (the job's params, `settings_digest`). Parquet files keep
it in their schema metadata, map files in their safetensors metadata, folders (a states folder,
a cached model, a pruned checkpoint) in a `stamp.json` written into the folder as it is put in
place, with the size, mtime and sha256 of each of the folder's files (jtc.files.digests).

- A reader refuses a file whose stamp names another output (a map copied over another method's,
  a states file moved between folders), naming the file, what it holds and how to rebuild it.
- Before a run starts, the workflow compares the stamp of every output it will use as it is
  with the settings the run would make it with (jtc.files.planned), so that an output left by
  another experiment, or put back by hand, is refused instead of read.

The stamps a job writes are registered by `jtc.pipeline.jobs.job` (`begin`); outside a workflow job
(tests, the API) files are written without one and read without the check. Standard library
only: the workflow imports it while it plans.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from jtc import paths
from jtc.files import digests
from jtc.files.digests import file_sha256

KEY = "jtc.stamp"  # metadata key (Parquet schema, safetensors header)
FOLDER_STAMP = "stamp.json"  # the stamp of a folder output, inside it
RESULTS = paths.RESULTS


class CorruptFileError(RuntimeError):
    """A file that exists but cannot be read as what it should be: damaged, or another output
    than the one it is read as (jtc.files.io re-exports it)."""


StampError = CorruptFileError


def _plain(value: Any) -> Any:
    """`value` as plain JSON data (mappings, sequences, numbers, strings), for a digest that
    does not depend on the container types Snakemake passes params in."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def settings_digest(rule: str, wildcards: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    """A digest of what a job was asked to do: its rule, wildcards and params (every value that
    changes a result flows through params, the code hash included)."""
    text = json.dumps(
        {"rule": rule, "wildcards": _plain(wildcards), "params": _plain(params)},
        sort_keys=True,
        allow_nan=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def config_digest(rule: str, wildcards: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    """settings_digest without the code hash: what the config asked for."""
    return settings_digest(rule, wildcards, {k: v for k, v in params.items() if k != "code"})


def results_name(path: str | Path) -> str | None:
    """A path's name under its results folder ("maps/m/c/mat.safetensors"), None outside one.
    The last folder named `results` counts, so a results folder moved elsewhere still matches."""
    parts = Path(path).parts
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == RESULTS:
            return "/".join(parts[i + 1 :]) or None
    return None


# --- the stamps of the running job's outputs ---------------------------------------------------

_job: dict[str, Any] = {}  # rule, wildcards, settings of the running job
_outputs: list[str] = []  # its outputs' names under results/
_aliases: dict[Path, Path] = {}  # a temporary folder being written -> its final path


def begin(
    rule: str, wildcards: Mapping[str, Any], params: Mapping[str, Any], outputs: list[str]
) -> None:
    """Register the running job: the files it writes under its outputs get its stamp."""
    _job.clear()
    _job.update(
        rule=rule,
        wildcards=_plain(wildcards),
        settings=settings_digest(rule, wildcards, params),
        config=config_digest(rule, wildcards, params),
    )
    _outputs[:] = [n for n in (results_name(o) for o in outputs) if n]


def end() -> None:
    _job.clear()
    _outputs.clear()
    _aliases.clear()


@contextlib.contextmanager
def writing_into(tmp: Path, final: Path) -> Iterator[None]:
    """Files written under the temporary folder `tmp` are stamped as under `final`."""
    _aliases[Path(tmp).resolve()] = Path(final)
    try:
        yield
    finally:
        _aliases.pop(Path(tmp).resolve(), None)


def _final(path: Path) -> Path:
    resolved = path.resolve()
    for tmp, final in _aliases.items():
        if resolved == tmp or tmp in resolved.parents:
            return final / resolved.relative_to(tmp)
    return path


def stamp_for(path: str | Path) -> str | None:
    """The stamp (JSON text) of a file or folder the running job writes at `path`; None outside
    a job, or for a path that is not (inside) one of its outputs."""
    if not _job:
        return None
    name = results_name(_final(Path(path)))
    if name is None or not any(name == o or name.startswith(o + "/") for o in _outputs):
        return None
    return json.dumps({"path": name, **_job}, sort_keys=True)


def write_folder_stamp(tmp: Path, final: Path) -> None:
    """Stamp a folder output about to be put in place (io.atomic_dir), with the size, mtime and
    sha256 of each of its files (jtc.files.digests; renaming the folder into place keeps them)."""
    text = stamp_for(final)
    if text is not None:
        stamp = {**json.loads(text), "files": digests.record(tmp, FOLDER_STAMP)}
        (Path(tmp) / FOLDER_STAMP).write_text(json.dumps(stamp, sort_keys=True) + "\n")


MADE_BY = "made_by"  # the command that wrote a folder outside a workflow job (own_stamp)


def write_own_stamp(folder: Path, made_by: str) -> None:
    """Record the files of a folder written outside a workflow job (`jtc prune --out`) in its
    stamp.json as a job's folder output is (write_folder_stamp: size, mtime and sha256 of each),
    with the command that wrote it and no output path, rule or settings; `verify_folders`
    checks it."""
    stamp = {MADE_BY: made_by, "files": digests.record(folder, FOLDER_STAMP)}
    (Path(folder) / FOLDER_STAMP).write_text(json.dumps(stamp, sort_keys=True) + "\n")


# --- reading and checking stamps -------------------------------------------------------------


# the folder outputs (states, block parts, cached models, pruned checkpoints, lm-eval's task
# files): {first folder: depth under results/}
FOLDER_DEPTHS = {
    Path(pattern).relative_to(RESULTS).parts[0]: len(Path(pattern).relative_to(RESULTS).parts)
    for pattern in (paths.HIDDEN, paths.PARTS, paths.MODEL, paths.PRUNED, paths.BENCHMARK_TASKS)
}


def output_of(path: str | Path) -> Path:
    """The output a path belongs to: the path itself, or for a file inside a folder output (a
    states folder, a cached model) that folder, which the workflow writes whole."""
    path = Path(path)
    name = (results_name(path) or "").split("/")
    depth = FOLDER_DEPTHS.get(name[0])
    if depth is None or len(name) <= depth:
        return path
    return Path(*path.parts[: len(path.parts) - (len(name) - depth)])


def rebuild_command(path: str | Path) -> str | None:
    """The snakemake command that makes the output a path belongs to alone (its name under
    results/ as the target, run in the run's folder); None outside a results folder."""
    name = results_name(output_of(path))
    return None if name is None else f"snakemake {RESULTS}/{name}"


# outputs that `snakemake all` does not make (unless the config asks, as
# pruning.benchmarks.in_all does), by their first folder: the target that always does
OWN_TARGETS = {
    Path(paths.PRUNED).relative_to(RESULTS).parts[0]: "pruned",
    Path(paths.BENCHMARK_TASKS).relative_to(RESULTS).parts[0]: "benchmarks",
}


def rebuild_hint(path: str | Path) -> str:
    """How to rebuild an output: delete it (a file inside a folder output: the folder) and rerun
    the same command, which makes it again with what depends on it (or the command that makes
    it alone; for what `all` does not make, its own target: `snakemake pruned` for a pruned
    checkpoint, `snakemake benchmarks` for lm-eval's task files)."""
    target = output_of(path)
    folder = target.is_dir() or target != Path(path)
    kind, remove = ("folder", f"rm -r {target}") if folder else ("file", f"rm {target}")
    alone = rebuild_command(target)
    own = OWN_TARGETS.get((results_name(target) or "").split("/")[0])
    if own and alone:
        then = f"then `snakemake {own}`, or `{alone}` for it alone: it makes it again)"
    else:
        then = "then the same snakemake command: it makes it again, and what depends on it" + (
            f"; `{alone}` makes it alone)" if alone else ")"
        )
    return f"to rebuild it, delete the {kind} {target} and rerun the workflow ({remove}, {then}"


def parse(text: str | bytes | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        stamp = json.loads(text)
    except ValueError:
        return {"path": "?", "damaged": True}
    return stamp if isinstance(stamp, dict) else {"path": "?", "damaged": True}


def describe(stamp: Mapping[str, Any]) -> str:
    what = stamp.get("path", "?")
    rule = stamp.get("rule")
    return f"results/{what}" + (f" (made by rule {rule})" if rule else "")


def check(path: str | Path, stamp: Mapping[str, Any] | None) -> None:
    """Refuse a file read at `path` whose stamp says it was written as another output. A file
    without a stamp (written outside a workflow job) passes; `required_stamp` refuses those."""
    if stamp is None:
        return
    name = results_name(path)
    if stamp.get("damaged"):
        raise StampError(f"{path}: its stamp is damaged; {rebuild_hint(path)}")
    if name is not None and stamp.get("path") != name:
        raise StampError(
            f"{path} is not the output it is read as: it holds {describe(stamp)} (a file copied "
            f"or moved over another); {rebuild_hint(path)}"
        )


def _parquet_stamp(path: Path) -> dict[str, Any] | None:
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as file:
        metadata = file.metadata.metadata or {}
    return parse(metadata.get(KEY.encode()))


def _safetensors_stamp(path: Path) -> dict[str, Any] | None:
    with path.open("rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(size))
    return parse((header.get("__metadata__") or {}).get(KEY))


INSIDE = (".parquet", ".safetensors")  # kinds that carry their stamp inside
RECORDS = ".stamps"  # results/.stamps/<name>.json: the stamp of any other output (CSV, figure)


def _record_of(path: Path) -> Path | None:
    """Where the stamp of an output without room for one (a CSV, an HTML page, a figure, a
    Markdown file) is kept, with the sha256 of the whole file: results/.stamps/<name>.json."""
    name = results_name(path)
    if name is None:
        return None
    root = Path(*path.parts[: len(path.parts) - len(name.split("/"))])
    return root / RECORDS / f"{name}.json"


def record_outputs(paths: list[str]) -> None:
    """After a job: record the stamp and whole-file sha256 of each of its outputs that has no
    room for a stamp inside."""
    for path in map(Path, paths):
        record, text = _record_of(path), stamp_for(path)
        if record is None or text is None or path.suffix in INSIDE or not path.is_file():
            continue
        stamp = {**json.loads(text), "sha256": file_sha256(path)}
        record.parent.mkdir(parents=True, exist_ok=True)
        tmp = record.with_name(f".{record.name}.tmp")
        tmp.write_text(json.dumps(stamp, sort_keys=True) + "\n")
        tmp.replace(record)


def _recorded_stamp(path: Path) -> dict[str, Any] | None:
    record = _record_of(path)
    if record is None or not record.is_file():
        return None
    stamp = parse(record.read_text())
    if stamp is not None and not stamp.get("damaged") and stamp.get("sha256") != file_sha256(path):
        raise StampError(
            f"{path} is not the file its job wrote (damaged, edited or replaced: its sha256 "
            f"differs from the one recorded in {record}); {rebuild_hint(path)}"
        )
    return stamp


def _folder_stamp(folder: Path, full: bool = False) -> dict[str, Any] | None:
    """A folder's stamp, its files checked against the record in it (jtc.files.digests: `full`
    hashes every file, else the quick check of planning)."""
    file = folder / FOLDER_STAMP
    if not file.is_file():
        return None
    stamp = parse(file.read_text())
    files = (stamp or {}).get("files", {})
    found = digests.differences(folder, files if isinstance(files, dict) else {}, full)
    if found:
        path, why = found[0]
        raise StampError(
            f"{path} is not the file its job wrote (damaged, edited or missing: {why}; "
            f"recorded in {file}); {rebuild_hint(folder)}"
        )
    return stamp


def verify_folders(folders: list[str]) -> None:
    """Every file of each folder output against the sha256 recorded when it was written,
    whatever its mtime (what hands a folder over whole, such as `snakemake pruned`); a
    StampError naming the first file that differs and how to rebuild its folder."""
    for folder in map(Path, folders):
        _folder_stamp(folder, full=True)


def read_stamp(path: str | Path) -> dict[str, Any] | None:
    """The stamp of an output (inside a Parquet or safetensors file, a folder's stamp.json, or
    for any other file its record, checked against the file's sha256); None when it has none.
    Raises StampError when it cannot be read, or the file is not the one recorded."""
    path = Path(path)
    try:
        if path.is_dir():
            return _folder_stamp(path)
        if path.suffix == ".parquet":
            return _parquet_stamp(path)
        if path.suffix == ".safetensors":
            return _safetensors_stamp(path)
        return _recorded_stamp(path)
    except StampError:
        raise
    except (OSError, ValueError, struct.error) as exc:
        raise StampError(f"cannot read {path}: {exc}; {rebuild_hint(path)}") from exc
    except Exception as exc:  # pyarrow's own errors (a damaged footer)
        raise StampError(f"cannot read {path}: {exc}; {rebuild_hint(path)}") from exc


def stamped(path: str | Path) -> bool:
    """Whether a path is a workflow output that has a stamp: anything under results/."""
    return results_name(path) is not None


def required_stamp(path: str | Path) -> dict[str, Any]:
    """The stamp of a workflow output read by a job, checked: present, and naming this output."""
    stamp = read_stamp(path)
    if stamp is None:
        raise StampError(
            f"{path} carries no stamp saying what it is (made by an older jtc, or not by this "
            f"workflow); {rebuild_hint(path)}"
        )
    check(path, stamp)
    return stamp


def check_inputs(paths: list[str]) -> None:
    """A job's inputs under results/, each checked to be the output it is read as."""
    for path in paths:
        if stamped(path):
            required_stamp(path)
