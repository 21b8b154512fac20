"""The terminal tables of a run's parts: each replica's figures beside the run's totals (a fleet),
and each model's (several models in one run).

Reads summary.json's ``endpoints`` section (results.figures.fleet), which only a run against several
``--url`` has, and its ``models`` section (results.figures.models), which only a run that sent
several models has; without them :func:`endpoints_table` and :func:`models_table` give None and
nothing is printed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich import box
from rich.table import Table

from perfmodel.files import JSONView

__all__ = ["endpoints_table", "models_table"]

# (label, summary section, key): one column each; latencies in ms, rates per second of the
# window.
_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("requests", "counts", "requests"),
    ("ok", "counts", "ok"),
    ("errors", "counts", "error"),
    ("output tok/s", "throughput", "output_tok_s"),
    ("req/s", "throughput", "requests_per_s"),
    ("TTFT p50", "ttft_ms", "p50"),
    ("TTFT p99", "ttft_ms", "p99"),
    ("ITL p50", "itl_ms", "p50"),
    ("TPOT p50", "tpot_ms", "p50"),
    ("TPOT p99", "tpot_ms", "p99"),
)


def _number(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"


def _cells(figures: JSONView) -> list[str]:
    cells = []
    for _, section, key in _COLUMNS:
        part = figures.get(section)
        if section == "counts" and isinstance(part, Mapping):
            part = part.get("window")  # the measured window's, as every other figure
        cells.append(_number(part.get(key) if isinstance(part, Mapping) else None))
    return cells


def _parts_table(title: str, part: str, parts: JSONView, summary: JSONView) -> Table:
    """One row per part (a replica, a model) with its share, then the run's total."""
    table = Table(title=title, box=box.SIMPLE_HEAVY)
    table.add_column(part, style="bold", overflow="fold")
    table.add_column("share", justify="right")
    for label, _, _ in _COLUMNS:
        table.add_column(label, justify="right")
    for name, figures in parts.items():
        share = figures.get("share")
        table.add_row(name, "-" if share is None else f"{share * 100:.1f}%", *_cells(figures))
    table.add_row("total", "100.0%", *_cells(summary), style="bold")
    return table


def endpoints_table(summary: JSONView) -> Table | None:
    """The per-replica table of ``summary``, or None for a run against one endpoint."""
    fleet = summary.get("endpoints")
    if not isinstance(fleet, Mapping):
        return None
    title = f"Per endpoint (route {fleet.get('route') or '-'}; measured window, ms)"
    return _parts_table(title, "endpoint", fleet.get("by_endpoint") or {}, summary)


def models_table(summary: JSONView) -> Table | None:
    """The per-model table of ``summary``, or None for a run that sent one model."""
    models = summary.get("models")
    if not isinstance(models, Mapping):
        return None
    title = "Per model (measured window, ms)"
    return _parts_table(title, "model", models.get("by_model") or {}, summary)
