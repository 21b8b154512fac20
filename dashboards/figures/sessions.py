"""Agent sessions and multi-turn chats: the figures per turn and per session.

Drawn only for a run whose requests belong to sessions (summary.json has ``sessions``,
results.figures.workloads.sessions). Left: TTFT p50 and p99 by turn index, which grow as the
history does unless the prefix cache holds it. Middle: the mean prompt tokens by turn, split
into those the prefix cache served and those prefilled (where the server reported cached
tokens), with the hit rate on hover. Right: the CDF of the sessions' whole durations (first
turn due to last turn done, delays included), from requests.parquet.
"""

from __future__ import annotations

from collections.abc import Mapping

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboards.definitions import definition
from dashboards.figures.series import cdf_points
from dashboards.runview import RunView
from dashboards.style import apply_layout, color_for, fmt, hover_lines, wrap
from perfmodel.files import JSONView
from results.figures.workloads.sessions import session_durations

__all__ = ["sessions_figure"]


def _ttft_traces(fig: go.Figure, rows: list[JSONView]) -> None:
    turns = [row["turn"] for row in rows]
    meaning = definition("sessions.ttft_by_turn")
    for index, mark in enumerate(("p50", "p99")):
        fig.add_trace(
            go.Scatter(
                x=turns, y=[(row.get("ttft_ms") or {}).get(mark) for row in rows],
                mode="lines+markers", name=f"TTFT {mark}",
                line={"color": color_for(index), "dash": "solid" if index else "dot"},
                hovertemplate=hover_lines(
                    [f"<b>TTFT {mark}</b>", "turn %{x}: %{y:,.1f} ms", wrap(meaning.text)]
                ),
            ),
            row=1, col=1,
        )  # fmt: skip


def _token_traces(fig: go.Figure, rows: list[JSONView]) -> None:
    turns = [row["turn"] for row in rows]
    ok = [max(int(row.get("ok") or 0), 1) for row in rows]
    means = [row.get("prompt_tokens_mean") or 0.0 for row in rows]
    cached = [(row.get("cached_tokens") or 0) / n for row, n in zip(rows, ok, strict=True)]
    rates = [row.get("cache_hit_rate") for row in rows]
    hit = [f"{r * 100:.1f}%" if r is not None else "not reported" for r in rates]
    meaning = definition("sessions.cache_hit_rate")
    prefilled = [m - c for m, c in zip(means, cached, strict=True)]
    for index, (name, values) in enumerate((("prefix cache", cached), ("prefilled", prefilled))):
        fig.add_trace(
            go.Bar(
                x=turns, y=values, name=name, customdata=hit,
                marker={"color": color_for(index + 2)},
                hovertemplate=hover_lines([
                    f"<b>{name}</b>", "turn %{x}: %{y:,.0f} tokens a request",
                    "cache hit rate %{customdata}", wrap(meaning.text),
                ]),
            ),
            row=1, col=2,
        )  # fmt: skip


def sessions_figure(view: RunView) -> go.Figure | None:
    """The figure (module docstring), or None for a run of no session."""
    section = view.summary.get("sessions")
    if not isinstance(section, Mapping) or not section.get("by_turn"):
        return None
    rows = list(section["by_turn"])
    fig = make_subplots(
        rows=1, cols=3, horizontal_spacing=0.08,
        subplot_titles=("TTFT by turn (ms)", "Prompt tokens by turn (mean a request)",
                        "Session duration (s)"),
    )  # fmt: skip
    _ttft_traces(fig, rows)
    _token_traces(fig, rows)
    x, p = cdf_points(session_durations(view.requests))
    meaning = definition("sessions.duration_s")
    fig.add_trace(
        go.Scatter(
            x=x, y=p, mode="lines", name="sessions", line={"color": color_for(4), "shape": "hv"},
            hovertemplate=hover_lines(
                ["<b>Session duration</b>", "%{y:.1%} ≤ %{x:,.2f} s", wrap(meaning.text)]
            ),
        ),
        row=1, col=3,
    )  # fmt: skip
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title_text="turn", dtick=1, row=1, col=1)
    fig.update_xaxes(title_text="turn", dtick=1, row=1, col=2)
    fig.update_xaxes(title_text="seconds", rangemode="tozero", row=1, col=3)
    fig.update_yaxes(range=[0, 1.02], tickformat=".0%", title_text="fraction ≤ x", row=1, col=3)
    per = section.get("per_session") or {}
    rate = section.get("cache_hit_rate")
    apply_layout(
        fig,
        f"Sessions: {fmt(per.get('sessions'))}, {fmt(len(rows))} turn indices; prefix cache "
        + ("hit rate not reported" if rate is None else f"hit rate {rate * 100:.1f}%"),
        420,
        legend=True,
    )
    return fig
