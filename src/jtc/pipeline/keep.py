"""A failed rebuild costs nothing already computed.

Snakemake deletes a job's outputs before the job runs, so a job that then fails (a setting that
can only fail at job time, a crash, a full disk) would lose the previous result. Before a run's
jobs start, `Keeper.save` gives every file under results/ a hard link in a folder of its own (no
data is copied: jtc replaces results by renaming new files into place, never by writing into an
existing file) and keeps Snakemake's record of how each output was made. When the run fails,
`Keeper.restore` puts back every output that is gone, a folder output whole, with its content,
time stamp and record: the next run sees exactly what it saw before the failed one (so it reruns
the job while the bad setting is there, and nothing once it is reverted). A successful run drops
the links. Temporary outputs (removed on purpose once used) and outputs marked incomplete (a
killed job's) are not kept; an output with no record gets none back (the failed job's record
is deleted), so it can never pass for the failed job's result.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

TIMESTAMP = ".snakemake_timestamp"  # Snakemake's marker inside a folder output
# said when results/ cannot be kept (Keeper.save gives None)
NO_LINKS_NOTE = (
    "jtc: could not hard-link results/ into .snakemake/ (another file system?): "
    "outputs deleted by a failing job will not be put back"
)


def _outputs(results: Path) -> Iterable[Path]:
    """The output units under results/: folder outputs (they hold Snakemake's time stamp
    marker) whole, and every other file."""
    for folder, dirs, files in os.walk(results):
        here = Path(folder)
        if TIMESTAMP in files:
            dirs.clear()
            yield here
            continue
        dirs.sort()
        for name in sorted(files):
            yield here / name


def _link_tree(source: Path, target: Path) -> None:
    """Hard-link `source` (a file or a folder) at `target`."""
    if source.is_dir():
        shutil.copytree(source, target, copy_function=os.link, symlinks=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(source, target)


def drop_stale(parent: str | Path, keep: str | Path) -> None:
    """Remove the keepers' folders under `parent` left by runs that no longer live (a killed
    Snakemake: each run keeps its links in a folder named by its process id), except `keep`."""
    for folder in Path(parent).glob("*"):
        if folder == Path(keep) or not folder.name.isdigit():
            continue
        try:
            os.kill(int(folder.name), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:  # alive, but another user's
            continue


class Keeper:
    """Hard links of a run's previous outputs, and Snakemake's records of them.

    `read_record(path)`, `write_record(path, record)` and `delete_record(path)` read, write
    and delete Snakemake's metadata record of an output (its params, code, inputs), keyed by
    the output's path; `incomplete(path)` says whether Snakemake marked it incomplete."""

    def __init__(
        self,
        results: str | Path,
        folder: str | Path,
        read_record: Callable[[str], Any],
        write_record: Callable[[str, Any], None],
        delete_record: Callable[[str], Any],
        incomplete: Callable[[str], bool] = lambda path: False,
        temporary: Iterable[str] = (),
    ):
        self.results = Path(results)
        self.folder = Path(folder)
        self.read_record = read_record
        self.write_record = write_record
        self.delete_record = delete_record
        self.incomplete = incomplete
        self.temporary = list(temporary)  # glob patterns of temporary outputs
        self.records: dict[Path, Any] = {}

    @classmethod
    def of_snakemake(
        cls, results: str | Path, folder: str | Path, persistence: Callable[[], Any]
    ) -> Keeper:
        """A keeper of Snakemake's records, through its record store: `persistence()` gives the
        run's `workflow.persistence` (made once the run starts, after the Snakefile is read).
        Snakemake has no public API for a single output's record: these are its private
        methods (snakemake.persistence.Persistence, Snakemake 9)."""
        return cls(
            results,
            folder,
            lambda key: persistence()._read_record(key),
            lambda key, record: persistence()._write_record(key, record),
            lambda key: persistence()._delete_record(key),
            lambda key: bool(persistence()._filter_incomplete_keys([key])),
        )

    def _kept(self, path: Path) -> bool:
        return not any(fnmatch.fnmatch(str(path), pattern) for pattern in self.temporary)

    def save(self) -> int | None:
        """Link every output under results/ into the keeper's folder; the number linked, or
        None where hard links cannot be made (e.g. across file systems: nothing is kept)."""
        self.drop()
        self.records.clear()
        if not self.results.is_dir():
            return 0
        try:
            for path in _outputs(self.results):
                if self._kept(path) and not self.incomplete(str(path)):
                    _link_tree(path, self.folder / path.relative_to(self.results))
                    self.records[path] = self.read_record(str(path))
        except OSError:
            self.drop()
            self.records.clear()
            return None
        return len(self.records)

    def restore(self) -> list[Path]:
        """Put back every saved output that is gone now, with Snakemake's record of it; then
        drop the links. The outputs put back."""
        restored = []
        for path, record in self.records.items():
            if path.exists():
                continue
            saved = self.folder / path.relative_to(self.results)
            if not saved.exists():
                continue
            _link_tree(saved, path)
            if record is None:
                self.delete_record(str(path))
            else:
                self.write_record(str(path), record)
            restored.append(path)
        self.drop()
        return restored

    def restore_note(self) -> str | None:
        """`restore`, and what it put back, said in a line (None: nothing)."""
        restored = self.restore()
        if not restored:
            return None
        return (
            f"jtc: put back {len(restored)} outputs that failed jobs had deleted "
            f"(e.g. {restored[0]}); they and their records are as before this run"
        )

    def drop(self) -> None:
        """Forget the saved outputs (after a successful run, or once restored)."""
        self.records.clear()
        shutil.rmtree(self.folder, ignore_errors=True)
