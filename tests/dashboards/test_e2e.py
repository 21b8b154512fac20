"""A real run folder (real engine, real client, `bench run`'s own code) made into report.html."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from bench.run.orchestrate import RunOptions, run_benchmark
from bench.scenario.scenario import load_scenario
from dashboards.pages.report import build_run_page, write_run_report
from dashboards.runview import load_run_view
from engine.config import EngineConfig
from tests.support.server_fixture import running_server

SCENARIO = """
name = "dash"
users = 4
num_requests = 12
ignore_eos = true
seed = 5

[input_len]
kind = "uniform"
low = 8
high = 32

[output_len]
kind = "uniform"
low = 4
high = 12
"""


@pytest.mark.slow
def test_a_real_run_folder_becomes_a_report(tmp_path: Path) -> None:
    scenario = tmp_path / "dash.toml"
    scenario.write_text(SCENARIO)
    config = EngineConfig.from_flat(
        dict(model="tiny", dtype="float32", device="cpu", max_model_len=64)
    )
    with running_server(config) as url, open("/dev/null", "w") as null:
        opts = RunOptions(
            scenario=load_scenario(scenario),
            url=url,
            engine="reference",
            model=None,
            tokenizer="tiny",
            runs_dir=tmp_path / "runs",
            live=False,
        )
        folder, summary = run_benchmark(opts, Console(file=null))
    view = load_run_view(folder)
    assert view.steps is not None and len(view.requests) == 12
    page = build_run_page(view)
    keys = {s.key for s in page.sections if s.figure is not None}
    assert {"headline", "latency", "tps", "timeline", "steps"} <= keys
    headline = next(s for s in page.sections if s.key == "headline").figure
    assert headline is not None
    assert f"{summary['throughput']['output_tok_s']:,.0f} tok/s" in " ".join(
        a.text for a in headline.layout.annotations
    )
    timeline = next(s for s in page.sections if s.key == "timeline").figure
    assert timeline is not None
    titles = {a.text for a in timeline.layout.annotations}
    if not view.run_json["hardware"].get("gpus"):
        # Only the CPU probe ran: the panel says so, not "GPU, SM, tensor".
        assert "Utilization: CPU" in titles
    assert "KV cache occupancy" in titles
    (kv,) = [t for t in timeline.data if t.name.startswith("KV blocks used (of ")]
    assert all(0 <= v <= 100 for v in kv.y if v == v)
    # Each process's CPU series names what it is (read from the page's labels text).
    cpu = [t.name for t in timeline.data if t.name.startswith("CPU ") and "system" not in t.name]
    assert cpu and not any("unknown" in name for name in cpu), cpu
    path = write_run_report(folder)
    assert path.stat().st_size > 1_000_000
    html = path.read_text(encoding="utf-8")
    if not view.run_json["hardware"].get("gpus"):
        assert "No GPU" in html  # said plainly at the top of the page
