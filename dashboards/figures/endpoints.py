"""A run's parts side by side: a fleet's replicas (several ``bench run --url``), or the models of
a run that sent several (a scenario's ``[[models]]``, LoRA adapters).

Drawn only for a run whose summary.json has ``endpoints`` (results.figures.fleet) or ``models``
(results.figures.models); one color per part, in ``--url`` or ``[[models]]`` order, the same in
every panel. Left: the requests each part took (measured window), with its share. Middle: each
part's output tokens per second of the window. Right: TTFT, ITL and TPOT p50 and p99 per part
(ms), the figures the terminal table prints, so a slow replica or model stands out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboards.definitions import definition
from dashboards.style import apply_layout, color_for, escape, fmt, hover_lines, wrap
from perfmodel.files import JSONView

__all__ = ["endpoints_figure", "models_figure"]

# (summary section, percentile, label): the latency bars of the right panel.
_LATENCIES: tuple[tuple[str, str, str], ...] = (
    ("ttft_ms", "p50", "TTFT p50"),
    ("ttft_ms", "p99", "TTFT p99"),
    ("itl_ms", "p50", "ITL p50"),
    ("itl_ms", "p99", "ITL p99"),
    ("tpot_ms", "p50", "TPOT p50"),
    ("tpot_ms", "p99", "TPOT p99"),
)


def _get(figures: JSONView, section: str, key: str) -> Any:
    part = figures.get(section)
    return part.get(key) if isinstance(part, Mapping) else None


def endpoints_figure(summary: JSONView) -> go.Figure | None:
    """The replicas' figure (module docstring), or None for a run against one endpoint."""
    fleet = summary.get("endpoints")
    if not isinstance(fleet, Mapping) or not fleet.get("by_endpoint"):
        return None
    by_endpoint: Mapping[str, JSONView] = fleet["by_endpoint"]
    title = (
        f"Replicas side by side: {len(by_endpoint)} endpoints, route "
        f"{escape(fleet.get('route') or '–')}"
    )
    return _parts_figure(by_endpoint, title)


def models_figure(summary: JSONView) -> go.Figure | None:
    """The models' figure (module docstring), or None for a run that sent one model."""
    models = summary.get("models")
    if not isinstance(models, Mapping) or not models.get("by_model"):
        return None
    by_model: Mapping[str, JSONView] = models["by_model"]
    return _parts_figure(by_model, f"Models side by side: {len(by_model)} models")


def _parts_figure(parts: Mapping[str, JSONView], title: str) -> go.Figure:
    """The three panels of the module docstring, one color per entry of ``parts``."""
    fig = make_subplots(
        rows=1,
        cols=3,
        column_widths=[0.22, 0.22, 0.56],
        horizontal_spacing=0.07,
        subplot_titles=("Requests (measured window)", "Output tok/s", "Latency (ms)"),
    )
    tok_s = definition("output_tok_s")
    for index, (url, figures) in enumerate(parts.items()):
        color, name = color_for(index), escape(url)
        window = _get(figures, "counts", "window") or {}
        share = figures.get("share")
        share_pct = fmt(None if share is None else share * 100)
        fig.add_trace(
            go.Bar(
                x=[name],
                y=[window.get("requests") or 0],
                marker_color=color,
                name=name,
                legendgroup=name,
                hovertemplate=hover_lines(
                    [
                        f"<b>{name}</b>",
                        f"{fmt(window.get('requests'))} requests, {fmt(window.get('ok'))} ok, "
                        f"{fmt(window.get('error'))} errors",
                        f"share of the run's requests: {share_pct}%",
                    ]
                ),
            ),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Bar(
                x=[name],
                y=[_get(figures, "throughput", "output_tok_s") or 0.0],
                marker_color=color,
                name=name,
                legendgroup=name,
                showlegend=False,
                hovertemplate=hover_lines([f"<b>{name}</b>", "%{y:,.2f} tok/s", wrap(tok_s.text)]),
            ),
            row=1,
            col=2,
        )
        fig.add_trace(
            go.Bar(
                x=[label for _, _, label in _LATENCIES],
                y=[_get(figures, section, key) for section, key, _ in _LATENCIES],
                marker_color=color,
                name=name,
                legendgroup=name,
                showlegend=False,
                hovertemplate=hover_lines([f"<b>{name}</b>", "%{x} = %{y:,.2f} ms"]),
            ),
            row=1,
            col=3,
        )
    fig.update_layout(barmode="group")
    fig.update_xaxes(showticklabels=False, row=1, col=1)
    fig.update_xaxes(showticklabels=False, row=1, col=2)
    apply_layout(fig, title, 420, legend=True)
    return fig
