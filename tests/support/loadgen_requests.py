"""Requests for the load generator's tests: specs to send, and sending one to a local server."""

from __future__ import annotations

from typing import Any

from loadgen.client.stream import StreamingClient
from loadgen.clock import RunClock
from loadgen.request_spec import RequestSpec
from results.folder.records import RequestRecord
from tests.support.http_server import Handler, LocalServer


def spec(api: str = "completions", **overrides: Any) -> RequestSpec:
    """One small request (3 prompt tokens, 4 output tokens); ``overrides`` set any field."""
    fields: dict[str, Any] = {
        "request_id": "r1",
        "prompt": "kalo strings",
        "prompt_tokens": 3,
        "max_tokens": 4,
        "api": api,
    }
    fields.update(overrides)
    return RequestSpec(**fields)


def make_requests(n: int, fail_every: int = 0) -> list[RequestSpec]:
    """``n`` requests ``req-000``...; every ``fail_every``-th (from the first) has prompt "FAIL",
    which ``sse_streams.streaming_handler`` answers with a 500."""
    return [
        RequestSpec(
            request_id=f"req-{i:03d}",
            prompt="FAIL" if fail_every and i % fail_every == 0 else f"prompt {i}",
            prompt_tokens=2,
            max_tokens=4,
        )
        for i in range(n)
    ]


async def send_once(handler: Handler, request: RequestSpec, **client_kw: Any) -> RequestRecord:
    """Send ``request`` through a fresh StreamingClient to a LocalServer running ``handler``."""
    async with (
        LocalServer(handler) as server,
        StreamingClient(server.base_url, "tiny-llama", 1, **client_kw) as client,
    ):
        return await client.send(request, 0, 0.0, RunClock())
