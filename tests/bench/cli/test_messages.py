"""The CLI's texts: the shipped scenarios in --help, and user text printed literally."""

from __future__ import annotations

import re
from pathlib import Path

from rich.console import Console
from typer.testing import CliRunner

from bench.cli.app import app
from bench.run.messages import print_error, print_info, print_note, print_path, print_warning
from bench.scenario.scenario import list_scenarios

SHIPPED = Path(__file__).resolve().parents[3] / "bench" / "scenario" / "scenarios"


def test_run_help_lists_every_shipped_scenario() -> None:
    names = sorted(p.stem for p in SHIPPED.glob("*.toml"))
    assert names == list_scenarios() and len(names) >= 5
    out = CliRunner().invoke(app, ["run", "--help"]).output
    out = re.sub(r"-\n\s+", "-", out)  # a name wrapped at its hyphen
    for name in names:
        assert name in out, name


def test_messages_keep_toml_keys_and_brackets() -> None:
    console = Console(width=200, record=True, color_system=None)
    text = "unknown key in [engine.options]: 'max_seqs'"
    for show in (print_error, print_warning, print_note, print_info):
        show(console, text)
    print_path(console, "run folder", Path("runs/[engine.options]-x"), "(note [bold])")
    out = console.export_text()
    assert out.count("[engine.options]") == 5
    assert "runs/[engine.options]-x (note [bold])" in out


def test_a_scenario_error_naming_a_table_prints_the_table(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text((SHIPPED / "1-user.toml").read_text() + "\n[engine.options]\nno_such = 1\n")
    result = CliRunner().invoke(app, ["run", "--scenario", str(bad)], env={"COLUMNS": "300"})
    assert result.exit_code == 2
    assert "known keys in [engine.options]" in " ".join(result.output.split())
