"""bench.run.auto_calibrate: a first CPU run in a fresh cache calibrates quickly before the load
and shows MFU; --no-calibrate and the runs that need no calibration say why there are no roofs."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from bench.run.auto_calibrate import needs_calibration
from bench.run.end.report import render_summary
from bench.run.endpoint.environment import cpu_name
from bench.run.orchestrate import RunOptions, run_benchmark
from bench.scenario.scenario import load_scenario
from engine.config import EngineConfig
from perfmodel import cache
from perfmodel.presets import TINY
from tests.support.cache import isolated_cache
from tests.support.calibration import save_calibration

SCENARIO = """
name = "first-run"
users = 2
num_requests = 6
ignore_eos = true
seed = 7

[input_len]
kind = "uniform"
low = 16
high = 32

[output_len]
kind = "uniform"
low = 8
high = 16
"""

# The engine the module's base_url fixture (tests/conftest.py) serves.
SERVER_CONFIG = EngineConfig.from_flat(
    dict(model="tiny", dtype="float32", device="cpu", max_model_len=96)
)

CPU_ENGINE = {"model_config": TINY.to_dict(), "dtype": "float32", "device": "cpu"}


def run(tmp_path: Path, url: str, **opts: object) -> tuple[Path, dict, str]:
    """One small run against ``url``; its folder, summary and what the terminal showed."""
    scenario = tmp_path / "first-run.toml"
    tmp_path.mkdir(parents=True, exist_ok=True)
    scenario.write_text(SCENARIO)
    out = io.StringIO()
    console = Console(file=out, width=200)
    options = RunOptions(load_scenario(scenario), url, "reference", None, "tiny",
                         tmp_path / "runs", live=False, **opts)  # fmt: skip
    folder, summary = run_benchmark(options, console)
    render_summary(summary, console)
    return folder, summary, out.getvalue()


def test_which_runs_need_a_calibration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isolated_cache(monkeypatch, tmp_path / "cache")
    assert needs_calibration(CPU_ENGINE, True, "Fake CPU")
    assert not needs_calibration(CPU_ENGINE, False, "Fake CPU")  # a remote host's roofs
    assert not needs_calibration(None, True, "Fake CPU")  # no description: no steps, no MFU
    assert not needs_calibration({**CPU_ENGINE, "device": "cuda:0"}, True, "Fake CPU")
    assert not needs_calibration({**CPU_ENGINE, "simulated": {"x": 1}}, True, "Fake CPU")
    save_calibration(cache.calibration_path(), "Other CPU")
    assert needs_calibration(CPU_ENGINE, True, "Fake CPU")  # measured on another CPU
    save_calibration(cache.calibration_path(), "Fake CPU")
    assert not needs_calibration(CPU_ENGINE, True, "Fake CPU")


def test_a_first_run_in_a_fresh_cache_shows_roofs_and_mfu(
    tmp_path: Path, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    isolated_cache(monkeypatch, tmp_path / "cache")
    assert not cache.calibration_path().exists()
    folder, summary, printed = run(tmp_path, base_url)
    assert printed.count("calibrating this CPU's roofs once") == 1
    saved = json.loads(cache.calibration_path().read_text())
    assert saved["mode"] == "quick" and saved["host"]["cpu"] == cpu_name()
    analytic = json.loads((folder / "run.json").read_text())["analytic"]
    assert analytic["roofs"]["source"].startswith("quick calibration")
    assert analytic["roofs_reason"] is None
    assert analytic["notes"][0].startswith("roofs from an automatic quick calibration")
    attr = summary["attribution"]
    assert attr["mfu"] > 0 and attr["mbu"] > 0 and attr["mfu_reason"] is None
    assert re.search(r"overall MFU \d+(\.\d+)?%", printed), printed
    # Cached: the next run finds the calibration and measures nothing.
    _, again, printed = run(tmp_path / "again", base_url)
    assert "calibrating" not in printed and again["attribution"]["mfu"] > 0


def test_no_calibrate_says_why_mfu_is_missing(
    tmp_path: Path, base_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    isolated_cache(monkeypatch, tmp_path / "cache")
    folder, summary, printed = run(tmp_path, base_url, calibrate=False)
    assert "calibrating" not in printed and not cache.calibration_path().exists()
    analytic = json.loads((folder / "run.json").read_text())["analytic"]
    assert analytic["roofs"] is None
    assert analytic["roofs_reason"].startswith("no automatic calibration (--no-calibrate)")
    assert "no calibration of this CPU: run `bench calibrate`" in analytic["roofs_reason"]
    assert any("--no-calibrate" in note for note in analytic["notes"])
    attr = summary["attribution"]
    assert attr["mfu"] is None and attr["mfu_reason"] == f"no roofs: {analytic['roofs_reason']}"
    assert 'MFU and MBU are "-": no roofs: no automatic calibration (--no-calibrate)' in printed
