"""`bench history`: the run history (results.history) indexed, listed, plotted, queried and
searched for change points; registered into the main app by bench/cli/app.py.

Also what the commands that make runs share: :func:`use_history` (their --history and
--no-history) and :func:`record_collection` (a --repeat group, sweep, ablation or A/B folder
indexed with its runs once the command ends). Exit codes: 0 done, 2 unusable input (a folder
that is no run, a metric no run has, a bad query).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.table import Table

from bench.cli.flags import history as hf
from bench.cli.flags.shared import RunsDir, command_group, declared
from bench.run.messages import print_error, print_info, print_path, print_warning
from bench.run.terminal import print_table, terminal_console

if TYPE_CHECKING:
    from rich.console import Console

    from results.history.query import Filters
    from results.history.store import Added, History

__all__ = ["history_app", "record_collection", "register", "use_history"]

_console = terminal_console()
history_app = command_group(
    "The run history: every run folder indexed in one DuckDB file (docs/history.md)."
)
# --by's words and the run columns they group by.


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


def _index(history: History, folder: Path) -> list[Added]:
    from results.history.folders import index_folder

    return index_folder(history, folder)


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
    from results.history.query import missing_folders

    with history.reading() as con:
        gone = missing_folders(con)
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
    from results.history.query import QueryError, hidden_runs, list_runs

    store = _open(history, runs_dir)
    filters = _filters(scenario, engine, model, hardware, since, include_invalid)
    try:
        with store.reading() as con:
            frame = list_runs(con, filters, tuple(metric or ()))
            hidden = hidden_runs(con, filters)
    except QueryError as exc:
        _fail(exc)
    title = f"{len(frame)} run(s)" + hidden_note(hidden)
    print_table(_console, _frame_table(frame.drop(columns=["path"]), title))
    _report_missing(store)


def hidden_note(hidden: int) -> str:
    """What a listing of valid runs says of the runs it left out (none: nothing)."""
    if not hidden:
        return ""
    return f"; {hidden} not valid or not usable left out (--include-invalid shows them)"


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


def register(app: typer.Typer) -> None:
    """Add `bench history` to ``app``, its commands here and those of bench.cli.history_views
    (which registers them on :data:`history_app`, and `bench export` and `bench frontier` on
    ``app``)."""
    app.add_typer(history_app, name="history")
