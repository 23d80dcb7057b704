"""Corpus files fetched by URL (a Leipzig archive, a MediaWiki dump), over http(s):// or from a
file:// URL: bounded in size (max_bytes), in waiting (timeout) and in total time (max_seconds),
checked against the pinned sha256, and put in place only whole and checked. A failed download
leaves no file behind but, on a checksum mismatch, the download set aside as `<dest>.rejected`
for inspection. A SIGTERM (Snakemake stopping the job) ends a download at once, its partial
file deleted.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from jtc.data import sources
from jtc.data.corpus import CorpusError
from jtc.files.digests import file_sha256

log = logging.getLogger(__name__)

# seconds a download may wait for the server: to connect, and for each block of data (a stalled
# server is given up on after this long without a byte); corpora.NAME.timeout
DOWNLOAD_TIMEOUT = 60.0
# the total time a download may take, corpora.NAME.max_seconds unset: DOWNLOAD_BASE_S plus one
# second per DOWNLOAD_MIN_RATE bytes expected (the Content-Length the server announces, else the
# bytes received so far: the download must then average this rate after the first
# DOWNLOAD_BASE_S seconds). A normal slow download passes; a server dripping a byte at a time,
# never stalling for `timeout`, is given up on.
DOWNLOAD_BASE_S = 120.0
DOWNLOAD_MIN_RATE = 50_000  # bytes per second (50 kB/s)
_BLOCK = 1 << 20


class _Overdue(Exception):
    """The download took longer than its time limit."""


class _Terminated(BaseException):
    """A SIGTERM arrived during the download (raised by its handler, ending a blocked read)."""


@contextlib.contextmanager
def _ending_on_sigterm() -> Iterator[None]:
    """Within the block a SIGTERM raises _Terminated, so that a read waiting for the server ends
    at once (and the partial file can be deleted); the previous handler is put back after. Only
    in the main thread (the only one Python runs signal handlers in): elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def time_limit(max_seconds: float | None, announced: int | None, received: int) -> float:
    """The seconds a download may take in all: `max_seconds` when set, else DOWNLOAD_BASE_S plus
    the expected bytes (`announced` by the server, else those `received` so far) at
    DOWNLOAD_MIN_RATE."""
    if max_seconds is not None:
        return max_seconds
    expected = announced if announced is not None else received
    return DOWNLOAD_BASE_S + expected / DOWNLOAD_MIN_RATE


def _overdue(
    url: str,
    received: int,
    announced: int | None,
    elapsed: float,
    limit: float,
    key: str,
    set_limit: bool,
) -> str:
    """The message of a download that took longer than its time limit."""
    got = f"{received} of the {announced} bytes announced" if announced else f"{received} bytes"
    how = (
        f"{key}.max_seconds"
        if set_limit
        else f"{DOWNLOAD_BASE_S:g} s plus 1 s per {DOWNLOAD_MIN_RATE} bytes expected; "
        f"{key}.max_seconds unset"
    )
    return (
        f"download {url} took too long: {got} arrived in {elapsed:.1f} s, over its limit of "
        f"{limit:.1f} s ({how}); nothing was kept. Rerun to try again, or raise "
        f"{key}.max_seconds (seconds) for a slow server"
    )


def _timed_out(exc: BaseException) -> bool:
    return isinstance(exc, TimeoutError) or (
        isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, TimeoutError)
    )


def _failure(url: str, exc: BaseException, received: int, wait: float, key: str) -> str:
    """The message of a download that failed on its way (never a checksum)."""
    nothing = "nothing was kept"
    if _timed_out(exc):
        when = f"after {received} bytes" if received else "before sending any data"
        return (
            f"cannot download {url}: the server stalled {when} (no data for {wait:g} s); "
            f"{nothing}. Rerun to try again, or raise {key}.timeout for a slow server"
        )
    if isinstance(exc, http.client.IncompleteRead):  # a chunked transfer closed mid-way
        return _cut_short(url, received, None)
    return f"cannot download {url}: {exc}; {nothing}. Check {key}.url and the network, then rerun"


def _cut_short(url: str, received: int, announced: int | None) -> str:
    got = f"{received} of the {announced} bytes the server announced" if announced else received
    return (
        f"download {url} was cut short: {got} arrived before the connection closed; nothing "
        "was kept. Rerun to try again"
    )


def download(
    url: str,
    dest: Path,
    sha256: str | None,
    max_bytes: int | None = None,
    *,
    timeout: float | None = None,
    max_seconds: float | None = None,
    corpus: str = "NAME",
) -> str:
    """Fetch `url` to `dest`, checking its sha256. A mismatching file is moved aside to
    `<dest>.rejected` for inspection and an error is raised; `dest` is only created when the
    checksum matches (or no checksum was given: the digest is then logged for pinning), and a
    `<dest>.rejected` left by an earlier attempt is then deleted.

    At most `max_bytes` (sources.MAX_DOWNLOAD_BYTES) are fetched: a larger download is refused.
    A server that sends nothing for `timeout` seconds (DOWNLOAD_TIMEOUT), or closes the
    connection before the bytes it announced arrived, is given up on, and so is a download that
    takes longer in all than `max_seconds` (none: time_limit's default, sized from the expected
    length; checked as data arrives). A SIGTERM ends it at once. Every failure deletes the
    partial file; its message names the URL and the config key to change (`corpora.<corpus>`).
    A file:// URL must name a regular file (not a directory or device)."""
    limit = max_bytes or sources.MAX_DOWNLOAD_BYTES
    wait = timeout or DOWNLOAD_TIMEOUT
    key = f"corpora.{corpus}"
    local = sources.local_url_path(url)
    problem = local is not None and sources.file_problem(local)
    if problem:
        raise CorpusError(f"cannot download {url} ({key}.url): {problem}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    received, announced = 0, None
    start = time.monotonic()
    try:
        with (
            _ending_on_sigterm(),
            urllib.request.urlopen(url, timeout=wait) as response,
            open(part, "wb") as out,
        ):
            length = response.headers.get("Content-Length")
            announced = int(length) if length and length.isdigit() else None
            if announced is not None and announced > limit:
                raise CorpusError(sources.too_large(f"download {url}", announced, limit))
            while block := response.read1(_BLOCK):  # what has arrived, up to a block
                received += len(block)
                if received > limit:
                    raise CorpusError(
                        f"download {url} has more than the limit of {limit} bytes; refused and "
                        f"deleted (raise {key}.max_bytes to accept it)"
                    )
                out.write(block)
                if time.monotonic() - start > time_limit(max_seconds, announced, received):
                    raise _Overdue
        if announced is not None and received < announced:
            raise CorpusError(_cut_short(url, received, announced))
    except BaseException as exc:  # an interrupt too: no partial file is left behind
        part.unlink(missing_ok=True)
        elapsed = time.monotonic() - start
        if isinstance(exc, _Overdue):
            allowed = time_limit(max_seconds, announced, received)
            raise CorpusError(
                _overdue(url, received, announced, elapsed, allowed, key, max_seconds is not None)
            ) from None
        if isinstance(exc, _Terminated):
            raise CorpusError(
                f"download {url} was stopped (SIGTERM) after {received} bytes in "
                f"{elapsed:.1f} s; nothing was kept. Rerun to download it again"
            ) from None
        if isinstance(exc, (OSError, http.client.HTTPException)):
            raise CorpusError(_failure(url, exc, received, wait, key)) from exc
        raise
    digest = file_sha256(part)
    rejected = dest.with_name(dest.name + ".rejected")
    if sha256 is not None and digest.lower() != sha256.lower():
        part.replace(rejected)
        raise CorpusError(
            f"checksum mismatch for {url}: expected sha256 {sha256.lower()} ({key}.sha256), "
            f"got {digest}; the download was set aside as {rejected} and nothing was read from "
            f"it. Check {key}.url and {key}.sha256 (put {digest} there only if you trust this "
            "file), then rerun"
        )
    if sha256 is None:
        log.warning("no sha256 given for %s; it is %s (add it as %s.sha256)", url, digest, key)
    part.replace(dest)
    if rejected.exists():
        log.info("deleting %s, left by an earlier download that failed its check", rejected)
        rejected.unlink()
    return digest
