"""`bench run` against a real `bench serve` on 127.0.0.1 follows the engine's steps while the
load goes on (bench.run.step_follower): steps.parquet holds every step of the run, in order,
none twice and none missing, sealed from parts written during the load, and equal to one read
of /debug/steps after it (what `bench run` used to fetch once, at the end)."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from bench.run.orchestrate import RunOptions, run_benchmark
from bench.scenario.scenario import load_scenario
from results.folder.engine_steps import fetch_steps
from results.folder.parts.writer import FLUSH_S, STEPS_PARTS
from results.folder.run_folder import load_run
from tests.support.server_fixture import bench_serve

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
# Users start over a ramp of several poll intervals, so that the load outlasts a few polls.
SCENARIO = f"""
name = "followed"
users = 4
num_requests = 24
ignore_eos = true
seed = 11
ramp_up_s = {3 * FLUSH_S}

[input_len]
kind = "uniform"
low = 8
high = 32

[output_len]
kind = "uniform"
low = 8
high = 24
"""


def test_a_served_run_streams_every_step_of_its_load(tmp_path: Path) -> None:
    (tmp_path / "followed.toml").write_text(SCENARIO)
    with bench_serve(tmp_path / "serve.log", "--max-model-len", "128") as served:
        options = RunOptions(
            load_scenario(tmp_path / "followed.toml"), served.url, "reference", None, "tiny",
            tmp_path / "runs", live=False,
        )  # fmt: skip
        folder, _ = run_benchmark(options, Console(file=io.StringIO(), width=200))
        data = load_run(folder)
        # The engine is idle since the run ended: one read of its steps now is the run's.
        one_read = fetch_steps(served.url, data.run_json["client"]["t0_ns"])
    steps = data.steps
    assert steps is not None and one_read is not None and data.run_json["recorded"]["steps"]
    assert not (folder / STEPS_PARTS).exists()
    pd.testing.assert_frame_equal(steps, one_read)
    # Every step of the run once, in order, and they account for every token of the load.
    assert steps["step"].diff().dropna().eq(1).all() and steps["start_s"].min() >= 0
    req = data.requests
    assert (req["status"] == "ok").all() and len(req) == 24
    assert steps["num_prefill_tokens"].sum() == req["prompt_tokens"].sum()
    assert steps["num_decode_tokens"].sum() == (req["output_tokens"] - 1).sum()
    # That the parts are written while the load goes on (not only at its end), a load shorter
    # than one poll on a fast machine cannot show: tests/bench/run/end/test_killed_run.py
    # reads them back from a run killed mid-load.
    assert not any("engine steps" in m for m in data.run_json["probes"]["messages"])
