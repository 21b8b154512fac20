"""`bench simulate`: a scenario in virtual time, written as a run folder that reads like any other;
`bench sim-calibrate`'s fit recovers the parameters of a known device."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from bench.cli.simulate import register
from bench.scenario.scenario import load_scenario
from bench.sim.simulate import SimulateError, simulate
from engine.core.request import SamplingParams
from engine.sim.calibration import SimCalibration, calibration_from_steps, save
from engine.sim.cost import device_roofs
from perfmodel.cache import sim_calibration_path
from perfmodel.presets import get_preset
from perfmodel.roofline import Precision
from results.folder.run_folder import load_run
from results.run_summary import summarize_run
from tests.support.sim_fixtures import sim_engine

# Every test here times its steps from the fixed CPU calibration (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("fake_calibration")


SCENARIO = """
name = "sim-test"
users = {users}
num_requests = {requests}
ignore_eos = true
{extra}
[input_len]
kind = "uniform"
low = 40
high = 120
[output_len]
kind = "uniform"
low = 8
high = 40
[engine]
preset = "{preset}"
max_num_seqs = 64
[engine.options]
{options}
"""


def scenario_file(tmp_path: Path, preset: str = "tiny", users: int = 6, requests: int = 24,
                  extra: str = "", options: str = "") -> Path:  # fmt: skip
    path = tmp_path / "scenario.toml"
    path.write_text(SCENARIO.format(preset=preset, users=users, requests=requests, extra=extra,
                                    options=options))  # fmt: skip
    return path


def test_closed_loop_run_folder_reads_like_a_served_run(tmp_path: Path) -> None:
    scenario = load_scenario(str(scenario_file(tmp_path)))
    folder, summary = simulate(scenario, tmp_path / "runs", {"gpu": "cpu"})
    run = load_run(folder)
    assert summarize_run(run) == json.loads((folder / "summary.json").read_text())
    assert summary["counts"]["all"]["ok"] == 24
    assert (run.requests["status"] == "ok").all() and len(run.requests) == 24
    assert (run.requests["output_tokens_source"] == "engine").all()
    tokens = run.tokens.groupby("request_id")["n_tokens"].sum()
    assert (
        tokens.loc[run.requests["request_id"]].to_numpy() == run.requests["output_tokens"]
    ).all()
    assert run.steps is not None and run.steps["end_s"].max() == pytest.approx(
        run.requests["done_s"].max()
    )
    assert run.run_json["hardware"]["simulated"] is True
    # tiny is a bfloat16 checkpoint: the simulated engine takes its dtype, and the bf16 roof.
    assert run.run_json["analytic"]["roofs"]["flops_per_s"] == 100e9
    assert run.run_json["engine"]["description"]["device"] == "sim"
    assert summary["attribution"]["available"]
    # Closed loop: at most 6 requests in flight; each user's next request follows its last.
    by_user = run.requests.sort_values("sent_s").groupby("user_id")
    for _, rows in by_user:
        assert (rows["sent_s"].to_numpy()[1:] >= rows["done_s"].to_numpy()[:-1]).all()


def test_open_loop_with_a_duration_cuts_and_cancels(tmp_path: Path) -> None:
    extra = 'duration_s = 2.0\n[arrival]\nkind = "poisson"\nrate_rps = 20.0\n'
    path = scenario_file(tmp_path, "llama-3-70b", users=200, requests=200, extra=extra,
                         options='gpu = "a100-80gb"\ntp = 4')  # fmt: skip
    folder, _ = simulate(load_scenario(str(path)), tmp_path / "runs")
    requests = load_run(folder).requests
    assert 20 < len(requests) < 80  # ~40 arrivals in 2 s
    assert (requests["scheduled_s"] <= 2.0).all()
    assert set(requests["status"]) <= {"ok", "cancelled"}
    assert (requests["status"] == "cancelled").any()
    assert (requests.loc[requests["status"] == "cancelled", "done_s"] == 2.0).all()
    # No cap reached: each request goes out when due, even in the middle of a step.
    assert (requests["sent_s"] == requests["scheduled_s"]).all()


def test_open_loop_cap_holds_requests_until_a_slot_frees(tmp_path: Path) -> None:
    extra = 'duration_s = 1.5\n[arrival]\nkind = "constant"\nrate_rps = 40.0\n'
    path = scenario_file(tmp_path, "llama-3-70b", users=2, requests=60, extra=extra,
                         options='gpu = "a100-80gb"\ntp = 4')  # fmt: skip
    folder, _ = simulate(load_scenario(str(path)), tmp_path / "runs")
    requests = load_run(folder).requests
    assert len(requests) == 60  # every arrival due before the end is recorded
    sent = requests[requests["status"] == "ok"]
    assert (sent["sent_s"] > sent["scheduled_s"]).sum() > len(sent) // 2  # they queued
    starts, ends = sent["sent_s"].to_numpy(), sent["done_s"].to_numpy()
    in_flight = [((starts <= t) & (ends > t)).sum() for t in starts]
    assert max(in_flight) <= 2


def test_a_device_is_required(tmp_path: Path) -> None:
    with pytest.raises(SimulateError, match="--gpu"):
        simulate(load_scenario(str(scenario_file(tmp_path))), tmp_path / "runs")


def test_abandoned_requests_are_not_simulated(tmp_path: Path) -> None:
    path = scenario_file(tmp_path, options='gpu = "a100-80gb"')
    path.write_text(path.read_text() + "[abandon]\nshare = 0.5\nafter_tokens = 4\n")
    with pytest.raises(SimulateError, match=r"\[abandon\]: bench simulate does not model"):
        simulate(load_scenario(str(path)), tmp_path / "runs")


def test_cli_simulates_and_calibrates_from_the_run(tmp_path: Path) -> None:
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    path = scenario_file(tmp_path, users=12, requests=36)
    result = runner.invoke(app, ["simulate", "--scenario", str(path), "--gpu", "cpu", "--set",
                                 "max_num_batched_tokens=256", "--runs-dir",
                                 str(tmp_path / "runs"), "--no-html"])  # fmt: skip
    assert result.exit_code == 0, result.output
    folder = next((tmp_path / "runs").iterdir())
    settings = json.loads((folder / "run.json").read_text())["engine"]["settings"]
    assert settings["max_num_batched_tokens"] == 256 and settings["sim_speedup"] == 0.0
    # The simulated steps are the fake CPU's roofline exactly: the fit finds its peaks again.
    result = runner.invoke(app, ["sim-calibrate", "--from-run", str(folder)])
    assert result.exit_code == 0, result.output
    saved = json.loads(sim_calibration_path("tiny").read_text())
    assert saved["rms_relative_error"] < 0.02
    assert saved["step_overhead_s"] < 1e-4
    bad = runner.invoke(app, ["simulate", "--scenario", str(path), "--set", "nonsense=1"])
    assert bad.exit_code == 2 and "--set" in bad.output


def test_fit_recovers_a_known_calibration(tmp_path: Path) -> None:
    known = SimCalibration(
        "tiny", "Test CPU", "fp32", 1, 0.5, 0.8, 25e9, 8e9, 2e-3, 1e-4, 0.0, 0, "test", ""
    )
    save(known)
    engine = sim_engine(max_num_batched_tokens=256)
    prompts = [[3 + i] * (20 + 7 * i) for i in range(40)]
    engine.generate(prompts, SamplingParams(max_tokens=24, ignore_eos=True))
    roofs = device_roofs("cpu", "fp32")
    tiny = get_preset("tiny")
    fitted = calibration_from_steps("tiny", tiny, Precision("fp32", "fp32", "fp32"), roofs,
                                    engine.steps.since(0), "Test CPU", "test")  # fmt: skip
    assert fitted.rms_relative_error < 0.03
    assert fitted.flops_per_s == pytest.approx(25e9, rel=0.1)
    assert fitted.step_overhead_s == pytest.approx(2e-3, rel=0.2)
    assert fitted.seq_overhead_s == pytest.approx(1e-4, rel=0.3)


def test_bench_simulate_command_writes_a_run_folder(tmp_path: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "bench", "simulate", "--scenario", "1-user", "--model",
         "llama-3-8b", "--gpu", "h100-sxm", "--runs-dir", str(tmp_path), "--no-html"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (folder,) = (p for p in tmp_path.iterdir() if (p / "run.json").is_file())
    for name in ("run.json", "requests.parquet", "tokens.parquet", "steps.parquet", "summary.json"):
        assert (folder / name).is_file(), name


def test_steps_are_streamed_in_parts_and_sealed_to_the_same_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import bench.sim.simulate as simulate_module
    from results.folder.parts.step_parts import StepParts
    from results.folder.parts.writer import STEPS_PARTS

    batches: list[int] = []

    class CountedParts(StepParts):
        def __call__(self, columns: dict[str, list[int]]) -> None:
            batches.append(len(columns["step"]))
            super().__call__(columns)

    monkeypatch.setattr(simulate_module, "StepParts", CountedParts)
    scenario = load_scenario(str(scenario_file(tmp_path)))
    # One part of every step, drained at the end: the table steps.parquet always was.
    monkeypatch.setattr(simulate_module, "STEPS_PART_STEPS", 10**9)
    whole, _ = simulate(scenario, tmp_path / "whole", {"gpu": "cpu"})
    assert len(batches) == 1
    total, batches[:] = batches[0], []
    monkeypatch.setattr(simulate_module, "STEPS_PART_STEPS", 7)
    parted, summary = simulate(scenario, tmp_path / "parted", {"gpu": "cpu"})
    # The recorder handed its steps over every 7: it never held more, whatever the run's length.
    assert len(batches) > 3 and max(batches) == 7 and sum(batches) == total
    assert not (parted / STEPS_PARTS).exists()
    a, b = load_run(whole).steps, load_run(parted).steps
    assert a is not None and b is not None and len(b) == total
    assert list(a.columns) == list(b.columns)
    assert a.equals(b)
    assert load_run(parted).run_json["recorded"]["steps"] is True
    assert summary == json.loads((parted / "summary.json").read_text())
