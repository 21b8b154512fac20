"""Requests abandoned by the workload against a real server on 127.0.0.1: recorded as cancelled
with what they received, kept out of the latencies, counted in the summary, and aborted by the
engine (it stops generating for them)."""

from __future__ import annotations

import io
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from bench.run.orchestrate import RunOptions, run_benchmark
from bench.scenario.scenario import ScenarioError, load_scenario, scenario_from_dict
from engine.config import EngineConfig
from results.folder.run_folder import load_run

pytestmark = pytest.mark.timeout(300)

SERVER_CONFIG = EngineConfig.from_flat(
    dict(model="tiny", dtype="float32", device="cpu", max_model_len=2048)
)
SCENARIO = """
name = "abandon"
users = 4
num_requests = {n}
ignore_eos = true
seed = 4
[input_len]
kind = "fixed"
value = 8
[output_len]
kind = "fixed"
value = {out}
[abandon]
{abandon}
"""


def generated(base_url: str) -> float:
    text = httpx.get(base_url + "/metrics").text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "vllm:generation_tokens_total"
    )


def run(tmp_path: Path, url: str, n: int, out: int, abandon: str) -> tuple[Path, dict]:
    path = tmp_path / "abandon.toml"
    path.write_text(SCENARIO.format(n=n, out=out, abandon=abandon))
    opts = RunOptions(
        load_scenario(path), url, "reference", None, "tiny", tmp_path / "runs", live=False
    )
    return run_benchmark(opts, Console(file=io.StringIO()))


def test_abandoned_after_tokens(tmp_path: Path, base_url: str) -> None:
    before = generated(base_url)
    folder, summary = run(tmp_path, base_url, 16, 400, "share = 0.5\nafter_tokens = 5")
    req = load_run(folder).requests
    cut = req[req["abandoned"]]
    kept = req[~req["abandoned"]]
    assert 0 < len(cut) < 16 and (kept["status"] == "ok").all()
    assert (kept["output_tokens"] == 400).all()
    assert (cut["status"] == "cancelled").all() and cut["done_s"].notna().all()
    assert cut["error"].str.startswith("abandoned by the workload after 5 tokens").all()
    # The client closed each stream once 5 tokens were in: it kept what had arrived.
    assert (cut["output_tokens"] >= 5).all() and (cut["output_tokens"] < 400).all()
    # Counted, and kept out of every latency figure.
    section = summary["abandoned"]
    assert section["count"] == len(cut) == summary["counts"]["all"]["cancelled"]
    assert section["share"] == len(cut) / 16
    assert section["tokens_received"] == cut["output_tokens"].sum()
    assert summary["ttft_ms"]["count"] == summary["e2el_ms"]["count"] == len(kept)
    assert summary["usability"]["usable"]
    # The engine aborted them: it generated the kept requests' tokens and only a few more,
    # far from the 400 each abandoned request asked for.
    extra = generated(base_url) - before - kept["output_tokens"].sum()
    assert extra < len(cut) * 400 / 2


def test_abandoned_after_seconds(tmp_path: Path, base_url: str) -> None:
    folder, summary = run(tmp_path, base_url, 2, 2000, "share = 1.0\nafter_s = 0.5")
    req = load_run(folder).requests
    assert req["abandoned"].all() and (req["status"] == "cancelled").all()
    assert req["error"].str.startswith("abandoned by the workload after 0.5 s").all()
    assert ((req["done_s"] - req["scheduled_s"]) >= 0.5).all()
    assert summary["abandoned"]["count"] == 2
    assert summary["ttft_ms"]["count"] == 0


def test_bad_abandon_keys_name_the_key() -> None:
    fixed = {"kind": "fixed", "value": 4}
    data = {"name": "t", "users": 1, "num_requests": 1, "input_len": fixed, "output_len": fixed}
    with pytest.raises(ScenarioError, match=r"key 'abandon.share': must be in 0..1"):
        scenario_from_dict({**data, "abandon": {"share": 2.0, "after_s": 1.0}}, source="t.toml")
    with pytest.raises(ScenarioError, match=r"key 'abandon.after_tokens': missing"):
        scenario_from_dict({**data, "abandon": {"share": 0.5}}, source="t.toml")
    with pytest.raises(ScenarioError, match=r"unknown key 'abandon.after_token'"):
        scenario_from_dict({**data, "abandon": {"share": 0.5, "after_token": 3}}, source="t.toml")
