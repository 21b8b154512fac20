"""Sweeps and the SLO search, with a modelled server standing in for `bench run`."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from bench.cli import sweep as cli_sweep
from bench.experiments.sweep import (
    load_sweep,
    parse_slo,
    parse_values,
    run_sweep,
    scenario_at,
    search_slo,
    slo_failures,
    write_sweep,
)
from bench.run import orchestrate
from bench.scenario.scenario import Scenario, ScenarioError, load_scenario, scenario_from_dict
from results.folder.run_folder import load_run
from tests.support.paths import REPO_ROOT
from tests.support.sweep_fakes import ModelServer, sweep_app

BASE = load_scenario("1-user")


def test_parse_values_and_slo() -> None:
    assert parse_values("1, 2,4", "users") == [1, 2, 4]
    assert parse_values("0.5,2", "rate") == [0.5, 2.0]
    for bad, axis, match in [("1,x", "users", "not a number"), ("1.5", "users", "integer"),
                             ("0", "rate", "> 0"), ("0", "users", "integer")]:  # fmt: skip
        with pytest.raises(ValueError, match=match):
            parse_values(bad, axis)
    assert parse_slo("ttft_p99=500, tpot_p99=50,error_rate=0.01") == {
        "ttft_p99": 500.0, "tpot_p99": 50.0, "error_rate": 0.01,
    }  # fmt: skip
    for bad, match in [("ttft=5", "expected NAME=VALUE"), ("latency_p99=5", "NAME"),
                       ("ttft_p99=abc", "not a number"), ("", "no targets")]:  # fmt: skip
        with pytest.raises(ValueError, match=match):
            parse_slo(bad)


def test_scenario_at_sets_users_or_rate() -> None:
    at4 = scenario_at(BASE, "users", 4, requests_per_user=3)
    assert (at4.users, at4.num_requests, at4.name) == (4, 12, "1-user-u4")
    at2 = scenario_at(BASE, "rate", 2.5, None)
    assert at2.open_loop and at2.arrival.kind == "poisson" and at2.arrival.rate_rps == 2.5
    with pytest.raises(ScenarioError, match="sweep --rates instead"):
        scenario_at(at2, "users", 3, None)
    data = {**BASE.to_dict(), "workload": {"kind": "multiturn", "turns": 2}}
    with pytest.raises(ScenarioError, match="multiturn"):
        scenario_at(scenario_from_dict(data), "rate", 1.0, None)


def test_a_sweep_runs_each_point_and_writes_its_summary(tmp_path: Path) -> None:
    server = ModelServer(tmp_path)
    result = run_sweep(BASE, "users", [1, 4, 16], server, requests_per_user=2)
    assert [s.users for s in server.runs] == [1, 4, 16]
    assert [p.figures["per_user_tps_p50"] for p in result.points] == [100, 50, 25]
    folder = write_sweep(result, tmp_path / "runs")
    body = json.loads((folder / "sweep.json").read_text())
    assert body["axis"] == "users" and [p["value"] for p in body["points"]] == [1, 4, 16]
    assert body["points"][1]["folder"].endswith("run-2") and body["search"] is None


def test_slo_search_brackets_users_and_counts_runs(tmp_path: Path) -> None:
    server = ModelServer(tmp_path)
    result = search_slo(BASE, "users", {"ttft_p99": 375.0}, server)  # met up to 37 users
    assert result.search["best"] == 37 and result.search["first_failing"] == 38
    tried = [s.users for s in server.runs]
    assert tried[:7] == [1, 2, 4, 8, 16, 32, 64]  # doubling until the first miss
    assert result.search["runs"] == len(tried) == len(set(tried)) <= 12
    assert all(p.slo_misses == [] for p in result.points if p.value <= 37)


def test_slo_search_on_rates_stops_at_the_tolerance(tmp_path: Path) -> None:
    server = ModelServer(tmp_path)
    result = search_slo(BASE, "rate", {"ttft_p99": 55.0}, server, start=0.5, tolerance=0.05)
    best, bad = result.search["best"], result.search["first_failing"]
    assert best <= 5.5 < bad and (bad - best) / bad <= 0.05
    none = search_slo(BASE, "users", {"ttft_p99": 1.0}, ModelServer(tmp_path / "x"))
    assert none.search["best"] is None and none.search["runs"] == 1


def test_slo_failures_name_each_miss() -> None:
    summary = {"counts": {"window": {"error_rate": 0.1}}, "ttft_ms": {"p99": 600.0}}
    misses = slo_failures(summary, {"ttft_p99": 500.0, "tpot_p99": 50.0})
    assert misses == [
        "error_rate 0.1 > 0",
        "ttft_p99 600.0 ms > 500 ms",
        "tpot_p99 none ms > 50 ms",
    ]


def test_cli_sweep_and_search(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app, _ = sweep_app(tmp_path, monkeypatch)
    runner = CliRunner()
    runs = tmp_path / "runs"
    out = runner.invoke(app, ["sweep", "--scenario", "1-user", "--users", "1,2", "--runs-dir",
                              str(runs), "--no-live"])  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "per-user TPS p50" in out.output and "sweep folder" in out.output
    out = runner.invoke(app, ["sweep", "--scenario", "1-user", "--slo", "ttft_p99=35",
                              "--runs-dir", str(runs)])  # fmt: skip
    assert out.exit_code == 0, out.output
    assert "highest users meeting ttft_p99=35: 3 (4 misses); 4 runs" in " ".join(
        out.output.split()
    ), out.output
    bad = runner.invoke(app, ["sweep", "--users", "1", "--rates", "2"])
    assert bad.exit_code == 2 and "exactly one of" in bad.output


def test_each_point_of_a_sweep_has_its_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`bench sweep`'s points take bench run's path with its report (make_run_point), so each
    point's run folder holds report.html; an old run folder stands in for each run's load."""

    def recorded_run(opts: orchestrate.RunOptions, console: Console) -> tuple[Path, dict]:
        folder = opts.runs_dir / f"run-{opts.scenario.users}"
        shutil.copytree(REPO_ROOT / "tests" / "fixtures" / "run-folder-v0", folder)
        summary = load_run(folder).summary
        assert summary is not None
        return folder, dict(summary)

    monkeypatch.setattr(orchestrate, "run_benchmark", recorded_run)
    console = Console(file=io.StringIO())
    run_point = cli_sweep.make_run_point(
        console,
        url=None,
        engine="reference",
        model=None,
        tokenizer=None,
        runs_dir=tmp_path,
        live=False,
    )
    result = run_sweep(BASE, "users", [1, 2], run_point)
    assert [p.folder.name for p in result.points] == ["run-1", "run-2"]
    for point in result.points:
        assert (point.folder / "report.html").is_file()


def test_an_slo_percentile_from_too_few_requests_is_marked(tmp_path: Path) -> None:
    class FewRequests(ModelServer):
        def __call__(self, scenario: Scenario) -> tuple[Path, dict[str, Any]]:
            folder, summary = super().__call__(scenario)
            summary["ttft_ms"]["count"] = 3
            summary["tpot_ms"]["count"] = 150
            return folder, summary

    targets = {"ttft_p99": 375.0, "tpot_p99": 1e9, "tpot_p50": 1e9}
    result = search_slo(BASE, "users", targets, FewRequests(tmp_path), max_runs=2)
    assert all(len(p.thin_percentiles) == 1 for p in result.points)
    assert result.search["thin_percentiles"] == [
        "ttft_p99: p99 from 3 samples (needs >= 100; below that it is the maximum)"
    ]
    written = json.loads((write_sweep(result, tmp_path) / "sweep.json").read_text())
    assert written["points"][0]["thin_percentiles"] == result.search["thin_percentiles"]


def test_a_written_sweep_loads_back_as_it_was(tmp_path: Path) -> None:
    result = search_slo(BASE, "users", {"ttft_p99": 375.0}, ModelServer(tmp_path), max_runs=4)
    assert load_sweep(write_sweep(result, tmp_path / "runs")) == result
    with pytest.raises(ValueError, match=r"not a sweep\.json"):
        load_sweep(tmp_path)
