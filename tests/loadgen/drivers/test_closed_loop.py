"""The closed-loop driver against a real local streaming server."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from loadgen.client.stream import StreamingClient
from loadgen.clock import RunClock
from loadgen.drivers.closed_loop import run_closed_loop
from loadgen.drivers.sending import LiveCounters
from loadgen.request_spec import RequestSpec
from results.folder.records import RequestRecord
from tests.support.http_server import LocalServer, run
from tests.support.loadgen_requests import make_requests
from tests.support.sse_streams import streaming_handler

pytestmark = pytest.mark.timeout(30)


async def drive(
    handler, requests: list[RequestSpec], num_users: int, **kwargs
) -> tuple[list[RequestRecord], LocalServer, LiveCounters, list[RequestRecord]]:
    seen: list[RequestRecord] = []
    counters = LiveCounters()
    async with (
        LocalServer(handler) as server,
        StreamingClient(server.base_url, "m", num_users, timeout_s=10) as client,
    ):
        records = await run_closed_loop(
            client,
            requests,
            num_users,
            RunClock(),
            on_record=seen.append,
            counters=counters,
            **kwargs,
        )
    return records, server, counters, seen


def test_every_request_recorded_once_with_at_most_n_in_flight() -> None:
    requests = make_requests(40, fail_every=7)
    records, server, counters, seen = run(drive(streaming_handler(5, 0.004), requests, 8))
    assert [r.request_id for r in records] == [s.request_id for s in requests]
    assert sorted(r.request_id for r in seen) == [s.request_id for s in requests]
    assert len(server.requests) == 40
    assert server.max_in_flight == 8  # all users busy at once, and never more
    assert server.connections <= 8
    failed = {r.request_id for r in records if r.status == "error"}
    assert failed == {s.request_id for s in requests if s.prompt == "FAIL"}
    assert all(r.http_status == 500 and "injected failure" in r.error for r in records if r.error)
    ok = [r for r in records if r.status == "ok"]
    assert all(r.output_tokens == 5 and len(r.chunks) == 5 for r in ok)
    assert {r.user_id for r in records} <= set(range(8))
    assert counters.snapshot() == {
        "started": 40,
        "in_flight": 0,
        "max_in_flight": 8,
        "done": 40,
        "ok": len(ok),
        "errors": len(failed),
        "cancelled": 0,
        "output_tokens": 5 * len(ok),
    }


def test_duration_cut_keeps_cancelled_records() -> None:
    requests = make_requests(100)
    start = time.monotonic()
    records, server, counters, _ = run(
        drive(streaming_handler(20, 0.05), requests, 4, duration_s=0.3)
    )
    assert time.monotonic() - start < 2.0
    assert len(records) == len(server.requests) == 4  # only the first wave ever started
    assert all(r.status == "cancelled" and "cancelled" in r.error for r in records)
    assert all(1 <= len(r.chunks) < 20 and r.done_s is not None for r in records)
    assert counters.cancelled == 4 and counters.in_flight == 0


def test_think_time_separates_a_users_requests() -> None:
    requests = make_requests(6)
    records, *_ = run(drive(streaming_handler(1, 0.0), requests, 2, think_time_s=0.1))
    for user_id in (0, 1):
        mine = sorted((r for r in records if r.user_id == user_id), key=lambda r: r.sent_s)
        assert len(mine) == 3
        for before, after in itertools.pairwise(mine):
            assert after.scheduled_s - before.done_s >= 0.1


def test_more_users_than_requests() -> None:
    records, server, *_ = run(drive(streaming_handler(2, 0.0), make_requests(3), 10))
    assert [r.status for r in records] == ["ok"] * 3 and server.max_in_flight <= 3


class RaisingSender:
    """A client that lets CancelledError escape instead of returning a record."""

    async def send(self, spec, user_id, scheduled_s, clock) -> RequestRecord:
        await asyncio.sleep(10)
        raise AssertionError("unreachable")


def test_a_client_that_raises_on_cancel_still_yields_records() -> None:
    records = run(run_closed_loop(RaisingSender(), make_requests(5), 2, RunClock(), 0.1))
    assert [r.status for r in records] == ["cancelled", "cancelled"]


class BrokenSender:
    """A client with a bug of its own: every second request raises instead of returning."""

    def __init__(self) -> None:
        self.calls = 0

    async def send(self, spec, user_id, scheduled_s, clock) -> RequestRecord:
        self.calls += 1
        if self.calls % 2 == 0:
            raise KeyError("usage")
        return RequestRecord.unanswered(
            spec.request_id, user_id, scheduled_s, scheduled_s, clock.now_s(),
            spec.prompt_tokens, "ok", "",
        )  # fmt: skip


def test_a_client_that_raises_is_recorded_and_the_run_goes_on() -> None:
    records = run(run_closed_loop(BrokenSender(), make_requests(6), 2, RunClock()))
    assert sorted(r.status for r in records) == ["error"] * 3 + ["ok"] * 3
    failed = [r for r in records if r.status == "error"]
    assert all(r.error == "the client raised KeyError: 'usage'" for r in failed)


def test_on_record_errors_propagate() -> None:
    def boom(record: RequestRecord) -> None:
        raise RuntimeError("display broke")

    async def main() -> None:
        async with (
            LocalServer(streaming_handler(1, 0.0)) as server,
            StreamingClient(server.base_url, "m", 2) as client,
        ):
            await run_closed_loop(client, make_requests(4), 2, RunClock(), on_record=boom)

    with pytest.raises(RuntimeError, match="display broke"):
        run(main())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_users": 0}, "num_users"),
        ({"duration_s": 0}, "duration_s"),
        ({"think_time_s": -1}, "think"),
    ],
)
def test_invalid_arguments(kwargs: dict, match: str) -> None:
    args = {"num_users": 1, **kwargs}
    with pytest.raises(ValueError, match=match):
        run(run_closed_loop(RaisingSender(), [], clock=RunClock(), **args))
