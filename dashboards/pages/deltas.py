"""The table of deltas between runs: each headline figure of each run against the first.

Used by the compare page (an HTML table and a bar chart) and by `bench compare` in the terminal.
Each metric says which direction is better, so a change is marked better or worse, not just
up or down.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from perfmodel.files import JSONView

__all__ = ["COMPARED", "Compared", "DeltaRow", "delta_rows", "summary_value"]

Better = Literal["higher", "lower"]


@dataclass(frozen=True)
class Compared:
    """A figure found at ``path`` in summary.json; ``scale`` converts to ``unit``."""

    path: tuple[str, ...]
    label: str
    unit: str
    better: Better
    scale: float = 1.0


COMPARED: tuple[Compared, ...] = (
    Compared(("throughput", "output_tok_s"), "Output throughput", "tok/s", "higher"),
    Compared(("throughput", "requests_per_s"), "Request throughput", "req/s", "higher"),
    Compared(("goodput", "requests_per_s"), "Goodput", "req/s", "higher"),
    Compared(("per_user_tps", "p50"), "Per-user TPS p50", "tok/s", "higher"),
    Compared(("per_user_tps", "p10"), "Per-user TPS p10", "tok/s", "higher"),
    Compared(("ttft_ms", "p50"), "TTFT p50", "ms", "lower"),
    Compared(("ttft_ms", "p99"), "TTFT p99", "ms", "lower"),
    Compared(("tpot_ms", "p50"), "TPOT p50", "ms", "lower"),
    Compared(("tpot_ms", "p99"), "TPOT p99", "ms", "lower"),
    Compared(("itl_ms", "p50"), "ITL p50", "ms", "lower"),
    Compared(("itl_ms", "p99"), "ITL p99", "ms", "lower"),
    Compared(("e2el_ms", "p50"), "E2EL p50", "ms", "lower"),
    Compared(("e2el_ms", "p99"), "E2EL p99", "ms", "lower"),
    Compared(("counts", "window", "error_rate"), "Error rate", "%", "lower", 100.0),
    Compared(("attribution", "mfu"), "MFU", "%", "higher", 100.0),
    Compared(("attribution", "mbu"), "MBU", "%", "higher", 100.0),
)


@dataclass(frozen=True)
class DeltaRow:
    """One metric across runs: ``values`` in ``unit`` (None: not recorded) and the change of
    each against the first run, in percent (None where either is missing or the base is 0)."""

    metric: Compared
    values: tuple[float | None, ...]
    change_pct: tuple[float | None, ...]

    def verdict(self, index: int) -> str:
        """ "better", "worse" or "" for run ``index`` against the first run."""
        change = self.change_pct[index]
        if change is None or change == 0 or index == 0:
            return ""
        improved = (change > 0) == (self.metric.better == "higher")
        return "better" if improved else "worse"


def summary_value(summary: JSONView, path: Sequence[str]) -> float | None:
    """The number at ``path`` in a summary dict, or None when any step is missing."""
    node: Any = summary
    for part in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    if isinstance(node, bool) or not isinstance(node, int | float):
        return None
    return float(node)


def delta_rows(summaries: Sequence[JSONView]) -> list[DeltaRow]:
    """Rows for every compared metric that at least one run recorded."""
    rows = []
    for metric in COMPARED:
        raw = [summary_value(s, metric.path) for s in summaries]
        if all(v is None for v in raw):
            continue
        values = tuple(None if v is None else v * metric.scale for v in raw)
        base = values[0]
        change = tuple(
            None if v is None or base is None or base == 0 else (v - base) / abs(base) * 100.0
            for v in values
        )
        rows.append(DeltaRow(metric, values, change))
    return rows
