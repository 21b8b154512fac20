"""bench's own options, declared once: each its type, default, help, bounds and metavar.

`bench run`, `sweep`, `ab`, `ablate`, `simulate` and `techniques` take the same option the same
way: a command names it by its Annotated type (``scenario: Scenario``) and leaves the default to
the declaration, which :func:`declared` fills in; a command that wrote another default would
make the commands disagree, so :func:`declared` refuses it when the module loads. The engine
settings of `bench serve` are declared in engine.config the same way (bench.cli.serve).

The choices of ``--engine`` are the adapter registry's (engine_adapters.registry), so an adapter
added there is offered, described and checked here without editing this module.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin

import typer

from bench.cli.flags.auth import API_KEY_OPTION, HEADER_OPTION
from bench.cli.flags.scenario import SCENARIO_HELP
from engine_adapters.registry import ADAPTERS
from results.validity.usability import DEFAULT_MAX_ERROR_RATE

__all__ = [
    "ApiKey",
    "BenchOption",
    "Calibrate",
    "Engine",
    "EngineSet",
    "Header",
    "Live",
    "MaxErrorRate",
    "Model",
    "Probes",
    "Route",
    "RunsDir",
    "Scenario",
    "Tokenizer",
    "Urls",
    "Workers",
    "declared",
    "engine_help",
]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class BenchOption:
    """One option: its value type, default, help, metavar and bounds (``minimum``/``maximum``,
    inclusive; None: unbounded). ``flag`` spells it when the parameter's name would not
    (``--set`` for ``engine_set``). A bool is a ``--x/--no-x`` flag and shows no metavar."""

    kind: Any
    default: Any
    help: str
    metavar: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    flag: str | None = None

    def annotated(self) -> Any:
        """The Annotated type a command's parameter takes (typer reads the Option in it)."""
        option = typer.Option(
            *([self.flag] if self.flag else []),
            help=self.help,
            metavar="" if self.kind is bool else self.metavar,
            min=self.minimum,
            max=self.maximum,
            show_default=self.default not in (None, [], ()),
        )
        return Annotated[self.kind, option, self]


def engine_help() -> str:
    """``--engine``'s help: every adapter of the registry and what it drives."""
    named = "; ".join(
        f"{name}: {adapter.description or 'the built-in engine'}"
        for name, adapter in ADAPTERS.items()
    )
    return f"The engine's adapter, how bench talks to it and starts it ({named})."


def _of(annotation: Any) -> BenchOption | None:
    if get_origin(annotation) is not Annotated:
        return None
    return next((m for m in get_args(annotation)[1:] if isinstance(m, BenchOption)), None)


def command_group(help: str) -> typer.Typer:
    """A group of bench's commands (bench, bench history, bench gate baseline), all alike: its
    help when called bare, no shell completion, tracebacks left to bench's own handling, and
    click's plain help, which wraps every option name and its text at any width (rich's
    options table cut names and words short at 80 columns: "--worker-join-tim…")."""
    return typer.Typer(
        help=help,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        # Click caps its help at 80 columns; the terminal's own width serves, as rich's did.
        context_settings={"max_content_width": 100_000},
    )


def declared(command: F) -> F:
    """Give each parameter typed by a BenchOption that option's default.

    Apply it under typer's and catching_signals' decorators (they copy the signature it sets).
    Raises TypeError at import for a parameter that writes a default of its own which differs
    from the declaration's: the commands would disagree on it.
    """
    signature = inspect.signature(command, eval_str=True)
    parameters = []
    for p in signature.parameters.values():
        option = _of(p.annotation)
        if option is not None:
            if p.default is not p.empty and p.default != option.default:
                raise TypeError(
                    f"{command.__name__}({p.name}=...): the default is bench.cli.flags.shared' "
                    f"{option.default!r}; drop the one written here"
                )
            p = p.replace(default=option.default)
        parameters.append(p)
    command.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    return command


Scenario = BenchOption(str, "100-users", SCENARIO_HELP, metavar="NAME|FILE").annotated()
RunsDir = BenchOption(
    Path, Path("runs"), "Where run folders are written.", metavar="DIR"
).annotated()
Model = BenchOption(
    str | None, None, "Model name to send (default: the server's first model).", metavar="NAME"
).annotated()
Tokenizer = BenchOption(
    str | None,
    None,
    "Tokenizer that builds the prompts: a local folder, a preset, or a Hugging Face Hub id "
    "(org/name or org/name@revision). Default with --url: the served model's root, then its "
    "id, from /v1/models, else the server's /tokenize.",
    metavar="SPEC",
).annotated()
# A Literal of the registry's names: click refuses any other, listing them.
Engine = BenchOption(
    Literal[tuple(ADAPTERS)], "reference", engine_help(), metavar="ADAPTER"
).annotated()
Live = BenchOption(bool, True, "Show a live display while each load runs.").annotated()
Probes = BenchOption(
    bool, True, "Sample NVML/GPM, CPU and the engine's /metrics during each run."
).annotated()
Calibrate = BenchOption(
    bool,
    True,
    "A CPU run without a calibration of this CPU first measures a quick one (a few seconds, "
    "before the load, cached) for MFU and MBU; --no-calibrate skips it.",
).annotated()
MaxErrorRate = BenchOption(
    float,
    DEFAULT_MAX_ERROR_RATE,
    "A run with more than this share of its requests failed, or none succeeded, is not usable: "
    "the command exits non-zero (`bench ab` 2, the others 1); run folders are written anyway.",
    metavar="SHARE",
    minimum=0.0,
    maximum=1.0,
).annotated()
Urls = BenchOption(
    list[str] | None,
    None,
    "Base URL of a running engine; without it the reference engine starts. Repeat it for a "
    "fleet: one run against several replicas, routed by --route.",
    metavar="URL",
).annotated()
Route = BenchOption(
    str,
    "round-robin",
    "A fleet's routing: round-robin, or least-outstanding (the replica with the fewest of this "
    "client's requests in flight, ties by --url order).",
    metavar="POLICY",
).annotated()
Workers = BenchOption(
    int, 1, "Client processes sharing the users (Locust: workers).", metavar="N", minimum=1
).annotated()
EngineSet = BenchOption(
    list[str] | None,
    None,
    # The backslash keeps rich from reading [engine] as markup.
    "NAME=VALUE: a reference-engine setting over the scenario's [engine] table, checked as "
    "its keys are (repeat for more; `bench serve --help` lists them), e.g. batching=static.",
    metavar="NAME=VALUE",
    flag="--set",
).annotated()
# Declared beside the code that reads them (bench.cli.flags.auth); typed here.
ApiKey = Annotated[str | None, API_KEY_OPTION]
Header = Annotated[list[str] | None, HEADER_OPTION]
