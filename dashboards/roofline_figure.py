"""A roofline plot (Plotly): the hardware's roofs and the prefill and decode points of a model.

x: arithmetic intensity (FLOP/byte), y: FLOP/s, both logarithmic. A roof is
min(peak FLOP/s, intensity * bandwidth); its knee is the ridge point. Each point sits at its
analytic intensity and at the FLOP/s the roofline lets it reach, so its height says how far below
the compute roof a phase runs even on ideal kernels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import plotly.graph_objects as go

PHASE_COLORS = {"prefill": "#d62728", "decode": "#1f77b4"}


@dataclass(frozen=True)
class Roof:
    """One compute roof over one memory roof: ``label`` (e.g. "bf16"), FLOP/s and bytes/s."""

    label: str
    peak_flops_per_s: float
    memory_bytes_per_s: float

    @property
    def ridge(self) -> float:
        return self.peak_flops_per_s / self.memory_bytes_per_s


@dataclass(frozen=True)
class Point:
    """A step on the roofline: its phase, a short label and hover text."""

    phase: str
    label: str
    arithmetic_intensity: float
    flops_per_s: float
    hover: str


def roofline_figure(roofs: Sequence[Roof], points: Sequence[Point], title: str) -> go.Figure:
    """The figure (module docstring); the first roof is drawn solid, others dashed."""
    if not roofs:
        raise ValueError("a roofline needs at least one roof")
    intensities = [p.arithmetic_intensity for p in points] + [r.ridge for r in roofs]
    x_min = max(min(intensities) / 4, 0.05)
    x_max = max(intensities) * 4
    x = np.geomspace(x_min, x_max, 200)
    fig = go.Figure()
    for i, roof in enumerate(roofs):
        fig.add_trace(
            go.Scatter(
                x=x,
                y=np.minimum(roof.peak_flops_per_s, x * roof.memory_bytes_per_s),
                mode="lines",
                name=f"{roof.label} roof (ridge {roof.ridge:.0f} FLOP/B)",
                line={"color": "black", "dash": "solid" if i == 0 else "dash", "width": 2},
                hovertemplate="intensity %{x:.3g} FLOP/B<br>attainable %{y:.3g} FLOP/s",
            )
        )
    for phase in sorted({p.phase for p in points}):
        chosen = [p for p in points if p.phase == phase]
        fig.add_trace(
            go.Scatter(
                x=[p.arithmetic_intensity for p in chosen],
                y=[p.flops_per_s for p in chosen],
                mode="markers+text",
                name=phase,
                text=[p.label for p in chosen],
                textposition="top center",
                marker={"size": 11, "color": PHASE_COLORS.get(phase, "#2ca02c")},
                hovertext=[p.hover for p in chosen],
                hoverinfo="text",
            )
        )
    fig.update_xaxes(type="log", title="arithmetic intensity (FLOP/byte)")
    fig.update_yaxes(type="log", title="FLOP/s (per GPU)")
    fig.update_layout(title=title, template="plotly_white", legend={"x": 0.01, "y": 0.99})
    return fig


def write_html(fig: go.Figure, path: Path) -> Path:
    """Write ``fig`` as one HTML file with plotly.js embedded (opens offline)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(path, include_plotlyjs=True, full_html=True)
    return path
