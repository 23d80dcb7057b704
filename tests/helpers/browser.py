"""A headless Chromium driven over the DevTools protocol (the --remote-debugging-pipe: no network
port, no third-party package), so that tests read a page as a person sees it after clicking
through it."""

from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import waits

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome")


def find_chromium() -> str | None:
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


class BrowserError(RuntimeError):
    pass


class Browser:
    """One headless Chromium with one page; `evaluate` runs JavaScript in the page (or in one of
    its frames) and returns the value."""

    def __init__(self, executable: str, timeout: float = 60.0) -> None:
        self.timeout = timeout  # for each answer, on an idle machine (stretched: waits.py)
        self._profile = tempfile.mkdtemp(prefix="jtc-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire() -> None:  # in the child: the protocol's pipes on fds 3 and 4
            reading = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)  # (out of 3 and 4's way)
            writing = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(reading, 3)
            os.dup2(writing, 4)

        self._proc = subprocess.Popen(
            [
                executable,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--remote-debugging-pipe",
                f"--user-data-dir={self._profile}",
                "--window-size=1400,1000",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=wire,
            pass_fds=(3, 4),  # (kept open after wire() put the pipes there)
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict] = []
        target = self._send("Target.createTarget", {"url": "about:blank"})["targetId"]
        attached = self._send("Target.attachToTarget", {"targetId": target, "flatten": True})
        self._session = attached["sessionId"]
        self.send("Page.enable")
        self.send("Runtime.enable")

    # --- the protocol ---------------------------------------------------------------------

    def _read_message(self, patience: waits.Patience) -> dict:
        while b"\0" not in self._buffer:
            left = patience.left()
            if left <= 0:
                raise BrowserError(f"Chromium did not answer: {patience.message()}")
            ready, _, _ = select.select([self._from_browser], [], [], min(left, waits.POLL_S))
            if not ready:
                continue
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise BrowserError("Chromium closed its DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def _send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        patience = waits.Patience(self.timeout, f"Chromium's answer to {method}")
        while True:
            reply = self._read_message(patience)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply["result"]
            self._events.append(reply)

    def send(self, method: str, params: dict | None = None) -> dict:
        """A command to the page."""
        return self._send(method, params, self._session)

    def wait_for_event(self, method: str) -> dict:
        patience = waits.Patience(self.timeout, f"Chromium's event {method}")
        while True:
            for i, event in enumerate(self._events):
                if event.get("method") == method:
                    return self._events.pop(i)
            self._events.append(self._read_message(patience))

    # --- what a test uses -----------------------------------------------------------------

    def open(self, path: str | Path) -> None:
        """Load a local file and wait for its load event."""
        self._events.clear()
        self.send("Page.navigate", {"url": Path(path).resolve().as_uri()})
        self.wait_for_event("Page.loadEventFired")

    def evaluate(self, expression: str, frame_id: str | None = None):
        """The value of a JavaScript expression (awaited if a promise) in the page, or in the
        frame `frame_id` (e.g. an iframe that shows a data: URL)."""
        params = {"expression": expression, "returnByValue": True, "awaitPromise": True}
        if frame_id is not None:
            world = self.send("Page.createIsolatedWorld", {"frameId": frame_id})
            params["contextId"] = world["executionContextId"]
        result = self.send("Runtime.evaluate", params)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_until(self, expression: str, timeout: float = 20.0):
        """Evaluate `expression` until it is truthy; its value. At most `timeout` seconds on an
        idle machine, stretched on a busy one (waits.py)."""
        patience = waits.Patience(timeout, f"the page to make this true: {expression[:200]}")
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if patience.left() <= 0:
                raise BrowserError(patience.message())
            time.sleep(0.1)

    def child_frames(self) -> list[dict]:
        """The page's iframes: [{"id", "url"}]."""
        tree = self.send("Page.getFrameTree")["frameTree"]
        return [child["frame"] for child in tree.get("childFrames", [])]

    def screenshot(self, path: str | Path) -> None:
        import base64

        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        Path(path).write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self._send("Browser.close")
        except (BrowserError, OSError):
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
