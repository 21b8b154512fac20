"""`bench run` end to end: a real server on 127.0.0.1, the real client, the real run folder."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from bench.run.orchestrate import RunError, RunOptions, RunRefused, run_benchmark
from bench.scenario.scenario import load_scenario
from engine.config import EngineConfig
from engine_adapters.launcher import free_port
from results.figures.summary import compute_summary
from results.folder.run_folder import load_run
from results.run_summary import summarize_run

SCENARIO = """
name = "small"
users = 8
num_requests = 40
ignore_eos = true
seed = 3

[input_len]
kind = "uniform"
low = {in_low}
high = {in_high}

[output_len]
kind = "uniform"
low = 4
high = 24
"""


def write_scenario(tmp_path: Path, in_low: int = 8, in_high: int = 64) -> Path:
    path = tmp_path / "small.toml"
    path.write_text(SCENARIO.format(in_low=in_low, in_high=in_high))
    return path


# The engine the module's base_url fixture (tests/conftest.py) serves.
SERVER_CONFIG = EngineConfig.from_flat(
    dict(model="tiny", dtype="float32", device="cpu", max_model_len=96)
)


def run(tmp_path: Path, url: str, scenario: Path) -> tuple[Path, dict]:
    opts = RunOptions(
        load_scenario(scenario), url, "reference", None, "tiny", tmp_path / "runs", live=False
    )
    return run_benchmark(opts, Console(file=open("/dev/null", "w")))


def generation_tokens_total(base_url: str) -> float:
    text = httpx.get(base_url + "/metrics").text
    (value,) = (
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "vllm:generation_tokens_total"
    )
    return value


def test_every_request_recorded_and_summary_recomputes(tmp_path: Path, base_url: str) -> None:
    generated_before = generation_tokens_total(base_url)
    folder, summary = run(tmp_path, base_url, write_scenario(tmp_path))
    data = load_run(folder)
    req = data.requests
    assert len(req) == 40 and req["request_id"].is_unique
    assert (req["status"] == "ok").all(), req[req["status"] != "ok"]["error"].tolist()
    assert (req["output_tokens_source"] == "usage").all()
    # Our count equals what the engine says it generated.
    generated = generation_tokens_total(base_url) - generated_before
    assert req["output_tokens"].sum() == generated == summary["tokens"]["output_tokens"]
    # ignore_eos: the server generated exactly max_tokens, and the usage says so.
    specs = data.run_json["scenario"]
    assert specs["users"] == 8
    assert req["output_tokens"].between(4, 24).all()
    tokens_per_request = data.tokens.groupby("request_id")["n_tokens"].sum()
    assert (tokens_per_request.loc[req["request_id"]].to_numpy() == req["output_tokens"]).all()
    assert (req["first_token_s"] - req["sent_s"] <= req["done_s"] - req["sent_s"]).all()
    assert (req["sent_s"] >= req["scheduled_s"]).all()
    recomputed = summarize_run(data)
    assert recomputed == json.loads((folder / "summary.json").read_text()) == summary
    # Its request figures are compute_summary's, from requests.parquet and tokens.parquet alone.
    assert compute_summary(data.requests, data.tokens, 0.0, 0.0, {}).items() <= summary.items()
    assert data.run_json["engine"]["model"] == "tiny"
    # The engine's own steps, on the run's clock, account for every token.
    steps = data.steps
    assert steps is not None and data.run_json["recorded"]["steps"]
    assert steps["num_prefill_tokens"].sum() == req["prompt_tokens"].sum()
    assert steps["num_decode_tokens"].sum() == (req["output_tokens"] - 1).sum()
    assert steps["start_s"].min() >= 0 and steps["end_s"].max() <= req["done_s"].max()
    assert (steps["forward_s"] <= steps["end_s"] - steps["start_s"]).all()
    assert data.run_json["engine"]["description"]["model_config"]["num_key_value_heads"] == 2
    assert data.run_json["hardware"]["cpu_count_logical"] >= 1


def test_a_scenario_overflowing_the_context_is_refused_before_the_load(
    tmp_path: Path, base_url: str
) -> None:
    # max_model_len is 96: prompts of 80..95 tokens plus up to 24 outputs would overflow it.
    keys = r"> max_model_len 96 \(/v1/models max_model_len\); lower input_len.high, output_len.high"
    with pytest.raises(RunRefused, match=keys):
        run(tmp_path, base_url, write_scenario(tmp_path, 80, 95))
    assert not (tmp_path / "runs").exists()


def test_unreachable_url_fails_fast_naming_it(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with pytest.raises(RunError, match=url.replace(".", r"\.")):
        run(tmp_path, url, write_scenario(tmp_path))
    assert time.monotonic() - t0 < 10


def test_cli_launches_the_reference_engine(tmp_path: Path) -> None:
    scenario = tmp_path / "cli.toml"
    scenario.write_text(
        SCENARIO.format(in_low=8, in_high=16).replace("users = 8", "users = 4")
        .replace("num_requests = 40", "num_requests = 8")
    )  # fmt: skip
    runs = tmp_path / "runs"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "run", "--scenario", str(scenario),
         "--runs-dir", str(runs), "--no-live"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (folder,) = runs.iterdir()
    assert "run folder" in proc.stdout and folder.name in proc.stdout.replace("\n", "")
    assert len(pd.read_parquet(folder / "requests.parquet")) == 8
    _check_no_sampler_shares_the_clients_or_the_engines_interpreter(folder)
    report = subprocess.run(
        [sys.executable, "-m", "bench", "report", str(folder)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    assert "TTFT" in report.stdout


def test_cli_rejects_a_bad_scenario_naming_file_and_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(SCENARIO.format(in_low=8, in_high=16) + "\nuserz = 3\n")
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "run", "--scenario", str(bad), "--no-live"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "bad.toml" in proc.stdout and "userz" in proc.stdout


def _check_no_sampler_shares_the_clients_or_the_engines_interpreter(folder: Path) -> None:
    """Where a real run takes its times (docs/ARCHITECTURE.md, "Who holds the clock"): the
    samplers in a probe process of their own, a child of bench, the client; the engine's steps
    in its core process, apart from its HTTP front. None of them ticks beside a busy Python
    loop, so none waits for that loop's interpreter lock."""
    probes = json.loads((folder / "run.json").read_text())["probes"]
    cpu = probes["samplers"]["cpu"]
    client_pid, probe_pid = cpu["processes"]["client"], probes["process"]["pid"]
    assert probe_pid != client_pid and probe_pid != cpu["processes"]["engine"]
    assert cpu["sampled"][str(probe_pid)]["group"] == "client"
    engine = {s["process"] for s in cpu["sampled"].values() if s["group"] == "engine"}
    assert {"engine-front", "engine-core"} <= engine, cpu["sampled"]
    # Every sampler kept its rate: no tick waited out another thread's work.
    for name, report in probes["samplers"].items():
        if report["status"] == "ok":
            assert report["wake_lag_ms"]["p99"] < 1000 * report["interval_s"], (name, report)


def test_a_duration_run_that_runs_out_of_requests_says_so(tmp_path: Path, base_url: str) -> None:
    # One user and 60 s plan 60 short requests, which the tiny engine answers in a few seconds:
    # the load ends long before its duration, and the run says why and what to set.
    path = tmp_path / "short.toml"
    path.write_text(
        'name = "short"\nusers = 1\nduration_s = 60\nignore_eos = true\n'
        '[input_len]\nkind = "fixed"\nvalue = 8\n[output_len]\nkind = "fixed"\nvalue = 2\n'
    )
    out = io.StringIO()
    opts = RunOptions(
        load_scenario(path), base_url, "reference", None, "tiny", tmp_path / "runs", live=False
    )
    run_benchmark(opts, Console(file=out, width=300))
    text = " ".join(out.getvalue().split())
    assert "the load ran out of requests after" in text and "duration_s = 60 s" in text
    assert "prepares 60 requests" in text and "set num_requests" in text
