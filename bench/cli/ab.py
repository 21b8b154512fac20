"""`bench ab`: two sides run in alternation on this machine, judged by the gate's rules.

Exit codes are `bench gate`'s (bench.gate.verdict.EXIT_CODES): 0 pass, 1 fail (B regressed
against A beyond a rule's allowance), 2 inconclusive or unusable (bad options, a side that
cannot be installed or started, a run that could not finish or is not usable).
``--allow-inconclusive`` turns an inconclusive verdict into exit 0, as in `bench gate`.
``--api-key`` and ``--header`` go with every request of every run, as `bench run`'s do
(bench.cli.flags.auth): never written or printed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from bench.cli.flags.auth import request_headers
from bench.cli.flags.history import HistoryPath, NoHistory
from bench.cli.flags.shared import (
    ApiKey,
    Engine,
    Header,
    Live,
    MaxErrorRate,
    Model,
    Probes,
    RunsDir,
    Scenario,
    Tokenizer,
    declared,
)
from bench.run.end.interrupt import catching_signals
from bench.run.messages import print_error
from bench.run.terminal import terminal_console

if TYPE_CHECKING:
    from bench.ab.session import AbPlan

__all__ = ["register"]

_EXIT_UNUSABLE = 2
_console = terminal_console()


def _set_help(side: str) -> str:
    return (
        # The backslash keeps rich from reading [engine] as markup.
        f"NAME=VALUE: a reference-engine setting of side {side} over the scenario's [engine] "
        "table (repeat for more; `bench serve --help` lists them)."
    )


def _side_options(side: str) -> tuple[Any, Any, Any, Any]:
    """The Annotated types of one side's --X-set, --X-rev, --X-url and --X-launch."""
    return (
        Annotated[list[str] | None, typer.Option(metavar="NAME=VALUE", help=_set_help(side))],
        Annotated[
            str | None,
            typer.Option(
                metavar="COMMIT",
                help=f"Side {side}'s engine from this git commit (its own worktree and venv).",
            ),
        ],
        Annotated[
            str | None, typer.Option(metavar="URL", help=f"Side {side}: an engine already running.")
        ],
        Annotated[
            str | None,
            typer.Option(
                metavar="COMMAND",
                help=f"Side {side}: start --engine with this command line, as "
                "`bench run --launch`.",
            ),
        ],
    )


_ASet, _ARev, _AUrl, _ALaunch = _side_options("A")
_BSet, _BRev, _BUrl, _BLaunch = _side_options("B")
_Pairs = Annotated[int, typer.Option(min=1, metavar="N", help="Pairs of runs (A B, B A, ...).")]
_UntilDecided = Annotated[
    bool,
    typer.Option(
        metavar="", help="After --pairs, add pairs while inconclusive, up to --max-pairs."
    ),
]
_MaxPairs = Annotated[int, typer.Option(min=1, metavar="N", help="The cap of --until-decided.")]
_BudgetS = Annotated[
    float | None,
    typer.Option(
        min=1.0,
        metavar="SECONDS",
        help="--until-decided adds no pair that would end past this many seconds from the "
        "start, at the pace of the pairs so far (a CI's time budget).",
    ),
]
_Rules = Annotated[
    Path | None,
    typer.Option(metavar="FILE", help="Gate rules TOML (default: `bench gate`'s rules)."),
]
_Junit = Annotated[
    Path | None, typer.Option(metavar="FILE", help="Also write the JUnit XML report here.")
]
_Markdown = Annotated[
    Path | None, typer.Option(metavar="FILE", help="Also write the Markdown report here.")
]
_AllowBusy = Annotated[
    bool, typer.Option(metavar="", help="Judge runs marked busy, as `bench gate --allow-busy`.")
]
_AllowInvalid = Annotated[
    bool,
    typer.Option(metavar="", help="Judge runs marked not valid, as `bench gate --allow-invalid`."),
]
_AllowInconclusive = Annotated[
    bool,
    typer.Option(metavar="", help="Exit 0 (with a warning) when the verdict is inconclusive."),
]


@catching_signals
@declared
def ab(
    *,
    scenario: Scenario,
    a_set: _ASet = None,
    b_set: _BSet = None,
    a_rev: _ARev = None,
    b_rev: _BRev = None,
    a_url: _AUrl = None,
    b_url: _BUrl = None,
    a_launch: _ALaunch = None,
    b_launch: _BLaunch = None,
    engine: Engine,
    model: Model,
    tokenizer: Tokenizer,
    api_key: ApiKey = None,
    header: Header = None,
    pairs: _Pairs = 3,
    until_decided: _UntilDecided = False,
    max_pairs: _MaxPairs = 10,
    budget_s: _BudgetS = None,
    rules: _Rules = None,
    runs_dir: RunsDir,
    junit: _Junit = None,
    markdown: _Markdown = None,
    live: Live,
    probes: Probes,
    allow_busy: _AllowBusy = False,
    allow_invalid: _AllowInvalid = False,
    allow_inconclusive: _AllowInconclusive = False,
    max_error_rate: MaxErrorRate,
    history: HistoryPath,
    no_history: NoHistory,
) -> None:
    """A/B on this machine: runs of A and B in alternation, a paired verdict; exit 0/1/2."""
    from bench.ab.session import AbPlan
    from bench.ab.sides import AbError, side_from_options
    from bench.cli.history import use_history
    from bench.gate.rules import RulesError, load_rules
    from bench.gate.run_size import print_scenario_size_warnings
    from bench.run.orchestrate import RunOptions
    from bench.scenario.scenario import ScenarioError, load_scenario

    if max_pairs < pairs:
        print_error(_console, f"--max-pairs {max_pairs} is below --pairs {pairs}; raise it")
        raise typer.Exit(_EXIT_UNUSABLE)
    try:
        spec = load_scenario(scenario)
        gate_rules = load_rules(rules)
        a = side_from_options("A", a_set or [], a_rev, a_url, a_launch, spec)
        b = side_from_options("B", b_set or [], b_rev, b_url, b_launch, spec)
        headers = request_headers(api_key, header)
    except (ScenarioError, RulesError, AbError, ValueError) as exc:
        print_error(_console, exc)
        raise typer.Exit(_EXIT_UNUSABLE) from None
    use_history(history, no_history, runs_dir)
    print_scenario_size_warnings(_console, gate_rules, spec, max_pairs if until_decided else pairs)
    base = RunOptions(
        scenario=spec, url=None, engine=engine, model=model, tokenizer=tokenizer,
        runs_dir=runs_dir, live=live, probes=probes, headers=headers,
        max_error_rate=max_error_rate,
    )  # fmt: skip
    plan = AbPlan(
        a=a, b=b, base=base, rules=gate_rules, pairs=pairs, until_decided=until_decided,
        max_pairs=max_pairs, allow_busy=allow_busy, budget_s=budget_s,
        allow_invalid=allow_invalid,
    )  # fmt: skip
    _run_and_judge(plan, junit, markdown, allow_inconclusive)


def _run_and_judge(
    plan: AbPlan, junit: Path | None, markdown: Path | None, allow_inconclusive: bool
) -> NoReturn:
    """Run the plan, write its reports; exit with the verdict's code (module docstring)."""
    from bench.ab.outputs import write_outputs
    from bench.ab.session import run_ab
    from bench.ab.sides import AbError
    from bench.cli.interrupted import end_interrupted
    from bench.gate.baseline import BaselineError
    from bench.gate.verdict import GateInputError
    from bench.run.end.interrupt import RunInterrupted
    from bench.run.orchestrate import RunError

    try:
        result = run_ab(plan, _console)
    except (AbError, RunError, BaselineError, GateInputError) as exc:
        # A run that could not finish is no verdict on B: unusable (2), not a fail (1).
        print_error(_console, exc)
        raise typer.Exit(_EXIT_UNUSABLE) from None
    except RunInterrupted as exc:
        end_interrupted(exc, _console)
    from bench.cli.history import record_collection

    record_collection(result.folder, _console)
    write_outputs(result, plan.until_decided, _console, junit, markdown)
    code = result.exit_code
    if result.report is not None and result.report.verdict == "inconclusive" and allow_inconclusive:
        _console.print("[yellow]inconclusive, allowed by --allow-inconclusive: exit 0[/yellow]")
        code = 0
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add `bench ab` to ``app``."""
    app.command("ab")(ab)
