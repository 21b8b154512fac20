"""Run validity end to end: real `bench run`s of the reference engine on 127.0.0.1 record the
fingerprint and reconcile their tokens; prompts built with a tokenizer that is not the served
model's mark the run, and the terminal and report.html say so."""

from __future__ import annotations

import io
import json
from importlib.metadata import version
from pathlib import Path

import pytest
from rich.console import Console

from bench.run.end.report import render_summary
from bench.run.orchestrate import RunOptions, run_benchmark
from bench.scenario.scenario import load_scenario
from dashboards.pages.report import build_run_page
from dashboards.runview import load_run_view
from tests.support.tokenizers import make_tokenizer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SCENARIO = """
name = "validity"
users = 2
num_requests = 16
ignore_eos = true
seed = 0

[input_len]
kind = "uniform"
low = 24
high = 48

[output_len]
kind = "fixed"
value = 8

[engine]
preset = "tiny"
device = "cpu"
dtype = "float32"
num_threads = 1
"""


def run(tmp_path: Path, tokenizer: str | None = None) -> tuple[Path, dict]:
    path = tmp_path / "validity.toml"
    path.write_text(SCENARIO)
    opts = RunOptions(load_scenario(path), None, "reference", None, tokenizer, tmp_path / "runs",
                      False, calibrate=False)  # fmt: skip
    folder, summary = run_benchmark(opts, Console(file=io.StringIO()))
    return folder, dict(summary)


def comparisons(summary: dict) -> dict[str, dict]:
    return {c["what"]: c for c in summary["token_reconciliation"]["comparisons"]}


def test_a_run_records_its_fingerprint_and_its_tokens_agree(tmp_path: Path) -> None:
    folder, summary = run(tmp_path)
    run_json = json.loads((folder / "run.json").read_text())
    fingerprint = run_json["fingerprint"]
    assert fingerprint["engine"]["version"] == version("llm-perf-lab")
    assert fingerprint["engine"]["version_source"] == "/version"
    assert fingerprint["engine"]["models"][0]["id"] == "tiny"
    assert "governors" in fingerprint["start"]["cpu"] and fingerprint["span_s"] > 0
    assert fingerprint["start"]["gpu"]["available"] is False  # no GPU on this machine
    # The engine's counters and the usage the server sent agree to the token, and the prompts
    # are the lengths the workload's tokenizer made (plus the server's BOS).
    by = comparisons(summary)
    assert by["output tokens (engine)"]["ratio"] == 1.0
    assert by["prompt tokens (engine)"]["ratio"] == 1.0
    assert by["prompt tokens"]["requests_off"] == 0
    assert by["output tokens"]["requests"] == 16
    assert not summary["token_reconciliation"]["mismatched"]
    assert "tokens" in summary["validity"]["checked"]
    assert not [v for v in summary["validity"]["violations"] if v["kind"] != "busy"]


def test_prompts_from_another_tokenizer_mark_the_run(tmp_path: Path) -> None:
    other = tmp_path / "other-tokenizer"
    other.mkdir()
    make_tokenizer(512)._tok.save(str(other / "tokenizer.json"))
    folder, summary = run(tmp_path, str(other))
    by = comparisons(summary)
    assert by["prompt tokens"]["exceeds"], by["prompt tokens"]
    tokens = [v for v in summary["validity"]["violations"] if v["kind"] == "tokens"]
    assert tokens and "give --tokenizer the served model's tokenizer" in tokens[0]["message"]
    console = Console(file=io.StringIO(), width=200)
    render_summary(summary, console)
    text = console.file.getvalue()
    assert "not a valid measurement: tokens: prompt tokens" in text
    assert "Token counts, by who counted" in text
    page = build_run_page(load_run_view(folder))
    assert any("not a valid measurement: tokens" in line for line in page.banner)
