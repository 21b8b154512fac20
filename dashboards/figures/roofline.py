"""The roofline figure: one set of plotting code for `bench roofline` and the run dashboard.

Left (log-log): arithmetic intensity (FLOP/byte) against FLOP/s. A roof is
min(peak FLOP/s, intensity × peak bytes/s) (perfmodel.roofs); the ridge point is where the two
meet. The first roof is drawn solid, others (another compute dtype) dashed.

- :func:`analytic_roofline_figure` (`bench roofline`): analytic prefill and decode points, each
  at its intensity and at the FLOP/s the roofline lets it reach.
- :func:`roofline_figure` (the run dashboard, inputs from
:mod:`dashboards.figures.roofline_inputs`):
  each step a faint dot, the prefill and decode parts of all steps (results.figures.attribution)
  large
  ones sized by their share of step time, at their achieved FLOP/s over executor time; right,
  where the step time went: prefill vs decode, memory- vs compute-bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboards.definitions import definition
from dashboards.figures.roofline_inputs import PhasePoint, RooflineInputs
from dashboards.style import PHASE_COLORS, apply_layout, escape, fmt, hover_lines, wrap
from perfmodel.files import JSONObject
from perfmodel.roofs import Roofs

__all__ = [
    "MAX_STEP_DOTS",
    "RooflinePoint",
    "analytic_roofline_figure",
    "roof_labels",
    "roofline_figure",
    "si_rate",
    "write_figure_html",
]

MAX_STEP_DOTS = 3000
# The left panel of both figures; the dashboard's has the attribution beside it.
_CELL: dict[str, int] = {"row": 1, "col": 1}


@dataclass(frozen=True)
class RooflinePoint:
    """A labelled point: ``phase`` (its color and legend entry), ``label`` (text beside it),
    ``intensity`` (FLOP/byte), ``flops_per_s``, ``hover`` (lines, escaped pseudo-HTML) and its
    marker ``size`` in pixels."""

    phase: str
    label: str
    intensity: float
    flops_per_s: float
    hover: tuple[str, ...]
    size: float = 11.0


def _pct(value: object) -> str:
    """A fraction as a percentage with three significant digits (MFU of a tiny model on a CPU
    can be 0.0123%)."""
    return f"{value * 100:.3g}%" if isinstance(value, int | float) else "–"


def _x_range(intensities: Sequence[float], roofs: Sequence[Roofs]) -> tuple[float, float]:
    xs = [x for x in intensities if math.isfinite(x) and x > 0]
    xs += [r.ridge_flop_per_byte for r in roofs]
    return (min(xs) / 4, max(xs) * 4) if xs else (0.1, 1000.0)


def _add_roofs(fig: go.Figure, roofs: Sequence[Roofs], lo: float, hi: float) -> None:
    for i, roof in enumerate(roofs):
        ridge, bw, peak = roof.ridge_flop_per_byte, roof.bytes_per_s, roof.flops_per_s
        fig.add_trace(
            go.Scatter(
                x=[lo, ridge, max(hi, ridge * 2)],
                y=[lo * bw, peak, peak],
                mode="lines",
                name=f"roofs: {escape(roof.label)}",
                line={"color": "#1f2328", "width": 2.5, "dash": "solid" if i == 0 else "dash"},
                hovertemplate=hover_lines(
                    [
                        f"<b>{escape(roof.label)}</b> ({escape(roof.source)})",
                        f"peak {fmt(peak / 1e12)} TFLOP/s, {fmt(bw / 1e12)} TB/s",
                        f"ridge {fmt(ridge)} FLOP/byte",
                    ]
                ),
            ),
            **_CELL,
        )
        fig.add_trace(
            go.Scatter(
                x=[ridge],
                y=[peak],
                mode="markers+text",
                text=[f"ridge {fmt(ridge)} FLOP/B"],
                textposition="top left",
                marker={"size": 8, "color": "#1f2328"},
                showlegend=False,
                name="ridge point",
                hovertemplate=hover_lines([wrap(definition("arithmetic_intensity").text)]),
            ),
            **_CELL,
        )
        _label_roofs(fig, roof, lo, max(hi, ridge * 2), dashed=i > 0)


def si_rate(value: float, unit: str) -> str:
    """``value`` with an SI prefix that leaves 1 to 999 before the unit: "45.3 GFLOP/s"."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{fmt(value / scale)} {prefix}{unit}"
    return f"{fmt(value)} {unit}"


def roof_labels(roof: Roofs) -> tuple[str, str]:
    """The texts that name a roof's two parts on the figure: (compute roof, memory roof)."""
    return (
        f"compute roof {si_rate(roof.flops_per_s, 'FLOP/s')}",
        f"memory roof {si_rate(roof.bytes_per_s, 'B/s')}",
    )


def _label_roofs(fig: go.Figure, roof: Roofs, lo: float, hi: float, dashed: bool) -> None:
    """Name the flat (compute) roof at its right end and the sloped (memory) roof halfway up.

    Annotations on log axes take log10 coordinates; a second roof (another dtype) says which.
    """
    compute, memory = roof_labels(roof)
    if dashed:
        compute, memory = f"{compute} ({escape(roof.label)})", f"{memory} ({escape(roof.label)})"
    ridge = roof.ridge_flop_per_byte
    mid = math.sqrt(lo * ridge)  # halfway along the slope on a log axis
    font = {"size": 11, "color": "#1f2328"}
    for text, x, y, xanchor, yanchor in (
        (compute, hi, roof.flops_per_s, "right", "bottom"),
        (memory, mid, mid * roof.bytes_per_s, "right", "bottom"),
    ):
        fig.add_annotation(
            x=math.log10(x),
            y=math.log10(y),
            text=text,
            showarrow=False,
            xanchor=xanchor,
            yanchor=yanchor,
            font=font,
            bgcolor="rgba(255,255,255,0.7)",
            **_CELL,
        )


def _add_points(fig: go.Figure, points: Sequence[RooflinePoint], legend_suffix: str) -> None:
    """One trace per phase, in the order the phases first appear."""
    for phase in dict.fromkeys(p.phase for p in points):
        chosen = [p for p in points if p.phase == phase]
        fig.add_trace(
            go.Scatter(
                x=[p.intensity for p in chosen],
                y=[p.flops_per_s for p in chosen],
                mode="markers+text",
                text=[p.label for p in chosen],
                textposition="top center",
                marker={
                    "size": [p.size for p in chosen],
                    "color": PHASE_COLORS.get(phase, "#8c959f"),
                    "opacity": 0.85,
                    "line": {"color": "white", "width": 1},
                },
                name=f"{phase}{legend_suffix}",
                legendgroup=phase,
                hovertext=["<br>".join(p.hover) for p in chosen],
                hovertemplate="%{hovertext}<extra></extra>",
            ),
            **_CELL,
        )


def _add_steps(fig: go.Figure, steps: pd.DataFrame) -> None:
    for phase in ("prefill", "decode", "mixed"):
        part = steps[steps["phase"] == phase]
        if part.empty:
            continue
        stride = max(1, len(part) // MAX_STEP_DOTS)
        part = part.iloc[::stride]
        fig.add_trace(
            go.Scatter(
                x=part["flops"] / part["bytes"],
                y=part["flops"] / part["busy_s"],
                mode="markers",
                marker={"size": 4, "color": PHASE_COLORS[phase], "opacity": 0.3},
                name=f"{phase} steps" + (f" (every {stride}th)" if stride > 1 else ""),
                legendgroup=phase,
                hovertemplate=hover_lines(
                    [f"{phase} step", "%{x:,.2f} FLOP/byte", "%{y:.3s}FLOP/s"]
                ),
            ),
            **_CELL,
        )


def _phase_marker(point: PhasePoint, roofs: Roofs | None) -> RooflinePoint:
    mfu = point.flops_per_s / roofs.flops_per_s if roofs else None
    mbu = point.bytes_per_s / roofs.bytes_per_s if roofs else None
    hover = (
        f"<b>{escape(point.phase)}</b>: {point.share * 100:.1f}% of step time "
        f"({fmt(point.time_s)} s)",
        f"intensity {fmt(point.intensity)} FLOP/byte",
        f"achieved {fmt(point.flops_per_s / 1e12)} TFLOP/s, {fmt(point.bytes_per_s / 1e9)} GB/s",
        f"MFU {_pct(mfu)} · MBU {_pct(mbu)}",
    )
    label = f"{point.phase} {point.share * 100:.0f}%"
    size = 14 + 46 * math.sqrt(point.share)
    return RooflinePoint(point.phase, label, point.intensity, point.flops_per_s, hover, size)


def _attribution_bars(attribution: JSONObject) -> list[tuple[str, str, float]]:
    """(group, name, seconds) of results.figures.attribution's parts and bound times."""
    parts = [(p, (attribution.get(p) or {}).get("time_s")) for p in ("prefill", "decode")]
    bound = attribution.get("bound_time_s") or {}
    bars = [("time by phase", name, seconds) for name, seconds in parts]
    bars += [("time by bound", f"{b}-bound", bound.get(b)) for b in ("memory", "compute")]
    return [(g, n, float(s)) for g, n, s in bars if isinstance(s, int | float)]


def _add_attribution(fig: go.Figure, inputs: RooflineInputs) -> None:
    bars = _attribution_bars(inputs.attribution)
    totals: dict[str, float] = {}
    for group, _, seconds in bars:
        totals[group] = totals.get(group, 0.0) + seconds
    for group, name, seconds in bars:
        if not totals[group]:
            continue
        share = seconds / totals[group]
        fig.add_trace(
            go.Bar(
                y=[group],
                x=[share],
                orientation="h",
                name=name,
                marker_color=PHASE_COLORS[name],
                text=[f"{name} {share * 100:.0f}%"],
                textposition="inside",
                textangle=0,
                showlegend=False,
                hovertemplate=hover_lines(
                    [
                        f"<b>{name}</b>",
                        f"{fmt(seconds)} s ({share * 100:.1f}%)",
                        wrap(inputs.attribution_source),
                    ]
                ),
            ),
            row=1,
            col=2,
        )


def _decade_range(values: Sequence[float], min_decades: float = 1.5) -> list[float]:
    """A log10 axis range over the finite positive ``values``, padded, and wide enough that at
    least one decade label shows (labels are drawn at decades only)."""
    logs = [math.log10(v) for v in values if math.isfinite(v) and v > 0]
    low, high = (min(logs), max(logs)) if logs else (0.0, 3.0)
    low, high = low - 0.15, high + 0.3  # room above the top roof for its labels
    if high - low < min_decades:
        middle = (low + high) / 2
        low, high = middle - min_decades / 2, middle + min_decades / 2
    return [low, high]


def _log_axes(fig: go.Figure, y_title: str, x_values: list[float], y_values: list[float]) -> None:
    """Log-log axes with a label at each decade (SI prefixes: 1G, 10G) and unlabelled minor
    grid lines at 2..9: the default labels 2..9 of each decade crowd the axis."""
    decades = {
        "type": "log",
        "dtick": 1,
        "exponentformat": "SI",
        "minor": {"dtick": "D1", "showgrid": True, "gridcolor": "#f3f4f6", "ticks": ""},
    }
    fig.update_xaxes(
        title_text="arithmetic intensity (FLOP/byte)",
        range=_decade_range(x_values),
        **decades,
        **_CELL,
    )
    fig.update_yaxes(title_text=y_title, range=_decade_range(y_values), **decades, **_CELL)


def _cell_values(fig: go.Figure) -> tuple[list[float], list[float]]:
    """Every x and y the left cell's traces draw (roofs, points, steps), for its axis ranges."""
    xs: list[float] = []
    ys: list[float] = []
    for trace in fig.data:
        if trace.xaxis in (None, "x") and trace.type == "scatter":
            xs += [float(v) for v in trace.x]
            ys += [float(v) for v in trace.y]
    return xs, ys


def analytic_roofline_figure(
    roofs: Sequence[Roofs], points: Sequence[RooflinePoint], title: str
) -> go.Figure:
    """`bench roofline`'s figure (module docstring). Raises ValueError without a roof."""
    if not roofs:
        raise ValueError("a roofline needs at least one roof")
    fig = make_subplots(rows=1, cols=1)
    lo, hi = _x_range([p.intensity for p in points], roofs)
    _add_roofs(fig, roofs, lo, hi)
    _add_points(fig, points, "")
    _log_axes(fig, "attainable FLOP/s (per GPU)", *_cell_values(fig))
    return apply_layout(fig, escape(title), 560)


def roofline_figure(inputs: RooflineInputs) -> go.Figure | None:
    """The run dashboard's roofline and attribution, or None with neither roofs nor points."""
    if inputs.roofs is None and not inputs.points:
        return None
    att = inputs.attribution
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.68, 0.32],
        horizontal_spacing=0.1,
        subplot_titles=(
            "Achieved FLOP/s against arithmetic intensity",
            f"Attribution — MFU {_pct(att.get('mfu'))}, MBU {_pct(att.get('mbu'))}",
        ),
    )
    roofs = [inputs.roofs] if inputs.roofs else []
    intensities = [p.intensity for p in inputs.points]
    steps = inputs.steps
    if steps is not None and len(steps):
        ai = (steps["flops"] / steps["bytes"]).to_numpy(np.float64)
        ai = ai[np.isfinite(ai) & (ai > 0)]
        intensities += [float(ai.min()), float(ai.max())] if ai.size else []
    lo, hi = _x_range(intensities, roofs)
    _add_roofs(fig, roofs, lo, hi)
    if steps is not None and not steps.empty:
        _add_steps(fig, steps)
    finite = [
        p for p in inputs.points if math.isfinite(p.intensity) and math.isfinite(p.flops_per_s)
    ]
    _add_points(fig, [_phase_marker(p, inputs.roofs) for p in finite], " (all steps)")
    _add_attribution(fig, inputs)
    _log_axes(fig, "achieved FLOP/s", *_cell_values(fig))
    fig.update_xaxes(range=[0, 1], tickformat=".0%", title_text="share of step time", row=1, col=2)
    fig.update_layout(barmode="stack")
    name = inputs.roofs.label if inputs.roofs else "no roofs: peaks unknown"
    apply_layout(fig, f"Roofline ({escape(name)}); points sized by share of step time", 520)
    return fig


def write_figure_html(fig: go.Figure, path: Path) -> Path:
    """Write ``fig`` as one HTML file with plotly.js embedded (opens offline)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(path, include_plotlyjs=True, full_html=True)
    return path
