"""Errors reach the user literally: TOML table names in a message are not eaten as markup."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from bench.cli.app import app

BAD = """
name = "typo"
users = 1
num_requests = 1

[engine.options]
batchng = "static"
"""


def test_a_scenario_typo_names_the_file_the_table_and_the_closest_key(tmp_path: Path) -> None:
    scenario = tmp_path / "typo.toml"
    scenario.write_text(BAD)
    result = CliRunner().invoke(app, ["run", "--scenario", str(scenario)], terminal_width=400)
    assert result.exit_code != 0
    text = " ".join(result.output.split())
    assert f"{scenario}: unknown key 'engine.options.batchng'; did you mean 'batching'?" in text
    assert "(known keys in [engine.options]: " in text
    assert "Traceback" not in result.output
