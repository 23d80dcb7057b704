"""A local HTTP server on 127.0.0.1 (an ephemeral port, a thread) serving fixed files, whole or
broken on purpose: a body cut short (its full Content-Length announced, the connection closed
early), a server that stalls (before any byte, or mid-body) or one that drips (a byte every
`drip_s`, never stalling). Only loopback traffic; every stall ends at `stall_s`, and every
drip, when the server stops."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Files:
    """What the server serves: {url path: bytes}, and how each path misbehaves
    (modes[path] in "whole", "cut", "stall", "stall_body", "drip"); `requests` counts the
    GETs."""

    def __init__(self, stall_s: float, drip_s: float = 0.1):
        self.files: dict[str, bytes] = {}
        self.modes: dict[str, str] = {}
        self.requests: dict[str, int] = {}
        self.stall_s = stall_s
        self.drip_s = drip_s
        self.stopping = threading.Event()
        self.base = ""

    def add(self, path: str, data: bytes, mode: str = "whole") -> str:
        """Serve `data` at `path` ("/x.tar.gz"); its URL."""
        self.files[path], self.modes[path] = data, mode
        return self.base + path


def _handler(files: Files):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def do_GET(self):
            files.requests[self.path] = files.requests.get(self.path, 0) + 1
            data, mode = files.files.get(self.path), files.modes.get(self.path)
            if data is None:
                self.send_error(404)
                return
            if mode == "stall":  # the connection accepted, nothing sent
                files.stopping.wait(files.stall_s)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if mode == "whole":
                self.wfile.write(data)
                return
            if mode == "drip":  # a byte at a time, until the client or the server gives up
                for i in range(len(data)):
                    if files.stopping.wait(files.drip_s):
                        return
                    try:
                        self.wfile.write(data[i : i + 1])
                        self.wfile.flush()
                    except OSError:
                        return
                return
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            if mode == "stall_body":
                files.stopping.wait(files.stall_s)
            self.close_connection = True  # "cut": closed with half the body sent

    return Handler


@contextlib.contextmanager
def serving(stall_s: float = 30.0, drip_s: float = 0.1) -> Iterator[Files]:
    """A running server (add files to what it yields), stopped when the block ends."""
    files = Files(stall_s, drip_s)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(files))
    server.daemon_threads = True
    files.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield files
    finally:
        files.stopping.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
