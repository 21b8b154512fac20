"""`bench history`: the run history (results.history) indexed, listed, plotted, queried and
searched for change points; registered into the main app by bench/cli/app.py.

Also what the commands that make runs share: :func:`use_history` (their --history and
--no-history) and :func:`record_collection` (a --repeat group, sweep, ablation or A/B folder
indexed with its runs once the command ends). Exit codes: 0 done, 2 unusable input (a folder
that is no run, a metric no run has, a bad query).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn

import typer
from rich.table import Table

from bench.cli.flags import history as hf
from bench.cli.flags.shared import RunsDir, declared
from bench.run.messages import print_error, print_info, print_path, print_warning
from bench.run.terminal import print_table, terminal_console

if TYPE_CHECKING:
    from rich.console import Console

    from results.history.query import Filters
    from results.history.store import Added, History

__all__ = ["record_collection", "register", "use_history"]

_console = terminal_console()
history_app = typer.Typer(
    help="The run history: every run folder indexed in one DuckDB file (docs/history.md).",
    no_args_is_help=True,
    add_completion=False,
)
# --by's words and the run columns they group by.
_GROUPS = {"version": "engine_version", "commit": "git_commit", "hardware": "hardware_label"}
_DEPTH = 4  # how deep `add` looks for bench's folders under a plain folder


def _fail(message: object) -> NoReturn:
    print_error(_console, message)
    raise typer.Exit(2)


def use_history(option: Path | None, no_history: bool, runs_dir: Path) -> None:
    """Settle the history a run-making command's runs add themselves to
    (results.history.target.choose_history)."""
    from results.history.target import choose_history

    choose_history(option, no_history, runs_dir)


def _open(option: Path | None, runs_dir: Path) -> History:
    from results.history.store import History
    from results.history.target import chosen_history

    target = option or chosen_history(runs_dir)
    if target is None:
        _fail("no history: --history PATH names one ($LLM_PERF_LAB_HISTORY is 'off')")
    return History(target)


def _members(folder: Path, definition: str) -> list[Path]:
    """The run folders of a collection folder: those inside it, and those its definition file
    names: inside it, as written, or beside it (a sweep's and an ablation's runs lie beside it;
    a moved one is looked for there)."""
    from results.folder.run_folder import RUN_JSON

    found = {p.parent.resolve() for p in folder.glob(f"**/{RUN_JSON}")}

    def strings(value: Any) -> Iterator[str]:
        if isinstance(value, dict):
            for v in value.values():
                yield from strings(v)
        elif isinstance(value, list):
            for v in value:
                yield from strings(v)
        elif isinstance(value, str) and len(value) < 4096:
            yield value

    document = json.loads((folder / definition).read_text(encoding="utf-8"))
    for text in strings(document):
        for candidate in (folder / text, Path(text), folder.parent / Path(text).name):
            if (candidate / RUN_JSON).is_file():
                found.add(candidate.resolve())
                break
    return sorted(found)


def _index(history: History, folder: Path, depth: int = 0) -> list[Added]:
    """Add ``folder`` whatever bench folder it is; a plain folder (a runs folder) is searched."""
    from bench.cli.report_folders import FOLDER_FILES

    kind = next((k for k, name in FOLDER_FILES.items() if (folder / name).is_file()), None)
    if kind == "run":
        return [history.add(folder)]
    if kind is not None:
        added = [history.add(run) for run in _members(folder, FOLDER_FILES[kind])]
        history.add_collection(kind, folder, added)
        return added
    if depth >= _DEPTH:
        return []
    return [
        a
        for child in sorted(folder.iterdir())
        if child.is_dir()
        for a in _index(history, child, depth + 1)
    ]


def record_collection(folder: Path, console: Console) -> None:
    """Index the collection ``folder`` a command just wrote in the history it chose (nothing
    when it chose none); a failure is a warning, never the command's."""
    from results.history.store import History
    from results.history.target import chosen_history

    target = chosen_history(None)
    if target is None:
        return
    try:
        _index(History(target), Path(folder))
    except Exception as exc:  # the history is an index: it never fails the runs it indexes
        print_warning(
            console,
            f"not added to the history {target} ({exc}); add it with: bench history add {folder}",
        )


def _report_missing(history: History) -> None:
    gone = history.missing()
    if gone:
        print_warning(
            _console,
            f"{len(gone)} indexed run folder(s) are gone (moved or deleted; "
            "kept in the history; `bench history add` at the new place updates them):",
        )
        for run_id, path in gone:
            print_info(_console, f"  {run_id}: {path}")


@history_app.command("add")
@declared
def add(
    folders: Annotated[
        list[Path],
        typer.Argument(
            help="Run folders, bench's folders of runs "
            "(--repeat group, sweep, ablation, A/B), or folders holding them."
        ),
    ],
    history: hf.HistoryPath,
    runs_dir: RunsDir,
    rebuild: Annotated[
        bool,
        typer.Option(
            help="First make the database again from its row "
            "files (nothing is lost: they hold every run)."
        ),
    ] = False,
) -> None:
    """Index run folders (idempotent: a run already there is unchanged, a moved one updated)."""
    from results.folder.run_folder import RunFolderError
    from results.history.store import HistoryError

    store = _open(history, runs_dir)
    if rebuild:
        print_info(_console, f"rebuilt from the row files: {store.rebuild()} run(s)")
    counts = {"added": 0, "unchanged": 0, "moved": 0}
    seen: set[str] = set()  # a sweep's runs lie beside it: met twice, counted once
    for folder in folders:
        if not folder.is_dir():
            _fail(f"{folder}: no such folder; give run folders or folders holding them")
        try:
            added = _index(store, folder)
        except (RunFolderError, HistoryError) as exc:
            _fail(exc)
        for a in added:
            if a.run_key in seen:
                continue
            seen.add(a.run_key)
            counts[a.status] += 1
            if a.status == "moved":
                print_info(_console, f"moved: {a.run_id}: {a.moved_from} -> {a.path}")
    print_info(_console, ", ".join(f"{n} {word}" for word, n in counts.items()))
    print_path(_console, "history", store.path)
    _report_missing(store)


def _filters(
    scenario: str | None,
    engine: str | None,
    model: str | None,
    hardware: str | None,
    since: str | None,
    include_invalid: bool,
) -> Filters:
    from results.history.query import Filters, QueryError, parse_since

    try:
        when = parse_since(since)
    except QueryError as exc:
        _fail(exc)
    return Filters(scenario, engine, model, hardware, when, include_invalid)


def _cell(value: Any) -> str:
    from dashboards.style import fmt

    if isinstance(value, float):
        return fmt(value)
    return "-" if value is None or value != value else str(value)


def _frame_table(frame: Any, title: str) -> Table:
    table = Table(title=title)
    for column in frame.columns:
        table.add_column(str(column), overflow="fold")
    for row in frame.itertuples(index=False):
        table.add_row(*(_cell(v) for v in row))
    return table


@history_app.command("list")
@declared
def list_(
    history: hf.HistoryPath,
    runs_dir: RunsDir,
    scenario: hf.HistoryScenario,
    engine: hf.HistoryEngine,
    model: hf.HistoryModel,
    hardware: hf.HistoryHardware,
    since: hf.Since,
    include_invalid: hf.IncludeInvalid,
    metric: Annotated[
        list[str] | None,
        typer.Option(
            help="A figure to show beside each run (repeat for more), e.g. throughput.output_tok_s."
        ),
    ] = None,
) -> None:
    """The runs of the history, oldest first (valid runs only, unless --include-invalid)."""
    from results.history.query import QueryError, list_runs

    store = _open(history, runs_dir)
    filters = _filters(scenario, engine, model, hardware, since, include_invalid)
    try:
        with store.reading() as con:
            frame = list_runs(con, filters, tuple(metric or ()))
    except QueryError as exc:
        _fail(exc)
    print_table(_console, _frame_table(frame.drop(columns=["path"]), f"{len(frame)} run(s)"))
    _report_missing(store)


@history_app.command("sql")
@declared
def sql(
    query: Annotated[
        str,
        typer.Argument(
            help="A DuckDB query over tables runs, collections, "
            "collection_runs and views requests, tokens, steps, samples, client."
        ),
    ],
    history: hf.HistoryPath,
    runs_dir: RunsDir,
) -> None:
    """Answer a SQL query over the history (read-only), as a table."""
    import duckdb

    store = _open(history, runs_dir)
    try:
        with store.reading() as con:
            frame = con.execute(query).df()
    except duckdb.Error as exc:
        _fail(f"query failed: {str(exc).splitlines()[0]}")
    print_table(_console, _frame_table(frame, f"{len(frame)} row(s)"))


def _changes(store: History, metrics: list[str], filters: Filters) -> list[Any]:
    from results.history.changes import ChangePointsError
    from results.history.query import QueryError
    from results.history.series import series_changes

    try:
        with store.reading() as con:
            return series_changes(con, metrics, filters)
    except (QueryError, ChangePointsError) as exc:
        _fail(exc)


@history_app.command("trend")
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
    """A metric over time: a table, and a page with a point per run (invalid runs apart)."""
    from dashboards.pages.trend import build_trend_page, write_trend_page
    from results.history.query import QueryError, metric_series

    store = _open(history, runs_dir)
    filters = _filters(scenario, engine, model, hardware, since, True)
    try:
        with store.reading() as con:
            frame = metric_series(con, metric, filters)
    except QueryError as exc:
        _fail(exc)
    changes = [c.to_dict() for c in _changes(store, [metric], filters)]
    column = _GROUPS[by]
    shown = frame[["started_utc", "run_id", column, "valid", "usable", "value"]]
    print_table(_console, _frame_table(shown, f"{metric}: {len(frame)} run(s)"))
    for c in changes:
        print_info(
            _console,
            f"change {c['change_pct']:+.1f}% from run {c['first_run']['run_id']}"
            f" (p = {c['pvalue']:.2g})",
        )
    runs = frame.to_dict("records")
    page = build_trend_page(runs, metric, column, changes, str(store.path))
    out = output or store.path.with_name(f"trend-{metric}.html")
    print_path(_console, "dashboard", write_trend_page(page, out))


@history_app.command("changes")
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
    as_json: Annotated[bool, typer.Option("--json", help="Print them as JSON.")] = False,
) -> None:
    """Change points per series (scenario, engine, model, hardware) and metric, valid runs."""
    from bench.gate.rules import DEFAULT_RULES

    names = metrics or [r.metric.name for r in DEFAULT_RULES.rules]
    store = _open(history, runs_dir)
    found = _changes(store, names, _filters(scenario, engine, model, hardware, since, False))
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


def register(app: typer.Typer) -> None:
    """Add `bench history` to ``app``."""
    app.add_typer(history_app, name="history")
