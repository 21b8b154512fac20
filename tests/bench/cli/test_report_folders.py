"""`bench report` on every folder bench prints: groups, sweeps and ablations made by the real
experiment code (their engines replaced by run folders written through results.folder.run_folder),
and
a folder that is none of them."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from bench.cli.app import app
from bench.experiments import ablate, repeat
from bench.experiments.sweep import run_sweep, write_sweep
from bench.run.orchestrate import RunOptions
from bench.scenario.scenario import Scenario, load_scenario
from results.folder.folder_kinds import folder_kind
from results.folder.run_folder import RunFolderError, load_run
from tests.support.dashboards_fakes import make_run

runner = CliRunner()
QUIET = Console(file=io.StringIO())


def fake_engine(runs: list[Path]) -> Any:
    """A run_benchmark stand-in: a fresh run folder under the options' runs_dir per call, with a
    different seed each, so that the runs differ as repeats do."""

    def run_benchmark(opts: RunOptions, console: Console) -> tuple[Path, dict[str, Any]]:
        folder = make_run(opts.runs_dir, users=2, requests=16, seed=len(runs), gpu=False)
        runs.append(folder)
        summary = load_run(folder).summary
        assert summary is not None
        return folder, dict(summary)

    return run_benchmark


def report(folder: Path, *args: str) -> Any:
    return runner.invoke(app, ["report", str(folder), *args])


def test_a_repeat_group_prints_its_runs_and_their_spread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[Path] = []
    monkeypatch.setattr(repeat, "run_benchmark", fake_engine(runs))
    opts = RunOptions(
        load_scenario("1-user"), "http://127.0.0.1:9", "reference", None, "tiny",
        tmp_path / "runs", live=False, probes=False,
    )  # fmt: skip
    group, _ = repeat.run_repeated(opts, 2, QUIET)
    assert folder_kind(group) == "group"

    result = report(group, "--html")
    assert result.exit_code == 0, result.output
    assert "2 of 2 runs" in result.output and "spread" in result.output
    assert "Output throughput" in result.output and "run 2" in result.output
    assert "…" not in result.output  # no cell cut
    assert (group / "compare.html").is_file() and "compare.html" in result.output


def test_a_sweep_prints_its_table_and_writes_its_page(tmp_path: Path) -> None:
    runs: list[Path] = []
    engine = fake_engine(runs)

    def run_point(scenario: Scenario) -> tuple[Path, dict[str, Any]]:
        return engine(RunOptions(scenario, None, "reference", None, None, tmp_path), QUIET)

    base = load_scenario("1-user")
    folder = write_sweep(run_sweep(base, "users", [1, 2], run_point), tmp_path / "runs")
    assert folder_kind(folder) == "sweep"

    result = report(folder)
    assert result.exit_code == 0, result.output
    assert "sweep of 1-user over users" in result.output
    assert runs[1].name[:12] in result.output.replace("\n", "")
    assert not (folder / "report.html").exists()
    result = report(folder, "--html")
    assert result.exit_code == 0, result.output
    assert (folder / "report.html").is_file()


def test_an_ablation_prints_its_table_and_writes_its_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs: list[Path] = []
    # The ablation runs each setting through run_and_report (its run, then its report.html).
    monkeypatch.setattr(ablate, "run_and_report", fake_engine(runs))
    switches = [ablate.parse_switch("batching=continuous,static")]
    path = ablate.run_ablation(load_scenario("1-user"), switches, tmp_path / "runs", QUIET, False)
    assert folder_kind(path.parent) == "ablation"

    result = report(path.parent, "--html")
    assert result.exit_code == 0, result.output
    assert "Ablation: 1-user" in result.output and "batching=static" in result.output
    assert (path.parent / "ablation.html").is_file()


def test_a_folder_of_no_kind_gets_one_line_naming_the_four(tmp_path: Path) -> None:
    result = report(tmp_path)
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(" ".join(lines)) < 400 and "Traceback" not in result.output
    for name in ("run.json", "group.json", "sweep.json", "ablation.json"):
        assert name in result.output.replace("\n", "")
    with pytest.raises(RunFolderError, match="does not exist"):
        folder_kind(tmp_path / "missing")


@pytest.mark.parametrize(
    ("name", "body", "said"),
    [
        ("sweep.json", {"scenario": "x", "axis": "users"}, "not a sweep.json"),
        ("ablation.json", {"rows": []}, "not as `bench ablate` writes it"),
        ("group.json", {"format": "llm-perf-lab/run-group", "runs": []}, "no finished run"),
    ],
)
def test_a_broken_document_is_one_line_not_a_traceback(
    tmp_path: Path, name: str, body: dict[str, Any], said: str
) -> None:
    (tmp_path / name).write_text(json.dumps(body))
    result = report(tmp_path)
    assert result.exit_code == 2, result.output
    assert said in result.output.replace("\n", "") and "Traceback" not in result.output
