"""A real HTTP/1.1 server on 127.0.0.1 for client tests, and a bounded event-loop runner.

The server is plain asyncio (no framework) so that tests control every byte and every close:
chunked SSE streams, error bodies, streams cut mid-way. It counts connections and the requests
in flight, which the closed-loop tests assert on. It runs in the test's own event loop, on a free
port chosen by the OS.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

# Seconds a test's event loop may run before it is cancelled (a hung stream fails, not hangs).
TEST_TIMEOUT_S = 15.0


def run(coro: Coroutine[Any, Any, Any], timeout_s: float = TEST_TIMEOUT_S) -> Any:
    """Run ``coro`` in a fresh event loop, bounded in time (seconds)."""
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


@dataclass
class HttpRequest:
    """One request as the server read it; header names are lower-cased."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Response:
    """Writes one HTTP/1.1 response; a stream is sent with chunked transfer encoding."""

    def __init__(self, writer: asyncio.StreamWriter, on_finish: Callable[[], None]) -> None:
        self._writer = writer
        self._on_finish = on_finish
        self.finished = False
        self.closed = False

    def _finish(self) -> None:
        if not self.finished:
            self.finished = True
            self._on_finish()

    async def start_stream(
        self, status: int = 200, content_type: str = "text/event-stream"
    ) -> None:
        typed = f"Content-Type: {content_type}\r\n" if content_type else ""
        self._writer.write(
            f"HTTP/1.1 {status} OK\r\n{typed}"
            "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n\r\n".encode()
        )
        await self._writer.drain()

    async def send(self, data: bytes) -> None:
        self._writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        await self._writer.drain()

    async def end(self) -> None:
        self._finish()  # before the last byte, so the client cannot start its next one first
        self._writer.write(b"0\r\n\r\n")
        await self._writer.drain()

    async def send_json(self, status: int, obj: Any) -> None:
        body = json.dumps(obj).encode()
        self._finish()
        self._writer.write(
            f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await self._writer.drain()

    def write_raw(self, data: bytes) -> None:
        """Write ``data`` as it is: a whole response whose every byte the test chose."""
        self._finish()
        self._writer.write(data)

    def socket(self) -> Any:
        """The connection's socket (to set options such as SO_LINGER before :meth:`abort`)."""
        return self._writer.transport.get_extra_info("socket")

    def abort(self) -> None:
        """Close the connection now, mid-response."""
        self._finish()
        self.closed = True
        self._writer.transport.abort()


Handler = Callable[[HttpRequest, Response], Awaitable[None]]


@dataclass
class LocalServer:
    """``async with LocalServer(handler) as server:``; ``server.base_url`` is where it listens."""

    handler: Handler
    connections: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    requests: list[HttpRequest] = field(default_factory=list)
    tls: ssl.SSLContext | None = None  # serve https with this server-side context
    _server: asyncio.Server | None = None
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    @property
    def base_url(self) -> str:
        assert self._server is not None
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aenter__(self) -> LocalServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()  # kept-alive connections would otherwise hold wait_closed open
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._server.wait_closed(), 1.0)

    def _done_one(self) -> None:
        self.in_flight -= 1

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request_line, *header_lines = head.decode("latin-1").split("\r\n")
                method, path, _ = request_line.split(" ", 2)
                headers = {}
                for line in header_lines:
                    if ":" in line:
                        key, value = line.split(":", 1)
                        headers[key.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                request = HttpRequest(method, path, headers, body)
                self.requests.append(request)
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
                response = Response(writer, self._done_one)
                try:
                    await self.handler(request, response)
                finally:
                    response._finish()
                if response.closed:
                    return
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            return
        finally:
            self._writers.discard(writer)
            writer.close()
