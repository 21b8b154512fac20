"""The frontier page of `bench frontier`: output tokens/s per GPU (or per CPU core) against
tokens/s per user, several configurations (sweeps) overlaid.

Each configuration's runs are points and its Pareto frontier a line through the points no other
point of it beats on both axes: what it offers. A configuration whose frontier lies above and to
the right of another's gives more tokens per GPU at every speed per user.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import plotly.graph_objects as go

from dashboards.pages.page import Page, Section, html_table, write_page
from dashboards.style import apply_layout, color_for, escape, fmt
from perfmodel.files import JSONView

__all__ = ["build_frontier_page", "write_frontier_page"]


def _figure(configs: Mapping[str, Sequence[JSONView]], per: str) -> go.Figure:
    fig = go.Figure()
    for i, (label, points) in enumerate(configs.items()):
        color = color_for(i)
        fig.add_trace(
            go.Scatter(
                x=[p["per_user_tok_s"] for p in points],
                y=[p["tok_s_per_unit"] for p in points],
                mode="markers",
                name=f"{label}: runs",
                marker={"color": color, "size": 8, "opacity": 0.5},
                hovertext=[escape(p["run_id"]) for p in points],
                hoverinfo="text+x+y",
            )
        )
        front = sorted((p for p in points if p["on_frontier"]), key=lambda p: p["per_user_tok_s"])
        fig.add_trace(
            go.Scatter(
                x=[p["per_user_tok_s"] for p in front],
                y=[p["tok_s_per_unit"] for p in front],
                mode="lines+markers",
                name=f"{label}: frontier",
                line={"color": color, "width": 2},
                marker={"color": color, "size": 10},
                hovertext=[escape(p["run_id"]) for p in front],
                hoverinfo="text+x+y",
            )
        )
    apply_layout(fig, "Throughput against interactivity", 520)
    fig.update_xaxes(title_text="output tokens/s per user (per_user_tps p50)")
    fig.update_yaxes(title_text=f"output tokens/s per {per}")
    return fig


def build_frontier_page(configs: Mapping[str, Sequence[JSONView]]) -> Page:
    """The page of ``configs``: each label's points (results.history.frontier.FrontierPoint as
    dicts: run_id, per_user_tok_s, tok_s_per_unit, per, on_frontier)."""
    pers = sorted({p["per"] for points in configs.values() for p in points}) or ["GPU"]
    rows = [
        [label, p["run_id"], fmt(p["per_user_tok_s"]), fmt(p["tok_s_per_unit"])]
        for label, points in configs.items()
        for p in sorted(points, key=lambda p: p["per_user_tok_s"])
        if p["on_frontier"]
    ]
    header = ["configuration", "run", "tok/s per user", f"tok/s per {' or '.join(pers)}"]
    return Page(
        title="Frontier: tokens per GPU against tokens per user",
        subtitle=f"{len(configs)} configuration(s), {sum(len(p) for p in configs.values())} runs",
        sections=[
            Section(
                "frontier",
                "Output tokens/s per unit against tokens/s per user",
                "Points are runs; lines join each configuration's Pareto frontier.",
                _figure(configs, " or ".join(pers)),
                html=html_table(header, rows),
            )
        ],
    )


def write_frontier_page(page: Page, out: Path) -> Path:
    """Write the frontier page to ``out``; returns its path."""
    return write_page(page, out)
