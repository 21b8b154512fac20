"""The key and header options of `bench run`, `bench sweep` and `bench serve`: parsed, their
errors one line naming the option, and never an engine setting."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from bench.cli.app import app
from bench.cli.serve import config_from_options
from engine.config import EngineConfig

KEY = "sk-canary-cli-0d9e"


def parse(command: str, *args: str) -> dict[str, Any]:
    """The options `bench COMMAND ARGS` would run with, from click's parser (nothing runs)."""
    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    with click_command.make_context(command, list(args)) as ctx:
        return dict(ctx.params)


@pytest.fixture(autouse=True)
def no_key_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("LLM_PERF_LAB_API_KEY", raising=False)


def test_serve_takes_its_key_from_the_flag_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert parse("serve")["api_key"] is None
    assert parse("serve", "--api-key", KEY)["api_key"] == KEY
    monkeypatch.setenv("LLM_PERF_LAB_API_KEY", KEY)
    options = parse("serve")
    assert options["api_key"] == KEY
    # A server option, not an engine setting: the EngineConfig is the one without a key.
    assert config_from_options(options) == EngineConfig()


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_run_and_sweep_take_the_key_from_openai_api_key(
    command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert parse(command)["api_key"] is None
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    assert parse(command)["api_key"] == KEY
    options = parse(command, "--header", "X-A: 1", "--header", "X-B: 2")
    assert options["header"] == ["X-A: 1", "X-B: 2"]


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_help_names_the_variable_but_never_its_value(command: str) -> None:
    result = CliRunner().invoke(
        app, [command, "--help"], env={"OPENAI_API_KEY": KEY, "COLUMNS": "300"}
    )
    assert result.exit_code == 0, result.output
    assert "OPENAI_API_KEY" in result.output and KEY not in result.output


@pytest.mark.parametrize("command", [["run"], ["sweep", "--users", "1"]])
def test_a_malformed_header_is_a_one_line_error(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--header", "no-colon-secret-value"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "--header" in lines[0], result.output
    assert "no-colon-secret-value" not in result.output
    assert "Traceback" not in result.output
