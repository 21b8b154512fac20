"""Latency distributions as CDFs: TTFT, ITL, TPOT and E2EL, with p50, p90 and p99 marked.

Curves are drawn from the measured requests' own values, thinned to at most CDF_POINTS points
(ITL's from tokens.parquet where it lies, in bounded memory); the exact percentile marks come
from summary.json, the same numbers the terminal summary prints.
The same builder overlays several runs (``bench compare``): one color per run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboards.definitions import definition
from dashboards.figures.series import cdf_points
from dashboards.runview import CDF_POINTS, RunView
from dashboards.style import apply_layout, color_for, escape, fmt, hover_lines, top_right_menu, wrap

__all__ = ["LATENCY_KEYS", "latency_cdf_figure", "latency_values"]

LATENCY_KEYS: tuple[str, ...] = ("ttft_ms", "itl_ms", "tpot_ms", "e2el_ms")
MARKED_PERCENTILES: tuple[str, ...] = ("p50", "p90", "p99")


def latency_values(view: RunView, key: str) -> np.ndarray:
    """The measured requests' values of ``key`` (ms), one per request (ITL, one per token,
    is drawn from RunView.itl_cdf instead)."""
    column = view.requests.loc[view.requests["measured"], key]
    values = column.to_numpy(dtype=np.float64, na_value=np.nan)
    return values[~np.isnan(values)]


def _add_marks(fig: go.Figure, view: RunView, key: str, color: str, row: int, col: int) -> None:
    stats = view.summary.get(key) or {}
    xs = [stats.get(p) for p in MARKED_PERCENTILES]
    ys = [float(p[1:]) / 100.0 for p in MARKED_PERCENTILES]
    keep = [i for i, x in enumerate(xs) if x is not None]
    if not keep:
        return
    fig.add_trace(
        go.Scatter(
            x=[xs[i] for i in keep],
            y=[ys[i] for i in keep],
            mode="markers+text",
            text=[MARKED_PERCENTILES[i] for i in keep],
            textposition="middle right",
            textfont={"size": 10, "color": color},
            marker={
                "symbol": "diamond",
                "size": 9,
                "color": color,
                "line": {"width": 1, "color": "white"},
            },
            name=f"{view.label} percentiles",
            legendgroup=view.label,
            showlegend=False,
            hovertemplate=hover_lines([f"<b>{escape(view.label)}</b>", "%{text} = %{x:,.2f} ms"]),
        ),
        row=row,
        col=col,
    )


def latency_cdf_figure(views: Sequence[RunView]) -> go.Figure:
    """A 2×2 grid of CDFs (x: milliseconds, y: fraction of requests or tokens ≤ x); E2EL alone
    where no run has token figures (a pooling run's summary.json leaves them out)."""
    keys = [k for k in LATENCY_KEYS if any(k in v.summary for v in views) or not views]
    keys = keys or ["e2el_ms"]
    titles = [
        f"{definition(k).label} (ms) — n = "
        + " / ".join(fmt((v.summary.get(k) or {}).get("count")) for v in views)
        for k in keys
    ]
    rows, cols = -(-len(keys) // 2), min(2, len(keys))
    fig = make_subplots(
        rows=rows, cols=cols, subplot_titles=titles, horizontal_spacing=0.08,
        vertical_spacing=0.14,
    )  # fmt: skip
    for index, view in enumerate(views):
        color = color_for(index)
        for k, key in enumerate(keys):
            row, col = k // 2 + 1, k % 2 + 1
            if key == "itl_ms":  # one value per token: thinned where it lies
                x, p = view.itl_cdf()
            else:
                x, p = cdf_points(latency_values(view, key), CDF_POINTS)
            meaning = definition(key)
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=p,
                    mode="lines",
                    line={"color": color, "width": 2, "shape": "hv"},
                    name=view.label,
                    legendgroup=view.label,
                    showlegend=k == 0 and len(views) > 1,
                    hovertemplate=hover_lines(
                        [
                            f"<b>{escape(view.label)}</b> {meaning.label}",
                            "%{y:.1%} ≤ %{x:,.2f} ms",
                            wrap(meaning.text),
                        ]
                    ),
                ),
                row=row,
                col=col,
            )
            _add_marks(fig, view, key, color, row, col)
    fig.update_yaxes(range=[0, 1.02], tickformat=".0%", title_text="fraction ≤ x")
    fig.update_xaxes(title_text="ms", rangemode="tozero")
    apply_layout(
        fig,
        "Latency distributions (measured window; ◆ p50 / p90 / p99)",
        320 * rows,
        legend=len(views) > 1,
    )
    axes = [f"xaxis{i if i > 1 else ''}.type" for i in range(1, len(keys) + 1)]
    buttons = [
        {"label": f"{kind} x", "method": "relayout", "args": [dict.fromkeys(axes, kind)]}
        for kind in ("linear", "log")
    ]
    top_right_menu(fig, {"type": "buttons", "direction": "right", "buttons": buttons})
    return fig
