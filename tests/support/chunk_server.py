"""A stream server that knows the true send time of every chunk, and holds the client's reader
while a chunk arrives: the test of receive stamps (tests/loadgen/client/test_kernel_stamps.py,
tests/loadgen/drivers/test_locust_reader.py).

The server runs in a thread of its own (not on the client's event loop or in its thread), so
that it keeps sending while the reader is held: it stamps each chunk's true send time just
before the write, on the same ``perf_counter_ns`` the client maps the kernel's stamps onto.
Over TLS with a server context.

How a reader is held: :class:`LoopHold` blocks an asyncio client's whole event loop;
:class:`PipeHold` has a blocking reader in another process (gevent's, as in a Locust worker)
block its whole hub after it read the piece before the held chunk, which the server marks
(:data:`HOLD_MARK`: a header, or an SSE comment, which a stream's reader ignores). Either way
the held chunk is read at least ``BLOCK_S`` after it was sent.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import subprocess
import sys
import threading
import time

import pytest

from loadgen.client.transport.kernel_stamps import keep_stamping_on

__all__ = [
    "BLOCKED",
    "BLOCK_S",
    "CHUNKS",
    "GAP_S",
    "HOLD_MARK",
    "LINUX_ONLY",
    "ChunkServer",
    "LoopHold",
    "PipeHold",
    "kernel_stamping",
    "stamping_on",
]

GAP_S = 0.3  # the server's spacing between chunks
BLOCK_S = 0.2  # how long the reader is held
CHUNKS = 4
BLOCKED = (0, 2)  # the chunks that arrive while the reader is held
HOLD_MARK = b"x-hold-next"  # in the piece before a held chunk (a header, or an SSE comment)


# Kernel receive stamps (SO_TIMESTAMPNS) are Linux's.
LINUX_ONLY = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="SO_TIMESTAMPNS is Linux's"
)


@pytest.fixture(autouse=True, scope="module")
def kernel_stamping() -> None:
    """The kernel's stamping on before a module's first connection (:func:`stamping_on`);
    autouse in a module that imports it."""
    stamping_on()


def stamping_on(timeout_s: float = 10.0) -> None:
    """Turn the kernel's receive stamping on for the test (loadgen.client.transport.
    kernel_stamps.keep_stamping_on) and wait until a loopback TCP segment gets its stamp, so
    that a reader process started next finds it on (Linux switches it on through deferred
    work)."""
    if keep_stamping_on() is None:
        return
    with (
        socket.create_server(("127.0.0.1", 0)) as listener,
        socket.create_connection(listener.getsockname()) as client,
    ):
        server, _ = listener.accept()
        with server:
            client.setsockopt(socket.SOL_SOCKET, 35, 1)  # SO_TIMESTAMPNS
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                server.sendall(b"x")
                _, ancdata, _, _ = client.recvmsg(16, 64)
                if ancdata:
                    return
                time.sleep(0.01)
    raise AssertionError(f"the kernel stamped no segment within {timeout_s} s")


class LoopHold:
    """Holds an asyncio client's event loop (set ``loop`` once it runs)."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None

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


class PipeHold:
    """Holds a reader in another process (tests.support.gevent_reader): it says ``paused`` on
    its stdout once it read a piece marked :data:`HOLD_MARK`, and waits for ``sent`` on its
    stdin, then ``BLOCK_S`` more."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None  # set once the reader runs

    def hold(self) -> _Sent:
        assert self.proc is not None and self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != "paused":
            raise AssertionError(f"the reader said {line!r}, not 'paused'")
        return _Sent(self.proc)


class _Sent:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc

    def set(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("sent\n")
        self.proc.stdin.flush()


class ChunkServer:
    """Answers one POST with ``CHUNKS`` SSE chunks ``GAP_S`` apart; the chunks of ``block``
    arrive while ``holder`` holds the reader. ``sent_ns`` holds each chunk's send time
    (perf_counter_ns, just before the write)."""

    def __init__(
        self, block: tuple[int, ...], holder: LoopHold | PipeHold,
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
            mark = b"X-Hold-Next: 1\r\n" if 0 in self.block else b""
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\nConnection: close\r\n" + mark + b"\r\n"
            )
            for i in range(CHUNKS):
                if i:
                    time.sleep(GAP_S)
                held = self.holder.hold() if i in self.block else None
                last = i == CHUNKS - 1
                event = {
                    "choices": [{"text": f" t{i}", "finish_reason": "length" if last else None}]
                }
                body = b"data: " + json.dumps(event).encode() + b"\n\n"
                if i + 1 in self.block:
                    body += b": " + HOLD_MARK + b"\n\n"
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
