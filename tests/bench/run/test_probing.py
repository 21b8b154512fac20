"""`bench run` with its probes, end to end: a real engine, the probe process, the run folder."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from bench.experiments.calibrate import calibrate
from bench.run.endpoint.environment import cpu_name
from bench.run.orchestrate import RunOptions, run_benchmark
from bench.scenario.scenario import load_scenario
from engine.config import EngineConfig
from perfmodel import calibration as cal
from results.figures.machine_load import process_labels
from results.folder.run_folder import load_run
from results.run_summary import summarize_run
from tests.support.cache import isolated_cache

SCENARIO = """
name = "probed"
users = {users}
num_requests = {requests}
ignore_eos = true
seed = 5
# Users start over 1.5 s, so the run outlasts several of the engine sampler's 0.5 s ticks
# however fast the engine is (a warm one finishes this load in about 0.4 s).
ramp_up_s = 1.5

[input_len]
kind = "uniform"
low = 16
high = 48

[output_len]
kind = "uniform"
low = 8
high = 24
"""


# The engine the module's base_url fixture (tests/conftest.py) serves.
SERVER_CONFIG = EngineConfig.from_flat(
    dict(model="tiny", dtype="float32", device="cpu", max_model_len=128)
)


@pytest.fixture
def calibration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A real (short) calibration of this CPU, where the run looks for one."""
    isolated_cache(monkeypatch, tmp_path / "cache")
    measured = calibrate(budget_s=0.02, cpu_matmul_n=256, cpu_triad_elements=2**21,
                             gpu=False, host={"cpu": cpu_name()})  # fmt: skip
    return cal.save(measured)


def run(tmp_path: Path, url: str | None, users: int, requests: int, **opts) -> tuple[Path, str]:
    scenario = tmp_path / "probed.toml"
    scenario.write_text(SCENARIO.format(users=users, requests=requests))
    out = io.StringIO()
    options = RunOptions(load_scenario(scenario), url, "reference", None, "tiny",
                         tmp_path / "runs", live=False, **opts)  # fmt: skip
    folder, _ = run_benchmark(options, Console(file=out, width=200))
    return folder, out.getvalue()


def test_a_run_records_probes_and_attributes_its_time(
    tmp_path: Path, base_url: str, calibration: Path
) -> None:
    folder, printed = run(tmp_path, base_url, users=8, requests=32)
    data = load_run(folder)
    assert data.run_json["recorded"] == {"steps": True, "samples": True, "client": True}
    samples = data.samples
    assert samples is not None and {"cpu", "engine"} <= set(samples["source"])
    names = set(samples.loc[samples["source"] == "engine", "name"])
    assert {"kv_cache_usage", "num_requests_running", "generation_tokens_total"} <= names
    # Probes start before the load and stop after it: readings on both sides of the run.
    assert samples["t_s"].min() < 0 < samples["t_s"].max()
    probes = data.run_json["probes"]
    for source in ("cpu", "engine"):
        report = probes["samplers"][source]
        assert report["status"] == "ok" and report["errors"] == 0 and report["ticks"] >= 2
        assert report["tick_cpu_ms"]["mean"] is not None and report["missed_ticks"] >= 0
    assert probes["process"]["cpu_s"] > 0
    # Streamed to the folder as they were taken, then sealed: every reading, no part left.
    assert probes["stream"]["samples"] == probes["samples"] == len(samples)
    assert probes["stream"]["errors"] == 0 and probes["stream"]["parts"] >= 1
    assert not (folder / "samples.parts").exists()
    if probes["samplers"]["nvml"]["status"] == "unavailable":  # no GPU here: said once
        reason = probes["samplers"]["nvml"]["reason"]
        assert printed.count(reason) == 1 and f"probe nvml: {reason}" in probes["messages"]
    # The analytic model's inputs, with this CPU's calibration as the roofs.
    analytic = data.run_json["analytic"]
    assert (
        analytic["model_config"]["name"] == "tiny" and analytic["precision"]["kv_dtype"] == "fp32"
    )
    assert analytic["roofs"]["source"].startswith("bench calibrate")
    summary = json.loads((folder / "summary.json").read_text())
    attr = summary["attribution"]
    assert attr["available"] and attr["mfu"] > 0 and attr["mbu"] > 0
    assert attr["prefill"]["tokens"] == data.requests["prompt_tokens"].sum()
    assert attr["prefill"]["time_s"] + attr["decode"]["time_s"] == pytest.approx(attr["busy_s"])
    assert sum(attr["bound_time_s"].values()) == pytest.approx(attr["busy_s"])
    assert summary["probes"]["engine"]["num_requests_running"]["max"] >= 1
    assert summary["per_user_tps_by_phase"]["decode_tok_s"]["count"] == 32
    # The whole summary is recomputed from the folder alone.
    assert summarize_run(data) == summary


def test_a_launched_engine_is_probed_and_nsys_said_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("nsys"):
        pytest.skip("nsys is on PATH here; this checks the message when it is not")
    folder, printed = run(tmp_path, None, users=2, requests=4, nsys=True)
    assert "nsys (Nsight Systems) is not on PATH" in printed
    data = load_run(folder)
    assert "nsys" not in data.run_json["recorded"]
    cpu = data.samples[data.samples["name"] == "process_cpu_pct"]
    labels = [json.loads(text) for text in cpu["labels"]]
    assert {label["group"] for label in labels} == {"client", "engine"}
    # Every process of the launched engine is followed, each under its own title: the HTTP
    # front and the core process that steps the model, both in the engine's group.
    engine = {label["process"]: label["pid"] for label in labels if label["group"] == "engine"}
    assert {"engine-front", "engine-core"} <= set(engine)
    assert engine["engine-front"] != engine["engine-core"]
    is_core = data.samples["labels"].map(lambda text: process_labels(text).get("process"))
    core_s = data.samples[
        (data.samples["name"] == "process_cpu_s_total") & (is_core == "engine-core")
    ]["value"]
    assert core_s.max() > 0  # the core did the work, and its CPU seconds say so
    assert data.run_json["probes"]["samplers"]["cpu"]["processes"]["engine"] > 0
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["machine_load"]["available"] and summary["machine_load"]["run_cpu_s"] > 0
