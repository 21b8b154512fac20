"""The streaming client's failures: HTTP errors, refused and cut connections, bad events,
timeouts, cancellation, and the reachability check. Every failure is a record, never an
exception."""

from __future__ import annotations

import asyncio
import re
import socket
import time
from typing import Any

import pytest

from engine_adapters.launcher import free_port
from loadgen.client.stream import ServerUnreachableError, StreamingClient
from loadgen.clock import RunClock
from results.folder.records import RequestRecord
from tests.support.http_server import HttpRequest, LocalServer, Response, run
from tests.support.loadgen_requests import send_once, spec
from tests.support.sse_streams import fixture_events, replay_handler, sse_event, text_events

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize(
    "body",
    [
        {"error": {"message": "boom: KV cache full", "type": "server_error", "code": 500}},
        {"object": "error", "message": "boom: KV cache full", "type": "InternalServerError"},
    ],
    ids=["openai", "old-vllm"],
)
def test_http_error_is_recorded_with_the_body_message(body: dict[str, Any]) -> None:
    async def handler(request: HttpRequest, response: Response) -> None:
        await response.send_json(500, body)

    record = run(send_once(handler, spec()))
    assert record.status == "error"
    assert record.http_status == 500
    assert "HTTP 500" in record.error and "boom: KV cache full" in record.error
    assert record.chunks == [] and record.first_token_s is None and record.done_s is not None


def test_connection_refused_is_an_error_record() -> None:
    async def main() -> RequestRecord:
        url = f"http://127.0.0.1:{free_port()}"
        async with StreamingClient(url, "m", 1, timeout_s=5) as client:
            return await client.send(spec(), 0, 0.0, RunClock())

    record = run(main())
    assert record.status == "error" and record.http_status is None
    assert "ConnectError" in record.error and "/v1/completions" in record.error


def test_stream_cut_mid_way_is_an_error_and_keeps_its_chunks() -> None:
    async def handler(request: HttpRequest, response: Response) -> None:
        await response.start_stream()
        for event in fixture_events("vllm-completions")[:2]:
            await response.send(event)
        response.abort()

    record = run(send_once(handler, spec()))
    assert record.status == "error" and record.http_status == 200
    assert "RemoteProtocolError" in record.error
    assert len(record.chunks) == 2


def test_stream_closed_cleanly_before_done_is_an_error() -> None:
    async def handler(request: HttpRequest, response: Response) -> None:
        writer = response._writer
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        )
        writer.write(fixture_events("vllm-completions")[0])
        await writer.drain()
        response.abort()

    record = run(send_once(handler, spec()))
    assert record.status == "error"
    assert "before [DONE]" in record.error and len(record.chunks) == 1


def test_finish_reason_without_done_is_ok() -> None:
    record = run(send_once(replay_handler(text_events(["a", "b"])[:-1]), spec()))
    assert record.status == "ok" and record.output_tokens == 2


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        (sse_event({"error": {"message": "engine died", "code": 500}}), "engine died"),
        (b"data: {not json\n\n", "malformed"),
        (b"data: [1, 2]\n\n", "malformed"),
    ],
)
def test_error_or_malformed_event_is_an_error(event: bytes, expected: str) -> None:
    events = [*fixture_events("vllm-completions")[:1], event, sse_event("[DONE]")]
    record = run(send_once(replay_handler(events), spec()))
    assert record.status == "error" and expected in record.error
    assert len(record.chunks) == 1


def test_read_timeout_names_the_knob() -> None:
    async def handler(request: HttpRequest, response: Response) -> None:
        await response.start_stream()
        await asyncio.sleep(5)

    record = run(send_once(handler, spec(), timeout_s=0.3))
    assert (
        record.status == "error"
        and "ReadTimeout" in record.error
        and "after its headers" in record.error
        and "--read-timeout" in record.error
    )


def test_cancellation_returns_a_cancelled_record() -> None:
    async def handler(request: HttpRequest, response: Response) -> None:
        await response.start_stream()
        await response.send(fixture_events("vllm-completions")[0])
        await asyncio.sleep(10)

    async def main() -> RequestRecord:
        async with (
            LocalServer(handler) as server,
            StreamingClient(server.base_url, "m", 1) as client,
        ):
            task = asyncio.create_task(client.send(spec(), 0, 0.0, RunClock()))
            await asyncio.sleep(0.3)
            task.cancel()
            return await task

    record = run(main())
    assert record.status == "cancelled" and "cancelled" in record.error
    assert len(record.chunks) == 1 and record.done_s is not None


def test_check_reachable_on_a_dead_port_fails_fast_naming_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"

    async def main() -> None:
        async with StreamingClient(url, "m", 1) as client:
            await client.check_reachable(timeout_s=3.0)

    start = time.monotonic()
    with pytest.raises(ServerUnreachableError, match=re.escape(f"{url}/v1/models")):
        run(main())
    assert time.monotonic() - start < 3.0


def test_check_reachable_on_a_silent_server_times_out() -> None:
    with socket.socket() as sock:  # accepts TCP (backlog) but never answers HTTP
        sock.bind(("127.0.0.1", 0))
        sock.listen(4)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"

        async def main() -> None:
            async with StreamingClient(url, "m", 1) as client:
                await client.check_reachable(timeout_s=0.5)

        start = time.monotonic()
        with pytest.raises(ServerUnreachableError, match=r"did not answer within 0\.5 s"):
            run(main())
        assert time.monotonic() - start < 3.0


@pytest.mark.parametrize(("status", "expected"), [(200, ["tiny-llama"]), (404, []), (401, None)])
def test_check_reachable_on_a_live_server(status: int, expected: list[str] | None) -> None:
    async def handler(request: HttpRequest, response: Response) -> None:
        body = {"data": [{"id": "tiny-llama"}]} if status == 200 else {"error": {"message": "no"}}
        await response.send_json(status, body)

    async def main() -> list[str]:
        async with (
            LocalServer(handler) as server,
            StreamingClient(server.base_url, "m", 1) as client,
        ):
            return await client.check_reachable(timeout_s=3.0)

    if expected is None:
        with pytest.raises(ServerUnreachableError, match="--api-key"):
            run(main())
    else:
        assert run(main()) == expected
