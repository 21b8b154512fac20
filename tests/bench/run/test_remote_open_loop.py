"""An open-loop trace replay over workers that join with `bench worker`: the master splits the
arrival plan among them, each sends its share at the planned times on the master's clock, every
record's latency counts from its planned time, and each worker's schedule lag is in run.json;
a worker lost mid-run leaves its unsent share as failed rows at their planned times.

Workers are separate processes started as a remote host would start them, against a simulated
70B served in real time on 127.0.0.1 (steps of their predicted ~21 ms)."""

from __future__ import annotations

import importlib.util
import json
import signal
import time
from pathlib import Path

import pandas as pd
import pytest

from engine.config import EngineConfig
from results.folder.arrival_plan import read_arrival_plan
from tests.support.bench_workers import remote_run, run_folder
from tests.support.traces import write_mooncake_trace

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("locust") is None, reason="locust is not installed"
    ),
]

# The engine the module's base_url fixture (tests/conftest.py) serves.
SERVER_CONFIG = EngineConfig.from_flat(
    dict(model="llama-3-70b", device="sim", gpu="a100-80gb", tp=4, max_num_seqs=16)
)


def trace_scenario(tmp_path: Path, n: int, gap_ms: int, out: int) -> str:
    """A Mooncake trace of ``n`` requests ``gap_ms`` apart, replayed as recorded."""
    trace = write_mooncake_trace(
        tmp_path / "trace.jsonl", [(gap_ms * i, 24, out, ()) for i in range(n)]
    )
    return (
        f'name = "remote-trace"\nseed = 0\nusers = 8\nignore_eos = true\n'
        f'[workload]\nkind = "trace"\npath = "{trace}"\n[trace]\nblock_tokens = 16\n'
    )


def planned_against_sent(folder: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    plan = read_arrival_plan(folder)
    assert plan is not None
    requests = pd.read_parquet(folder / "requests.parquet").set_index("request_id")
    return plan, requests.loc[plan["request_id"]]


@pytest.mark.timeout(120)
def test_four_workers_replay_a_trace_at_its_planned_times_with_each_workers_lag(
    base_url: str, tmp_path: Path
) -> None:
    scenario = trace_scenario(tmp_path, n=40, gap_ms=50, out=8)  # 20 requests/s for 2 s
    with remote_run(tmp_path, base_url, scenario, 4) as (run, workers):
        assert run.finish(timeout_s=90) == 0, run.output
        for w in workers:
            assert w.finish(timeout_s=15) == 0, w.output
    assert "joined, 4 of 4" in run.output
    folder = run_folder(tmp_path)
    plan, req = planned_against_sent(folder)
    assert (req["status"] == "ok").all(), req["error"].tolist()
    # Latency counts from the plan: every scheduled_s is the planned time on the master's
    # clock, whichever worker sent it, and nothing went out before it.
    due = req["scheduled_s"].to_numpy()
    assert due - due[0] == pytest.approx(plan["planned_offset_s"].to_numpy(), abs=1e-6)
    assert (req["sent_s"].to_numpy() >= due - 1e-3).all()
    load = json.loads((folder / "run.json").read_text())["load"]
    assert load["mode"] == "open" and load["workers"] == 4
    entries = load["locust_workers"]
    assert [w["index"] for w in entries] == [0, 1, 2, 3]
    for w in entries:
        assert w["requests_assigned"] == w["requests_recorded"] == 10
        lag = w["schedule_lag"]
        assert lag["samples"] == 10 and lag["p50_s"] <= lag["p99_s"] <= lag["max_s"]
        assert isinstance(lag["behind"], bool)
    # The self-check's samples carry each worker's lags too.
    client = pd.read_parquet(folder / "client.parquet")
    lags = client[client["name"] == "schedule_lag_s"]
    assert sorted(lags["worker"].unique()) == [0, 1, 2, 3] and len(lags) == 40


@pytest.mark.timeout(120)
def test_a_worker_lost_mid_replay_leaves_its_unsent_share_at_the_planned_times(
    base_url: str, tmp_path: Path
) -> None:
    scenario = trace_scenario(tmp_path, n=60, gap_ms=100, out=8)  # 10 requests/s for 6 s
    with remote_run(tmp_path, base_url, scenario, 2, "--worker-timeout", "3") as (run, workers):
        run.wait_for("joined, 2 of 2", timeout_s=30)
        time.sleep(3.0)  # about a third of the schedule in
        workers[1].proc.send_signal(signal.SIGKILL)
        assert workers[1].finish(timeout_s=10) == -signal.SIGKILL
        rc = run.finish(timeout_s=90)
        assert workers[0].finish(timeout_s=15) == 0, workers[0].output
    assert rc == 1, run.output  # the lost share counts as failed: not usable
    folder = run_folder(tmp_path)
    plan, req = planned_against_sent(folder)
    assert len(req) == 60  # nothing of the plan is dropped
    load = json.loads((folder / "run.json").read_text())["load"]
    (lost,) = [w for w in load["locust_workers"] if w["status"] == "lost"]
    failed = req[req["status"] != "ok"]
    assert len(failed) == lost["requests_failed_as_lost"] >= 1
    assert failed["error"].str.startswith(f"worker {lost['index']} ({lost['host']}) lost").all()
    # Every row, failed or not, sits at its planned time.
    due = req["scheduled_s"].to_numpy()
    assert due - due[0] == pytest.approx(plan["planned_offset_s"].to_numpy(), abs=1e-6)
    unsent = failed[failed["error"].str.endswith("before sending the request")]
    assert len(unsent) >= 1 and (unsent["sent_s"] >= unsent["scheduled_s"]).all()
