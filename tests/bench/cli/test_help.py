"""Every command's --help at 80 columns names every option whole."""

from __future__ import annotations

from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from bench.cli.app import app


# Typer's own click (typer._click) is private: its commands are read by their attributes.
def _commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for name, command in group.commands.items():
        out.append((*path, name))
        if hasattr(command, "commands"):
            out += _commands(command, (*path, name))
    return out


ROOT = get_command(app)
COMMANDS = _commands(ROOT)


def _command(path: tuple[str, ...]) -> Any:
    command = ROOT
    for name in path:
        command = command.commands[name]
    return command


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_help_at_80_columns_names_every_option_whole(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert max(len(line) for line in lines) <= 80, result.output
    words = set(result.output.replace(",", " ").replace("/", " ").split())
    for param in _command(path).params:
        for name in (*param.opts, *param.secondary_opts):
            if name.startswith("-"):
                assert name in words, f"{' '.join(path)}: {name} is not whole in\n{result.output}"
    assert "…" not in result.output
