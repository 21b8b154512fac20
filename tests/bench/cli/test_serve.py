"""`bench serve`'s options, made from EngineConfig's settings: every one listed with its help,
spelled as before, parsed into the EngineConfig it names."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from bench.cli.app import app
from bench.cli.serve import config_from_options
from engine.config import SETTINGS, EngineConfig
from engine.serving.guards.limits import ServerLimits, server_limit_fields


def serve_command() -> Any:
    """The click command typer builds for `bench serve` (typer carries its own click)."""
    return typer.main.get_command(app).commands["serve"]  # type: ignore[attr-defined]


def parse(*args: str) -> dict[str, Any]:
    """The options `bench serve ARGS` runs with, from click's own parser (no server starts)."""
    with serve_command().make_context("serve", list(args)) as ctx:
        return dict(ctx.params)


def test_help_lists_every_setting_with_its_help() -> None:
    result = CliRunner().invoke(app, ["serve", "--help"])
    assert result.exit_code == 0, result.output
    # Click wraps the text, a word with a hyphen at it: compare it with the spacing taken out.
    text = re.sub(r"\s+", " ", re.sub(r"-\n\s+", "-", result.output))
    for s in SETTINGS:
        assert f"{s.flag} " in text, s.name
        assert " ".join(s.help.split()) in text, s.name
        if s.choices:
            assert "|".join(s.choices) in text, s.name
    limit_flags = [f"--{name.replace('_', '-')}" for name, *_ in server_limit_fields()]
    for server_flag in ("--host", "--port", "--no-engine-core-process", "--log-level"):
        assert server_flag in text
    for flag, (*_, help_text) in zip(limit_flags, server_limit_fields(), strict=True):
        assert f"{flag} " in text and " ".join(help_text.split()) in text, flag


def limits_of(options: dict[str, Any]) -> ServerLimits:
    return ServerLimits(**{name: options[name] for name, *_ in server_limit_fields()})


def test_the_limit_options_make_server_limits() -> None:
    assert limits_of(parse()) == ServerLimits()
    options = parse("--max-body-bytes", "4096", "--timeout-request-read-s", "2.5")
    assert limits_of(options) == ServerLimits(max_body_bytes=4096, timeout_request_read_s=2.5)


def test_a_limit_that_is_not_positive_is_a_bad_parameter() -> None:
    result = CliRunner().invoke(app, ["serve", "--max-connections", "0"])
    assert result.exit_code == 2
    assert "max_connections must be above 0" in result.output


def test_defaults_are_the_engine_config_defaults() -> None:
    options = parse()
    assert config_from_options(options) == EngineConfig()
    assert (options["host"], options["port"], options["engine_core_process"]) == (
        "127.0.0.1",
        8000,
        True,
    )


def test_the_flags_in_use_keep_their_spelling() -> None:
    options = parse(
        "--model", "tiny", "--max-num-seqs", "8", "--kv-cache-dtype", "fp8", "--block-size",
        "32", "--no-enable-chunked-prefill", "--enable-prefix-caching", "--speculative",
        "ngram", "--step-delay-ms", "2.5", "--no-engine-core-process", "--port", "7000",
    )  # fmt: skip
    config = config_from_options(options)
    assert config.scheduler.max_num_seqs == 8 and config.cache.kv_cache_dtype == "fp8"
    assert config.cache.block_size == 32 and config.cache.enable_prefix_caching is True
    assert config.scheduler.enable_chunked_prefill is False
    assert config.speculative.method == "ngram" and config.scheduler.step_delay_ms == 2.5
    assert options["engine_core_process"] is False and options["port"] == 7000


def test_a_value_outside_the_choices_is_refused_by_the_parser() -> None:
    result = CliRunner().invoke(app, ["serve", "--batching", "dynamic"])
    assert result.exit_code == 2
    assert "dynamic" in result.output and "continuous" in result.output


def test_settings_that_do_not_go_together_are_a_bad_parameter() -> None:
    result = CliRunner().invoke(app, ["serve", "--tp", "2"])
    assert result.exit_code == 2
    assert "tp above 1 runs only on the simulated device" in result.output


@pytest.mark.parametrize("flag", ["--block-size", "--max-num-seqs"])
def test_a_rule_is_stated_in_the_help(flag: str) -> None:
    result = CliRunner().invoke(app, ["serve", "--help"])
    lines = result.output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(f"{flag} "))
    # The option's entry: its line and the wrapped lines under it, up to the next option.
    end = next(i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("-"))
    entry = " ".join(" ".join(lines[start:end]).split())
    rule = EngineConfig.setting(flag.removeprefix("--").replace("-", "_")).rule
    assert rule is not None and f"Must be {rule.text}." in entry
