"""A LoadStop set mid-load, from another thread as a signal handler or a watchdog sets it: every
driver stops sending, records its in-flight requests cancelled with the reason and the time."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from loadgen.clock import RunClock
from loadgen.drivers.driver import ClientConfig, LoadPlan
from loadgen.drivers.stop import LoadStop, cancelled_message
from loadgen.drivers.workers import run_load
from results.folder.records import RequestRecord
from tests.support.http_server import LocalServer, run
from tests.support.loadgen_requests import make_requests
from tests.support.sse_streams import streaming_handler

pytestmark = pytest.mark.timeout(90)

REASON = "the run was interrupted (SIGINT)"


async def drive(
    plan: LoadPlan, workers: int, stop_after_s: float | None = None, stop_after_ok: int = 0
) -> tuple[list, int, float]:
    """Run ``plan``, stopped ``stop_after_s`` after the start or once ``stop_after_ok``
    requests have finished ok (counted as their records reach this process, which is what a
    loaded machine's slow worker start-up cannot shift)."""
    stop = LoadStop()
    clock = RunClock()
    finished_ok = 0

    def count(record: RequestRecord) -> None:
        nonlocal finished_ok
        finished_ok += record.status == "ok"
        if stop_after_ok and finished_ok >= stop_after_ok:
            stop.set(REASON)

    # 20 chunks 0.05 s apart: each request takes ~1 s, so the stop finds requests in flight.
    async with LocalServer(streaming_handler(20, 0.05)) as server:
        config = ClientConfig(server.base_url, "m", timeout_s=20)
        timer = threading.Timer(stop_after_s or 0.0, stop.set, args=(REASON,))
        if stop_after_s is not None:
            timer.start()
        try:
            result = await run_load(plan, config, clock, None, workers, stop=stop, on_record=count)
        finally:
            timer.cancel()
        stopped_s = clock.now_s()
        sent = len(server.requests)
    return result.records, sent, stopped_s


@pytest.mark.parametrize("workers", [1, 2])
def test_closed_loop_stops_and_records_in_flight_cancelled(workers: int) -> None:
    plan = LoadPlan("closed", [[s] for s in make_requests(40)], users=4)
    records, sent, stopped_s = run(drive(plan, workers, stop_after_ok=4))
    ok = [r for r in records if r.status == "ok"]
    cancelled = [r for r in records if r.status == "cancelled"]
    assert len(ok) >= 4 and 1 <= len(cancelled) <= 4
    assert len(ok) + len(cancelled) == len(records) < 40 and sent <= len(records)
    assert all(r.error == cancelled_message(REASON) for r in cancelled)
    # Stamped with the time of the cut, after it started and before the load returned.
    assert all(r.done_s is not None and r.sent_s < r.done_s <= stopped_s for r in cancelled)


def test_open_loop_stops_sending_what_is_not_yet_due() -> None:
    specs = make_requests(30)
    plan = LoadPlan("open", [[s] for s in specs], users=8, schedule_s=np.arange(30) * 0.1)
    records, sent, _ = run(drive(plan, 1, stop_after_s=1.0))
    # Due by the stop (about 10): each has a row; one cut while connecting never reached it.
    assert sent <= len(records) and 8 <= len(records) <= 13
    cancelled = [r for r in records if r.status == "cancelled"]
    assert cancelled and all(r.error == cancelled_message(REASON) for r in cancelled)
    assert all(r.done_s is not None for r in cancelled)


def test_a_stop_set_before_the_load_sends_nothing() -> None:
    async def main() -> list:
        stop = LoadStop()
        stop.set(REASON)
        async with LocalServer(streaming_handler(2, 0.01)) as server:
            plan = LoadPlan("closed", [[s] for s in make_requests(5)], users=2)
            config = ClientConfig(server.base_url, "m", timeout_s=5)
            result = await asyncio.wait_for(
                run_load(plan, config, RunClock(), None, 1, stop=stop), 5.0
            )
            assert server.requests == []
        return result.records

    assert run(main()) == []


def test_the_first_reason_is_kept() -> None:
    stop = LoadStop()
    assert not stop.is_set() and stop.reason is None
    stop.set("the engine died")
    stop.set(REASON)
    assert stop.is_set() and stop.message() == cancelled_message("the engine died")
