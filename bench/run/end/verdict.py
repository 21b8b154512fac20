"""A run's usability verdict (summary.json's ``usability``, results.validity.usability) as the
commands
say it and exit with it (bench.run.end.exit_codes).

`bench run` and `bench report` print why a run is not usable and its top causes of failure;
`bench run`, `bench sweep`, `bench ablate` and `--repeat` exit with :data:`EXIT_UNUSABLE` when a
run they wrote is not usable, after writing every folder, naming the runs that are not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.console import Console

from bench.run.end.exit_codes import EXIT_OK, EXIT_UNUSABLE
from bench.run.messages import print_error
from perfmodel.files import JSONView
from results.validity.usability import describe_failures

__all__ = ["exit_code", "is_usable", "print_unusable_runs", "print_verdict"]


def is_usable(verdict: JSONView | None) -> bool:
    """False only for a verdict (summary.json's ``usability``) that says so; None (a summary
    written before verdicts) counts as usable."""
    return verdict is None or bool(verdict.get("usable", True))


def print_verdict(summary: JSONView, console: Console) -> None:
    """Print why the run is not usable and its top causes of failure; nothing for a usable one."""
    verdict = summary.get("usability")
    if isinstance(verdict, Mapping) and not is_usable(verdict):
        for line in describe_failures(verdict):
            print_error(console, line)


def print_unusable_runs(
    console: Console, runs: Sequence[tuple[str, Path, JSONView | None]]
) -> None:
    """Name each run of ``runs`` (label, folder, verdict) that is not usable, with its reasons."""
    bad = [(label, folder, v) for label, folder, v in runs if v is not None and not is_usable(v)]
    if not bad:
        return
    print_error(console, f"{len(bad)} of {len(runs)} runs not usable:")
    for label, folder, verdict in bad:
        print_error(console, f"  {label} ({folder}): {'; '.join(verdict['reasons'])}")


def exit_code(verdicts: Sequence[JSONView | None]) -> int:
    """EXIT_UNUSABLE when any of ``verdicts`` says its run is not usable, else EXIT_OK."""
    return EXIT_OK if all(is_usable(v) for v in verdicts) else EXIT_UNUSABLE
