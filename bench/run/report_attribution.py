"""Where the time went: the attribution and probe sections of a summary, as rich tables."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from bench.run.report import format_number


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _attribution_table(attr: Mapping[str, Any]) -> Table:
    busy = attr.get("busy_s") or 0.0
    table = Table(
        title=f"Where the engine's time went ({attr.get('steps')} steps, {busy:.2f} s busy)",
        box=box.SIMPLE_HEAD,
    )
    for col in ("phase", "time s", "share", "tokens", "FLOP/byte", "MFU", "MBU"):
        table.add_column(col, justify="left" if col == "phase" else "right")
    for phase in ("prefill", "decode"):
        part = attr.get(phase) or {}
        time_s = part.get("time_s")
        table.add_row(
            phase,
            format_number(time_s),
            _pct(time_s / busy if time_s is not None and busy else None),
            format_number(part.get("tokens")),
            format_number(part.get("arithmetic_intensity")),
            _pct(part.get("mfu")),
            _pct(part.get("mbu")),
        )
    bound = attr.get("bound_time_s") or {}
    if bound:
        compute, memory = bound.get("compute") or 0.0, bound.get("memory") or 0.0
        table.caption = (
            f"compute-bound {compute:.2f} s, memory-bound {memory:.2f} s; overall MFU "
            f"{_pct(attr.get('mfu'))}, MBU {_pct(attr.get('mbu'))}"
        )
    return table


def render_attribution(summary: Mapping[str, Any], console: Console) -> None:
    """Print the attribution, energy and probe notes of a summary; silent on older summaries."""
    attr = summary.get("attribution")
    if isinstance(attr, Mapping):
        if attr.get("available"):
            console.print(_attribution_table(attr))
        else:
            console.print(f"[dim]no time attribution: {attr.get('reason')}[/dim]")
    probes = summary.get("probes")
    if not isinstance(probes, Mapping):
        return
    if not probes.get("available"):
        console.print(f"[dim]no probe readings: {probes.get('reason')}[/dim]")
        return
    energy = probes.get("energy") or {}
    if energy.get("available"):
        console.print(
            f"energy: {format_number(energy.get('joules_per_output_token'))} J per output token, "
            f"mean power {format_number(energy.get('mean_power_w'))} W"
        )
    else:
        console.print(f"[dim]no energy figures: {energy.get('reason')}[/dim]")
