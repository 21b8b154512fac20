"""The terminal table of a reasoning model's run: the answer's latency beside the reasoning.

Reads summary.json's ``reasoning`` section (results.figures.summary), which only runs in which some
request reasoned have; for every other run :func:`reasoning_table` gives None and nothing is
printed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich import box
from rich.table import Table

from perfmodel.files import JSONView

__all__ = ["reasoning_table"]

# Percentiles that both the latency and the per-user TPS distributions carry.
_KEYS = ("mean", "p50", "p90", "p99", "max")
# (section, key, label): the reasoning section's distributions, TTFT beside them to compare.
_ROWS: tuple[tuple[str | None, str, str], ...] = (
    (None, "ttft_ms", "TTFT, first token of any kind (ms)"),
    ("reasoning", "time_to_first_answer_token_ms", "Time to first answer token (ms)"),
    ("reasoning", "answer_tpot_ms", "Answer TPOT (ms)"),
    ("reasoning", "answer_per_user_tps", "Answer per-user TPS (tok/s)"),
    ("reasoning", "reasoning_tokens_per_request", "Reasoning tokens per request"),
    ("reasoning", "answer_tokens_per_request", "Answer tokens per request"),
)


def _number(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"


def reasoning_table(summary: JSONView) -> Table | None:
    """The reasoning table of ``summary``, or None for a run without reasoning."""
    reasoning = summary.get("reasoning")
    if not isinstance(reasoning, Mapping):
        return None
    share = reasoning.get("reasoning_share")
    by_source = reasoning.get("requests_by_reasoning_tokens_source") or {}
    sources = ", ".join(f"{name} ({count} requests)" for name, count in by_source.items())
    table = Table(
        title=(
            f"Reasoning: {_number(reasoning.get('reasoning_tokens'))} reasoning tokens "
            f"({'-' if share is None else f'{share * 100:.1f}%'} of output), "
            f"{_number(reasoning.get('answer_tokens'))} answer tokens"
        ),
        box=box.SIMPLE_HEAVY,
        caption=(
            f"{_number(reasoning.get('requests_with_reasoning'))} requests reasoned; reasoning "
            f"tokens counted by {sources or '-'}"
        ),
    )
    table.add_column("metric (ok requests)", style="bold")
    table.add_column("n", justify="right")
    for key in _KEYS:
        table.add_column(key, justify="right")
    for section, key, label in _ROWS:
        source = reasoning if section else summary
        stats = source.get(key)
        stats = stats if isinstance(stats, Mapping) else {}
        table.add_row(label, _number(stats.get("count")), *(_number(stats.get(k)) for k in _KEYS))
    return table
