"""Content fingerprints of the inputs that come from outside the workflow.

A text corpus, a local model folder or GGUF file, a model folder inside an installed package and
a downloaded archive can be replaced by a copy with other content but an older modification time
(`cp -p`, `rsync -a`, `tar x`), which Snakemake's time stamps miss. The rules that read them get
their fingerprint as a `params:` value, and a changed param reruns a job (Snakemake's default
rerun triggers include params), whatever the time stamps say.

A fingerprint is the sha256 of a file's bytes, or of a folder's sorted (relative name, file
sha256) list. sha256 (with the CPU's SHA instructions) hashed 0.96 GB/s on the 2-core
development machine, blake2b 0.35 GB/s. Each file's digest is cached in a JSON file,
`.snakemake/jtc-fingerprints.json` under the working directory, under its absolute path with its
size, inode, device, mtime and ctime: a rerun only stats the files. The ctime is what no tool can
set back, so a rewrite that keeps the size, inode and mtime is still seen. A file changed less
than RACY_SECONDS before it was hashed is hashed again next time (a change within the same clock
tick could leave every time stamp equal). A missing or damaged cache is recomputed; it is
written to a temporary file renamed into place, merged with what other processes wrote
meanwhile. Entries of deleted files are kept (see corpus_fingerprint).

Standard library only (and jtc.model.sources, torch-free): the workflow calls it while it plans.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jtc.files.stamps import file_sha256

ALGORITHM = "sha256"
CACHE = Path(".snakemake", "jtc-fingerprints.json")  # under the working directory
CACHE_VERSION = 1
RACY_SECONDS = 2.0  # a file changed this recently is hashed again next time
# left out of a folder's fingerprint, with every name starting with "." (.git, huggingface_hub's
# .cache): never read by a model loader, and changed by tools on their own
SKIPPED_DIRS = frozenset({"__pycache__"})

# [size, inode, device, mtime_ns, ctime_ns]: a cached digest is used only while all are equal
StatKey = list[int]
# the key of a digest kept only as a file's last known one (see corpus_fingerprint),
# never used for the file as it is: it was changed too recently, or while it was read
UNSETTLED: StatKey = [-1, -1, -1, -1, -1]


def _stat_key(st: os.stat_result) -> StatKey:
    return [st.st_size, st.st_ino, st.st_dev, st.st_mtime_ns, st.st_ctime_ns]


_hash_file = file_sha256  # (a module attribute: the tests count its calls)


class FingerprintCache:
    """The digests of files, by absolute path, valid while their stat key is unchanged. The
    entry of a deleted file is kept: its last known digest (see `last`)."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path if path is not None else CACHE).absolute()
        self.entries = self._read()
        self.new: dict[str, list[Any]] = {}

    def _read(self) -> dict[str, list[Any]]:
        """The cached entries; none for a missing, unreadable or damaged cache."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if (
            not isinstance(data, dict)
            or data.get("version") != CACHE_VERSION
            or data.get("algorithm") != ALGORITHM
            or not isinstance(data.get("files"), dict)
        ):
            return {}
        return {k: v for k, v in data["files"].items() if _valid_entry(v)}

    def digest(self, path: str) -> str:
        """The digest of the regular file at absolute `path`: cached, or read and cached."""
        before = os.stat(path)
        key = _stat_key(before)
        entry = self.new.get(path) or self.entries.get(path)
        if entry is not None and entry[:5] == key:
            return str(entry[5])
        started = time.time_ns()
        digest = _hash_file(path)
        settled = before.st_ctime_ns < started - int(RACY_SECONDS * 1e9)
        trusted = settled and _stat_key(os.stat(path)) == key
        self.new[path] = [*(key if trusted else UNSETTLED), digest]
        return digest

    def last(self, path: str) -> str | None:
        """The last digest known of the file at absolute `path`, whatever the file is now, or
        whether it is still there; None if it was never hashed here."""
        entry = self.new.get(path) or self.entries.get(path)
        return None if entry is None else str(entry[5])

    def save(self) -> None:
        """Write the new digests, merged into the cache as it is now on disk (another process
        may have written it meanwhile). A cache that cannot be written is left as it is: the
        digests are computed again next time."""
        if not self.new:
            return
        files = {**self._read(), **self.new}
        data = {"version": CACHE_VERSION, "algorithm": ALGORITHM, "files": files}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._remove_stale()
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        except OSError:
            return
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(data, handle, separators=(",", ":"))
            os.replace(tmp, self.path)
        except OSError:
            Path(tmp).unlink(missing_ok=True)
            return
        self.entries, self.new = files, {}

    def _remove_stale(self) -> None:
        """Temporary files left by processes killed while writing (an hour old or more)."""
        for tmp in self.path.parent.glob(f".{self.path.name}.*"):
            try:
                if time.time() - tmp.stat().st_mtime > 3600:
                    tmp.unlink()
            except OSError:
                pass


def _valid_entry(entry: Any) -> bool:
    return (
        isinstance(entry, list)
        and len(entry) == 6
        and all(isinstance(v, int) and not isinstance(v, bool) for v in entry[:5])
        and isinstance(entry[5], str)
    )


def _folder_files(root: str) -> list[tuple[str, str]]:
    """(relative name with '/', absolute path) of every regular file under a folder, symbolic
    links followed (a model in the Hugging Face cache is links to blobs; a link back to a folder
    being walked is not followed again), names starting with '.' and __pycache__ left out;
    sorted by name."""
    found: list[tuple[str, str]] = []

    def walk(folder: str, relative: str, ancestors: frozenset[tuple[int, int]]) -> None:
        with os.scandir(folder) as it:
            entries = list(it)
        for entry in entries:
            if entry.name.startswith(".") or entry.name in SKIPPED_DIRS:
                continue
            name = f"{relative}{entry.name}"
            try:
                st = os.stat(entry.path)  # follows links
            except OSError:  # a dangling link: no content to read
                continue
            if stat.S_ISDIR(st.st_mode):
                node = (st.st_dev, st.st_ino)
                if node not in ancestors:
                    walk(entry.path, f"{name}/", ancestors | {node})
            elif stat.S_ISREG(st.st_mode):
                found.append((name, entry.path))

    top = os.stat(root)
    walk(root, "", frozenset({(top.st_dev, top.st_ino)}))
    return sorted(found)


def fingerprint(path: str | os.PathLike[str], cache: FingerprintCache | None = None) -> str:
    """The content fingerprint of a regular file ('sha256:<hex>', the sha256 of its bytes) or
    a folder ('sha256-folder:<hex>', over the sorted relative names and digests of its files).
    With no `cache`, the working directory's cache is read and written back."""
    own = cache is None
    if cache is None:
        cache = FingerprintCache()
    absolute = os.path.abspath(path)
    mode = os.stat(absolute).st_mode
    if stat.S_ISREG(mode):
        result = f"{ALGORITHM}:{cache.digest(absolute)}"
    elif stat.S_ISDIR(mode):
        listing = hashlib.new(ALGORITHM)
        for name, file in _folder_files(absolute):
            listing.update(os.fsencode(name) + b"\0" + cache.digest(file).encode() + b"\n")
        result = f"{ALGORITHM}-folder:{listing.hexdigest()}"
    else:
        raise ValueError(f"'{path}' is neither a regular file nor a folder")
    if own:
        cache.save()
    return result


def fingerprint_if_present(
    path: str | os.PathLike[str], cache: FingerprintCache | None = None
) -> str | None:
    """fingerprint(), or None for a path that does not exist or is neither a file nor a folder
    (the rule's own checks say what is wrong with it)."""
    try:
        return fingerprint(path, cache)
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None


def corpus_fingerprint(
    name: str, spec: Mapping[str, Any], cache: FingerprintCache | None = None
) -> str | None:
    """The fingerprint of what prepare_corpus reads from outside the workflow: a text_file's
    text, a leipzig or mediawiki corpus's downloaded file; None otherwise.

    An archive that is not there (yet) is downloaded in the run, after its prepare_corpus job
    was planned with this value, and Snakemake records the value it planned with. So that the
    next run does not find it changed: the sha256 the config expects (which a download must
    match), else the archive's last known fingerprint, else None."""
    if spec["source"] == "text_file":
        return fingerprint_if_present(spec["path"], cache)
    from jtc.paths import DOWNLOAD_SUFFIXES, download

    if spec["source"] not in DOWNLOAD_SUFFIXES:
        return None

    own = cache is None
    if cache is None:
        cache = FingerprintCache()
    archive = os.path.abspath(download(name, spec["source"]))
    found = fingerprint_if_present(archive, cache)
    if own:
        cache.save()
    if found is not None:
        return found
    if spec.get("sha256"):
        return f"{ALGORITHM}:{str(spec['sha256']).lower()}"
    last = cache.last(archive)
    return None if last is None else f"{ALGORITHM}:{last}"


def model_fingerprint(spec: Mapping[str, Any], cache: FingerprintCache | None = None) -> str | None:
    """The fingerprint of the weights resolve_model reads (jtc.model.sources): a local or packaged
    model folder, or the GGUF file alone (the only file read from its folder); a "parts:"
    source's pinned sha256 (what joining checks); None for a hub id (the id and revision are
    params already) or a source that is not there."""
    from jtc.model.joined import Parts, is_parts
    from jtc.model.sources import candidates

    if is_parts(dict(spec)):
        return f"sha256:{Parts.of(dict(spec)).sha256}"

    found, _ = candidates(dict(spec))
    if not found or found[0].kind == "hub":
        return None
    source = found[0]
    path = Path(source.location)
    return fingerprint_if_present(path / source.gguf_file if source.gguf_file else path, cache)
