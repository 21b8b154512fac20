"""`bench sweep`: a scenario at several users or rates, or the highest meeting SLOs.

    bench sweep --scenario 100-users --users 1,2,4,8,16,32,64,128 --requests-per-user 3
    bench sweep --scenario open-loop --rates 1,2,4,8
    bench sweep --scenario 100-users --slo ttft_p99=500,tpot_p99=50 [--start 1 --limit 256]

Each point is a full `bench run` (its own run folder); the sweep's folder holds sweep.json
(bench.experiments.sweep) and, when the dashboards are installed, report.html.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from bench.cli.auth_options import API_KEY_OPTION, HEADER_OPTION, request_headers
from bench.cli.scenario_option import SCENARIO_HELP
from bench.experiments.sweep import (
    Axis,
    RunPoint,
    SweepPoint,
    SweepResult,
    parse_slo,
    parse_values,
    run_sweep,
    search_slo,
    write_sweep,
)
from bench.run.end.exit_codes import EXIT_REFUSED
from bench.run.end.interrupt import catching_signals
from bench.run.messages import print_error, print_info, print_path, print_warning
from bench.run.terminal import print_table, terminal_console
from results.validity.usability import DEFAULT_MAX_ERROR_RATE

__all__ = ["make_run_point", "register", "render_sweep", "write_sweep_page"]


def make_run_point(console: Console, **options: Any) -> RunPoint:
    """``bench run``'s path as a sweep's ``run_point``: RunOptions(scenario, **options).

    Options RunOptions does not have (e.g. ``workers`` before it grows one) are dropped.
    """
    from bench.run.orchestrate import RunOptions, run_and_report

    known = {f.name for f in dataclasses.fields(RunOptions)}
    kept = {k: v for k, v in options.items() if k in known}

    def run_point(scenario: Any) -> tuple[Path, dict[str, Any]]:
        console.rule(Text(scenario.name, style="bold"))
        return run_and_report(RunOptions(scenario=scenario, **kept), console)

    return run_point


def _fmt(value: Any, spec: str = ".1f") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return format(value, spec)


def render_sweep(result: SweepResult, console: Console) -> None:
    """The sweep table: per-user TPS against concurrency (or rate), then the search verdict."""
    table = Table(title=f"sweep of {result.scenario} over {result.axis}", title_justify="left")
    for name in ("users" if result.axis == "users" else "rate (req/s)", "per-user TPS p50",
                 "p10", "out tok/s", "TTFT p99 ms", "TPOT p99 ms", "errors", "client-bound",
                 "SLO", "run folder"):  # fmt: skip
        table.add_column(name, justify="left" if name == "run folder" else "right")
    for point in sorted(result.points, key=lambda p: p.value):
        f = point.figures
        slo = "-" if point.slo_misses is None else ("met" if not point.slo_misses else "missed")
        table.add_row(
            _fmt(point.value, "g"), _fmt(f["per_user_tps_p50"]), _fmt(f["per_user_tps_p10"]),
            _fmt(f["output_tok_s"]), _fmt(f["ttft_p99_ms"]), _fmt(f["tpot_p99_ms"]),
            _fmt(f["error_rate"], ".1%"), _fmt(f["client_bound"]), slo, point.folder.name,
        )  # fmt: skip
    print_table(console, table)
    search = result.search
    if search is not None:
        targets = ", ".join(f"{k}={v:g}" for k, v in search["targets"].items())
        if search["best"] is None:
            verdict = f"even {result.axis} = {result.points[0].value:g} misses {targets}"
        else:
            verdict = f"highest {result.axis} meeting {targets}: [bold]{search['best']:g}[/bold]"
            if search["first_failing"] is not None:
                verdict += f" ({search['first_failing']:g} misses)"
            elif search["hit_limit"]:
                verdict += " (the search limit; raise --limit to look higher)"
        console.print(f"{verdict}; {search['runs']} runs")
        for point in sorted(result.points, key=lambda p: p.value):
            for thin in point.thin_percentiles:
                print_warning(console, f"{result.axis} {point.value:g}: {thin}; add requests")
        if search["hit_max_runs"]:
            console.print("[yellow]stopped at --max-runs before the bracket closed[/yellow]")
    if any(p.figures.get("client_bound") for p in result.points):
        console.print(
            "[yellow]some points were client-bound (see each summary's client section): their "
            "latencies include the load generator's own delays[/yellow]"
        )


def register(app: typer.Typer) -> None:
    """Add `bench sweep` to ``app``."""

    @app.command()
    @catching_signals
    def sweep(
        scenario: Annotated[str, typer.Option(help=SCENARIO_HELP)] = "100-users",
        users: Annotated[
            str | None, typer.Option(help="Closed-loop users per point, e.g. 1,2,4,8.")
        ] = None,
        rates: Annotated[
            str | None, typer.Option(help="Open-loop arrival rates (req/s) per point, e.g. 1,2,4.")
        ] = None,
        slo: Annotated[
            str | None,
            typer.Option(
                help="Find the highest users (or rate, with --axis rate) meeting "
                "targets in ms, e.g. ttft_p99=500,tpot_p99=50."
            ),
        ] = None,
        axis: Annotated[str, typer.Option(help="--slo searches users or rate.")] = "users",
        start: Annotated[float, typer.Option(help="--slo: first value tried.")] = 1.0,
        limit: Annotated[float | None, typer.Option(help="--slo: highest value tried.")] = None,
        max_runs: Annotated[int, typer.Option(help="--slo: most runs.")] = 12,
        requests_per_user: Annotated[
            int | None, typer.Option(help="Users sweeps: num_requests = users x this.")
        ] = None,
        url: Annotated[
            str | None, typer.Option(help="A running engine (default: start one).")
        ] = None,
        engine: Annotated[str, typer.Option(help="Engine adapter.")] = "reference",
        model: Annotated[str | None, typer.Option(help="Model name to send.")] = None,
        tokenizer: Annotated[
            str | None,
            typer.Option(help="Tokenizer for --url: a folder, a preset or a Hub id, as bench run."),
        ] = None,
        runs_dir: Annotated[Path, typer.Option(help="Where run folders go.")] = Path("runs"),
        workers: Annotated[int, typer.Option(help="Client processes per run.")] = 1,
        live: Annotated[bool, typer.Option(help="Live display during each run.")] = True,
        api_key: Annotated[str | None, API_KEY_OPTION] = None,
        header: Annotated[list[str] | None, HEADER_OPTION] = None,
        max_error_rate: Annotated[
            float,
            typer.Option(
                min=0.0, max=1.0, help="Exit 1 when a point's run has more failed requests."
            ),
        ] = DEFAULT_MAX_ERROR_RATE,
    ) -> None:
        """Run a scenario at several users or rates (one run folder each), or search SLOs."""
        from bench.run.end.verdict import exit_code, print_unusable_runs
        from bench.run.orchestrate import RunError
        from bench.scenario.scenario import ScenarioError, load_scenario

        # Piped output (CI logs, files) gets room for the whole table.
        console = terminal_console(piped_width=160)
        given = [name for name, v in (("--users", users), ("--rates", rates), ("--slo", slo)) if v]
        try:
            if len(given) != 1:
                raise ValueError("give exactly one of --users, --rates and --slo")
            if axis not in ("users", "rate"):
                raise ValueError(f"--axis: expected users or rate, got {axis!r}")
            spec = load_scenario(scenario)
            targets = parse_slo(slo) if slo else None
            chosen: Axis = "users" if users else "rate" if rates else axis  # type: ignore[assignment]
            values = parse_values(users or rates, chosen) if (users or rates) else None
            headers = request_headers(api_key, header)
        except (ValueError, ScenarioError) as e:
            print_error(console, e)
            raise typer.Exit(EXIT_REFUSED) from e
        run_point = make_run_point(
            console, url=url, engine=engine, model=model, tokenizer=tokenizer,
            runs_dir=runs_dir, live=live, workers=workers, headers=headers,
            max_error_rate=max_error_rate,
        )  # fmt: skip

        def on_point(point: SweepPoint) -> None:
            print_info(console, f"point {point.value:g}: run folder {point.folder}")

        try:
            if targets is not None:
                result = search_slo(
                    spec, chosen, targets, run_point, start=start, limit=limit,
                    max_runs=max_runs, requests_per_user=requests_per_user, on_point=on_point,
                )  # fmt: skip
            else:
                assert values is not None
                result = run_sweep(spec, chosen, values, run_point, requests_per_user, on_point)
        except ScenarioError as e:
            print_error(console, e)
            raise typer.Exit(EXIT_REFUSED) from e
        except RunError as e:
            print_error(console, e)
            raise typer.Exit(e.exit_code) from e
        folder = write_sweep(result, runs_dir)
        write_sweep_page(result, folder, console)
        render_sweep(result, console)
        print_path(console, "sweep folder", folder)
        if result.interrupted is not None:
            print_error(console, f"interrupted by {result.interrupted['signal']}: sweep.json "
                        f"keeps the {len(result.points)} points that finished")  # fmt: skip
            raise typer.Exit(result.interrupted["exit_code"])
        points = sorted(result.points, key=lambda p: p.value)
        print_unusable_runs(
            console, [(f"{result.axis} {p.value:g}", p.folder, p.usability) for p in points]
        )
        raise typer.Exit(exit_code([p.usability for p in points]))


def write_sweep_page(result: SweepResult, folder: Path, console: Console) -> Path | None:
    """``folder/report.html`` through the dashboards, when they are there (they are optional
    here); returns its path, or None when it was not written (a warning says why)."""
    try:
        from dashboards.pages.sweep import SweepInput, write_sweep_report
    except ImportError:
        return None
    points = sorted(result.points, key=lambda p: p.value)
    parameter = "users" if result.axis == "users" else "rate (req/s)"
    try:
        return write_sweep_report(
            SweepInput([p.folder for p in points], [p.value for p in points], parameter),
            folder / "report.html",
        )
    except Exception as exc:  # the sweep's data is written; a figure failing must not lose it
        print_warning(console, f"sweep report not written: {type(exc).__name__}: {exc}")
        return None
