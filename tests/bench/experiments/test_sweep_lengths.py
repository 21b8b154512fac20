"""`bench sweep --lengths`: each users or rates value at each (input, output) token pair, with a
modelled server standing in for `bench run`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench.experiments.sweep import load_sweep, run_sweep, write_sweep
from bench.experiments.sweep_lengths import parse_lengths, with_lengths
from bench.scenario.scenario import ScenarioError, load_scenario
from tests.support.sweep_fakes import ModelServer, sweep_app

BASE = load_scenario("1-user")


def test_parse_lengths() -> None:
    assert parse_lengths("128:128, 512:64") == [(128, 128), (512, 64)]
    for bad, fragment in (("128", "INPUT:OUTPUT"), ("128:0", ">= 1"), ("a:b", "INPUT:OUTPUT"),
                          ("8:8,8:8", "given twice"), (",", "no pairs")):  # fmt: skip
        with pytest.raises(ValueError, match=fragment):
            parse_lengths(bad)


def test_each_value_runs_at_each_pair_and_says_its_lengths(tmp_path: Path) -> None:
    server = ModelServer(tmp_path)
    result = run_sweep(BASE, "users", [1, 4], server, lengths=[(128, 16), (32, 64)])
    shapes = [(s.users, s.input_len.value, s.output_len.value) for s in server.runs]  # type: ignore[union-attr]
    assert shapes == [(1, 128, 16), (4, 128, 16), (1, 32, 64), (4, 32, 64)]
    assert all(s.input_len.kind == s.output_len.kind == "fixed" for s in server.runs)  # type: ignore[union-attr]
    assert server.runs[0].name == f"{BASE.name}-in128-out16-u1"
    assert [p.lengths for p in result.points] == [[128, 16], [128, 16], [32, 64], [32, 64]]
    assert load_sweep(write_sweep(result, tmp_path / "runs")) == result
    plain = run_sweep(BASE, "users", [1], ModelServer(tmp_path / "plain"))
    assert plain.points[0].lengths is None


def test_a_workload_with_its_own_lengths_is_refused_before_any_run(tmp_path: Path) -> None:
    server = ModelServer(tmp_path)
    own = dataclasses.replace(BASE, input_len=None, output_len=None)
    with pytest.raises(ScenarioError, match="--lengths sets synthetic"):
        run_sweep(own, "users", [1, 2], server, lengths=[(8, 8)])
    assert server.runs == []
    assert with_lengths(BASE, (8, 4)).output_len.value == 4  # type: ignore[union-attr]


def test_cli_sweep_over_lengths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app, server = sweep_app(tmp_path, monkeypatch)
    runner = CliRunner()
    args = ["sweep", "--scenario", "1-user", "--runs-dir", str(tmp_path / "runs"), "--no-live"]
    out = runner.invoke(app, [*args, "--users", "1,2", "--lengths", "16:8,32:4"])
    assert out.exit_code == 0, out.output
    assert "in:out" in out.output and "16:8" in out.output and "32:4" in out.output
    assert len(server.runs) == 4
    bad = runner.invoke(app, [*args, "--slo", "ttft_p99=35", "--lengths", "16:8"])
    assert bad.exit_code == 2 and "--slo searches one" in " ".join(bad.output.split())
    bad = runner.invoke(app, [*args, "--users", "1", "--lengths", "16"])
    assert bad.exit_code == 2 and "INPUT:OUTPUT" in " ".join(bad.output.split())
