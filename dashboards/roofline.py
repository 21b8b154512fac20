"""The roofline: the hardware's roofs, prefill and decode points sized by their share of step
time, and the attribution of time to prefill and decode, memory- and compute-bound.

Left (log-log): arithmetic intensity (FLOP/byte) against achieved FLOP/s. The roof is
min(peak FLOP/s, intensity × peak bytes/s); the ridge point is where the two meet. Each step is a
faint dot; each phase (all its steps together: total FLOPs / total bytes, total FLOPs / total
time) a large one. Right: where the time went. Inputs: :mod:`dashboards.roofline_inputs`.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboards.definitions import definition
from dashboards.roofline_inputs import RooflineInputs
from dashboards.style import PHASE_COLORS, apply_layout, escape, fmt, hover_lines, wrap

__all__ = ["MAX_STEP_DOTS", "roofline_figure"]

MAX_STEP_DOTS = 3000


def _pct(value: object) -> str:
    """A fraction as a percentage with three significant digits (MFU of a tiny model on a CPU
    can be 0.0123%)."""
    return f"{value * 100:.3g}%" if isinstance(value, int | float) else "–"


def _x_range(inputs: RooflineInputs) -> tuple[float, float]:
    xs = [p.intensity for p in inputs.points if math.isfinite(p.intensity) and p.intensity > 0]
    if inputs.steps is not None and len(inputs.steps):
        ai = (inputs.steps["flops"] / inputs.steps["bytes"]).to_numpy(np.float64)
        ai = ai[np.isfinite(ai) & (ai > 0)]
        if ai.size:
            xs += [float(ai.min()), float(ai.max())]
    if inputs.roofs is not None:
        xs.append(inputs.roofs.ridge_flops_per_byte)
    return (min(xs) / 4, max(xs) * 4) if xs else (0.1, 1000.0)


def _add_roofs(fig: go.Figure, inputs: RooflineInputs, lo: float, hi: float) -> None:
    roofs = inputs.roofs
    if roofs is None:
        return
    ridge = roofs.ridge_flops_per_byte
    bw, peak = roofs.peak_bytes_per_s, roofs.peak_flops_per_s
    xs = [lo, ridge, max(hi, ridge * 2)]
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=[lo * bw, peak, peak],
            mode="lines",
            name=f"roofs: {escape(roofs.name)}",
            line={"color": "#1f2328", "width": 2.5},
            hovertemplate=hover_lines(
                [
                    f"<b>{escape(roofs.name)}</b> ({escape(roofs.source)})",
                    f"peak {fmt(peak / 1e12)} TFLOP/s, {fmt(bw / 1e12)} TB/s",
                    f"ridge {fmt(ridge)} FLOP/byte",
                ]
            ),
        ),
        row=1,
        col=1,
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
        row=1,
        col=1,
    )


def _add_steps(fig: go.Figure, inputs: RooflineInputs) -> None:
    steps = inputs.steps
    if steps is None or steps.empty:
        return
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
            row=1,
            col=1,
        )


def _add_points(fig: go.Figure, inputs: RooflineInputs) -> None:
    roofs = inputs.roofs
    for point in inputs.points:
        if not (math.isfinite(point.intensity) and math.isfinite(point.flops_per_s)):
            continue
        mfu = point.flops_per_s / roofs.peak_flops_per_s if roofs else None
        mbu = point.bytes_per_s / roofs.peak_bytes_per_s if roofs else None
        fig.add_trace(
            go.Scatter(
                x=[point.intensity],
                y=[point.flops_per_s],
                mode="markers+text",
                text=[f"{point.phase} {point.share * 100:.0f}%"],
                textposition="bottom center",
                marker={
                    "size": 14 + 46 * math.sqrt(point.share),
                    "color": PHASE_COLORS.get(point.phase, "#8c959f"),
                    "opacity": 0.85,
                    "line": {"color": "white", "width": 1},
                },
                name=f"{point.phase} (all steps)",
                legendgroup=point.phase,
                hovertemplate=hover_lines(
                    [
                        f"<b>{escape(point.phase)}</b>: {point.share * 100:.1f}% of step time "
                        f"({fmt(point.time_s)} s)",
                        f"intensity {fmt(point.intensity)} FLOP/byte",
                        f"achieved {fmt(point.flops_per_s / 1e12)} TFLOP/s, "
                        f"{fmt(point.bytes_per_s / 1e9)} GB/s",
                        f"MFU {_pct(mfu)} · MBU {_pct(mbu)}",
                    ]
                ),
            ),
            row=1,
            col=1,
        )


def _add_attribution(fig: go.Figure, inputs: RooflineInputs) -> None:
    att = inputs.attribution
    bars = [
        ("time by phase", "prefill", att.get("prefill_s")),
        ("time by phase", "decode", att.get("decode_s")),
        ("time by bound", "memory-bound", att.get("memory_bound_s")),
        ("time by bound", "compute-bound", att.get("compute_bound_s")),
    ]
    totals: dict[str, float] = {}
    for group, _, seconds in bars:
        if isinstance(seconds, int | float):
            totals[group] = totals.get(group, 0.0) + float(seconds)
    for group, name, seconds in bars:
        if not isinstance(seconds, int | float) or not totals.get(group):
            continue
        share = float(seconds) / totals[group]
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
                        f"{fmt(float(seconds))} s ({share * 100:.1f}%)",
                        wrap(inputs.attribution_source),
                    ]
                ),
            ),
            row=1,
            col=2,
        )


def roofline_figure(inputs: RooflineInputs) -> go.Figure | None:
    """The roofline and attribution, or None when there are neither roofs nor points."""
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
    lo, hi = _x_range(inputs)
    _add_roofs(fig, inputs, lo, hi)
    _add_steps(fig, inputs)
    _add_points(fig, inputs)
    _add_attribution(fig, inputs)
    fig.update_xaxes(
        type="log", title_text="arithmetic intensity (FLOP/byte)", exponentformat="SI", row=1, col=1
    )
    fig.update_yaxes(type="log", title_text="achieved FLOP/s", exponentformat="SI", row=1, col=1)
    fig.update_xaxes(range=[0, 1], tickformat=".0%", title_text="share of step time", row=1, col=2)
    fig.update_layout(barmode="stack")
    name = inputs.roofs.name if inputs.roofs else "no roofs: peaks unknown"
    apply_layout(fig, f"Roofline ({escape(name)}); points sized by share of step time", 520)
    return fig
