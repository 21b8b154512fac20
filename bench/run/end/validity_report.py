"""The terminal's account of a run's validity: its violations, the token counts side by side,
and the energy split by phase (summary.json's "validity", "token_reconciliation" and
"energy_by_phase"; silent on summaries written before them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from bench.run.messages import print_note, print_warning
from bench.run.terminal import print_table
from perfmodel.files import JSONView
from results.figures.energy_phase import energy_phase_line
from results.validity.run_validity import violation_lines

__all__ = ["render_energy_by_phase", "render_reconciliation", "render_violations"]


def render_violations(summary: JSONView, console: Console) -> None:
    """One warning per violation; a busy machine is said by results.figures.machine_load's own
    line."""
    for line in violation_lines(summary, skip=("busy",)):
        print_warning(console, f"not a valid measurement: {line}")
    for note in (summary.get("validity") or {}).get("notes") or []:
        print_note(console, note)


def _number(value: Any) -> str:
    return "-" if value is None else f"{value:,}"


def reconciliation_table(section: JSONView) -> Table:
    """The comparisons of results.validity.token_reconciliation, one row each."""
    table = Table(title="Token counts, by who counted", box=box.SIMPLE_HEAD)
    for col in ("tokens", "counted by", "requests", "count", "server's usage", "ratio", "off"):
        table.add_column(col, justify="left" if col in ("tokens", "counted by") else "right")
    for c in section.get("comparisons") or []:
        ratio = c.get("ratio")
        mark = " !" if c.get("exceeds") else ("" if c.get("judged") else " (not judged)")
        off = c.get("requests_off")
        table.add_row(
            str(c.get("what")),
            str((c.get("counted_by") or ["?"])[0]),
            _number(c.get("requests")),
            _number(c.get("other_total")),
            _number(c.get("server_total")),
            ("-" if ratio is None else f"{ratio:.3f}") + mark,
            "-" if off is None else f"{off:,}",
        )
    lines = []
    share = section.get("max_mismatch")
    if share is not None:
        lines.append(
            f"! = the run is marked: more than {100 * share:.0f}% of the requests off, or a "
            f"counter's total more than {100 * share:.0f}% apart; off = requests whose counts "
            f"differ by more than {100 * section.get('request_tolerance', 0):.0f}% (and 2 tokens)"
        )
    # Why a row is not judged, in its own words: a first run's chat prompts read "ratio 1.145
    # (not judged)" with nothing to say that 14.5% is the chat template's tokens.
    lines += [
        f"{c.get('what')}, not judged: {c['note']}"
        for c in section.get("comparisons") or []
        if c.get("note") and not c.get("judged")
    ]
    table.caption = "\n".join(lines) or None
    return table


def render_reconciliation(summary: JSONView, console: Console) -> None:
    """The token counts table, or why there is none."""
    section = summary.get("token_reconciliation")
    if not isinstance(section, Mapping):
        return
    if not section.get("available"):
        print_note(console, f"no token reconciliation: {section.get('reason')}")
        return
    print_table(console, reconciliation_table(section))


def render_energy_by_phase(summary: JSONView, console: Console) -> None:
    """Joules per prefill and decode token, and goodput per watt, in one line."""
    line = energy_phase_line(summary.get("energy_by_phase"))
    if line is not None:
        console.print(line)
