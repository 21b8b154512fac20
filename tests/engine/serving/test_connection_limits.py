"""Connections that hold the server without finishing a request are closed: idle ones, half-sent
headers, half-sent bodies, idle keep-alives; and past the cap a new one is refused at once,
so that the file table never fills. Raw sockets on 127.0.0.1, a few hundred at most."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from engine.config import EngineConfig
from engine.serving.guards.limits import ServerLimits
from tests.support.server_fixture import running_server

CONFIG = EngineConfig.from_flat(
    dict(model="tiny", dtype="float32", device="cpu", max_model_len=256)
)
LIMITS = ServerLimits(timeout_keep_alive_s=1.0, timeout_request_read_s=1.5, max_connections=150)


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    with running_server(CONFIG, limits=LIMITS) as url:
        yield int(url.rsplit(":", 1)[1])


def connect(port: int, data: bytes = b"") -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    if data:
        s.sendall(data)
    return s


def read_all(s: socket.socket) -> bytes:
    """Everything until the server closes the connection (a 10 s socket timeout otherwise)."""
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass
    return out


def served_normally(port: int) -> bool:
    r = httpx.post(
        f"http://127.0.0.1:{port}/v1/completions",
        json={"model": "tiny", "prompt": "hi", "max_tokens": 2},
        timeout=10,
    )
    return r.status_code == 200


HALF_HEADERS = b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: appl"
HALF_BODY = (
    b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
    b'content-length: 100\r\n\r\n{"model": "tiny", '
)


def test_idle_and_half_sent_connections_get_408_and_are_closed(port: int) -> None:
    held = [connect(port) for _ in range(40)]
    held += [connect(port, HALF_HEADERS) for _ in range(40)]
    held += [connect(port, HALF_BODY) for _ in range(40)]
    start = time.monotonic()
    answers = [read_all(s) for s in held]  # each returns when the server closes it
    took_s = time.monotonic() - start
    for s in held:
        s.close()
    assert took_s < LIMITS.timeout_request_read_s + 3, took_s
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:100]
        assert b'"error"' in answer and b"--timeout-request-read-s" in answer
    assert served_normally(port)


def test_an_idle_keep_alive_connection_is_closed(port: int) -> None:
    s = connect(port, b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
    first = s.recv(65536)
    assert first.startswith(b"HTTP/1.1 200 ")
    start = time.monotonic()
    assert read_all(s) == b""  # closed, without a second answer
    assert time.monotonic() - start < LIMITS.timeout_keep_alive_s + 2
    s.close()


def test_a_connection_past_the_cap_is_refused_at_once(port: int) -> None:
    held = [connect(port) for _ in range(LIMITS.max_connections)]
    try:
        time.sleep(0.2)  # the server has accepted them all
        extra = [connect(port) for _ in range(10)]
        answers = [read_all(s) for s in extra]
        for s in extra:
            s.close()
        for answer in answers:
            assert answer.startswith(b"HTTP/1.1 503 "), answer[:100]
            assert b"too_many_connections" in answer
    finally:
        for s in held:
            s.close()
    time.sleep(0.2)
    assert served_normally(port)
