"""Requests with images: TTFT by image count, and the prompt tokens the images cost.

Drawn only for a run that sent images (summary.json has ``images``,
results.figures.workloads.images). Left: TTFT p50 and p99 of the ok requests at each image
count (0 included where some requests sent none): what the images' prefill and the vision
encoder add before the first token. Right: each ok request's prompt tokens as the server
counted them beyond the text's own (usage.prompt_tokens less the workload tokenizer's count,
from requests.parquet) against its image count; the points of one count lie at the same
height when the server's image cost depends on the count alone (fixed-size images).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboards.definitions import definition
from dashboards.runview import RunView
from dashboards.style import apply_layout, color_for, fmt, hover_lines, wrap
from perfmodel.files import JSONView

__all__ = ["images_figure"]


def _ttft_traces(fig: go.Figure, rows: list[JSONView]) -> None:
    counts = [str(row["images"]) for row in rows]
    requests = [row.get("count") for row in rows]
    meaning = definition("images.ttft_by_images")
    for index, mark in enumerate(("p50", "p99")):
        fig.add_trace(
            go.Bar(
                x=counts, y=[row.get(mark) for row in rows], name=f"TTFT {mark}",
                customdata=requests, marker={"color": color_for(index)},
                hovertemplate=hover_lines([
                    f"<b>TTFT {mark}</b>", "%{x} images: %{y:,.1f} ms",
                    "%{customdata} requests", wrap(meaning.text),
                ]),
            ),
            row=1, col=1,
        )  # fmt: skip


def _excess_trace(fig: go.Figure, view: RunView) -> None:
    req = view.requests
    ok = (req["status"] == "ok").to_numpy()
    usage = req["usage_prompt_tokens"].to_numpy(dtype=np.float64, na_value=np.nan)
    text = req["client_prompt_tokens"].to_numpy(dtype=np.float64, na_value=np.nan)
    excess = (usage - text)[ok]
    counts = req["images"].to_numpy(dtype=np.int64, na_value=0)[ok]
    keep = ~np.isnan(excess)
    meaning = definition("image_tokens_per_image")
    fig.add_trace(
        go.Scatter(
            x=counts[keep], y=excess[keep], mode="markers", name="requests",
            marker={"color": color_for(2), "opacity": 0.6},
            hovertemplate=hover_lines([
                "<b>Prompt tokens beyond the text</b>", "%{x} images: %{y:,.0f} tokens",
                wrap(meaning.text),
            ]),
        ),
        row=1, col=2,
    )  # fmt: skip


def images_figure(view: RunView) -> go.Figure | None:
    """The figure (module docstring), or None for a run that sent no image."""
    section = view.summary.get("images")
    if not isinstance(section, Mapping) or not section.get("ttft_ms_by_images"):
        return None
    rows = list(section["ttft_ms_by_images"])
    fig = make_subplots(
        rows=1, cols=2, horizontal_spacing=0.1,
        subplot_titles=("TTFT by images per request (ms)",
                        "Prompt tokens beyond the text, by images per request"),
    )  # fmt: skip
    _ttft_traces(fig, rows)
    if "images" in view.requests.columns:
        _excess_trace(fig, view)
    fig.update_xaxes(title_text="images per request", type="category", row=1, col=1)
    fig.update_xaxes(title_text="images per request", dtick=1, row=1, col=2)
    fig.update_yaxes(title_text="tokens", rangemode="tozero", row=1, col=2)
    per = section.get("image_tokens_per_image")
    apply_layout(
        fig,
        f"Images: {fmt(section.get('images'))} sent by {fmt(section.get('requests_with_images'))}"
        f" of {fmt(section.get('requests'))} requests; "
        + ("no usage reported" if per is None else f"{fmt(per)} prompt tokens per image"),
        400,
        legend=True,
    )
    return fig
