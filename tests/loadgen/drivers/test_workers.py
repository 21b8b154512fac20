"""Load plans run in one process and sharded over worker processes, against a local server."""

from __future__ import annotations

import asyncio
import itertools
import sys
import time

import numpy as np
import pytest

from loadgen.clock import RunClock
from loadgen.drivers.driver import ClientConfig, LoadPlan
from loadgen.drivers.sending import LiveCounters
from loadgen.drivers.workers import run_load, shard_plan
from loadgen.request_spec import RequestSpec
from tests.support.http_server import LocalServer, run
from tests.support.loadgen_requests import make_requests
from tests.support.sse_streams import streaming_handler

pytestmark = pytest.mark.timeout(90)


def sessions_of(n: int, turns: int) -> list[list[RequestSpec]]:
    specs = make_requests(n * turns)
    return [specs[i * turns : (i + 1) * turns] for i in range(n)]


async def drive(plan: LoadPlan, workers: int, chunks: int = 3, delay_s: float = 0.005):
    seen = []
    counters = LiveCounters()
    async with LocalServer(streaming_handler(chunks, delay_s)) as server:
        config = ClientConfig(server.base_url, "m", timeout_s=20)
        result = await run_load(
            plan, config, RunClock(), None, workers, on_record=seen.append, counters=counters
        )
    return result, server, seen, counters


@pytest.mark.parametrize("workers", [1, 2])
def test_closed_loop_sessions_keep_their_turn_order(workers: int) -> None:
    plan = LoadPlan("closed", sessions_of(6, 3), users=4)
    result, server, seen, counters = run(drive(plan, workers), timeout_s=60)
    ids = [r.request_id for r in result.records]
    assert ids == [s.request_id for s in plan.requests]  # plan order, every request once
    assert len(seen) == 18 and counters.done == 18 and result.workers == workers
    assert all(r.status == "ok" for r in result.records)
    assert server.max_in_flight <= 4 and {r.user_id for r in result.records} <= set(range(4))
    by_id = {r.request_id: r for r in result.records}
    for session in plan.sessions:  # each turn starts after the previous answer, on one user
        turns = [by_id[s.request_id] for s in session]
        assert len({r.user_id for r in turns}) == 1
        assert all(b.sent_s >= a.done_s for a, b in itertools.pairwise(turns))
    samples = result.client
    assert set(samples.worker) == set(range(workers))
    assert samples.name.count("schedule_lag_s") == 18
    assert "loop_lag_s" in samples.name and "cpu_s" in samples.name
    # Each worker's client says where its chunk times came from, per connection.
    assert sorted(c["worker"] for c in result.stamps) == list(range(workers))
    kernel = sys.platform.startswith("linux")
    assert all(r.stamps == ("kernel" if kernel else "user") for r in result.records)
    for client in result.stamps:
        assert client["connections"] and all(
            c["stamps"] == ("kernel" if kernel else "user") for c in client["connections"]
        )


def test_open_loop_sharded_keeps_the_plan_times() -> None:
    specs = make_requests(12)
    plan = LoadPlan("open", [[s] for s in specs], users=8, schedule_s=np.arange(12) * 0.02)
    t0 = time.monotonic()
    result, _, _, _ = run(drive(plan, 2), timeout_s=60)
    assert time.monotonic() - t0 < 30
    records = result.records
    assert [r.request_id for r in records] == [s.request_id for s in specs]
    offsets = np.array([r.scheduled_s for r in records])
    assert np.allclose(np.diff(offsets), 0.02)  # one clock, one origin for both workers
    assert all(0 <= r.sent_s - r.scheduled_s < 0.05 for r in records)
    assert {r.user_id for r in records} == set(range(12))


def test_shards_split_users_and_the_cap() -> None:
    closed = shard_plan(LoadPlan("closed", sessions_of(4, 1), users=5), 2)
    assert [s.user_ids for s in closed] == [[0, 2, 4], [1, 3]]
    assert [s.plan.users for s in closed] == [3, 2]
    plan = LoadPlan("open", sessions_of(5, 1), users=3, schedule_s=np.arange(5.0))
    shards = shard_plan(plan, 2)
    assert [s.user_ids for s in shards] == [[0, 2, 4], [1, 3]]
    assert [s.plan.cap for s in shards] == [2, 1]
    assert shards[1].plan.schedule_s.tolist() == [1.0, 3.0]
    assert len(shard_plan(LoadPlan("closed", sessions_of(1, 1), users=1), 3)) == 1


def test_a_worker_that_cannot_reach_the_server_still_records_errors() -> None:
    plan = LoadPlan("closed", sessions_of(4, 1), users=2)
    config = ClientConfig("http://127.0.0.1:9", "m", timeout_s=2)
    result = asyncio.run(run_load(plan, config, RunClock(), None, 2))
    assert [r.status for r in result.records] == ["error"] * 4


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "both"}, "mode"),
        ({"users": 0}, "users"),
        ({"mode": "open"}, "schedule_s"),
    ],
)
def test_bad_plans_are_named(kwargs: dict, match: str) -> None:
    args = {"mode": "closed", "sessions": sessions_of(2, 1), "users": 1, **kwargs}
    with pytest.raises(ValueError, match=match):
        LoadPlan(**args)


def test_an_open_loop_plan_starts_sessions_of_several_turns() -> None:
    plan = LoadPlan("open", sessions_of(2, 2), users=1, schedule_s=np.zeros(2))
    assert len(plan.requests) == 4
    with pytest.raises(ValueError, match="one schedule_s time per session"):
        LoadPlan("open", sessions_of(2, 2), users=1, schedule_s=np.zeros(4))
