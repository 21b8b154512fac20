"""`bench run` against `bench serve --reasoning-tokens N`: a real server streaming reasoning,
the real client, the run folder, summary.json, the terminal and the dashboard."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from engine_adapters.launcher import free_port, launch
from results.folder.run_folder import load_run
from results.run_summary import summarize_run
from tests.support.browser import evaluate_figure
from tests.support.paths import TEST_FIXTURES

pytestmark = pytest.mark.timeout(300)
PREFIX = 6
REQUESTS = 12
SCENARIO = f"""
name = "reasoning"
api = "chat"
users = 4
num_requests = {REQUESTS}
ignore_eos = true
seed = 11

[input_len]
kind = "uniform"
low = 8
high = 24

[output_len]
kind = "uniform"
low = 10
high = 20
"""


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """One `bench run` (the CLI, as a user types it) against a reasoning `bench serve`."""
    tmp = tmp_path_factory.mktemp("reasoning")
    scenario = tmp / "reasoning.toml"
    scenario.write_text(SCENARIO)
    port = free_port()
    serve = [
        sys.executable, "-m", "bench", "serve", "--port", str(port), "--model", "tiny",
        "--dtype", "float32", "--device", "cpu", "--max-model-len", "96",
        "--no-engine-core-process", "--reasoning-tokens", str(PREFIX),
    ]  # fmt: skip
    with launch(serve, f"http://127.0.0.1:{port}", timeout_s=120) as engine:
        proc = subprocess.run(
            [sys.executable, "-m", "bench", "run", "--url", engine.base_url, "--tokenizer",
             "tiny", "--scenario", str(scenario), "--runs-dir", str(tmp / "runs"), "--no-live"],
            capture_output=True, text=True, timeout=240, env={**os.environ, "COLUMNS": "160"},
        )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (folder,) = (tmp / "runs").iterdir()
    yield folder, proc.stdout


def test_summary_counts_reasoning_and_answer_apart(run_folder: tuple[Path, str]) -> None:
    folder, _ = run_folder
    run = load_run(folder)
    summary = run.summary
    assert summary is not None and summary == summarize_run(run)
    assert summary["counts"]["all"]["ok"] == REQUESTS
    reasoning = summary["reasoning"]
    assert reasoning["requests_with_reasoning"] == REQUESTS
    assert reasoning["reasoning_tokens"] == PREFIX * REQUESTS
    output = summary["tokens"]["output_tokens"]
    assert reasoning["answer_tokens"] == output - PREFIX * REQUESTS > 0
    assert reasoning["requests_by_reasoning_tokens_source"] == {"usage": REQUESTS}
    assert reasoning["reasoning_share"] == pytest.approx(PREFIX * REQUESTS / output)
    assert reasoning["time_to_first_answer_token_ms"]["mean"] > summary["ttft_ms"]["mean"]
    requests = run.requests
    assert reasoning["answer_tpot_ms"]["count"] == REQUESTS  # every answer has > 1 token
    # A whole answer read at once (a busy client) has TPOT 0 and no per-user TPS, as in
    # per_user_tps.
    streamed = int((requests["done_s"] > requests["first_answer_token_s"]).sum())
    assert reasoning["answer_per_user_tps"]["count"] == streamed > 0
    # Equal where one network read carried the last reasoning and the first answer chunk
    # (times are per read): the first wave's events can arrive together.
    assert (requests["first_answer_token_s"] >= requests["first_token_s"]).all()
    assert (requests["reasoning_tokens"] == PREFIX).all()
    tokens = run.tokens
    per_request = tokens[tokens["reasoning"]].groupby("request_id")["n_tokens"].sum()
    assert (per_request == PREFIX).all() and len(per_request) == REQUESTS
    last_thought = tokens[tokens["reasoning"]].groupby("request_id")["index"].max()
    first_said = tokens[~tokens["reasoning"]].groupby("request_id")["index"].min()
    assert (last_thought < first_said).all()  # reasoning first, then the answer
    first_answer = tokens[~tokens["reasoning"]].groupby("request_id")["t_s"].min()
    assert first_answer.sort_index().tolist() == pytest.approx(
        requests.set_index("request_id")["first_answer_token_s"].sort_index().tolist()
    )


def test_the_terminal_shows_the_reasoning(run_folder: tuple[Path, str]) -> None:
    _, stdout = run_folder
    assert f"{PREFIX * REQUESTS:,} reasoning tokens" in stdout
    assert "Time to first answer token" in stdout and "Answer per-user TPS" in stdout


def test_the_dashboard_draws_the_reasoning(run_folder: tuple[Path, str]) -> None:
    folder, _ = run_folder
    html = (folder / "report.html").read_text(encoding="utf-8")
    assert 'data-figure="reasoning"' in html and "Reasoning share" in html
    drawn = evaluate_figure(
        folder / "report.html", "fig-reasoning", "gd => gd.querySelectorAll('g.trace').length"
    )
    assert drawn >= 4


def test_a_run_without_reasoning_prints_and_draws_none(tmp_path: Path) -> None:
    # The old fixture folder: no reasoning columns, no reasoning section, table or figure.
    old = Path(shutil.copytree(TEST_FIXTURES / "run-folder-v0", tmp_path / "old"))
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "report", str(old), "--html"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Reasoning" not in proc.stdout and "answer token" not in proc.stdout
    html = (old / "report.html").read_text(encoding="utf-8")
    assert 'data-figure="reasoning"' not in html and "Reasoning share" not in html
    assert len(pd.read_parquet(old / "requests.parquet")) == 8
