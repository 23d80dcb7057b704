"""Files: Parquet tables, JSON and atomic writes (the hidden-state format built on them is
jtc.data.states).

Every output is written under a temporary name beside its final path and renamed into place only
when complete, so an interrupted job never leaves a file that a later run would trust. Parquet
pages carry CRC checksums, verified on every read, and every Parquet file written here keeps a
sha256 of each column's values in its metadata, verified for the columns a read returns: damage
anywhere (a page, a page header, the footer) that changes a value is an error, not a number. A
file written by a workflow job also carries its stamp (jtc.files.stamps), checked by every read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from jtc.files import stamps
from jtc.files.stamps import CorruptFileError

__all__ = ["CorruptFileError"]
DIGESTS = "jtc.digests"  # Parquet metadata: {column: sha256 of its values}


def _tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def _remove_leftovers(final: Path) -> None:
    """Temporary siblings of `final` left by a job that was killed (one job writes an output
    at a time, so any that exist now are stale)."""
    for stale in final.parent.glob(f".{final.name}.tmp-*"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path; on success rename it onto `path`, on failure remove it."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(final)
    tmp = _tmp_name(final)
    try:
        yield tmp
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary folder; on success it replaces `path` (a folder) in one rename."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(final)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the result is an ordinary folder
    try:
        with stamps.writing_into(tmp, final):  # its files are stamped as under `final`
            yield tmp
        stamps.write_folder_stamp(tmp, final)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise CorruptFileError(
            f"cannot read JSON file {path}: {exc}; {stamps.rebuild_hint(path)}"
        ) from exc


def write_table(table: pa.Table, path: str | os.PathLike, csv: bool = False) -> None:
    """Write a Parquet table atomically; with `csv`, a CSV copy next to it (the HTML page the
    report shows beside a table is jtc.report.pages.write_table_with_page's)."""
    table = table.replace_schema_metadata(
        {**(table.schema.metadata or {}), **parquet_metadata(path, ColumnDigests.of(table))}
    )
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd", write_page_checksum=True)
    if csv:
        import pyarrow.csv as pacsv

        with atomic_path(Path(path).with_suffix(".csv")) as tmp:
            pacsv.write_csv(table, tmp)


def rows_table(rows: list[dict[str, Any]], schema: dict[str, pa.DataType]) -> pa.Table:
    """A table from row dicts, with the columns and types of `schema` (missing keys: null)."""
    return pa.table({c: pa.array([r.get(c) for r in rows], t) for c, t in schema.items()})


class ColumnDigests:
    """sha256 of each column's values, fed a table (or the successive tables of a file written
    in pieces) at a time; the same for a file however its rows were split into pieces."""

    def __init__(self, names: list[str]):
        # per column: the values, the null mask, and (lists of fixed size) the lists' null mask
        self.hashes = {name: [hashlib.sha256() for _ in range(3)] for name in names}

    @classmethod
    def of(cls, table: pa.Table) -> ColumnDigests:
        digests = cls(table.column_names)
        digests.update(table)
        return digests

    def update(self, table: pa.Table) -> None:
        for name in table.column_names:
            for chunk in table.column(name).chunks:
                _feed(self.hashes[name], chunk)

    def hexdigests(self) -> dict[str, str]:
        return {
            name: hashlib.sha256(b"".join(h.digest() for h in hashes)).hexdigest()
            for name, hashes in self.hashes.items()
        }


def _mask(values: pa.Array) -> bytes:
    return values.is_null().to_numpy(zero_copy_only=False).tobytes()


def _feed(hashes: list, values: pa.Array) -> None:
    """Add an array's values to a column's hashes: numbers as their bytes (nulls as a mask), a
    list of fixed size as its numbers, anything else value by value as JSON."""
    digest, nulls, lists = hashes
    kind = values.type
    if pa.types.is_fixed_size_list(kind):
        lists.update(_mask(values))
        values = values.flatten()
        kind = values.type
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
        nulls.update(_mask(values))
        filled = pc.fill_null(values, False if pa.types.is_boolean(kind) else 0)
        digest.update(filled.to_numpy(zero_copy_only=False).tobytes())
        return
    for value in values.to_pylist():
        digest.update(json.dumps(value, default=str, sort_keys=True).encode() + b"\n")


def parquet_metadata(path: str | os.PathLike, digests: ColumnDigests) -> dict[bytes, bytes]:
    """The jtc metadata of a Parquet file: its column digests and, in a job, its stamp."""
    meta = {DIGESTS.encode(): json.dumps(digests.hexdigests(), sort_keys=True).encode()}
    stamp = stamps.stamp_for(path)
    if stamp is not None:
        meta[stamps.KEY.encode()] = stamp.encode()
    return meta


def _verify(path: str | os.PathLike, table: pa.Table, meta: dict[bytes, bytes]) -> None:
    """Check a table read from `path` against the digests and the stamp its file stores
    (`meta`, the file's key-value metadata)."""
    stamps.check(path, stamps.parse(meta.get(stamps.KEY.encode())))
    if DIGESTS.encode() not in meta:
        return  # written by pyarrow directly (a test, an older jtc): pages' checksums only
    try:
        want = json.loads(meta[DIGESTS.encode()])
    except ValueError:
        want = None
    if not isinstance(want, dict):
        raise CorruptFileError(
            f"{path}: its column digests are damaged; {stamps.rebuild_hint(path)}"
        )
    for name, got in ColumnDigests.of(table).hexdigests().items():
        if want.get(name) != got:
            raise CorruptFileError(
                f"{path}: column '{name}' does not match the digest stored when it was written "
                f"(the file is damaged); {stamps.rebuild_hint(path)}"
            )


def read_table(path: str | os.PathLike, columns: list[str] | None = None) -> pa.Table:
    """A Parquet file, its pages' checksums and the returned columns' digests verified, and its
    stamp checked against the path it is read as."""
    if not Path(path).exists():
        raise FileNotFoundError(f"no such Parquet file: {path}")
    try:
        with pq.ParquetFile(path, page_checksum_verification=True) as file:
            meta = file.metadata.metadata or {}
            table = file.read(columns=columns)
    except (OSError, ValueError, KeyError, IndexError, pa.ArrowException) as exc:
        # (a damaged footer can surface as any of these, e.g. an undecodable column name)
        raise CorruptFileError(
            f"cannot read Parquet file {path}: {exc}; {stamps.rebuild_hint(path)}"
        ) from exc
    _verify(path, table, meta)
    return table


def read_tables(paths: Mapping[str, str | os.PathLike]) -> dict[str, pa.Table]:
    """read_table of every path of `paths` (name -> file), keyed and ordered as `paths` is."""
    return {name: read_table(path) for name, path in paths.items()}


def write_tables(tables: Mapping[str, pa.Table], paths: Mapping[str, str | os.PathLike]) -> None:
    """write_table of every table of `tables` (name -> table) to its path in `paths`, in the
    order of `paths`."""
    for name, path in paths.items():
        write_table(tables[name], path)


def write_or_check(path: Path, text: str, check: bool, stale: str) -> int:
    """A generated file's command-line end: with `check`, 1 (printing `stale`) if `path` holds
    other text than `text`, else 0; without, write `text` to `path` and return 0."""
    if check:
        if text != path.read_text():
            print(stale)
            return 1
        return 0
    path.write_text(text)
    return 0
