"""A server that misbehaves cannot hang or fool the client: each misbehaviour is that request's
error, named, on both client paths (the raw asyncio client and httpx), in bounded time."""

from __future__ import annotations

import re
import time

import pytest

from loadgen.client.stream import StreamingClient
from loadgen.clock import RunClock
from results.folder.records import RequestRecord
from tests.support.http_server import run
from tests.support.loadgen_requests import spec
from tests.support.misbehaving_server import EXPECTED_ERRORS, MIXED, Misbehaving, misbehaving

KEY = "sk-misbehaving-test-key"
# The client's limits in these tests, seconds: short, so that a timeout is quick to meet.
READ_TIMEOUT_S = 0.5
REQUEST_TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def server() -> Misbehaving:
    with misbehaving() as running:
        yield running  # type: ignore[misc]


async def _send(base_url: str, raw: bool) -> RequestRecord:
    async with StreamingClient(
        base_url, "m", 1, timeout_s=READ_TIMEOUT_S, request_timeout_s=REQUEST_TIMEOUT_S,
        api_key=KEY, headers={"X-Team": "perf-secret"}, raw=raw,
    ) as client:  # fmt: skip
        return await client.send(spec(max_tokens=4), 0, 0.0, RunClock())


@pytest.mark.parametrize("raw", [True, False], ids=["raw", "httpx"])
@pytest.mark.parametrize("route", MIXED)
def test_each_misbehaviour_is_the_requests_named_error(
    server: Misbehaving, route: str, raw: bool
) -> None:
    started = time.monotonic()
    record = run(_send(server.url(route), raw))
    took = time.monotonic() - started
    assert record.status == "error", record
    assert record.error is not None and re.search(EXPECTED_ERRORS[route], record.error), (
        record.error
    )
    assert KEY not in record.error and "perf-secret" not in record.error
    # Bounded: nothing waits past the whole request's limit (plus a loaded machine's slack).
    assert took < REQUEST_TIMEOUT_S + 8.0


@pytest.mark.parametrize("raw", [True, False], ids=["raw", "httpx"])
def test_a_redirect_is_not_followed_nor_sent_the_key(server: Misbehaving, raw: bool) -> None:
    record = run(_send(server.url("redirect"), raw))
    assert record.http_status == 307 and record.error is not None
    assert "not followed" in record.error and "secret-token" not in record.error
    assert server.target.requests == []


@pytest.mark.parametrize("raw", [True, False], ids=["raw", "httpx"])
def test_an_absurd_usage_is_not_used_for_the_counts(server: Misbehaving, raw: bool) -> None:
    record = run(_send(server.url("absurd-usage"), raw))
    assert record.usage_output_tokens is None and record.output_tokens == 2
    assert record.output_tokens_source == "chunks" and len(record.chunks) == 2


@pytest.mark.parametrize("raw", [True, False], ids=["raw", "httpx"])
def test_an_endless_error_page_is_cut_short(server: Misbehaving, raw: bool) -> None:
    record = run(_send(server.url("endless-error"), raw))
    assert record.http_status == 502
    assert record.error is not None and len(record.error) < 1000
    assert record.done_s is not None and record.done_s < READ_TIMEOUT_S + 4.0


def test_a_key_that_was_not_sent_is_said_missing(server: Misbehaving) -> None:
    async def main() -> RequestRecord:
        async with StreamingClient(server.url("unauthorized"), "m", 1) as client:
            return await client.send(spec(), 0, 0.0, RunClock())

    record = run(main())
    assert record.error is not None and "no key was sent" in record.error
    assert "--tokenizer" not in record.error
