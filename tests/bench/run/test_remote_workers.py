"""`bench run --driver locust --expect-workers N`: workers that join with `bench worker`.

Each worker is a separate process started as a remote host would start it, `python -m bench
worker --master 127.0.0.1:PORT`, against a simulated 70B served in real time on 127.0.0.1 (its
steps take their predicted ~21 ms, so requests are in flight long enough to lose a worker under
them).
"""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from bench.cli.app import app
from engine.config import EngineConfig
from tests.support.bench_workers import remote_run, run_folder

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

SCENARIO = """
name = "remote"
seed = 0
users = 4
num_requests = {n}
ignore_eos = true

[input_len]
kind = "uniform"
low = 16
high = 32

[output_len]
kind = "fixed"
value = {out}
"""


@pytest.mark.timeout(90)
def test_two_workers_from_bench_worker_record_every_request_on_the_masters_clock(
    base_url: str, tmp_path: Path
) -> None:
    t_start = time.monotonic()
    with remote_run(tmp_path, base_url, SCENARIO.format(n=16, out=24), 2) as (run, workers):
        assert run.finish(timeout_s=60) == 0, run.output
        for w in workers:
            assert w.finish(timeout_s=15) == 0, w.output
    assert time.monotonic() - t_start < 60
    assert "joined, 1 of 2: clock offset" in run.output and "joined, 2 of 2" in run.output
    folder = run_folder(tmp_path)
    requests = pd.read_parquet(folder / "requests.parquet")
    assert sorted(requests.request_id) == [f"req-{i:06d}" for i in range(16)]  # each once
    assert (requests.status == "ok").all(), requests.error.tolist()
    assert (requests.output_tokens == 24).all()
    # Times are on the master's run clock: ordered, and inside the run as the master saw it.
    assert (requests.scheduled_s <= requests.sent_s).all()
    assert (requests.sent_s < requests.first_token_s).all()
    assert (requests.first_token_s < requests.done_s).all()
    run_json = json.loads((folder / "run.json").read_text())
    load = run_json["load"]
    assert load["driver"] == "locust" and load["workers"] == 2 and load["expect_workers"] == 2
    wall = pd.Timestamp(run_json["ended_utc"]) - pd.Timestamp(run_json["started_utc"])
    assert requests.done_s.max() < wall.total_seconds()
    assert [w["index"] for w in load["locust_workers"]] == [0, 1]
    for w in load["locust_workers"]:
        assert w["status"] == "ok" and w["requests_assigned"] == w["requests_recorded"] == 8
        # One host: the true offset is 0, which the measured bound must hold.
        assert abs(w["clock_offset_s"]) <= w["clock_offset_bound_s"] < 0.05
    tokens = pd.read_parquet(folder / "tokens.parquet")
    assert len(tokens) == 16 * 24 and tokens.t_s.min() >= requests.sent_s.min()


@pytest.mark.timeout(90)
def test_a_worker_killed_mid_run_leaves_failed_rows_naming_it_and_the_run_is_written(
    base_url: str, tmp_path: Path
) -> None:
    t_start = time.monotonic()
    # 24 requests of 60 tokens (~1.4 s each), 4 users on 2 workers: ~9 s of load.
    scenario = SCENARIO.format(n=24, out=60)
    with remote_run(tmp_path, base_url, scenario, 2, "--worker-timeout", "3") as (run, workers):
        run.wait_for("joined, 2 of 2", timeout_s=30)
        time.sleep(3.0)  # into the second round of requests
        victim = workers[1]
        victim.proc.send_signal(signal.SIGKILL)
        assert victim.finish(timeout_s=10) == -signal.SIGKILL
        rc = run.finish(timeout_s=60)
        assert workers[0].finish(timeout_s=15) == 0, workers[0].output
    assert time.monotonic() - t_start < 60
    # A lost worker's requests count as failed, above --max-error-rate here: the run is written
    # and said not usable (exit 1).
    assert rc == 1, run.output
    assert "not usable" in " ".join(run.output.split()), run.output
    text = " ".join(run.output.split())
    assert "lost at t=" in text and "recorded as failed" in text
    folder = run_folder(tmp_path)
    for name in ("run.json", "requests.parquet", "tokens.parquet", "summary.json"):
        assert (folder / name).is_file(), name
    requests = pd.read_parquet(folder / "requests.parquet")
    assert sorted(requests.request_id) == [f"req-{i:06d}" for i in range(24)]
    load = json.loads((folder / "run.json").read_text())["load"]
    lost = [w for w in load["locust_workers"] if w["status"] == "lost"]
    assert len(lost) == 1 and lost[0]["requests_failed_as_lost"] >= 1
    (alive,) = [w for w in load["locust_workers"] if w["status"] == "ok"]
    failed = requests[requests.status != "ok"]
    assert len(failed) == lost[0]["requests_failed_as_lost"]
    prefix = f"worker {lost[0]['index']} ({lost[0]['host']}) lost at t="
    assert failed.error.str.startswith(prefix).all(), failed.error.tolist()
    assert failed.done_s.isna().all()
    # The survivor finished its whole share; the lost one's in-flight requests kept their
    # send times, which came before it was lost.
    assert alive["requests_recorded"] == alive["requests_assigned"] == 12
    in_flight = failed[failed.error.str.endswith("with the request in flight")]
    assert (in_flight.sent_s < lost[0]["lost_at_s"]).all()
    assert lost[0]["last_heard_s"] < lost[0]["lost_at_s"]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["counts"]["all"]["error"] == len(failed)


def test_options_that_cannot_run_are_refused_in_one_line(tmp_path: Path) -> None:
    cases = [
        (["--expect-workers", "2"], "add --driver locust"),
        (["--driver", "locust", "--expect-workers", "2"], "--expect-workers needs --master-bind"),
        (["--driver", "locust", "--expect-workers", "2", "--master-bind", "10.0.0.1"],
         "--master-bind '10.0.0.1': expected HOST:PORT"),
        (["--driver", "locust", "--expect-workers", "2", "--workers", "3",
          "--master-bind", "0.0.0.0:5557"], "drop --workers"),
    ]  # fmt: skip
    for args, message in cases:
        result = CliRunner().invoke(app, ["run", "--scenario", "1-user", *args], terminal_width=400)
        assert result.exit_code == 2, (args, result.output)
        assert message in " ".join(result.output.split()), (args, result.output)
        assert "Traceback" not in result.output


def test_bench_worker_refuses_a_bad_address_in_one_line() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench", "worker", "--master", "nohost"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2
    assert "--master 'nohost': expected HOST:PORT" in " ".join(out.stderr.split())
    assert "Traceback" not in out.stderr
