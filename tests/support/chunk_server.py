"""A stream server that knows the true send time of every chunk, and holds the client's reader
while a chunk arrives: the test of receive stamps (tests/loadgen/client/test_kernel_stamps.py,
tests/loadgen/drivers/test_locust_raw.py).

The server runs in a thread of its own (not on the client's event loop or in its thread), so
that it keeps sending while the reader is held: it stamps each chunk's true send time just
before the write, on the same ``perf_counter_ns`` the client maps the kernel's stamps onto.
Over TLS with a server context.

How a reader is held: :class:`LoopHold` blocks an asyncio client's whole event loop;
:class:`ReadHold` stops a blocking reader in its own thread, after the read before the chunk
(it wraps the parser's ``stamped_received``). Either way the held chunk is read at least
``BLOCK_S`` after it was sent.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["BLOCKED", "BLOCK_S", "CHUNKS", "GAP_S", "ChunkServer", "LoopHold", "ReadHold"]

GAP_S = 0.3  # the server's spacing between chunks
BLOCK_S = 0.2  # how long the reader is held
CHUNKS = 4
BLOCKED = (0, 2)  # the chunks that arrive while the reader is held


class LoopHold:
    """Holds an asyncio client's event loop (set ``loop`` once it runs)."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None

    def arm(self) -> None:
        """Before the piece that precedes a held chunk: nothing to do for a loop."""

    def hold(self) -> threading.Event:
        """Block the client's loop now; it stays blocked until the returned event is set
        (after the chunk is sent) and ``BLOCK_S`` more, so it reads the chunk that late."""
        assert self.loop is not None
        started, sent = threading.Event(), threading.Event()

        def blocker() -> None:
            started.set()
            sent.wait(10)
            time.sleep(BLOCK_S)  # the whole loop stops: no read, no user-space stamp

        self.loop.call_soon_threadsafe(blocker)
        started.wait(10)
        return sent


class ReadHold:
    """Holds a blocking reader after the read of the piece that precedes a held chunk."""

    def __init__(self) -> None:
        self._armed = threading.Event()
        self._paused = threading.Event()
        self._sent = threading.Event()

    def wrap(self, parser: Any) -> None:
        """Hold ``parser``'s reader (a raw_http.Connection fed by a blocking reader)."""
        received: Callable[[bytes, int, int], None] = parser.stamped_received

        def held(data: bytes, t_ns: int, read_ns: int) -> None:
            received(data, t_ns, read_ns)
            if self._armed.is_set():
                self._armed.clear()
                self._sent.clear()
                self._paused.set()
                self._sent.wait(10)
                time.sleep(BLOCK_S)  # the reader stops: no read, no user-space stamp

        parser.stamped_received = held

    def arm(self) -> None:
        self._paused.clear()
        self._armed.set()

    def hold(self) -> threading.Event:
        self._paused.wait(10)
        return self._sent


class ChunkServer:
    """Answers one POST with ``CHUNKS`` SSE chunks ``GAP_S`` apart; the chunks of ``block``
    arrive while ``holder`` holds the reader. ``sent_ns`` holds each chunk's send time
    (perf_counter_ns, just before the write)."""

    def __init__(
        self, block: tuple[int, ...], holder: LoopHold | ReadHold,
        tls: ssl.SSLContext | None = None,
    ) -> None:  # fmt: skip
        self.block, self.holder, self.tls = block, holder, tls
        self.sent_ns: list[int] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        raw, _ = self.listener.accept()
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            conn = self.tls.wrap_socket(raw, server_side=True) if self.tls else raw
        except (ssl.SSLError, OSError):  # a client that refused the certificate
            raw.close()
            return
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            if 0 in self.block:
                self.holder.arm()
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            )
            for i in range(CHUNKS):
                if i:
                    time.sleep(GAP_S)
                held = self.holder.hold() if i in self.block else None
                if i + 1 in self.block:
                    self.holder.arm()
                last = i == CHUNKS - 1
                event = {
                    "choices": [{"text": f" t{i}", "finish_reason": "length" if last else None}]
                }
                body = b"data: " + json.dumps(event).encode() + b"\n\n"
                if last:
                    body += b"data: [DONE]\n\n"
                self.sent_ns.append(time.perf_counter_ns())
                conn.sendall(b"%x\r\n%s\r\n" % (len(body), body) + (b"0\r\n\r\n" if last else b""))
                if held is not None:
                    held.set()

    def __enter__(self) -> ChunkServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.thread.join(10)
        self.listener.close()
