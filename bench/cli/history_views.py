"""`bench history trend` and `changes`, which read a history's series and its change points,
`bench export`, which writes runs or their requests out for other tools, and `bench frontier`,
configurations as throughput against interactivity; registered by bench/cli/app.py. Exit
codes: 0 done, 2 unusable input."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from rich.table import Table

from bench.cli.flags import history as hf
from bench.cli.flags.shared import RunsDir, declared
from bench.cli.history import (
    _console,
    _fail,
    _filters,
    _frame_table,
    _index,
    _open,
    hidden_note,
    history_app,
)
from bench.run.messages import print_info, print_path
from bench.run.terminal import print_table

if TYPE_CHECKING:
    from results.history.query import Filters
    from results.history.store import History

__all__ = ["register"]

# --by's words and the run columns they group by.
_GROUPS = {"version": "engine_version", "commit": "git_commit", "hardware": "hardware_label"}


def _changes(
    store: History, metrics: list[str], filters: Filters, optional: bool = False
) -> list[Any]:
    """The change points of ``metrics``; ``optional``: without the history extra, none and
    a line saying so (a trend needs no change-point library), instead of failing."""
    from results.history.changes import ChangePointsError
    from results.history.query import QueryError
    from results.history.series import series_changes

    try:
        with store.reading() as con:
            return series_changes(con, metrics, filters)
    except ChangePointsError as exc:
        if not optional:
            _fail(exc)
        print_info(_console, f"no change points: {exc}")
        return []
    except QueryError as exc:
        _fail(exc)


@declared
def trend(
    metric: Annotated[
        str,
        typer.Argument(
            help="A figure of summary.json by its dotted path, "
            "e.g. throughput.output_tok_s, ttft_ms.p99."
        ),
    ],
    history: hf.HistoryPath,
    runs_dir: RunsDir,
    scenario: hf.HistoryScenario,
    engine: hf.HistoryEngine,
    model: hf.HistoryModel,
    hardware: hf.HistoryHardware,
    since: hf.Since,
    include_invalid: hf.IncludeInvalid,
    by: Annotated[
        Literal["version", "commit", "hardware"],
        typer.Option(help="Group the points by engine version, commit or hardware."),
    ] = "version",
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="The page to write (default: trend-METRIC.html beside the history).",
        ),
    ] = None,
) -> None:
    """A metric over time: a table, and a page with a line per series (scenario, engine, model,
    hardware) and a point per run; runs not valid or not usable are left out, counted, unless
    --include-invalid, which draws them apart."""
    from dashboards.pages.trend import build_trend_page, series_label, write_trend_page
    from results.history.query import QueryError, hidden_runs, metric_series

    store = _open(history, runs_dir)
    filters = _filters(scenario, engine, model, hardware, since, include_invalid)
    try:
        with store.reading() as con:
            frame = metric_series(con, metric, filters)
            hidden = hidden_runs(con, filters)
    except QueryError as exc:
        _fail(exc)
    valid = dataclasses.replace(filters, include_invalid=False)  # change points: valid runs
    changes = [c.to_dict() for c in _changes(store, [metric], valid, optional=True)]
    column = _GROUPS[by]
    runs = frame.to_dict("records")
    frame.insert(2, "series", [series_label(r, runs) for r in runs])
    shown = frame[["started_utc", "run_id", "series", column, "valid", "usable", "value"]]
    title = f"{metric}: {len(frame)} run(s)" + hidden_note(hidden)
    print_table(_console, _frame_table(shown, title))
    if len(set(frame["series"])) > 1:
        print_info(
            _console,
            f"{frame['series'].nunique()} series, each its own line: a figure of one scenario, "
            "engine, model and hardware is not compared with another's (--scenario, --engine, "
            "--model, --hardware pick one)",
        )
    for c in changes:
        print_info(
            _console,
            f"change {c['change_pct']:+.1f}% from run {c['first_run']['run_id']}"
            f" (p = {c['pvalue']:.2g})",
        )
    page = build_trend_page(runs, metric, column, changes, str(store.path))
    out = output or store.path.with_name(f"trend-{metric}.html")
    print_path(_console, "dashboard", write_trend_page(page, out))


@declared
def changes(
    metrics: Annotated[
        list[str] | None,
        typer.Argument(help="Figures to search (default: the gate's default rules' metrics)."),
    ] = None,
    history: hf.HistoryPath = None,
    runs_dir: RunsDir = Path("runs"),
    scenario: hf.HistoryScenario = None,
    engine: hf.HistoryEngine = None,
    model: hf.HistoryModel = None,
    hardware: hf.HistoryHardware = None,
    since: hf.Since = None,
    include_invalid: hf.IncludeInvalid = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print them as JSON.")] = False,
) -> None:
    """Change points per series (scenario, engine, model, hardware) and metric, valid runs."""
    from bench.gate.rules import DEFAULT_RULES

    names = metrics or [r.metric.name for r in DEFAULT_RULES.rules]
    store = _open(history, runs_dir)
    filters = _filters(scenario, engine, model, hardware, since, include_invalid)
    found = _changes(store, names, filters)
    if as_json:
        _console.print_json(json.dumps([c.to_dict() for c in found], default=str))
        return
    table = Table(title=f"{len(found)} change point(s)")
    for column in ("series", "metric", "change", "p", "from run", "commits", "runs before/after"):
        table.add_column(column, overflow="fold")
    for c in found:
        d = c.to_dict()
        series = " ".join(str(v) for v in d["series"].values())
        commits = (
            f"{d['last_run_before']['git_commit'] or '-'} -> {d['first_run']['git_commit'] or '-'}"
        )
        table.add_row(
            series,
            c.metric,
            f"{d['change_pct']:+.1f}%",
            f"{d['pvalue']:.2g}",
            f"{d['first_run']['run_id']} ({d['first_run']['started_utc']})",
            commits,
            f"{d['runs_before']}/{d['runs_after']}",
        )
    print_table(_console, table)


_COPY_FORMATS = {"csv": "FORMAT csv, HEADER", "parquet": "FORMAT parquet", "jsonl": "FORMAT json"}


@declared
def export(
    sources: Annotated[
        list[Path],
        typer.Argument(
            metavar="RUN_OR_HISTORY...",
            help="Run folders, bench's folders of runs, folders holding them, or one run "
            "history file (a .duckdb of `bench history`).",
        ),
    ],
    fmt: Annotated[
        Literal["csv", "parquet", "jsonl"],
        typer.Option(
            "--format", help="csv (with a header), parquet, or jsonl (a JSON object a line)."
        ),
    ] = "csv",
    requests: Annotated[
        bool,
        typer.Option(
            "--requests",
            help="One row per request (every run's requests.parquet, with the run's run_key and "
            "run_id) instead of one per run.",
        ),
    ] = False,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="The file to write (default: export.FORMAT)."),
    ] = None,
) -> None:
    """Runs as one row each (identity and every summary figure), or their requests, to a file."""
    import tempfile

    from results.folder.run_folder import RunFolderError
    from results.history.store import History

    if any(s.is_file() for s in sources) and len(sources) != 1:
        _fail("give one history file, or run folders and folders holding them, not both")
    with tempfile.TemporaryDirectory(prefix="bench-export-") as scratch:
        if sources[0].is_file():
            store = History(sources[0])
        else:
            store = History(Path(scratch) / "export.duckdb")
            for source in sources:
                if not source.is_dir():
                    _fail(f"{source}: no such folder or file")
                try:
                    _index(store, source)
                except RunFolderError as exc:
                    _fail(exc)
        out = output or Path(f"export.{fmt}")
        count = _copy(store, "requests" if requests else "runs", out, fmt)
    print_info(_console, f"{count} {'request' if requests else 'run'} row(s)")
    print_path(_console, "written", out)


def _copy(store: History, table: str, out: Path, fmt: str) -> int:
    """COPY ``table`` of ``store`` to ``out``; returns its rows."""
    order = "run_key, request_id" if table == "requests" else "started_utc, run_id"
    with store.reading() as con:
        views = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
        if table == "requests" and table not in views:
            _fail("no run folder with a requests.parquet is where the history last saw it")
        count = int(con.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
        out.parent.mkdir(parents=True, exist_ok=True)
        target = str(out.resolve()).replace("'", "''")
        con.execute(
            f"COPY (SELECT * FROM {table} ORDER BY {order}) TO '{target}' ({_COPY_FORMATS[fmt]})"
        )
    return count


def _runs_of(folder: Path) -> list[Path]:
    from results.folder.folder_kinds import FOLDER_FILES, find_folder_kind
    from results.history.folders import collection_runs

    kind = find_folder_kind(folder)
    if kind is None:
        _fail(f"{folder}: not a run, --repeat group, sweep, ablation or A/B folder")
    return [folder] if kind == "run" else collection_runs(folder, FOLDER_FILES[kind])


def frontier(
    folders: Annotated[
        list[Path],
        typer.Argument(
            metavar="SWEEP...",
            help="One folder per configuration: a sweep (or any folder of runs, or a run).",
        ),
    ],
    label: Annotated[
        list[str] | None, typer.Option(help="A name per folder, in order (default: its name).")
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="The page (default: frontier.html).")
    ] = None,
) -> None:
    """Output tokens/s per GPU (per CPU core without one) against tokens/s per user: each
    configuration's runs and Pareto frontier, overlaid; the terminal lists the frontiers."""
    from dashboards.pages.frontier import build_frontier_page, write_frontier_page
    from results.folder.run_folder import RunFolderError
    from results.history.frontier import frontier_series

    labels = label or [f.name for f in folders]
    if len(labels) != len(folders):
        _fail(f"--label: {len(labels)} given for {len(folders)} folder(s); one per folder")
    configs: dict[str, list[dict[str, Any]]] = {}
    try:
        for name, folder in zip(labels, folders, strict=True):
            series = frontier_series(_runs_of(folder))
            # Runs of several length pairs: one series per pair, named by it.
            for lengths, points in series.items():
                key = f"{name} {lengths or 'varied'}" if len(series) > 1 else name
                configs[key] = [dataclasses.asdict(p) for p in points]
    except RunFolderError as exc:
        _fail(exc)
    table = Table(title="Pareto frontier points")
    for column in ("configuration", "run", "tok/s per user", "tok/s per unit", "unit"):
        table.add_column(column, overflow="fold")
    for name, points in configs.items():
        for p in sorted(points, key=lambda p: p["per_user_tok_s"]):
            if p["on_frontier"]:
                table.add_row(
                    name,
                    p["run_id"],
                    f"{p['per_user_tok_s']:.3g}",
                    f"{p['tok_s_per_unit']:.3g}",
                    p["per"],
                )
    print_table(_console, table)
    page = write_frontier_page(build_frontier_page(configs), output or Path("frontier.html"))
    print_path(_console, "dashboard", page)


def register(app: typer.Typer) -> None:
    """Add `trend` and `changes` to `bench history` (bench.cli.history's ``history_app``), and
    `bench export` and `bench frontier` to ``app``."""
    history_app.command("trend")(trend)
    history_app.command("changes")(changes)
    app.command("export")(export)
    app.command("frontier")(frontier)
