"""`bench report FOLDER` for every folder bench prints: a run, a `--repeat` group, a sweep, an
ablation.

The kind of a folder is told by the one file that defines it (results.folder.folder_kinds:
run.json, group.json, sweep.json, ablation.json or ab.json; an A/B folder is reprinted by
bench.ab.reread). Each kind is printed as the command that made it printed it, and
``--html`` writes the page that command writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from bench.run.end.exit_codes import EXIT_REFUSED
from bench.run.messages import print_error, print_path
from bench.run.terminal import print_table
from results.folder.folder_kinds import ABLATION_JSON, FOLDER_FILES, FolderKind
from results.folder.run_folder import RunFolderError, load_run
from results.folder.run_group import GROUP_JSON, expand_run_paths

__all__ = ["group_table", "report_folder"]


def _spread_pct(values: list[float]) -> float | None:
    """(max - min) / mean of ``values`` in percent: how far apart the runs landed (None for
    fewer than two values or a zero mean)."""
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return (max(values) - min(values)) / abs(mean) * 100 if mean else None


def group_table(summaries: list[dict[str, Any]], labels: list[str]) -> Table:
    """The group's runs side by side on the compare page's headline figures (dashboards'
    delta rows), with each figure's spread across the runs: (max - min) / mean."""
    from dashboards.pages.deltas import delta_rows
    from dashboards.style import fmt

    table = Table(title="Runs of the group", box=box.SIMPLE_HEAVY)
    table.add_column("metric", style="bold")
    for label in labels:
        table.add_column(label, justify="right", overflow="fold")
    table.add_column("spread", justify="right")
    for row in delta_rows(summaries):
        if all(v is None for v in row.values):
            continue  # a figure no run recorded says nothing about the spread
        cells = [f"{fmt(v)} {row.metric.unit}" if v is not None else "-" for v in row.values]
        spread = _spread_pct([v for v in row.values if v is not None])
        table.add_row(row.metric.label, *cells, "-" if spread is None else f"{spread:.1f}%")
    return table


def _run_summary(folder: Path) -> dict[str, Any]:
    """A run's summary.json, or the one recomputed from its tables when it was not written."""
    loaded = load_run(folder)
    if loaded.summary is not None:
        return dict(loaded.summary)
    from results.run_summary import summarize_run

    return dict(summarize_run(loaded))


def _report_group(folder: Path, html: bool, console: Console) -> None:
    import json

    manifest = json.loads((folder / GROUP_JSON).read_text(encoding="utf-8"))
    runs = expand_run_paths([folder])
    done = f"{len(runs)} of {manifest.get('repeat', len(runs))} runs"
    console.print(f"group of {manifest.get('scenario')} on {manifest.get('engine')}: {done}")
    if manifest.get("error"):
        print_error(console, f"the group stopped: {manifest['error']}")
    if (note := manifest.get("interrupted")) is not None:
        print_error(console, f"interrupted by {note.get('signal')}: the finished runs are listed")
    labels = [f"run {i + 1}" for i in range(len(runs))]
    print_table(console, group_table([_run_summary(run) for run in runs], labels))
    for label, run in zip(labels, runs, strict=True):
        print_path(console, label, run)
    print_path(console, "group folder", folder)
    if not html:
        return
    if len(runs) == 1:
        from bench.cli.dashboards import write_report_html

        write_report_html(runs[0], console)
        return
    from dashboards.pages.compare import write_compare_report

    page = write_compare_report(runs, folder / "compare.html", labels)
    print_path(console, "comparison", page, f"(opens offline: {page.resolve().as_uri()})")


def _report_sweep(folder: Path, html: bool, console: Console) -> None:
    from bench.cli.sweep import render_sweep, write_sweep_page
    from bench.experiments.sweep import load_sweep

    result = load_sweep(folder)
    render_sweep(result, console)
    print_path(console, "sweep folder", folder)
    if html and (page := write_sweep_page(result, folder, console)) is not None:
        print_path(console, "dashboard", page, f"(opens offline: {page.resolve().as_uri()})")


def _report_ablation(folder: Path, html: bool, console: Console) -> None:
    from bench.experiments.ablate import render_ablation

    path = folder / ABLATION_JSON
    render_ablation(path, console)
    if html:
        from dashboards.pages.ablation import ablation_input_from_json, write_ablation_report

        page = write_ablation_report(ablation_input_from_json(path), folder / "ablation.html")
        print_path(console, "dashboard", page)


def report_folder(folder: Path, kind: FolderKind, html: bool, console: Console) -> None:
    """Print a group, sweep or ablation folder (``kind`` from :func:`folder_kind`) and, with
    ``html``, write its page. A broken document or a run it lists that cannot be read ends in
    one line and typer.Exit(EXIT_REFUSED)."""
    from bench.ab.reread import report_ab_folder

    reporters = {
        "group": _report_group,
        "sweep": _report_sweep,
        "ablation": _report_ablation,
        "ab": report_ab_folder,
    }
    writers = {
        "group": "bench run --repeat",
        "sweep": "bench sweep",
        "ablation": "bench ablate",
        "ab": "bench ab",
    }
    if kind not in reporters:
        raise ValueError(f"report_folder: {kind} folders are reported by `bench report` itself")
    try:
        reporters[kind](Path(folder), html, console)
    except (RunFolderError, ValueError, KeyError, TypeError) as e:
        # A ValueError names its file; KeyError/TypeError: a key its writer sets is missing.
        where = f"{folder / FOLDER_FILES[kind]}: not as `{writers[kind]}` writes it: "
        print_error(console, str(e) if isinstance(e, ValueError) else f"{where}{e!r}")
        raise typer.Exit(EXIT_REFUSED) from e
