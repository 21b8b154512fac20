"""The sweep page: one scenario run at several values of one parameter (users, rate, ...).

Input contract (:class:`SweepInput`): the run folders, the varied parameter's name and its value
in each run. Figures: per-user TPS and TTFT against the parameter; throughput against latency
with the knee marked. The knee is the run of maximum *power*, throughput / latency (Kleinrock):
past it, each extra token/s costs proportionally more latency than it adds throughput.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboards.pages.deltas import summary_value
from dashboards.pages.page import Page, Section, html_table, write_page
from dashboards.runview import RunView, load_run_view
from dashboards.style import apply_layout, color_for, escape, fmt, hover_lines

__all__ = ["SweepInput", "build_sweep_page", "knee_index", "write_sweep_report"]


@dataclass(frozen=True)
class SweepInput:
    """A sweep to draw.

    runs: run folders, one per point; values: the parameter's value in each (same order).
    parameter: its name as the x-axis shows it ("users", "rate (req/s)").
    latency: the summary.json figure on the latency axis, (section, statistic) in ms.
    """

    runs: Sequence[Path]
    values: Sequence[float]
    parameter: str
    title: str = ""
    latency: tuple[str, str] = ("e2el_ms", "p50")

    def __post_init__(self) -> None:
        if len(self.runs) != len(self.values):
            raise ValueError(
                f"SweepInput: {len(self.runs)} runs but {len(self.values)} values; "
                "give one value per run"
            )
        if not self.runs:
            raise ValueError("SweepInput: no runs")


def knee_index(throughput: Sequence[float | None], latency: Sequence[float | None]) -> int | None:
    """Index of the point of maximum throughput / latency, or None without a valid point."""
    best, best_power = None, -np.inf
    for i, (x, y) in enumerate(zip(throughput, latency, strict=True)):
        if x is None or y is None or y <= 0:
            continue
        if x / y > best_power:
            best, best_power = i, x / y
    return best


def _line(
    fig: go.Figure,
    x: list[float],
    y: list[float | None],
    name: str,
    color: str,
    row: int,
    col: int,
    dash: str = "solid",
) -> None:
    fig.add_trace(
        go.Scatter(
            x=x,
            y=y,
            mode="lines+markers",
            name=name,
            line={"color": color, "dash": dash},
            hovertemplate=hover_lines([f"<b>{escape(name)}</b>", "%{x:,.4g}: %{y:,.2f}"]),
        ),
        row=row,
        col=col,
    )


def _speed_figure(
    col: Callable[..., list[float | None]], sweep: SweepInput, x: list[float]
) -> go.Figure:
    """Per-user TPS and TTFT percentiles against the swept parameter."""
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=("Per-user TPS (tok/s)", "TTFT (ms)"), horizontal_spacing=0.1
    )
    _line(fig, x, col("per_user_tps", "p50"), "per-user TPS p50", color_for(0), 1, 1)
    _line(
        fig,
        x,
        col("per_user_tps", "p10"),
        "per-user TPS p10 (slow users)",
        color_for(0),
        1,
        1,
        "dot",
    )
    _line(fig, x, col("ttft_ms", "p50"), "TTFT p50", color_for(3), 1, 2)
    _line(fig, x, col("ttft_ms", "p99"), "TTFT p99", color_for(3), 1, 2, "dot")
    fig.update_xaxes(title_text=sweep.parameter)
    fig.update_yaxes(rangemode="tozero")
    apply_layout(fig, f"Per-user TPS and TTFT against {escape(sweep.parameter)}", 420)

    return fig


def _tradeoff_figure(
    col: Callable[..., list[float | None]], sweep: SweepInput, x: list[float]
) -> go.Figure:
    """Throughput against the sweep's latency, each run labelled by its value, with the knee."""
    section, stat = sweep.latency
    throughput, latency = col("throughput", "output_tok_s"), col(section, stat)
    knee = knee_index(throughput, latency)
    tradeoff = go.Figure()
    tradeoff.add_trace(
        go.Scatter(
            x=throughput,
            y=latency,
            mode="lines+markers+text",
            name="runs",
            text=[f"{fmt(v)}" for v in x],
            textposition="top left",
            marker={"size": 9, "color": color_for(0)},
            customdata=[[fmt(v)] for v in x],
            hovertemplate=hover_lines(
                [
                    f"{escape(sweep.parameter)} = %{{customdata[0]}}",
                    "%{x:,.1f} tok/s",
                    f"{section} {stat} %{{y:,.1f}} ms",
                ]
            ),
        )
    )
    if knee is not None:
        tradeoff.add_trace(
            go.Scatter(
                x=[throughput[knee]],
                y=[latency[knee]],
                mode="markers",
                name="knee",
                marker={
                    "symbol": "star",
                    "size": 20,
                    "color": color_for(1),
                    "line": {"color": "black", "width": 1},
                },
                hovertemplate=hover_lines(
                    [
                        f"<b>knee</b>: {escape(sweep.parameter)} = {fmt(x[knee])}",
                        "max throughput / latency",
                    ]
                ),
            )
        )
        tradeoff.add_annotation(
            x=throughput[knee],
            y=latency[knee],
            ax=40,
            ay=-40,
            text=f"knee: {escape(sweep.parameter)} = {fmt(x[knee])}",
        )
    tradeoff.update_xaxes(title_text="output throughput (tok/s)", rangemode="tozero")
    tradeoff.update_yaxes(
        title_text=f"{section.removesuffix('_ms').upper()} {stat} (ms)", rangemode="tozero"
    )
    apply_layout(tradeoff, "Throughput against latency (labels: parameter value; ★ knee)", 460)
    return tradeoff


def sweep_figures(views: Sequence[RunView], sweep: SweepInput, x: list[float]) -> list[go.Figure]:
    """The two sweep figures for runs already sorted by parameter value ``x``."""
    s = [v.summary for v in views]

    def col(*path: str) -> list[float | None]:
        return [summary_value(one, path) for one in s]

    return [_speed_figure(col, sweep, x), _tradeoff_figure(col, sweep, x)]


def build_sweep_page(sweep: SweepInput) -> Page:
    """The sweep page (runs are sorted by parameter value)."""
    order = sorted(range(len(sweep.runs)), key=lambda i: sweep.values[i])
    x = [float(sweep.values[i]) for i in order]
    views = [
        load_run_view(sweep.runs[i], f"{sweep.parameter}={fmt(sweep.values[i])}") for i in order
    ]
    tps_fig, tradeoff = sweep_figures(views, sweep, x)
    header = [
        sweep.parameter,
        "output tok/s",
        "req/s",
        "TPS p50",
        "TPS p10",
        "TTFT p50 ms",
        "TTFT p99 ms",
        "E2EL p50 ms",
        "errors",
        "run",
    ]
    rows = []
    for value, view in zip(x, views, strict=True):
        s = view.summary
        figures = [
            summary_value(s, p)
            for p in (
                ("throughput", "output_tok_s"),
                ("throughput", "requests_per_s"),
                ("per_user_tps", "p50"),
                ("per_user_tps", "p10"),
                ("ttft_ms", "p50"),
                ("ttft_ms", "p99"),
                ("e2el_ms", "p50"),
                ("counts", "all", "error"),
            )
        ]
        rows.append([fmt(value), *(fmt(f) for f in figures), view.run_id])
    notes = [f"{v.label}: {n.text}" for v in views for n in v.notes if n.topic == "run"]
    return Page(
        title=sweep.title or f"Sweep over {sweep.parameter}",
        subtitle=f"{len(views)} runs of one scenario at {sweep.parameter} = "
        + ", ".join(fmt(v) for v in x),
        notes=notes,
        notes_heading="What these runs did not record",
        sections=[
            Section(
                "tps-ttft",
                "Per-user TPS and TTFT",
                "How each user's speed and wait change as the parameter grows.",
                tps_fig,
            ),
            Section(
                "tradeoff",
                "Throughput against latency",
                "The knee is the run of highest throughput per unit of latency: the "
                "operating point beyond which latency grows faster than throughput.",
                tradeoff,
                html=html_table(header, rows),
            ),
        ],
    )


def write_sweep_report(sweep: SweepInput, out: Path) -> Path:
    """Write the sweep page to ``out`` and return its path."""
    return write_page(build_sweep_page(sweep), out)
