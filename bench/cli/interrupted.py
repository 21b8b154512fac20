"""The end of a command that a signal cut short (bench.run.end.interrupt): what is shown, the
status.

- :func:`end_interrupted`: the partial run's summary and report.html (unless a second signal
  said to skip it), then exit 128 + the signal's number (130 for SIGINT, 143 for SIGTERM).
- :func:`report_then_exit_status`: report.html of a finished run, abandoned when a signal
  arrives meanwhile; returns the exit status the command ends with: the signal's, else the
  run's usability verdict (bench.run.end.exit_codes; a run whose engine died is not usable).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console

from bench.run.end.interrupt import ReportSkipped, RunInterrupted, active_interrupts
from bench.run.end.verdict import exit_code
from bench.run.messages import print_error, print_path, print_warning

__all__ = ["end_interrupted", "report_then_exit_status"]


def _report(folder: Path, console: Console) -> None:
    from bench.cli.dashboards import report_after_run

    try:
        with active_interrupts().report():
            report_after_run(folder, console)
    except ReportSkipped as exc:
        print_warning(console, f"{exc}; write it later with: bench report {folder} --html")


def end_interrupted(exc: RunInterrupted, console: Console) -> NoReturn:
    """Show what the interrupted run left (module docstring) and exit with the signal's status."""
    from bench.run.end.report import render_summary

    if exc.folder is not None and exc.summary is not None:
        render_summary(exc.summary, console, nvml_said=True)
        print_path(console, "run folder", exc.folder)
        if exc.skip_report:
            print_warning(
                console,
                f"report.html skipped (signalled twice); write it with: bench report "
                f"{exc.folder} --html",
            )
        else:
            _report(exc.folder, console)
    print_error(console, exc)
    raise typer.Exit(exc.exit_code)


def report_then_exit_status(folder: Path, summary: Mapping[str, Any], console: Console) -> int:
    """Write report.html for a finished run (module docstring); the command's exit status."""
    _report(folder, console)
    got = active_interrupts().first
    if got is not None:
        return got.exit_code
    return exit_code([summary.get("usability")])
