"""Corpus files downloaded over HTTP from a local server (127.0.0.1), whole or broken: a wrong
checksum, a transfer cut short, a server that stalls; and MediaWiki dumps read as corpora."""

import bz2
import hashlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from archives import make_leipzig, make_mediawiki_dump, mediawiki_xml, sentences
from http_files import serving

from jtc.data import downloads, sources
from jtc.data.corpus import CorpusError


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    """Loopback requests never go through a proxy the environment may name."""
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def server():
    with serving(stall_s=20) as files:
        yield files


@pytest.fixture
def archive(tmp_path):
    return make_leipzig(tmp_path / "src.tar.gz", sentences(40)).read_bytes()


def left(folder):
    """The names of the files under `folder` (none if it is missing)."""
    return sorted(p.name for p in folder.rglob("*")) if folder.exists() else []


def test_a_download_over_http_is_checked_and_put_in_place(server, archive, tmp_path):
    url = server.add("/c.tar.gz", archive)
    digest = hashlib.sha256(archive).hexdigest()
    dest = tmp_path / "downloads" / "c.tar.gz"
    assert downloads.download(url, dest, digest.upper(), corpus="c") == digest
    assert dest.read_bytes() == archive and left(dest.parent) == ["c.tar.gz"]
    assert len(list(sources.read_leipzig(dest))) == 40


def test_a_wrong_checksum_is_refused_and_a_fixed_rerun_downloads_again(server, archive, tmp_path):
    url = server.add("/c.tar.gz", archive)
    dest = tmp_path / "downloads" / "c.tar.gz"
    with pytest.raises(CorpusError) as err:
        downloads.download(url, dest, "0" * 64, corpus="leip")
    message = str(err.value)
    assert f"checksum mismatch for {url}" in message and "corpora.leip.sha256" in message
    # nothing at the path a reader takes; the download set aside, named in the message
    assert left(dest.parent) == ["c.tar.gz.rejected"] and "c.tar.gz.rejected" in message
    digest = hashlib.sha256(archive).hexdigest()
    assert downloads.download(url, dest, digest, corpus="leip") == digest
    assert left(dest.parent) == ["c.tar.gz"]  # the rejected copy went with the good download
    assert server.requests["/c.tar.gz"] == 2


@pytest.mark.parametrize(
    "mode, timeout, problem",
    [
        ("cut", None, r"was cut short: \d+ of the \d+ bytes the server announced arrived"),
        ("stall", 0.5, r"the server stalled before sending any data \(no data for 0.5 s\)"),
        ("stall_body", 0.5, r"the server stalled after \d+ bytes \(no data for 0.5 s\)"),
    ],
)
def test_a_broken_transfer_is_refused_and_leaves_nothing(
    server, archive, tmp_path, mode, timeout, problem
):
    url = server.add("/c.tar.gz", archive, mode)
    dest = tmp_path / "downloads" / "c.tar.gz"
    digest = hashlib.sha256(archive).hexdigest()
    with pytest.raises(CorpusError, match=problem) as err:
        downloads.download(url, dest, digest, timeout=timeout, corpus="leip")
    message = str(err.value)
    assert url in message and "nothing was kept" in message and "Rerun" in message
    if mode != "cut":
        assert "raise corpora.leip.timeout" in message
    assert left(dest.parent) == []  # no partial file, nothing set aside
    server.modes["/c.tar.gz"] = "whole"  # the server mended: the same call succeeds
    assert downloads.download(url, dest, digest, timeout=timeout) == digest


def test_a_dripping_download_is_refused_at_its_time_limit(server, archive, tmp_path):
    """A byte every 0.1 s never stalls for `timeout`; max_seconds ends it, nothing kept."""
    url = server.add("/c.tar.gz", archive, "drip")
    dest = tmp_path / "downloads" / "c.tar.gz"
    start = time.monotonic()
    with pytest.raises(CorpusError) as err:
        downloads.download(url, dest, None, timeout=5, max_seconds=1.0, corpus="leip")
    assert time.monotonic() - start < 4
    message = str(err.value)
    got = re.search(rf"(\d+) of the {len(archive)} bytes announced arrived in (\d+\.\d) s", message)
    assert got and 1 <= int(got[1]) < len(archive) and float(got[2]) >= 1.0, message
    assert f"download {url} took too long" in message and "limit of 1.0 s" in message
    assert "nothing was kept" in message and "raise corpora.leip.max_seconds" in message
    assert left(dest.parent) == []
    # a slow download within its limit passes
    small = server.add("/s.tar.gz", b"0123456789", "drip")
    assert downloads.download(small, dest, None, timeout=5, max_seconds=30, corpus="leip")
    assert dest.read_bytes() == b"0123456789"


def test_the_default_time_limit_is_sized_from_the_expected_length(
    server, archive, tmp_path, monkeypatch
):
    base, rate = downloads.DOWNLOAD_BASE_S, downloads.DOWNLOAD_MIN_RATE
    assert downloads.time_limit(None, 10 * rate, 0) == base + 10  # from the Content-Length
    assert downloads.time_limit(None, None, 3 * rate) == base + 3  # else from what arrived
    assert downloads.time_limit(7.5, 10 * rate, 0) == 7.5  # max_seconds set
    monkeypatch.setattr(downloads, "DOWNLOAD_BASE_S", 0.5)
    url = server.add("/c.tar.gz", archive)
    dest = tmp_path / "downloads" / "c.tar.gz"
    assert downloads.download(url, dest, None, corpus="w")  # a normal download is in time
    server.modes["/c.tar.gz"] = "drip"
    with pytest.raises(CorpusError, match=r"over its limit of 0\.5 s \(0\.5 s plus 1 s per"):
        downloads.download(url, dest, None, corpus="w")
    assert left(dest.parent) == ["c.tar.gz"]  # the earlier, whole download untouched


def test_a_sigterm_ends_a_download_at_once_and_leaves_nothing(server, archive, tmp_path):
    """Snakemake stopping the job: the download, waiting on a dripping server, ends within a
    few seconds (not at its time limit) and its partial file is deleted."""
    url = server.add("/c.tar.gz", archive, "drip")
    dest = tmp_path / "downloads" / "c.tar.gz"
    code = (
        "import sys; from pathlib import Path; from jtc.data.downloads import download; "
        "download(sys.argv[1], Path(sys.argv[2]), None, timeout=60, max_seconds=600)"
    )
    src = Path(downloads.__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(src), "no_proxy": "127.0.0.1"}
    child = subprocess.Popen(
        [sys.executable, "-c", code, url, str(dest)], env=env, stderr=subprocess.PIPE, text=True
    )
    part = dest.with_name("c.tar.gz.part")
    deadline = time.monotonic() + 30
    while not part.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert part.exists(), "the download did not start"
    time.sleep(0.5)  # a few bytes in: the read waits on the server
    child.send_signal(signal.SIGTERM)
    start = time.monotonic()
    try:
        _, stderr = child.communicate(timeout=10)
    finally:
        child.kill()
    assert time.monotonic() - start < 5 and child.returncode != 0
    assert f"download {url} was stopped (SIGTERM)" in stderr and "nothing was kept" in stderr
    assert left(dest.parent) == []


def test_a_missing_file_on_the_server_is_named(server, tmp_path):
    url = server.base + "/none.xml.bz2"
    dest = tmp_path / "downloads" / "w.xml.bz2"
    with pytest.raises(CorpusError, match=re.escape(f"cannot download {url}: HTTP Error 404")):
        downloads.download(url, dest, None, corpus="w")
    assert left(dest.parent) == []


# --- MediaWiki dumps -------------------------------------------------------------------------


ARTICLES = {
    "River city": (
        "'''River city''' is a [[city|town]] on the [[river]].{{citation needed}} "
        "The king built a new house there.<ref>A source.</ref>\n"
        "== History ==\n* a list item that is dropped\n"
        "The army won the war in the first year."
    ),
    "Music": "{{Infobox music|genre=x}}\nThe people played a new song at the school.",
}
OTHER_PAGES = [
    ("Riverside", 0, "#REDIRECT [[River city]] and the water went north.", "River city"),
    ("Talk:Music", 1, "This talk page sentence is never read at all.", None),
]


def test_a_mediawiki_dump_gives_its_articles_sentences(tmp_path):
    dump = make_mediawiki_dump(tmp_path / "w.xml.bz2", ARTICLES, OTHER_PAGES)
    # the articles' sentences, markup dropped, each with its article's title; not the redirect
    # nor the talk page
    assert list(sources.read_mediawiki(dump)) == [
        ("River city is a town on the river.", "River city"),
        ("The king built a new house there.", "River city"),
        ("The army won the war in the first year.", "River city"),
        ("The people played a new song at the school.", "Music"),
    ]


def test_a_mediawiki_dump_is_read_bounded(tmp_path, monkeypatch):
    long_article = {"Long": " ".join(sentences(400, seed=1))}
    dump = make_mediawiki_dump(tmp_path / "w.xml.bz2", long_article)
    inflated = len(mediawiki_xml(long_article).encode())
    # the XML is read up to DUMP_INFLATION times max_bytes
    with pytest.raises(CorpusError, match=r"\(decompressed\) has more than the limit"):
        list(sources.read_mediawiki(dump, max_bytes=inflated // sources.DUMP_INFLATION - 1))
    assert len(list(sources.read_mediawiki(dump, max_bytes=inflated))) == 400
    # one page is held whole while it is parsed: at most MAX_PAGE_BYTES
    monkeypatch.setattr(sources, "MAX_PAGE_BYTES", 4096)
    with pytest.raises(CorpusError, match="a page of the MediaWiki dump has more than the limit"):
        list(sources.read_mediawiki(dump))


@pytest.mark.parametrize(
    "data", [b"not bz2 at all", bz2.compress(b"<mediawiki><page><title>x</ti")]
)
def test_a_file_that_is_no_mediawiki_dump_is_named(tmp_path, data):
    dump = tmp_path / "w.xml.bz2"
    dump.write_bytes(data)
    with pytest.raises(CorpusError, match=re.escape(f"cannot read MediaWiki dump {dump}")):
        list(sources.read_mediawiki(dump))


# --- the config ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "corpus, problem",
    [
        ({"source": "mediawiki"}, "'corpora.c.url' is required for source 'mediawiki'"),
        ({"source": "mediawiki", "url": "ftp://x/y.bz2"}, "corpora.c.url"),
        ({"source": "leipzig", "url": "https://x/y", "timeout": 0}, "corpora.c.timeout"),
        (
            {"source": "gensim_wiki", "timeout": 5},
            "url/sha256/timeout/max_seconds apply only to sources",
        ),
        ({"source": "text_file", "path": "x", "sha256": "0" * 64}, "apply only to sources"),
    ],
)
def test_download_keys_are_checked(corpus, problem):
    from configs import BASE

    from jtc.pipeline.config import ConfigError, validate_config

    with pytest.raises(ConfigError, match=re.escape(problem)):
        validate_config({**BASE, "corpora": {"c": corpus}})


def test_a_mediawiki_corpus_is_planned_with_its_download(tmp_path):
    from configs import BASE

    from jtc import paths
    from jtc.pipeline.config import ConfigError
    from jtc.pipeline.planning import checked_config

    spec = {"source": "mediawiki", "url": "https://example.org/w.xml.bz2", "timeout": 2.5}
    checked = checked_config({**BASE, "corpora": {"w": spec}}, [])
    assert checked["corpora"]["w"] == spec
    assert paths.download("w", "mediawiki") == "data/downloads/w.xml.bz2"
    assert paths.download("n", "leipzig") == "data/downloads/n.tar.gz"  # as before
    assert sources.reading_spec(spec) == {"source": "mediawiki", "url": spec["url"]}
    missing = (tmp_path / "missing.xml.bz2").as_uri()
    with pytest.raises(ConfigError, match=r"'corpora.w.url': '.*missing.xml.bz2' does not exist"):
        checked_config({**BASE, "corpora": {"w": {**spec, "url": missing}}}, [])


def test_a_mediawiki_download_is_fingerprinted_like_an_archive(tmp_path, monkeypatch):
    from jtc.pipeline.fingerprint import corpus_fingerprint

    monkeypatch.chdir(tmp_path)
    content = b"a dump"
    sha = hashlib.sha256(content).hexdigest()
    spec = {"source": "mediawiki", "url": "https://example.org/w.xml.bz2", "sha256": sha}
    assert corpus_fingerprint("w", spec) == f"sha256:{sha}"  # before the download: the pin
    (tmp_path / "data/downloads").mkdir(parents=True)
    (tmp_path / "data/downloads/w.xml.bz2").write_bytes(b"replaced by hand")
    assert corpus_fingerprint("w", spec) != f"sha256:{sha}"  # after: the file's own


def test_a_chunked_transfer_cut_short_is_refused(tmp_path):
    """No Content-Length, chunks, the connection closed inside one: refused, nothing kept."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/w.xml.bz2"

    def serve_once():
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n" + b"x" * 100
            )

    thread = threading.Thread(target=serve_once)
    thread.start()
    dest = tmp_path / "downloads" / "w.xml.bz2"
    try:
        with pytest.raises(CorpusError, match=re.escape(f"download {url} was cut short")):
            downloads.download(url, dest, None, timeout=5, corpus="w")
    finally:
        thread.join(timeout=10)
        listener.close()
    assert left(dest.parent) == []
