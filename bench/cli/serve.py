"""`bench serve`: the reference engine's OpenAI-compatible server.

Its engine options are not written here: one is made for every EngineConfig setting (its flag,
type, default, help and choices, in a help panel per group), so a setting added to
engine.config appears here untouched. The server's own options (address, core process, log
level, API key, reasoning prefix) are the only ones declared in this module; its limits (body
size, timeouts, connection cap) are engine.serving.guards.limits.ServerLimits' fields, one option
each.
The key is a server option, not an engine setting: it is in no EngineConfig, so it never reaches
the engine core, /debug/engine or run.json.
"""

from __future__ import annotations

import inspect
import logging
from typing import Annotated, Any, Literal

import typer

from engine.config import SETTINGS, EngineConfig, Setting
from engine.serving.guards.auth import API_KEY_ENV
from engine.serving.guards.limits import ServerLimits, server_limit_fields

__all__ = ["config_from_options", "register", "serve"]

_SERVER_PANEL = "Server"

# (name, type, default, help) of the options that are the server's, not the engine's.
_SERVER_OPTIONS: tuple[tuple[str, type, Any, str], ...] = (
    ("host", str, "127.0.0.1", "Address to bind; 127.0.0.1 keeps it local."),
    ("port", int, 8000, "TCP port."),
    (
        "engine_core_process",
        bool,
        True,
        "Step the engine in its own process (as vLLM V1), not a thread of the server.",
    ),
    ("log_level", str, "INFO", "Python log level."),
    (
        "reasoning_tokens",
        int,
        0,
        "Stream the first N generated tokens of each chat answer as reasoning (as a reasoning "
        "model behind vLLM's --reasoning-parser), with usage.completion_tokens_details."
        "reasoning_tokens; 0: plain answers.",
    ),
    (
        "reasoning_field",
        str,
        "reasoning_content",
        "The delta field reasoning is streamed in: reasoning_content (vLLM's parsers, DeepSeek) "
        "or reasoning (newer vLLM, OpenRouter).",
    ),
    *server_limit_fields(),
)


def _annotation(s: Setting) -> Any:
    # A Literal becomes a click.Choice: `--batching dynamic` is refused with the choices listed.
    kind: Any = Literal[s.choices] if s.choices is not None else s.kind
    return kind | None if s.nullable else kind


def _engine_parameter(s: Setting) -> inspect.Parameter:
    # No explicit flag: typer spells it from the name (--max-num-seqs, --x/--no-x for booleans),
    # which is how the flags were spelled when they were written out by hand.
    rule = f" Must be {s.rule.text}." if s.rule is not None else ""
    option = typer.Option(help=s.help + rule, rich_help_panel=f"Engine: {s.group}")
    return inspect.Parameter(
        s.name,
        inspect.Parameter.KEYWORD_ONLY,
        default=s.default,
        annotation=Annotated[_annotation(s), option],
    )


def _server_parameter(name: str, kind: type, default: Any, help: str) -> inspect.Parameter:
    option = typer.Option(help=help, rich_help_panel=_SERVER_PANEL)
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[kind, option]
    )


def _api_key_parameter() -> inspect.Parameter:
    option = typer.Option(
        "--api-key",
        envvar=API_KEY_ENV,
        show_envvar=True,
        show_default=False,
        rich_help_panel=_SERVER_PANEL,
        help="Require 'Authorization: Bearer KEY' on every /v1 route (401 otherwise), as vLLM's "
        "--api-key; /health, /metrics and /debug stay open.",
    )
    return inspect.Parameter(
        "api_key",
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation=Annotated[str | None, option],
    )


def config_from_options(options: dict[str, Any]) -> EngineConfig:
    """The EngineConfig of `bench serve`'s parsed options (the server's own are ignored).

    Raises engine.config.SettingError when the settings do not go together.
    """
    return EngineConfig.from_flat({s.name: options[s.name] for s in SETTINGS if s.name in options})


def serve(**options: Any) -> None:
    """Start the reference engine's OpenAI-compatible server."""
    from engine.serving.core_process import EngineCoreError
    from engine.serving.reasoning import ReasoningPrefix
    from engine.serving.server import EngineDiedError, run_server

    level = str(options["log_level"]).upper()
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(message)s")
    try:
        config = config_from_options(options)
        limits = ServerLimits(**{name: options[name] for name, *_ in server_limit_fields()})
        reasoning = ReasoningPrefix(options["reasoning_tokens"], options["reasoning_field"])
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    try:
        run_server(
            config, options["host"], options["port"], options["engine_core_process"], limits,
            api_key=options.get("api_key") or None, reasoning=reasoning,
        )  # fmt: skip
    except EngineDiedError as e:
        typer.echo(f"error: {e}; exiting, so that a supervisor can restart the server", err=True)
        raise typer.Exit(1) from e
    except (EngineCoreError, ValueError) as e:
        typer.echo(f"error: the engine did not start: {e}", err=True)
        raise typer.Exit(1) from e


# typer reads the options from the signature: the server's, then one per engine setting.
serve.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [_server_parameter(*option) for option in _SERVER_OPTIONS]
    + [_api_key_parameter()]
    + [_engine_parameter(s) for s in SETTINGS]
)


def register(app: typer.Typer) -> None:
    """Add `bench serve` to ``app``."""
    app.command()(serve)
