"""The Locust driver: a local master and 2 workers against the reference engine on 127.0.0.1."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.tokenizer.tokenizer import Tokenizer
from loadgen.clock import RunClock
from loadgen.drivers.driver import ClientConfig, LoadPlan
from loadgen.drivers.locust_driver import LocustError, run_locust
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
    result = run_locust(
        p, ClientConfig(base_url, "tiny", timeout_s=60), clock, None, 2, on_record=seen.append,
        run_time_s=120,
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


def test_refusals_are_named() -> None:
    config = ClientConfig("http://127.0.0.1:9", "m")
    with pytest.raises(LocustError, match="workers <= users"):
        run_locust(plan(2, users=1), config, RunClock(), None, 2)
    open_plan = LoadPlan("open", plan(2, 1).sessions, users=1, schedule_s=np.zeros(2))
    with pytest.raises(LocustError, match="asyncio driver for open loop"):
        run_locust(open_plan, config, RunClock(), None, 1)


def test_importing_the_driver_does_not_patch_this_process_with_gevent() -> None:
    code = "import loadgen.drivers.locust_driver, sys; print('gevent' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_a_worker_from_elsewhere_joins_with_the_job_file(base_url: str) -> None:
    # Stands in for a second machine: a worker started from the command bench hands out.
    started: list[subprocess.Popen] = []

    def on_job(job: object, command: list[str]) -> None:
        argv = [sys.executable, "-m", *command]  # "locust ..." through this interpreter
        argv[argv.index("--master-host") + 1] = "127.0.0.1"
        env = {**os.environ, "LLM_PERF_LOCUST_JOB": str(job)}
        started.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL))  # fmt: skip

    p = plan(8, users=4)
    try:
        result = run_locust(
            p, ClientConfig(base_url, "tiny", timeout_s=60), RunClock(), None, 1,
            remote_workers=1, on_job=on_job, run_time_s=120,
        )  # fmt: skip
    finally:
        for proc in started:
            proc.terminate()
            proc.wait(timeout=10)
    assert [r.status for r in result.records] == ["ok"] * 8
    assert set(result.client.worker) == {0, 1}
