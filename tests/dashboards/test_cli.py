"""`bench compare` and the report helpers that `bench run` / `bench report --html` call."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from bench.cli.dashboards import register, report_after_run, write_report_html
from tests.support.dashboards_fakes import make_run
from tests.support.paths import REPO_ROOT


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("runs")
    return [make_run(root, seed=s, samples=False) for s in (1, 2)]


def app() -> typer.Typer:
    fresh = typer.Typer()
    register(fresh)

    @fresh.command()
    def noop() -> None:  # a second command keeps Typer from collapsing the app into compare
        """Nothing."""

    return fresh


def test_compare_prints_deltas_and_writes_the_page(runs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "cmp.html"
    result = CliRunner().invoke(
        app(), ["compare", *map(str, runs), "--out", str(out), "--label", "a", "--label", "b"]
    )
    assert result.exit_code == 0, result.output
    assert "Against a" in result.output and "Output throughput" in result.output
    assert out.is_file() and "comparison:" in result.output


def test_compare_default_output_is_beside_the_first_run(runs: list[Path]) -> None:
    result = CliRunner().invoke(app(), ["compare", *map(str, runs)])
    assert result.exit_code == 0, result.output
    written = list(runs[0].parent.glob("compare-*.html"))
    assert len(written) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["one"], "at least two"),
        (["a", "b", "--label", "x"], "one per run"),
        (["/nonexistent/a", "/nonexistent/b"], "not a run folder"),
    ],
)
def test_compare_refuses_bad_input(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app(), ["compare", *args])
    assert result.exit_code == 2
    assert message in result.output


def test_report_helpers(runs: list[Path], tmp_path: Path) -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, width=200)
    path = report_after_run(runs[0], console)
    assert path == runs[0] / "report.html" and path.is_file()
    assert "dashboard:" in buffer.getvalue() and "file://" in buffer.getvalue()
    # A failure at the end of a run is a warning with the command to retry, never an error.
    assert report_after_run(tmp_path / "missing", console) is None
    assert "bench report" in buffer.getvalue() and "--html" in buffer.getvalue()
    assert write_report_html(runs[1], console).is_file()
    with pytest.raises(typer.Exit):
        write_report_html(tmp_path / "missing", console)


def test_bench_compare_is_wired_into_the_cli(runs: list[Path], tmp_path: Path) -> None:
    from bench.cli.app import app as bench_app

    if "compare" not in {c.name or c.callback.__name__ for c in bench_app.registered_commands}:
        pytest.skip("bench/cli/app.py does not call bench.cli.dashboards.register(app) yet")
    out = tmp_path / "sub.html"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "compare", *map(str, runs), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert out.is_file()
