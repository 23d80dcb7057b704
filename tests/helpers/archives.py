"""Archives and dumps as their sources ship them: gzipped tar archives built from (name, data,
kind) members (files, symlinks, hard links), Leipzig Corpora Collection archives and MediaWiki
XML dumps (bz2)."""

import bz2
import io
import tarfile
from xml.sax.saxutils import escape

import numpy as np

EXPORT_NS = "http://www.mediawiki.org/xml/export-0.11/"


def make_tar(path, members):
    """members: list of (TarInfo-like dict, bytes or None)."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, data
                tar.addfile(info)
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, data
                tar.addfile(info)
    return path


WORDS = (
    "the a of to in and is was for on that with as by at from it they this city river king "
    "music war year people first new state school team game world house water time day life "
    "work book film song army church party group law north south played wrote built won lost"
).split()


def sentences(count, seed=0, words=None):
    """`count` distinct made-up English sentences of 6 to 12 words (a seeded draw)."""
    rng = np.random.default_rng(seed)
    found, vocabulary = [], words or WORDS
    while len(found) < count:
        text = " ".join(rng.choice(vocabulary, size=rng.integers(6, 13))).capitalize() + "."
        if text not in found:
            found.append(text)
    return found


def make_leipzig(path, lines, name="eng_news_2020_10K"):
    """A Leipzig Corpora Collection archive as the collection ships it: NAME/NAME-sentences.txt
    (`id<TAB>sentence` lines, numbered from 1) beside its words and sources files."""
    body = "".join(f"{i}\t{line}\n" for i, line in enumerate(lines, 1)).encode()
    return make_tar(
        path,
        [
            (f"{name}/{name}-sentences.txt", body, "file"),
            (f"{name}/{name}-words.txt", b"1\tthe\t100\n", "file"),
            (f"{name}/{name}-sources.txt", b"1\thttps://example.org/\t2020-01-01\n", "file"),
        ],
    )


def _page(page_id, title, ns, text, redirect=None):
    target = f'    <redirect title="{escape(redirect)}" />\n' if redirect else ""
    return (
        f"  <page>\n    <title>{escape(title)}</title>\n    <ns>{ns}</ns>\n"
        f"    <id>{page_id}</id>\n{target}    <revision>\n      <id>{1000 + page_id}</id>\n"
        "      <timestamp>2024-01-01T00:00:00Z</timestamp>\n"
        "      <contributor><username>Tester</username><id>1</id></contributor>\n"
        "      <model>wikitext</model>\n      <format>text/x-wiki</format>\n"
        f'      <text bytes="{len(text.encode())}" xml:space="preserve">{escape(text)}</text>\n'
        "      <sha1>0</sha1>\n    </revision>\n  </page>\n"
    )


def mediawiki_xml(articles, extra_pages=()):
    """A MediaWiki XML export (schema 0.11, as dumps.wikimedia.org's pages-articles files):
    `articles` {title: wikitext} in namespace 0, then `extra_pages` (title, ns, text,
    redirect target or None)."""
    pages = [_page(i, title, 0, text) for i, (title, text) in enumerate(articles.items(), 1)]
    start = len(pages) + 1
    pages += [_page(start + i, *page) for i, page in enumerate(extra_pages)]
    return (
        f'<mediawiki xmlns="{EXPORT_NS}" version="0.11" xml:lang="en">\n  <siteinfo>\n'
        "    <sitename>Testwiki</sitename>\n    <dbname>testwiki</dbname>\n"
        "    <base>https://test.example.org/wiki/Main_Page</base>\n"
        "    <generator>MediaWiki 1.42.0</generator>\n    <case>first-letter</case>\n"
        '    <namespaces>\n      <namespace key="0" case="first-letter" />\n'
        '      <namespace key="1" case="first-letter">Talk</namespace>\n    </namespaces>\n'
        "  </siteinfo>\n" + "".join(pages) + "</mediawiki>\n"
    )


def make_mediawiki_dump(path, articles, extra_pages=()):
    """mediawiki_xml(articles, extra_pages), bz2-compressed, written to `path`."""
    path.write_bytes(bz2.compress(mediawiki_xml(articles, extra_pages).encode()))
    return path
