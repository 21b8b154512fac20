"""`bench sweep`: a scenario at several users or rates, or the highest meeting SLOs.

    bench sweep --scenario 100-users --users 1,2,4,8,16,32,64,128 --requests-per-user 3
    bench sweep --scenario open-loop --rates 1,2,4,8
    bench sweep --scenario 100-users --users 1,4,16 --lengths 128:128,512:64   # each pair
    bench sweep --scenario 100-users --slo ttft_p99=500,tpot_p99=50 [--start 1 --limit 256]
    bench sweep --url http://a:8000 --url http://b:8000 --users 8,16   # a fleet, as bench run

Each point is a full `bench run` (its own run folder); the sweep's folder holds sweep.json
(bench.experiments.sweep) and, when the dashboards are installed, report.html: the sweep page,
or with several --lengths pairs the frontier page (one series per pair) and a sweep page per
pair, report-in<INPUT>-out<OUTPUT>.html.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from bench.cli.flags.auth import request_headers
from bench.cli.flags.history import HistoryPath, NoHistory
from bench.cli.flags.shared import (
    ApiKey,
    Calibrate,
    Engine,
    Header,
    Live,
    MaxErrorRate,
    Model,
    Probes,
    Route,
    RunsDir,
    Scenario,
    Tokenizer,
    Urls,
    Workers,
    declared,
)
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
from bench.experiments.sweep_lengths import lengths_label, parse_lengths
from bench.run.end.exit_codes import EXIT_REFUSED
from bench.run.end.interrupt import catching_signals
from bench.run.messages import print_error, print_info, print_path, print_warning
from bench.run.terminal import print_table, terminal_console

__all__ = ["make_run_point", "register", "render_sweep", "sweep", "write_sweep_page"]


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
    paired = any(p.lengths for p in result.points)
    for name in (*(("in:out",) if paired else ()),
                 "users" if result.axis == "users" else "rate (req/s)", "per-user TPS p50",
                 "p10", "out tok/s", "TTFT p99 ms", "TPOT p99 ms", "errors", "client-bound",
                 "SLO", "run folder"):  # fmt: skip
        table.add_column(name, justify="left" if name == "run folder" else "right")
    for point in sorted(result.points, key=lambda p: (p.lengths or [], p.value)):
        f = point.figures
        slo = "-" if point.slo_misses is None else ("met" if not point.slo_misses else "missed")
        pair = (lengths_label((point.lengths[0], point.lengths[1])),) if point.lengths else ()
        table.add_row(
            *pair, _fmt(point.value, "g"), _fmt(f["per_user_tps_p50"]), _fmt(f["per_user_tps_p10"]),
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


# --slo's first value: a whole number of users (or a rate, with --axis rate).
_START_HELP = "--slo: first value tried: a count of users (or req/s with --axis rate)."
_Start = Annotated[float, typer.Option(help=_START_HELP, metavar="N|RATE")]


@catching_signals
@declared
def sweep(
    *,
    scenario: Scenario,
    users: Annotated[
        str | None, typer.Option(metavar="N,N,...", help="Closed-loop users per point, e.g. 1,2,4.")
    ] = None,
    rates: Annotated[
        str | None,
        typer.Option(
            metavar="R,R,...", help="Open-loop arrival rates (req/s) per point, e.g. 1,2,4."
        ),
    ] = None,
    lengths: Annotated[
        str | None,
        typer.Option(
            metavar="IN:OUT,...",
            help="Run the --users or --rates at each pair of input and output tokens, e.g. "
            "128:128,512:64 (every request of a point at exactly those lengths).",
        ),
    ] = None,
    slo: Annotated[
        str | None,
        typer.Option(
            metavar="TARGET=MS,...",
            help="Find the highest users (or rate, with --axis rate) meeting targets in ms, e.g. "
            "ttft_p99=500,tpot_p99=50.",
        ),
    ] = None,
    axis: Annotated[
        str, typer.Option(metavar="users|rate", help="--slo searches users or rate.")
    ] = "users",
    start: _Start = 1,
    limit: Annotated[
        float | None, typer.Option(metavar="N|RATE", help="--slo: highest value tried.")
    ] = None,
    max_runs: Annotated[int, typer.Option(metavar="N", min=1, help="--slo: most runs.")] = 12,
    requests_per_user: Annotated[
        int | None,
        typer.Option(metavar="N", min=1, help="Users sweeps: num_requests = users x this."),
    ] = None,
    url: Urls,
    route: Route,
    engine: Engine,
    model: Model,
    tokenizer: Tokenizer,
    runs_dir: RunsDir,
    workers: Workers,
    live: Live,
    probes: Probes,
    calibrate: Calibrate,
    api_key: ApiKey = None,
    header: Header = None,
    max_error_rate: MaxErrorRate,
    history: HistoryPath,
    no_history: NoHistory,
) -> None:
    """Run a scenario at several users or rates (one run folder each), or search SLOs."""
    from bench.cli.history import use_history
    from bench.run.fleet import fleet_urls
    from bench.scenario.scenario import ScenarioError, load_scenario

    # Piped output (CI logs, files) gets room for the whole table.
    console = terminal_console(piped_width=160)
    try:
        chosen, values, targets = _sweep_plan(users, rates, slo, axis, start)
        pairs = _lengths_plan(lengths, slo)
        spec = load_scenario(scenario)
        headers = request_headers(api_key, header)
        urls = url or []
        fleet = fleet_urls(urls, route, starts_engine=False)
    except (ValueError, ScenarioError) as e:
        print_error(console, e)
        raise typer.Exit(EXIT_REFUSED) from e
    use_history(history, no_history, runs_dir)
    run_point = make_run_point(
        console, url=urls[0] if urls else None, endpoints=fleet, route=route, engine=engine,
        model=model, tokenizer=tokenizer, runs_dir=runs_dir, live=live, workers=workers,
        headers=headers, max_error_rate=max_error_rate, probes=probes, calibrate=calibrate,
    )  # fmt: skip

    def on_point(point: SweepPoint) -> None:
        print_info(console, f"point {point.value:g}: run folder {point.folder}")

    def points() -> SweepResult:
        if targets is not None:
            return search_slo(
                spec, chosen, targets, run_point, start=start, limit=limit, max_runs=max_runs,
                requests_per_user=requests_per_user, on_point=on_point,
            )  # fmt: skip
        assert values is not None
        return run_sweep(spec, chosen, values, run_point, requests_per_user, on_point, pairs)

    _finish_sweep(_sweep_or_exit(points, console), runs_dir, console)


def _sweep_plan(
    users: str | None, rates: str | None, slo: str | None, axis: str, start: float
) -> tuple[Axis, list[float] | None, dict[str, float] | None]:
    """The sweep's axis, its values (a --users/--rates sweep) or targets (an --slo search).

    Raises ValueError naming the option: not exactly one of the three, a bad --axis, or a
    --start that is no whole, positive count of users.
    """
    given = [name for name, v in (("--users", users), ("--rates", rates), ("--slo", slo)) if v]
    if len(given) != 1:
        raise ValueError("give exactly one of --users, --rates and --slo")
    if axis not in ("users", "rate"):
        raise ValueError(f"--axis: expected users or rate, got {axis!r}")
    chosen: Axis = "users" if users else "rate" if rates else axis  # type: ignore[assignment]
    if slo and chosen == "users" and (start != int(start) or start < 1):
        raise ValueError(f"--start {start:g}: a count of users is a whole number >= 1, e.g. 1")
    if slo and not start > 0:
        raise ValueError(f"--start {start:g}: a rate is > 0 req/s, e.g. 0.5")
    values = parse_values(users or rates, chosen) if (users or rates) else None
    return chosen, values, parse_slo(slo) if slo else None


def _lengths_plan(lengths: str | None, slo: str | None) -> list[tuple[int, int]]:
    """--lengths' pairs (none without it); raises ValueError for bad pairs or with --slo."""
    if lengths is None:
        return []
    if slo:
        raise ValueError("--lengths sweeps --users or --rates at each pair; --slo searches one")
    return parse_lengths(lengths)


def _sweep_or_exit(points: Callable[[], SweepResult], console: Console) -> SweepResult:
    """``points()``, or the exit a refused scenario or a failed run calls for."""
    from bench.run.orchestrate import RunError
    from bench.scenario.scenario import ScenarioError

    try:
        return points()
    except ScenarioError as e:
        print_error(console, e)
        raise typer.Exit(EXIT_REFUSED) from e
    except RunError as e:
        print_error(console, e)
        raise typer.Exit(e.exit_code) from e


def _finish_sweep(result: SweepResult, runs_dir: Path, console: Console) -> NoReturn:
    """Write the sweep's folder and page, show its table; exit with the points' verdict."""
    from bench.cli.history import record_collection
    from bench.run.end.verdict import exit_code, print_unusable_runs

    folder = write_sweep(result, runs_dir)
    record_collection(folder, console)
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


def register(app: typer.Typer) -> None:
    """Add `bench sweep` to ``app``."""
    app.command()(sweep)


def write_sweep_page(result: SweepResult, folder: Path, console: Console) -> Path | None:
    """``folder/report.html`` through the dashboards, when they are there (they are optional
    here); returns its path, or None when it was not written (a warning says why)."""
    try:
        from dashboards.pages.sweep import SweepInput, write_sweep_report
    except ImportError:
        return None
    points = sorted(result.points, key=lambda p: p.value)
    parameter = "users" if result.axis == "users" else "rate (req/s)"
    pairs = sorted({(p.lengths[0], p.lengths[1]) for p in points if p.lengths})
    try:
        if len(pairs) > 1:
            return _write_length_pages(points, pairs, parameter, folder)
        return write_sweep_report(
            SweepInput([p.folder for p in points], [p.value for p in points], parameter),
            folder / "report.html",
        )
    except Exception as exc:  # the sweep's data is written; a figure failing must not lose it
        print_warning(console, f"sweep report not written: {type(exc).__name__}: {exc}")
        return None


def _write_length_pages(
    points: list[SweepPoint], pairs: list[tuple[int, int]], parameter: str, folder: Path
) -> Path:
    """A sweep page per length pair (report-in<I>-out<O>.html) and report.html, the frontier
    page with one series per pair; returns report.html."""
    from dashboards.pages.frontier import build_frontier_page, write_frontier_page
    from dashboards.pages.sweep import SweepInput, write_sweep_report
    from results.history.frontier import frontier_series

    for pair in pairs:
        mine = [p for p in points if p.lengths and tuple(p.lengths) == pair]
        title = f"Sweep over {parameter} at {lengths_label(pair)} tokens (input:output)"
        write_sweep_report(
            SweepInput([p.folder for p in mine], [p.value for p in mine], parameter, title),
            folder / f"report-in{pair[0]}-out{pair[1]}.html",
        )
    series = frontier_series([p.folder for p in points])
    configs = {
        f"{lengths or 'varied'} tokens": [dataclasses.asdict(p) for p in front]
        for lengths, front in series.items()
    }
    return write_frontier_page(build_frontier_page(configs), folder / "report.html")
