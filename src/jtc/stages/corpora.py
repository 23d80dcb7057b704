"""Stages of workflow/rules/corpora.smk: fetch a corpus file by URL, build the sentence table."""

from __future__ import annotations

from pathlib import Path


def download_corpus(
    name: str,
    url: str,
    sha256: str | None,
    out: str,
    *,
    max_bytes: int | None,
    timeout: float | None,
    max_seconds: float | None = None,
) -> None:
    """Fetch a corpus's file (a Leipzig archive, a MediaWiki dump) by URL, checked against
    `sha256` when it is given, refused beyond `max_bytes` (none:
    jtc.data.sources.MAX_DOWNLOAD_BYTES), given up on after `timeout` seconds without data
    (none: jtc.data.downloads.DOWNLOAD_TIMEOUT) or `max_seconds` in all (none: sized from the
    expected length, jtc.data.downloads.time_limit)."""
    from jtc.data.downloads import download

    download(
        url, Path(out), sha256, max_bytes, timeout=timeout, max_seconds=max_seconds, corpus=name
    )


def prepare_corpus(
    name: str, spec: dict, archive: str | None, out: str, *, seed: int, validation_fraction: float
) -> None:
    """The sentence table: cleaned, de-duplicated sentences, each assigned to a split."""
    from jtc.data.corpus import sentence_table
    from jtc.data.sources import read_source
    from jtc.files.io import write_table
    from jtc.logs import ready

    ready()
    pairs = read_source(spec, Path(archive) if archive else None)
    write_table(
        sentence_table(pairs, name, seed, validation_fraction, spec.get("max_sentences")), out
    )
