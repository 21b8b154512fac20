"""`bench ab`: two sides run in alternation on this machine, judged by the gate's rules.

Exit codes are `bench gate`'s (bench.gate.verdict.EXIT_CODES): 0 pass, 1 fail (B regressed
against A beyond a rule's allowance), 2 inconclusive or unusable (bad options, a side that
cannot be installed or started, a run that could not finish or is not usable).
``--allow-inconclusive`` turns an inconclusive verdict into exit 0, as in `bench gate`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bench.cli.scenario_option import SCENARIO_HELP
from bench.run.end.interrupt import catching_signals
from bench.run.messages import print_error
from bench.run.terminal import terminal_console
from results.validity.usability import DEFAULT_MAX_ERROR_RATE

__all__ = ["register"]

_EXIT_UNUSABLE = 2
_console = terminal_console()


def _set_help(side: str) -> str:
    return (
        # The backslash keeps rich from reading [engine] as markup.
        f"NAME=VALUE: a reference-engine setting of side {side} over the scenario's \\[engine] "
        "table (repeat for more; `bench serve --help` lists them)."
    )


@catching_signals
def ab(
    scenario: Annotated[str, typer.Option(help=SCENARIO_HELP)] = "100-users",
    a_set: Annotated[list[str] | None, typer.Option(help=_set_help("A"))] = None,
    b_set: Annotated[list[str] | None, typer.Option(help=_set_help("B"))] = None,
    a_rev: Annotated[
        str | None,
        typer.Option(help="Side A's engine from this git commit (its own worktree and venv)."),
    ] = None,
    b_rev: Annotated[
        str | None,
        typer.Option(help="Side B's engine from this git commit (its own worktree and venv)."),
    ] = None,
    a_url: Annotated[str | None, typer.Option(help="Side A: an engine already running.")] = None,
    b_url: Annotated[str | None, typer.Option(help="Side B: an engine already running.")] = None,
    a_launch: Annotated[
        str | None,
        typer.Option(
            help="Side A: start --engine with this command line, as `bench run --launch`."
        ),
    ] = None,
    b_launch: Annotated[
        str | None,
        typer.Option(
            help="Side B: start --engine with this command line, as `bench run --launch`."
        ),
    ] = None,
    engine: Annotated[
        str, typer.Option(help="Adapter of --X-url / --X-launch sides (vllm, llamacpp, ...).")
    ] = "reference",
    model: Annotated[str | None, typer.Option(help="Model name to send (default: served).")] = None,
    tokenizer: Annotated[
        str | None, typer.Option(help="Tokenizer of the prompts, as `bench run --tokenizer`.")
    ] = None,
    pairs: Annotated[int, typer.Option(min=1, help="Pairs of runs (A B, B A, ...).")] = 3,
    until_decided: Annotated[
        bool,
        typer.Option(help="After --pairs, add pairs while inconclusive, up to --max-pairs."),
    ] = False,
    max_pairs: Annotated[int, typer.Option(min=1, help="The cap of --until-decided.")] = 10,
    budget_s: Annotated[
        float | None,
        typer.Option(
            min=1.0,
            help="--until-decided adds no pair that would end past this many seconds from the "
            "start, at the pace of the pairs so far (a CI's time budget).",
        ),
    ] = None,
    rules: Annotated[
        Path | None, typer.Option(help="Gate rules TOML (default: `bench gate`'s rules).")
    ] = None,
    runs_dir: Annotated[Path, typer.Option(help="Where the A/B folder is written.")] = Path("runs"),
    junit: Annotated[
        Path | None, typer.Option(help="Also write the JUnit XML report here.")
    ] = None,
    markdown: Annotated[
        Path | None, typer.Option(help="Also write the Markdown report here.")
    ] = None,
    live: Annotated[bool, typer.Option(help="Show a live display during each run.")] = False,
    probes: Annotated[bool, typer.Option(help="Run the probes during each run.")] = True,
    allow_busy: Annotated[
        bool, typer.Option(help="Judge runs marked busy, as `bench gate --allow-busy`.")
    ] = False,
    allow_invalid: Annotated[
        bool,
        typer.Option(help="Judge runs marked not valid, as `bench gate --allow-invalid`."),
    ] = False,
    allow_inconclusive: Annotated[
        bool, typer.Option(help="Exit 0 (with a warning) when the verdict is inconclusive.")
    ] = False,
    max_error_rate: Annotated[
        float,
        typer.Option(min=0.0, max=1.0, help="A run with more failed requests is not usable."),
    ] = DEFAULT_MAX_ERROR_RATE,
) -> None:
    """A/B on this machine: runs of A and B in alternation, a paired verdict; exit 0/1/2."""
    from bench.ab.outputs import write_outputs
    from bench.ab.session import AbPlan, run_ab
    from bench.ab.sides import AbError, side_from_options
    from bench.cli.interrupted import end_interrupted
    from bench.gate.baseline import BaselineError
    from bench.gate.rules import RulesError, load_rules
    from bench.gate.run_size import print_scenario_size_warnings
    from bench.gate.verdict import GateInputError
    from bench.run.end.interrupt import RunInterrupted
    from bench.run.orchestrate import RunError, RunOptions
    from bench.scenario.scenario import ScenarioError, load_scenario

    if max_pairs < pairs:
        print_error(_console, f"--max-pairs {max_pairs} is below --pairs {pairs}; raise it")
        raise typer.Exit(_EXIT_UNUSABLE)
    try:
        spec = load_scenario(scenario)
        gate_rules = load_rules(rules)
        a = side_from_options("A", a_set or [], a_rev, a_url, a_launch, spec)
        b = side_from_options("B", b_set or [], b_rev, b_url, b_launch, spec)
    except (ScenarioError, RulesError, AbError) as exc:
        print_error(_console, exc)
        raise typer.Exit(_EXIT_UNUSABLE) from None
    print_scenario_size_warnings(_console, gate_rules, spec, max_pairs if until_decided else pairs)
    base = RunOptions(
        spec, None, engine, model, tokenizer, runs_dir, live, probes=probes,
        max_error_rate=max_error_rate,
    )  # fmt: skip
    plan = AbPlan(
        a, b, base, gate_rules, pairs, until_decided, max_pairs, allow_busy, budget_s=budget_s,
        allow_invalid=allow_invalid,
    )  # fmt: skip
    try:
        result = run_ab(plan, _console)
    except (AbError, RunError, BaselineError, GateInputError) as exc:
        # A run that could not finish is no verdict on B: unusable (2), not a fail (1).
        print_error(_console, exc)
        raise typer.Exit(_EXIT_UNUSABLE) from None
    except RunInterrupted as exc:
        end_interrupted(exc, _console)
    write_outputs(result, until_decided, _console, junit, markdown)
    code = result.exit_code
    if result.report is not None and result.report.verdict == "inconclusive" and allow_inconclusive:
        _console.print("[yellow]inconclusive, allowed by --allow-inconclusive: exit 0[/yellow]")
        code = 0
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add `bench ab` to ``app``."""
    app.command("ab")(ab)
