"""Exit codes a CI job can use: `bench run` and `bench sweep` against an OpenAI-compatible test
server on 127.0.0.1 that fails the requests each test chooses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from bench.cli.app import app
from results.folder.run_folder import load_run
from results.run_summary import summarize_run
from results.validity.usability import DEFAULT_MAX_ERROR_RATE
from tests.support.openai_fakes import MODELS, openai_handler, serving, write_scenario

TOO_LONG = "This model's maximum context length is 10 tokens"


def run_args(url: str, tmp_path: Path, *extra: str) -> list[str]:
    return [
        "run", "--scenario", str(write_scenario(tmp_path)), "--url", url, "--tokenizer", "tiny",
        "--runs-dir", str(tmp_path / "runs"), "--no-live", "--no-probes", *extra,
    ]  # fmt: skip


def the_run(tmp_path: Path) -> Path:
    (folder,) = (tmp_path / "runs").iterdir()
    return folder


def test_a_run_in_which_every_request_failed_exits_1_naming_the_cause(tmp_path: Path) -> None:
    with serving(openai_handler(MODELS, fail=lambda i: (400, TOO_LONG))) as server:
        proc = subprocess.run(
            [sys.executable, "-m", "bench", *run_args(server.base_url, tmp_path)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = " ".join(proc.stdout.split())
    assert "run not usable: none of the 20 requests succeeded; 20 of 20 requests failed" in out
    assert f"20 (100.0% of requests): HTTP 400: {TOO_LONG}" in out
    # The run folder is written all the same, every failure recorded with its cause.
    folder = the_run(tmp_path)
    requests = pd.read_parquet(folder / "requests.parquet")
    assert len(requests) == 20 and (requests["status"] == "error").all()
    assert (requests["http_status"] == 400).all()
    verdict = json.loads((folder / "summary.json").read_text())["usability"]
    assert verdict["usable"] is False and verdict["error_rate"] == 1.0
    assert verdict["max_error_rate"] == DEFAULT_MAX_ERROR_RATE
    report = CliRunner().invoke(app, ["report", str(folder)])
    assert report.exit_code == 0 and "run not usable: none of the 20" in report.output
    assert verdict["top_errors"] == [
        {"error": f"HTTP 400: {TOO_LONG}", "http_status": 400, "count": 20, "share": 1.0}
    ]


def test_failures_below_the_threshold_exit_0_and_above_it_exit_1(tmp_path: Path) -> None:
    # Two failures in twenty: 10 %.
    def fail(i: int) -> tuple[int, str] | None:
        return (500, "injected failure") if i < 2 else None

    runner = CliRunner()
    with serving(openai_handler(MODELS, fail=fail)) as server:
        above = runner.invoke(app, run_args(server.base_url, tmp_path / "a"))
    with serving(openai_handler(MODELS, fail=fail)) as server:
        below = runner.invoke(
            app, run_args(server.base_url, tmp_path / "b", "--max-error-rate", "0.1")
        )
    assert above.exit_code == 1, above.output
    assert "2 of 20 requests failed (10.0%), above --max-error-rate 0.05" in above.output
    assert "2 (10.0% of requests): HTTP 500: injected failure" in above.output
    assert below.exit_code == 0, below.output
    assert "not usable" not in below.output
    # The verdict is recomputed from the folder alone, with the threshold run.json recorded.
    for name, usable, threshold in (("a", False, DEFAULT_MAX_ERROR_RATE), ("b", True, 0.1)):
        data = load_run(the_run(tmp_path / name))
        assert data.run_json["max_error_rate"] == threshold
        assert data.summary is not None and data.summary["usability"]["usable"] is usable
        assert summarize_run(data)["usability"] == data.summary["usability"]
        counts = data.summary["counts"]["all"]
        assert (counts["ok"], counts["error"]) == (18, 2)


def test_a_bad_flag_or_a_refused_scenario_exits_2(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = runner.invoke(app, run_args("http://127.0.0.1:9", tmp_path, "--max-error-rate", "2"))
    assert bad.exit_code == 2, bad.output
    with serving(openai_handler(MODELS)) as server:
        refused = runner.invoke(app, run_args(server.base_url, tmp_path, "--model", "other"))
    assert refused.exit_code == 2, refused.output
    assert "--model 'other'" in refused.output and "it serves 'm'" in refused.output


def test_a_sweep_with_an_unusable_point_exits_1_after_writing_every_point(
    tmp_path: Path,
) -> None:
    # Point users=1 sends requests 0..2, point users=2 requests 3..8: the second fails.
    def fail(i: int) -> tuple[int, str] | None:
        return (503, "overloaded") if i >= 3 else None

    with serving(openai_handler(MODELS, fail=fail)) as server:
        out = CliRunner().invoke(
            app,
            ["sweep", "--scenario", str(write_scenario(tmp_path)), "--url", server.base_url,
             "--tokenizer", "tiny", "--users", "1,2", "--requests-per-user", "3",
             "--runs-dir", str(tmp_path / "runs"), "--no-live"],
        )  # fmt: skip
    assert out.exit_code == 1, out.output
    text = " ".join(out.output.split())
    assert "1 of 2 runs not usable:" in text
    assert "users 2 (" in text and "none of the 6 requests succeeded" in text
    (sweep,) = (tmp_path / "runs").glob("*sweep*")
    points = json.loads((sweep / "sweep.json").read_text())["points"]
    assert [p["usability"]["usable"] for p in points] == [True, False]


def test_repeats_exit_1_naming_the_unusable_runs_after_writing_the_group(tmp_path: Path) -> None:
    # The first run's 20 requests succeed, the second's all fail.
    def fail(i: int) -> tuple[int, str] | None:
        return (500, "engine crashed") if i >= 20 else None

    with serving(openai_handler(MODELS, fail=fail)) as server:
        out = CliRunner().invoke(app, run_args(server.base_url, tmp_path, "--repeat", "2"))
    assert out.exit_code == 1, out.output
    text = " ".join(out.output.split())
    assert "1 of 2 runs not usable:" in text and "run 2 (" in text
    (group,) = (tmp_path / "runs").iterdir()
    manifest = json.loads((group / "group.json").read_text())
    assert manifest["completed"] == 2 and manifest["error"] is None
