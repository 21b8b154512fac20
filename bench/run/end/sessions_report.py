"""The terminal table of a run whose requests belong to sessions: the figures per turn.

Reads summary.json's ``sessions`` (results.figures.workloads.sessions), which only runs of agent
sessions or multi-turn chats have; for every other run :func:`sessions_table` gives None.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich import box
from rich.table import Table

from perfmodel.files import JSONView

__all__ = ["sessions_table"]

# The turns shown; summary.json holds every one.
MAX_TURNS_SHOWN = 12


def _number(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.{digits}f}"


def _caption(section: JSONView) -> str:
    per = section.get("per_session") or {}
    turns, duration = per.get("turns") or {}, per.get("duration_s") or {}
    tokens = per.get("prompt_tokens") or {}
    rate = section.get("cache_hit_rate")
    hit = "not reported by the server" if rate is None else f"{rate * 100:.1f}%"
    return (
        f"{_number(per.get('sessions'))} sessions ({_number(per.get('complete'))} complete): "
        f"turns mean {_number(turns.get('mean'))}, duration p50 "
        f"{_number(duration.get('p50'), 2)} s p99 {_number(duration.get('p99'), 2)} s, "
        "prompt tokens per session mean "
        f"{_number(tokens.get('mean'), 0)}; prefix cache hit rate {hit}"
    )


def sessions_table(summary: JSONView) -> Table | None:
    """The per-turn table of ``summary``, or None for a run of no session."""
    section = summary.get("sessions")
    if not isinstance(section, Mapping):
        return None
    rows = list(section.get("by_turn") or [])
    table = Table(title="Per turn of the sessions", box=box.SIMPLE_HEAVY, caption=_caption(section))
    for col in (
        "turn",
        "requests",
        "ok",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "prompt tokens",
        "cache hit",
    ):
        table.add_column(col, justify="right")
    for row in rows[:MAX_TURNS_SHOWN]:
        ttft = row.get("ttft_ms") or {}
        rate = row.get("cache_hit_rate")
        table.add_row(
            str(row.get("turn")), _number(row.get("requests")), _number(row.get("ok")),
            _number(ttft.get("p50")), _number(ttft.get("p99")),
            _number(row.get("prompt_tokens_mean"), 0),
            "-" if rate is None else f"{rate * 100:.1f}%",
        )  # fmt: skip
    if len(rows) > MAX_TURNS_SHOWN:
        table.add_row(f"+{len(rows) - MAX_TURNS_SHOWN}", "more turns in summary.json", *[""] * 5)
    return table
