"""Per-user TPS: the speed each user sees (1 / TPOT), across requests and across users.

Left: the CDF over measured requests, with summary.json's p10, p50 and p90 marked (the slow
tail is what a mean hides). Right: users ranked by their mean TPS, fastest first, so one
glance tells whether load is shared evenly; past :data:`RANKING_POINTS` users, that many
ranks evenly spaced (the fastest and the slowest kept), the hover saying how many of how many.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboards.definitions import definition
from dashboards.figures.series import cdf_points
from dashboards.runview import RunView
from dashboards.style import apply_layout, color_for, escape, hover_lines, wrap

__all__ = ["per_user_tps_figure", "user_ranking"]

_MARKS: tuple[str, ...] = ("p10", "p50", "p90")
# The most users the ranking draws: a page stays small however many users the run had.
RANKING_POINTS = 2000


def user_ranking(view: RunView) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(user ids, mean TPS, requests) of measured requests per user, fastest first."""
    req = view.requests[view.requests["measured"]].dropna(subset=["tps"])
    if req.empty:
        empty = np.zeros(0)
        return empty.astype(np.int64), empty, empty.astype(np.int64)
    grouped = req.groupby("user_id")["tps"].agg(["mean", "count"])
    grouped = grouped.sort_values("mean", ascending=False, kind="mergesort")
    return (
        grouped.index.to_numpy(dtype=np.int64),
        grouped["mean"].to_numpy(dtype=np.float64),
        grouped["count"].to_numpy(dtype=np.int64),
    )


def _cdf_trace(view: RunView, color: str, meaning_text: str) -> go.Scatter:
    tps = view.requests.loc[view.requests["measured"], "tps"].to_numpy(
        dtype=np.float64, na_value=np.nan
    )
    x, p = cdf_points(tps)
    return go.Scatter(
        x=x,
        y=p,
        mode="lines",
        name=view.label,
        legendgroup=view.label,
        line={"color": color, "width": 2, "shape": "hv"},
        hovertemplate=hover_lines(
            [
                f"<b>{escape(view.label)}</b>",
                "%{y:.1%} of requests ≤ %{x:,.2f} tok/s",
                wrap(meaning_text),
            ]
        ),
    )


def _marks_trace(view: RunView, color: str) -> go.Scatter | None:
    """summary.json's per-user TPS percentiles as diamonds on the CDF (None if it has none)."""
    stats = view.summary.get("per_user_tps") or {}
    marks = [(m, stats.get(m)) for m in _MARKS if stats.get(m) is not None]
    if not marks:
        return None
    return go.Scatter(
        x=[v for _, v in marks],
        y=[float(m[1:]) / 100 for m, _ in marks],
        mode="markers+text",
        text=[m for m, _ in marks],
        textposition="middle right",
        textfont={"size": 10, "color": color},
        showlegend=False,
        marker={"symbol": "diamond", "size": 9, "color": color},
        legendgroup=view.label,
        name=f"{view.label} percentiles",
        hovertemplate=hover_lines([f"<b>{escape(view.label)}</b>", "%{text} = %{x:,.2f} tok/s"]),
    )


def _drawn_ranks(n: int) -> np.ndarray:
    """Which of ``n`` ranks (0-based) the ranking draws: every one up to :data:`RANKING_POINTS`,
    else that many evenly spaced, the fastest and the slowest always kept."""
    max_points = RANKING_POINTS
    if n <= max_points:
        return np.arange(n)
    return np.unique(np.round(np.linspace(0, n - 1, max_points)).astype(np.int64))


def _ranking_trace(view: RunView, color: str) -> go.Scatter:
    users, mean_tps, counts = user_ranking(view)
    total = users.size
    drawn = _drawn_ranks(total)
    users, mean_tps, counts = users[drawn], mean_tps[drawn], counts[drawn]
    shown = f"rank %{{x}} of {total:,} users" + (
        f" ({drawn.size:,} ranks drawn)" if drawn.size < total else ""
    )
    return go.Scatter(
        x=drawn + 1,
        y=mean_tps,
        mode="lines+markers",
        marker={"size": 5, "color": color},
        line={"color": color, "width": 1},
        name=view.label,
        legendgroup=view.label,
        showlegend=False,
        customdata=np.stack([users, counts], axis=1) if users.size else None,
        hovertemplate=hover_lines(
            [
                f"<b>{escape(view.label)}</b>",
                f"{shown}: user %{{customdata[0]}}",
                "mean %{y:,.2f} tok/s over %{customdata[1]} requests",
            ]
        ),
    )


def per_user_tps_figure(views: Sequence[RunView]) -> go.Figure:
    """CDF of per-request TPS and the per-user ranking, one color per run."""
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("Per-user TPS across requests (CDF)", "Users ranked by mean TPS"),
        horizontal_spacing=0.1,
    )
    meaning = definition("per_user_tps")
    for index, view in enumerate(views):
        color = color_for(index)
        fig.add_trace(_cdf_trace(view, color, meaning.text), row=1, col=1)
        if (marks := _marks_trace(view, color)) is not None:
            fig.add_trace(marks, row=1, col=1)
        fig.add_trace(_ranking_trace(view, color), row=1, col=2)
    fig.update_xaxes(title_text="tokens/s per request", row=1, col=1)
    fig.update_yaxes(title_text="fraction ≤ x", tickformat=".0%", range=[0, 1.02], row=1, col=1)
    fig.update_xaxes(title_text="user rank (fastest first)", row=1, col=2)
    fig.update_yaxes(title_text="mean tokens/s", rangemode="tozero", row=1, col=2)
    apply_layout(
        fig,
        "Per-user TPS (1 / TPOT; measured window; ◆ p10 / p50 / p90)",
        420,
        legend=len(views) > 1,
    )
    return fig
