"""`bench baseline save` and `bench gate`: registered into the main app by bench/cli/app.py.

Exit codes of `bench gate`: 0 every rule passed, 1 a rule failed (a regression), 2 inconclusive
(too few samples or too much noise) or unusable input (no run folder, a malformed baseline or
rules file, other hardware or another workload without --force, a metric the runs lack).
``--allow-inconclusive`` turns an inconclusive verdict (not unusable input) into exit 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from bench.cli.flags.shared import command_group
from bench.run.messages import print_error, print_warning
from bench.run.terminal import terminal_console

if TYPE_CHECKING:
    from bench.gate.baseline import RunGroup
    from bench.gate.rules import GateRules
    from bench.gate.verdict import GateReport

__all__ = ["register"]

EXIT_UNUSABLE = 2
_console = terminal_console()

baseline_app = command_group("Baseline files that `bench gate` compares runs against.")


@baseline_app.command("save")
def baseline_save(
    runs: Annotated[
        list[Path], typer.Argument(help="Run folders, or group folders of `bench run --repeat`.")
    ],
    name: Annotated[str, typer.Option(help="The baseline's name, shown in gate reports.")],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="File to write (default: baselines/NAME.json)."),
    ] = None,
) -> None:
    """Make a baseline file (to commit) from runs of one scenario on one machine."""
    from bench.gate.baseline import BaselineError, save_baseline
    from results.folder.run_folder import sanitize_name

    target = output or Path("baselines") / f"{sanitize_name(name)}.json"
    try:
        document = save_baseline(runs, name, target)
    except BaselineError as exc:
        print_error(_console, exc)
        raise typer.Exit(EXIT_UNUSABLE) from None
    requests = sum(len(r["samples"]["ttft_ms"]) for r in document["runs"])
    _console.print(
        f"baseline [bold]{name}[/bold]: {len(document['runs'])} run(s), {requests} measured"
        f" requests, scenario {document['scenario'].get('name')!r} -> [bold]{target}[/bold]"
    )


def gate(
    runs: Annotated[
        list[Path], typer.Argument(help="Run folders, or group folders of `bench run --repeat`.")
    ],
    baseline: Annotated[
        Path | None, typer.Option(help="Baseline file (`bench baseline save`).")
    ] = None,
    history: Annotated[
        Path | None,
        typer.Option(
            "--history",
            metavar="PATH",
            help="Instead of --baseline: the runs of this run history (a DuckDB file, `bench "
            "history`) of the candidate's scenario, engine, model and hardware since their last "
            "change point in a gated metric.",
        ),
    ] = None,
    rules: Annotated[
        Path | None, typer.Option(help="Rules TOML (default: the built-in rules).")
    ] = None,
    junit: Annotated[Path | None, typer.Option(help="Write a JUnit XML report here.")] = None,
    markdown: Annotated[
        Path | None, typer.Option(help="Write a Markdown report here (a CI step summary).")
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Compare even across hardware or workloads (noted in reports).")
    ] = False,
    allow_inconclusive: Annotated[
        bool,
        typer.Option(
            help="Exit 0 (with a warning) when the verdict is inconclusive; for smoke gates on "
            "shared machines whose noise makes 'cannot tell' common. Unusable input still exits 2."
        ),
    ] = False,
    allow_busy: Annotated[
        bool,
        typer.Option(
            help="Judge runs marked busy (summary.json's machine_load: other processes used much "
            "of the CPU); without it a busy run makes the verdict inconclusive."
        ),
    ] = False,
    allow_invalid: Annotated[
        bool,
        typer.Option(
            help="Judge runs whose summary.json marks them not valid (GPU throttling, powersave "
            "governor, XID or ECC errors, token counts apart; a busy machine too); without it "
            "such a run makes the verdict inconclusive."
        ),
    ] = False,
    skip_other_hardware: Annotated[
        bool,
        typer.Option(
            help="When the baseline was made on other hardware, say so and exit 0 without a "
            "verdict (a CI machine that has no baseline of its own) instead of exiting 2."
        ),
    ] = False,
) -> None:
    """Gate runs against a baseline: a bootstrap CI per metric; exit 0 pass, 1 fail, 2 other."""
    from bench.gate.baseline import BaselineError, load_baseline, load_run_group
    from bench.gate.report import write_text
    from bench.gate.rules import RulesError, load_rules
    from bench.gate.run_size import print_group_size_warnings
    from bench.gate.verdict import GateInputError, OtherHardwareError, evaluate

    if (baseline is None) == (history is None):
        _report_unusable("give one of --baseline FILE and --history PATH", junit, markdown)
    try:
        gate_rules = load_rules(rules)
        if history is not None:
            base = _history_baseline(history, runs, gate_rules)
        else:
            assert baseline is not None
            base = load_baseline(baseline)
        candidate, _ = load_run_group(runs, "candidate runs")
        print_group_size_warnings(_console, gate_rules, base, candidate)
        report = evaluate(
            gate_rules, base, candidate, force=force, allow_busy=allow_busy,
            allow_invalid=allow_invalid,
        )  # fmt: skip
    except OtherHardwareError as exc:
        if not skip_other_hardware:
            _report_unusable(str(exc), junit, markdown)
        message = f"not judged: {exc}"
        print_warning(_console, message)
        if markdown is not None:
            write_text(markdown, f"**Performance gate not judged.** {exc}\n")
        raise typer.Exit(0) from None
    except (BaselineError, RulesError, GateInputError) as exc:
        _report_unusable(str(exc), junit, markdown)
    _judged(report, junit, markdown, allow_inconclusive)


def _history_baseline(history: Path, runs: list[Path], rules: GateRules) -> RunGroup:
    """The baseline ``--history`` gives: the valid runs of the candidate's series since the
    last change point of a gated metric (results.history.series.runs_since_last_change)."""
    from bench.gate.baseline import BaselineError, load_run_group
    from results.folder.run_folder import RunFolderError
    from results.folder.run_group import expand_run_paths
    from results.history.changes import ChangePointsError
    from results.history.query import SERIES_KEYS, QueryError
    from results.history.row import run_row
    from results.history.series import runs_since_last_change
    from results.history.store import History, HistoryError

    if not history.is_file():
        raise BaselineError(f"--history {history}: no such file; `bench history add` makes one")
    try:
        candidates = [run_row(p) for p in expand_run_paths(runs)]
        series = {k: candidates[0][k] for k in SERIES_KEYS}
        metrics = [r.metric.name for r in rules.rules]
        with History(history).reading() as con:
            exclude = [c["run_key"] for c in candidates]
            since, change = runs_since_last_change(con, series, metrics, exclude)
            if since.empty:  # none on this hardware: the gate's hardware rules decide
                since, change = runs_since_last_change(
                    con, {**series, "hardware": None}, metrics, exclude
                )
    except (RunFolderError, QueryError, ChangePointsError, HistoryError) as exc:
        raise BaselineError(str(exc)) from None
    present = [Path(p) for p in since["path"] if Path(p).is_dir()] if not since.empty else []
    if not present:
        raise BaselineError(
            f"--history {history}: no valid run of scenario {series['scenario']!r}, engine "
            f"{series['engine']!r}, model {series['model']!r} to compare with"
        )
    where = (
        "its first run"
        if change is None
        else (
            f"the change point at run {change.first_run['run_id']} ({change.metric} "
            f"{change.point.change_pct:+.1f}%)"
        )
    )
    _console.print(f"baseline: {len(present)} run(s) of the history since {where}")
    if len(present) < len(since):
        print_warning(
            _console,
            f"{len(since) - len(present)} run folder(s) of the history are "
            "gone and left out (`bench history list` names them)",
        )
    group, _ = load_run_group(present, f"history since {where}")
    return group


def _judged(
    report: GateReport, junit: Path | None, markdown: Path | None, allow_inconclusive: bool
) -> NoReturn:
    """Show and write a verdict; exit with its code (0 for an allowed inconclusive one)."""
    from bench.gate.report import render_gate, to_junit_xml, to_markdown, write_text

    render_gate(report, _console)
    if junit is not None:
        write_text(junit, to_junit_xml(report))
    if markdown is not None:
        write_text(markdown, to_markdown(report))
    if report.verdict == "inconclusive" and allow_inconclusive:
        _console.print("[yellow]inconclusive, allowed by --allow-inconclusive: exit 0[/yellow]")
        raise typer.Exit(0)
    raise typer.Exit(report.exit_code)


def _report_unusable(message: str, junit: Path | None, markdown: Path | None) -> NoReturn:
    from bench.gate.report import input_error_junit, input_error_markdown, write_text

    print_error(_console, f"unusable input: {message}")
    if junit is not None:
        write_text(junit, input_error_junit(message))
    if markdown is not None:
        write_text(markdown, input_error_markdown(message))
    raise typer.Exit(EXIT_UNUSABLE)


def register(app: typer.Typer) -> None:
    """Add `bench baseline save` and `bench gate` to ``app``."""
    app.add_typer(baseline_app, name="baseline")
    app.command("gate")(gate)
