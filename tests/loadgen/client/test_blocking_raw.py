"""The raw client in blocking form (loadgen.client.transport.blocking_raw), in this thread
against a real server on 127.0.0.1 (plain and TLS): keep-alive, a connection the server closed
while idle, a TLS 1.3 session ticket that is no close, and its failures named as the asyncio
client names them."""

from __future__ import annotations

import asyncio
import socket
import sys
from time import perf_counter_ns

import pytest

from loadgen.client.transport import tls_layer
from loadgen.client.transport.blocking_raw import BlockingConnection
from loadgen.client.transport.kernel_clock import KernelClock
from loadgen.client.transport.raw_http import ConnectError, ReadTimeout, RequestTimeout
from tests.support.http_server import HttpRequest, Response
from tests.support.openai_fakes import serving
from tests.support.sse_streams import streaming_handler
from tests.support.tls_certs import TlsCert, server_context, tls_cert, trusting

__all__ = ["tls_cert", "trusting"]  # fixtures

pytestmark = pytest.mark.timeout(60)
KERNEL = "kernel" if sys.platform.startswith("linux") else "user"
REQUEST = (
    b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b'Content-Length: 17\r\n\r\n{"prompt": "hi"}\n'
)


def post(conn: BlockingConnection, timeout_s: float = 10.0, deadline_ns: int | None = None):
    """One request; (status, the body bytes streamed, their stamps)."""
    body: list[bytes] = []
    stamps: list[int] = []

    def on_body(data: bytes, t_ns: int) -> None:
        body.append(data)
        stamps.append(t_ns)

    status, _ = conn.request(REQUEST, on_body, timeout_s, deadline_ns)
    return status, b"".join(body), stamps


def closing_handler(n_chunks: int):
    """Streams, then closes the connection (the server ends an idle keep-alive connection)."""
    stream = streaming_handler(n_chunks, 0.001)

    async def handler(request: HttpRequest, response: Response) -> None:
        await stream(request, response)
        response.closed = True

    return handler


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_keep_alive_reuses_one_connection(tls: bool, request: pytest.FixtureRequest) -> None:
    cert: TlsCert | None = request.getfixturevalue("trusting") if tls else None
    context = server_context(cert) if cert else None
    with serving(streaming_handler(3, 0.001), tls=context) as server:
        conn = BlockingConnection(
            "127.0.0.1", int(server.base_url.rsplit(":", 1)[1]), 5, KernelClock(),
            tls_layer.client_context() if tls else None,
        )  # fmt: skip
        for _ in range(3):  # with TLS 1.3 the server's session tickets wait on the idle socket
            status, body, stamps = post(conn)
            assert status == 200 and body.endswith(b"data: [DONE]\n\n") and stamps
        conn.close()
        assert server.connections == 1
    counts = conn.stamp_counts
    assert counts.opened == 1 and counts.source == KERNEL
    if KERNEL == "kernel":
        assert counts.stamped == counts.reads > 0


@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_a_connection_the_server_closed_while_idle_is_opened_again(
    tls: bool, request: pytest.FixtureRequest
) -> None:
    cert: TlsCert | None = request.getfixturevalue("trusting") if tls else None
    context = server_context(cert) if cert else None
    with serving(closing_handler(2), tls=context) as server:
        conn = BlockingConnection(
            "127.0.0.1", int(server.base_url.rsplit(":", 1)[1]), 5, None,
            tls_layer.client_context() if tls else None,
        )  # fmt: skip
        for _ in range(2):
            status, body, _ = post(conn)
            assert status == 200 and b"[DONE]" in body
        conn.close()
        assert server.connections == 2
    assert conn.stamp_counts.opened == 2 and conn.stamp_counts.source == "user"
    assert conn.stamp_counts.why == "user-space stamps asked for"


def test_silence_and_the_whole_request_deadline_end_the_request() -> None:
    async def silent(request: HttpRequest, response: Response) -> None:
        await response.start_stream()
        await asyncio.sleep(30)

    with serving(silent) as server:
        port = int(server.base_url.rsplit(":", 1)[1])
        conn = BlockingConnection("127.0.0.1", port, 5, KernelClock())
        with pytest.raises(ReadTimeout, match=r"silent for 0\.3 s"):
            post(conn, timeout_s=0.3)
        assert conn.parser.closed  # mid-response: not reusable
        with pytest.raises(RequestTimeout, match="over"):
            post(conn, timeout_s=10, deadline_ns=perf_counter_ns() + 300_000_000)


def test_no_server_is_a_connect_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: refused
        conn = BlockingConnection("127.0.0.1", port, 5, KernelClock())
        with pytest.raises(ConnectError, match="ConnectionRefusedError"):
            post(conn)
