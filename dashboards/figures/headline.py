"""The headline: a run's key figures as tiles, each with its definition on hover.

Tiles come from summary.json alone (plus summary["attribution"] MFU/MBU when the probes wrote
them), so the headline agrees with the terminal summary to the last digit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from dashboards.definitions import definition
from dashboards.style import apply_layout, escape, fmt, wrap
from perfmodel.files import JSONView

__all__ = ["Tile", "headline_figure", "headline_tiles", "utilization_missing"]

_COLUMNS = 4
_ROW_HEIGHT_PX = 96


@dataclass(frozen=True)
class Tile:
    """One headline figure: ``key`` picks its definition; ``detail`` is a second, smaller line."""

    key: str
    label: str
    value: str
    detail: str
    # Why the figure is missing, shown on hover (its short form is ``detail``).
    why: str = ""


def _get(summary: JSONView, *path: str) -> Any:
    node: Any = summary
    for part in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def _latency_tile(summary: JSONView, key: str) -> Tile:
    stats = summary.get(key) or {}
    label = definition(key).label
    return Tile(
        key,
        f"{label} p50",
        f"{fmt(stats.get('p50'))} ms",
        f"p90 {fmt(stats.get('p90'))} · p99 {fmt(stats.get('p99'))} ms",
    )


def _goodput_tile(goodput: JSONView) -> Tile:
    if not goodput.get("slo"):
        return Tile("goodput", "Goodput", "no SLO", "the scenario set no [slo] targets")
    targets = ", ".join(f"{k} ≤ {fmt(v)}" for k, v in goodput["slo"].items())
    fraction = goodput.get("good_fraction")
    share = "–" if fraction is None else f"{fraction * 100:.1f}%"
    return Tile(
        "goodput",
        "Goodput",
        f"{fmt(goodput.get('requests_per_s'))} req/s",
        f"{share} meet {targets}",
    )


def _utilization_tiles(summary: JSONView) -> list[Tile]:
    """MFU and MBU of the whole run, or "–" with why they could not be computed."""
    attribution = summary.get("attribution") or {}
    why = utilization_missing(summary)
    tiles = []
    for key in ("mfu", "mbu"):
        value = attribution.get(key)
        if isinstance(value, int | float):
            tiles.append(Tile(key, definition(key).label, f"{value * 100:.3g}%", "whole run"))
        elif why:
            short = why.split(":", 1)[0]
            tiles.append(Tile(key, definition(key).label, "–", short, why))
    return tiles


def _pooling_tiles(summary: JSONView, pooling: JSONView) -> list[Tile]:
    """A pooling run's tiles (embeddings, rerank): no token figure, since none was generated."""
    counts = _get(summary, "counts", "window") or {}
    rate = counts.get("error_rate")
    return [
        Tile(
            "requests_per_s",
            "Request throughput",
            f"{fmt(pooling.get('requests_per_s'))} req/s",
            f"{fmt(counts.get('ok'))} ok in {fmt(_get(summary, 'window', 'duration_s'))} s",
        ),
        Tile(
            "inputs_per_s",
            "Input throughput",
            f"{fmt(pooling.get('inputs_per_s'))} inputs/s",
            f"{fmt(pooling.get('inputs_per_request'))} inputs per request",
        ),
        Tile(
            "input_tok_s",
            "Input token throughput",
            f"{fmt(pooling.get('input_tok_s'))} tok/s",
            f"{fmt(pooling.get('input_tokens'))} input tokens",
        ),
        _goodput_tile(summary.get("goodput") or {}),
        _latency_tile(summary, "e2el_ms"),
        Tile(
            "error_rate",
            "Errors",
            "–" if rate is None else f"{rate * 100:.1f}%",
            f"{fmt(counts.get('error'))} failed of {fmt(counts.get('requests'))}",
        ),
    ]


def headline_tiles(summary: JSONView) -> list[Tile]:
    """The tiles of a summary, in reading order; missing figures show as "–"."""
    pooling = summary.get("pooling")
    if isinstance(pooling, Mapping):
        return _pooling_tiles(summary, pooling) + _utilization_tiles(summary)
    rates = summary.get("throughput") or {}
    counts = _get(summary, "counts", "window") or {}
    tokens = summary.get("tokens") or {}
    tps = summary.get("per_user_tps") or {}
    goodput = summary.get("goodput") or {}
    tiles = [
        Tile(
            "output_tok_s",
            "Output throughput",
            f"{fmt(rates.get('output_tok_s'))} tok/s",
            f"total {fmt(rates.get('total_tok_s'))} tok/s",
        ),
        Tile(
            "requests_per_s",
            "Request throughput",
            f"{fmt(rates.get('requests_per_s'))} req/s",
            f"{fmt(counts.get('ok'))} ok in {fmt(_get(summary, 'window', 'duration_s'))} s",
        ),
        Tile(
            "per_user_tps",
            "Per-user TPS p50",
            f"{fmt(tps.get('p50'))} tok/s",
            f"slowest 10% ≤ {fmt(tps.get('p10'))} · fastest {fmt(tps.get('max'))}",
        ),
    ]
    tiles.append(_goodput_tile(goodput))
    tiles += [_latency_tile(summary, k) for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")]
    rate = counts.get("error_rate")
    tiles.append(
        Tile(
            "error_rate",
            "Errors",
            "–" if rate is None else f"{rate * 100:.1f}%",
            f"{fmt(counts.get('error'))} failed · {fmt(counts.get('cancelled'))} cancelled"
            f" of {fmt(counts.get('requests'))}",
        )
    )
    tiles.append(
        Tile(
            "output_tokens",
            "Output tokens",
            fmt(tokens.get("output_tokens")),
            f"from {tokens.get('output_tokens_source') or '–'}; "
            f"prompt {fmt(tokens.get('prompt_tokens'))}",
        )
    )
    tiles += _reasoning_tiles(summary)
    tiles += _tool_call_tiles(summary) + _image_tiles(summary)
    energy = _get(summary, "probes", "energy") or {}
    if energy.get("available"):
        tiles.append(
            Tile(
                "joules_per_output_token",
                "Energy per output token",
                f"{fmt(energy.get('joules_per_output_token'))} J",
                f"mean power {fmt(energy.get('mean_power_w'))} W, {fmt(energy.get('gpus'))} GPU(s)",
            )
        )
    return tiles + _utilization_tiles(summary)


def utilization_missing(summary: JSONView) -> str | None:
    """Why summary.json has no MFU and MBU (its attribution's ``mfu_reason``, or why there is no
    attribution); None when it has them, or when the summary predates the attribution."""
    attribution = summary.get("attribution")
    if not isinstance(attribution, Mapping):
        return None
    if not attribution.get("available"):
        return f"no time attribution: {attribution.get('reason')}"
    if isinstance(attribution.get("mfu"), int | float):
        return None
    return str(attribution.get("mfu_reason") or "summary.json gives no reason (an older summary)")


def _reasoning_tiles(summary: JSONView) -> list[Tile]:
    """A reasoning model's run only: the reasoning share and the time to first answer token."""
    reasoning = summary.get("reasoning")
    if not isinstance(reasoning, Mapping):
        return []
    share = reasoning.get("reasoning_share")
    ttfat = reasoning.get("time_to_first_answer_token_ms") or {}
    key = "time_to_first_answer_token_ms"
    return [
        Tile(
            "reasoning_share",
            "Reasoning share",
            "–" if share is None else f"{share * 100:.1f}%",
            f"{fmt(reasoning.get('reasoning_tokens'))} reasoning · "
            f"{fmt(reasoning.get('answer_tokens'))} answer tokens",
        ),
        Tile(
            key,
            f"{definition(key).label} p50",
            f"{fmt(ttfat.get('p50'))} ms",
            f"p90 {fmt(ttfat.get('p90'))} · p99 {fmt(ttfat.get('p99'))} ms",
        ),
    ]


def _tool_call_tiles(summary: JSONView) -> list[Tile]:
    """A run that offered or called tools only: the requests that called, and the calls."""
    tools = summary.get("tool_calls")
    if not isinstance(tools, Mapping):
        return []
    share = tools.get("share")
    per = tools.get("calls_per_calling_request") or {}
    ttft = tools.get("ttft_ms_calling") or {}
    return [
        Tile(
            "tool_calls",
            "Requests with tool calls",
            "–" if share is None else f"{share * 100:.1f}%",
            f"{fmt(tools.get('requests_with_tool_calls'))} of {fmt(tools.get('requests'))} · "
            f"{fmt(tools.get('tool_calls'))} calls, {fmt(per.get('mean'))} per calling request",
        ),
        Tile(
            "ttft_ms_calling",
            "TTFT of tool-calling requests p50",
            f"{fmt(ttft.get('p50'))} ms",
            f"others p50 {fmt((tools.get('ttft_ms_not_calling') or {}).get('p50'))} ms",
        ),
    ]


def _image_tiles(summary: JSONView) -> list[Tile]:
    """A run that sent images only: the images sent, and the prompt tokens one costs."""
    images = summary.get("images")
    if not isinstance(images, Mapping):
        return []
    net = images.get("tokens_per_image")
    return [
        Tile(
            "images",
            "Images sent",
            fmt(images.get("images")),
            f"by {fmt(images.get('requests_with_images'))} of {fmt(images.get('requests'))} "
            f"requests, {fmt(images.get('images_per_request'))} each",
        ),
        Tile(
            "image_tokens_per_image",
            "Prompt tokens per image",
            fmt(images.get("image_tokens_per_image")),
            "server usage beyond the text"
            + ("" if net is None else f"; {fmt(net)} less the chat template's"),
        ),
    ]


def _hover(tile: Tile) -> str:
    meaning = definition(tile.key)
    lines = [f"<b>{escape(tile.label)}</b>: {escape(tile.value)}"]
    if tile.why:
        lines.append(wrap(tile.why))
    if meaning.text:
        lines.append(wrap(meaning.text))
    return "<br>".join(lines)


def headline_figure(summary: JSONView) -> go.Figure:
    """Tiles on a grid; hovering anywhere on a tile shows its definition."""
    tiles = headline_tiles(summary)
    rows = -(-len(tiles) // _COLUMNS)
    fig = go.Figure()
    xs, ys = [], []
    for i, tile in enumerate(tiles):
        col, row = i % _COLUMNS, i // _COLUMNS
        x0, y0 = col, -row
        fig.add_shape(
            type="rect",
            x0=x0 + 0.03,
            x1=x0 + 0.97,
            y0=y0 - 0.95,
            y1=y0 - 0.05,
            line={"color": "#d0d7de", "width": 1},
            fillcolor="#f6f8fa",
            layer="below",
        )
        for dy, text, size, color in (
            (-0.2, tile.label, 12, "#57606a"),
            (-0.5, f"<b>{escape(tile.value)}</b>", 20, "#1f2328"),
            (-0.8, tile.detail, 11, "#57606a"),
        ):
            fig.add_annotation(
                x=x0 + 0.5,
                y=y0 + dy,
                text=text if size == 20 else escape(text),
                showarrow=False,
                font={"size": size, "color": color},
            )
        xs.append(x0 + 0.5)
        ys.append(y0 - 0.5)
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=ys,
            mode="markers",
            marker={"size": 40, "color": "rgba(0,0,0,0)"},
            hovertext=[_hover(t) for t in tiles],
            hoverinfo="text",
            name="headline",
            showlegend=False,
        )
    )
    axis = {"visible": False, "fixedrange": True}
    fig.update_xaxes(range=[0, _COLUMNS], **axis)
    fig.update_yaxes(range=[-rows, 0], **axis)
    apply_layout(
        fig,
        "Headline (measured window; hover a tile for its definition)",
        rows * _ROW_HEIGHT_PX + 70,
        legend=False,
    )
    # Closest tile center wins wherever the pointer is, so the whole tile is the hover target.
    fig.update_layout(hovermode="closest", hoverdistance=-1, margin={"l": 10, "r": 10, "b": 10})
    return fig
