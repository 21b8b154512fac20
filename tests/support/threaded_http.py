"""A plain HTTP server in a thread on 127.0.0.1, for tests whose client is synchronous.

Routes map (method, path) to a handler returning (status, headers, body); every request is
recorded (method, path, headers), so a test can assert what was asked and what was not.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["Handler", "Reply", "SeenRequest", "threaded_server"]

Reply = tuple[int, dict[str, str], bytes]
Handler = Callable[["SeenRequest"], Reply]


@dataclass
class SeenRequest:
    method: str
    path: str  # with its query string
    headers: dict[str, str] = field(default_factory=dict)  # names lower-cased
    body: bytes = b""


@dataclass
class _State:
    routes: Callable[[SeenRequest], Reply]
    seen: list[SeenRequest] = field(default_factory=list)


@contextmanager
def threaded_server(
    route: Callable[[SeenRequest], Reply],
) -> Iterator[tuple[str, list[SeenRequest]]]:
    """Serve ``route`` (called for every request) until the block ends; yields the base URL
    and the list of requests seen so far."""
    state = _State(route)

    class _Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the servers it stands in for

        def _serve(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            request = SeenRequest(
                self.command,
                self.path,
                {k.lower(): v for k, v in self.headers.items()},
                self.rfile.read(length) if length else b"",
            )
            state.seen.append(request)
            status, headers, body = state.routes(request)
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            if "Content-Length" not in headers:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_POST = do_HEAD = _serve

        def log_message(self, format: str, *args: object) -> None:
            pass

    class _Server(ThreadingHTTPServer):
        request_queue_size = 128  # clients that open many connections at once are not reset
        daemon_threads = True

    server = _Server(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state.seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
