"""Dashboard commands: `bench compare RUN RUN ...`, and the helpers `bench run` and
`bench report --html` call to write a run's report.html.

``register(app)`` adds the commands to the main Typer app (bench/cli/app.py calls it).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from bench.run.end.run_writer import write_report
from bench.run.messages import print_error, print_path
from bench.run.terminal import print_table, terminal_console

__all__ = ["compare", "deltas_table", "register", "report_after_run", "write_report_html"]


def write_report_html(
    run_folder: Path, console: Console, summary: Mapping[str, Any] | None = None
) -> Path:
    """Write ``run_folder/report.html`` and print where (`bench report RUN --html`);
    ``summary``: the folder's, computed by the caller when it has no summary.json.

    Raises typer.Exit(2) with a message when ``run_folder`` is not a run folder.
    """
    from dashboards.pages.report import write_run_report
    from results.folder.run_folder import RunFolderError

    try:
        path = write_run_report(run_folder, summary)
    except RunFolderError as e:
        print_error(console, e)
        raise typer.Exit(2) from e
    print_path(console, "dashboard", path, f"(opens offline: {path.resolve().as_uri()})")
    return path


def report_after_run(run_folder: Path, console: Console) -> Path | None:
    """Write report.html at the end of `bench run`; a failure is a warning, never a failed run
    (the run's tables are already safe on disk, and `bench report RUN --html` can retry)."""
    return write_report(run_folder, console)


def deltas_table(summaries: list[dict], labels: list[str]) -> Table:
    """The compare page's table of deltas, for the terminal."""
    from dashboards.pages.deltas import delta_rows
    from dashboards.style import fmt

    table = Table(title=f"Against {labels[0]}", box=box.SIMPLE_HEAVY)
    table.add_column("metric", style="bold")
    for label in labels:
        table.add_column(label, justify="right", overflow="fold")
    for label in labels[1:]:
        table.add_column(f"Δ {label}", justify="right", overflow="fold")
    for row in delta_rows(summaries):
        values = [f"{fmt(v)} {row.metric.unit}" if v is not None else "-" for v in row.values]
        changes = []
        for i, change in enumerate(row.change_pct[1:], start=1):
            text = "-" if change is None else f"{change:+.1f}%"
            style = {"better": "green", "worse": "red"}.get(row.verdict(i), "")
            changes.append(f"[{style}]{text}[/{style}]" if style else text)
        table.add_row(row.metric.label, *values, *changes)
    return table


def compare(
    runs: Annotated[
        list[Path], typer.Argument(help="Two or more run folders; the first is the baseline.")
    ],
    out: Annotated[
        Path | None,
        typer.Option(help="HTML file to write (default: compare-<UTC time>.html beside RUN 1)."),
    ] = None,
    label: Annotated[
        list[str] | None,
        typer.Option(help="A legend label per run, in order (repeat the option)."),
    ] = None,
) -> None:
    """Compare runs: a table of deltas here, and overlaid distributions and timelines in HTML."""
    from dashboards.pages.compare import build_compare_page, default_compare_path, unique_labels
    from dashboards.pages.page import write_page
    from dashboards.runview import load_run_view
    from results.folder.run_folder import RunFolderError

    # Piped output (CI logs) gets a width that fits the table, as in bench/cli/app.py.
    console = terminal_console()
    if len(runs) < 2:
        print_error(console, "bench compare needs at least two run folders")
        raise typer.Exit(2)
    try:
        labels = unique_labels(runs, label or None)
    except ValueError as e:
        print_error(console, f"--label: {e}")
        raise typer.Exit(2) from e
    try:
        views = [load_run_view(p, name) for p, name in zip(runs, labels, strict=True)]
    except RunFolderError as e:
        print_error(console, e)
        raise typer.Exit(2) from e
    print_table(console, deltas_table([v.summary for v in views], labels))
    path = write_page(build_compare_page(views), out or default_compare_path(runs[0]))
    print_path(console, "comparison", path, f"(opens offline: {path.resolve().as_uri()})")


def register(app: typer.Typer) -> None:
    """Add `bench compare` to ``app``."""
    app.command()(compare)
