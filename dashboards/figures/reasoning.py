"""A reasoning model's run: when the answer begins, and how fast it streams, beside the figures
of every generated token.

Drawn only for a run in which some request reasoned (summary.json has ``reasoning``). Left:
CDFs over the measured requests of TTFT (the first token of any kind) and of the time to first
answer token; the horizontal gap between the curves is the reasoning. Right: CDFs of per-user
TPS over every token and of the answer's per-user TPS. Diamonds mark summary.json's p50, p90
and p99, the numbers the terminal prints.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboards.definitions import definition
from dashboards.figures.series import cdf_points
from dashboards.runview import RunView
from dashboards.style import apply_layout, color_for, escape, fmt, hover_lines, wrap
from perfmodel.files import JSONView

__all__ = ["reasoning_figure"]

_MARKS: tuple[str, ...] = ("p50", "p90", "p99")
# (panel, request column, summary section or None for the top level, summary key, unit)
_CURVES: tuple[tuple[int, str, str | None, str, str], ...] = (
    (1, "ttft_ms", None, "ttft_ms", "ms"),
    (1, "time_to_first_answer_token_ms", "reasoning", "time_to_first_answer_token_ms", "ms"),
    (2, "tps", None, "per_user_tps", "tok/s"),
    (2, "answer_tps", "reasoning", "answer_per_user_tps", "tok/s"),
)


def _values(view: RunView, column: str) -> np.ndarray:
    values = view.requests.loc[view.requests["measured"], column]
    array = values.to_numpy(dtype=np.float64, na_value=np.nan)
    return array[~np.isnan(array)]


def _stats(summary: JSONView, section: str | None, key: str) -> JSONView:
    node = summary.get(section) if section else summary
    stats = node.get(key) if isinstance(node, Mapping) else None
    return stats if isinstance(stats, Mapping) else {}


def reasoning_figure(view: RunView) -> go.Figure | None:
    """The figure (module docstring), or None for a run without reasoning."""
    reasoning = view.summary.get("reasoning")
    if not isinstance(reasoning, Mapping):
        return None
    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.1,
        subplot_titles=(
            "TTFT and time to first answer token (ms)",
            "Per-user TPS: every token and the answer (tok/s)",
        ),
    )
    for index, (panel, column, section, key, unit) in enumerate(_CURVES):
        meaning = definition(key)
        color = color_for(index % 2)
        x, p = cdf_points(_values(view, column))
        dash = "solid" if index % 2 else "dot"
        fig.add_trace(
            go.Scatter(
                x=x,
                y=p,
                mode="lines",
                line={"color": color, "width": 2, "shape": "hv", "dash": dash},
                name=meaning.label,
                hovertemplate=hover_lines(
                    [
                        f"<b>{escape(meaning.label)}</b>",
                        f"%{{y:.1%}} ≤ %{{x:,.2f}} {unit}",
                        wrap(meaning.text),
                    ]
                ),
            ),
            row=1,
            col=panel,
        )
        stats = _stats(view.summary, section, key)
        marks = [(m, stats.get(m)) for m in _MARKS if stats.get(m) is not None]
        if marks:
            fig.add_trace(
                go.Scatter(
                    x=[v for _, v in marks],
                    y=[float(m[1:]) / 100.0 for m, _ in marks],
                    mode="markers",
                    marker={"symbol": "diamond", "size": 9, "color": color},
                    text=[m for m, _ in marks],
                    name=f"{meaning.label} percentiles",
                    showlegend=False,
                    hovertemplate=hover_lines(
                        [f"<b>{escape(meaning.label)}</b>", f"%{{text}} = %{{x:,.2f}} {unit}"]
                    ),
                ),
                row=1,
                col=panel,
            )
    share = reasoning.get("reasoning_share")
    fig.update_yaxes(range=[0, 1.02], tickformat=".0%", title_text="fraction ≤ x")
    fig.update_xaxes(rangemode="tozero")
    apply_layout(
        fig,
        f"Reasoning: {fmt(reasoning.get('reasoning_tokens'))} reasoning and "
        f"{fmt(reasoning.get('answer_tokens'))} answer tokens"
        + ("" if share is None else f" ({share * 100:.1f}% reasoning)"),
        420,
        legend=True,
    )
    return fig
