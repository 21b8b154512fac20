"""The Locust driver: a master and 2 local workers against the reference engine on 127.0.0.1.

Workers joining from other hosts (`bench worker`), and one lost mid-run, are tested end to end in
tests/bench/run/test_remote_workers.py."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.tokenizer.tokenizer import Tokenizer
from loadgen.clock import RunClock
from loadgen.drivers.driver import ClientConfig, LoadPlan
from loadgen.drivers.locust.driver import LocustError, run_locust
from loadgen.workloads.prompts import synthetic_requests
from loadgen.workloads.spec import LengthDist

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        importlib.util.find_spec("locust") is None, reason="locust is not installed"
    ),
]


# The engine the module's base_url fixture (tests/conftest.py) serves.
SERVER_CONFIG = EngineConfig.from_flat(
    dict(model="tiny", dtype="float32", device="cpu", max_model_len=128)
)


def plan(n: int, users: int) -> LoadPlan:
    tok = Tokenizer.for_preset(4096)
    specs = synthetic_requests(
        tok, n, LengthDist("uniform", low=8, high=24), LengthDist("uniform", low=4, high=12),
        seed=1, ignore_eos=True,
    )  # fmt: skip
    return LoadPlan("closed", [[s] for s in specs], users=users)


def test_two_workers_record_every_request_on_one_clock(base_url: str) -> None:
    p = plan(16, users=4)
    clock = RunClock()
    seen = []
    events: list[dict] = []
    result = run_locust(
        p, ClientConfig(base_url, "tiny", timeout_s=60), clock, 2, on_record=seen.append,
        on_event=events.append, run_time_s=120,
    )  # fmt: skip
    records = result.records
    assert [r.request_id for r in records] == [s.request_id for s in p.requests]
    assert len(seen) == 16 and result.workers == 2
    assert all(r.status == "ok" for r in records), [r.error for r in records]
    assert all(r.output_tokens_source == "usage" for r in records)
    assert [r.output_tokens for r in records] == [s.max_tokens for s in p.requests]
    for r in records:
        assert sum(c.n_tokens for c in r.chunks) == r.output_tokens
        assert 0 <= r.scheduled_s <= r.sent_s <= r.first_token_s <= r.done_s
    assert clock.now_s() > max(r.done_s for r in records)  # the run's clock, not the workers'
    assert {r.user_id for r in records} == {0, 1, 2, 3}  # user u on worker u % 2
    assert set(result.client.worker) == {0, 1} and "cpu_s" in result.client.name
    lags = np.array([v for n, v in zip(result.client.name, result.client.value, strict=True)
                     if n == "loop_lag_s"])  # fmt: skip
    assert lags.size > 10 and np.median(lags) < 0.05
    # Each worker's clock was measured against the master's: one host, so the true offset is 0
    # and must lie inside the measured bound.
    assert result.worker_info is not None and [w["index"] for w in result.worker_info] == [0, 1]
    for w in result.worker_info:
        assert w["status"] == "ok" and w["requests_recorded"] == w["requests_assigned"] == 8
        assert abs(w["clock_offset_s"]) <= w["clock_offset_bound_s"] < 0.05
        assert w["clock_samples"] >= 8
    kinds = [e["event"] for e in events]
    assert kinds[0] == "listening" and kinds.count("joined") == 2 and kinds[-1] == "end"
    # The users read through the raw client: each worker reports its connections' stamps.
    source = "kernel" if sys.platform.startswith("linux") else "user"
    assert {r.stamps for r in records} == {source}
    assert sorted(c["worker"] for c in result.stamps) == [0, 1]
    assert sum(len(c["connections"]) for c in result.stamps) == 4  # one per user


def test_two_workers_send_an_open_loop_schedule_at_the_planned_times(base_url: str) -> None:
    # 24 requests at 12 per second (a Poisson schedule), split between two workers.
    closed = plan(24, users=4)
    gaps = np.random.default_rng(3).exponential(1 / 12, size=24)
    schedule = np.cumsum(gaps) - gaps[0]
    p = LoadPlan("open", closed.sessions, users=4, schedule_s=schedule)
    events: list[dict] = []
    result = run_locust(
        p, ClientConfig(base_url, "tiny", timeout_s=60), RunClock(), 2, on_event=events.append,
        run_time_s=120, clock_resync_s=0.5,
    )  # fmt: skip
    records = result.records
    assert [r.request_id for r in records] == [s.request_id for s in p.requests]
    assert all(r.status == "ok" for r in records), [r.error for r in records]
    # Every record's scheduled_s is its planned time on the master's clock: one start second
    # plus the plan's offset, whichever worker sent it.
    due = np.array([r.scheduled_s for r in records])
    assert due - due[0] == pytest.approx(schedule, abs=1e-6)
    assert all(r.scheduled_s <= r.sent_s <= r.done_s for r in records)
    assert set(result.client.worker) == {0, 1}
    lags = [v for n, v in zip(result.client.name, result.client.value, strict=True)
            if n == "schedule_lag_s"]  # fmt: skip
    assert len(lags) == 24 and min(lags) > -0.001  # sent within 0.5 ms before its time, or later
    assert result.worker_info is not None
    for w in result.worker_info:
        assert w["requests_assigned"] == w["requests_recorded"] == 12
        lag = w["schedule_lag"]
        assert lag["samples"] == 12 and lag["p50_s"] <= lag["p99_s"] <= lag["max_s"]
        # Clocks measured again during the load (every 0.5 s here): one host, no drift to
        # find beyond the measurement's own bound.
        assert w["clock_resyncs"] >= 1 and abs(w["clock_drift_s"]) < 0.05
    kinds = [e["event"] for e in events]
    assert kinds.count("joined") == 2 and kinds[-1] == "end"


def test_refusals_are_named() -> None:
    config = ClientConfig("http://127.0.0.1:9", "m")
    with pytest.raises(LocustError, match="workers <= users"):
        run_locust(plan(2, users=1), config, RunClock(), 2)
    with pytest.raises(LocustError, match="within 1 s"):
        # Nobody joins: the master says so once its wait is over.
        run_locust(plan(2, users=2), config, RunClock(), 0, remote_workers=1, join_timeout_s=1)


def test_importing_the_driver_does_not_patch_this_process_with_gevent() -> None:
    code = "import loadgen.drivers.locust.driver, sys; print('gevent' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr
