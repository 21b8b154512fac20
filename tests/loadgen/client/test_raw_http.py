"""The lean HTTP/1.1 path: framing split at every byte, keep-alive, and the same records as
httpx's path on the captured engine streams."""

from __future__ import annotations

import asyncio

import pytest

from loadgen.client.stream import StreamingClient
from loadgen.client.transport.raw_http import Connection, RemoteProtocolError
from loadgen.clock import RunClock
from tests.support.http_server import LocalServer, run
from tests.support.loadgen_requests import spec
from tests.support.sse_streams import FIXTURE_STREAMS, fixture_events, replay_handler

pytestmark = pytest.mark.timeout(30)


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False

    def write(self, data: bytes) -> None:  # type: ignore[override]
        self.written += data

    def close(self) -> None:
        self.closed = True


def feed(response: bytes, step: int) -> tuple[bytes, int | None, bytes]:
    """Run one request on a Connection fed ``response`` ``step`` bytes per read."""

    async def main() -> tuple[bytes, int | None, bytes]:
        conn = Connection()
        conn.connection_made(FakeTransport())
        body: list[bytes] = []
        task = asyncio.create_task(conn.request(b"GET", lambda b, t: body.append(b), 5.0))
        await asyncio.sleep(0)
        for i in range(0, len(response), step):
            conn.data_received(response[i : i + step])
        status, error_body = await task
        return b"".join(body), status, error_body

    return asyncio.run(main())


CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"7\r\ndata: a\r\n"
    b"b;ext=1\r\n\ndata: bc\n\n\r\n"
    b"0\r\n\r\n"
)


@pytest.mark.parametrize("step", [1, 2, 3, 5, 7, 1000])
def test_chunked_bodies_survive_any_read_boundary(step: int) -> None:
    body, status, error_body = feed(CHUNKED, step)
    assert body == b"data: a\ndata: bc\n\n" and status == 200 and error_body == b""


def test_content_length_and_error_bodies() -> None:
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
    assert feed(ok, 2)[0] == b"hello"
    head = b"HTTP/1.1 400 Bad\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n"
    bad = head + b'{"err": 1}\n'
    body, status, error_body = feed(bad, 4)
    assert (body, status, error_body) == (b"", 400, b'{"err": 1}\n')


def test_malformed_responses_are_protocol_errors() -> None:
    with pytest.raises(RemoteProtocolError, match="status line"):
        feed(b"HTCPCP/1.0 418 teapot\r\n\r\n", 100)
    with pytest.raises(RemoteProtocolError, match="chunk size"):
        feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 100)


@pytest.mark.parametrize("name", sorted(FIXTURE_STREAMS))
def test_raw_and_httpx_paths_record_the_same(name: str) -> None:
    api = FIXTURE_STREAMS[name][1]

    async def main(raw: bool):
        async with (
            LocalServer(replay_handler(fixture_events(name))) as server,
            StreamingClient(server.base_url, "m", 2, raw=raw) as client,
        ):
            clock = RunClock()
            first = await client.send(spec(api=api, request_id="a"), 0, 0.0, clock)
            second = await client.send(spec(api=api, request_id="b"), 0, 0.0, clock)
            return first, second, server.connections

    raw_first, raw_second, raw_connections = run(main(True))
    httpx_first, _, _ = run(main(False))
    assert raw_first.status == raw_second.status == httpx_first.status == "ok"
    assert raw_connections == 1  # keep-alive: the second request reused the connection
    for field in ("output_tokens", "output_tokens_source", "prompt_tokens", "http_status"):
        assert getattr(raw_first, field) == getattr(httpx_first, field), field
    assert [c.n_tokens for c in raw_first.chunks] == [c.n_tokens for c in httpx_first.chunks]


def test_a_server_that_closes_after_each_answer_costs_no_request() -> None:
    # llama-server closes the connection after each streamed answer, without saying so; the
    # client must notice (or retry once on a fresh connection) instead of failing the next one.
    async def handler(request, response) -> None:
        await response.start_stream()
        for event in fixture_events("llama-completions"):
            await response.send(event)
        await response.end()
        response._writer.close()

    async def main():
        async with (
            LocalServer(handler) as server,
            StreamingClient(server.base_url, "m", 1) as client,
        ):
            clock = RunClock()
            records = [await client.send(spec(request_id=f"r{i}"), 0, 0.0, clock) for i in range(4)]
            return records, server.connections

    records, connections = run(main())
    assert [r.status for r in records] == ["ok"] * 4, [r.error for r in records]
    assert connections == 4
