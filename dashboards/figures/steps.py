"""The engine's own steps (steps.parquet): tokens per step, batch size, step time.

One point per step while a run has few enough steps to draw; beyond that, means over time bins
(the title says which), so an hour-long run is as light as a short one. Panels share their time
axis, so zooming one zooms all.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboards.figures.series import bin_centers, bin_edges, bin_mean, bin_width_s
from dashboards.style import PHASE_COLORS, apply_layout, color_for, escape, fmt, hover_lines

__all__ = ["MAX_RAW_STEPS", "phase_of_steps", "steps_figure"]

MAX_RAW_STEPS = 2000

# Panel -> list of (column or derived name, legend, color, stacked).
_PANELS: tuple[tuple[str, str, tuple[tuple[str, str, str, bool], ...]], ...] = (
    (
        "Tokens per step",
        "tokens",
        (
            ("num_prefill_tokens", "prefill tokens", PHASE_COLORS["prefill"], True),
            ("num_decode_tokens", "decode tokens", PHASE_COLORS["decode"], True),
        ),
    ),
    (
        "Batch size",
        "sequences",
        (
            ("num_seqs", "sequences in the step", color_for(7), False),
            ("num_decode_seqs", "decoding", PHASE_COLORS["decode"], False),
            ("num_prefill_seqs", "prefilling", PHASE_COLORS["prefill"], False),
        ),
    ),
    (
        "Step time",
        "ms",
        (
            ("step_ms", "step (start to end)", color_for(0), False),
            ("forward_ms", "executor (forward, logits, sampling)", color_for(2), False),
        ),
    ),
)


def phase_of_steps(steps: pd.DataFrame) -> np.ndarray:
    """ "prefill", "decode", "mixed" or "idle" per step, from its token counts."""
    prefill = steps["num_prefill_tokens"].to_numpy() > 0
    decode = steps["num_decode_tokens"].to_numpy() > 0
    return np.select(
        [prefill & decode, prefill, decode], ["mixed", "prefill", "decode"], default="idle"
    )


def _columns(steps: pd.DataFrame) -> pd.DataFrame:
    frame = steps.copy()
    frame["step_ms"] = (frame["end_s"] - frame["start_s"]) * 1000.0
    frame["forward_ms"] = frame["forward_s"] * 1000.0
    return frame


def steps_figure(steps: pd.DataFrame, label: str = "") -> go.Figure:
    """Three panels over the run's time axis (seconds), one point per step or per bin."""
    frame = _columns(steps)
    t = frame["start_s"].to_numpy(np.float64)
    raw = len(frame) <= MAX_RAW_STEPS
    if raw:
        x = t
        how = "one point per step"
    else:
        end_s = float(frame["end_s"].max())
        edges = bin_edges(0.0, end_s, bin_width_s(end_s, max_bins=600))
        x = bin_centers(edges)
        how = f"means over {edges[1] - edges[0]:g} s bins of {len(frame):,} steps"
    fig = make_subplots(
        rows=len(_PANELS),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.06,
        subplot_titles=[title for title, _, _ in _PANELS],
    )
    for row, (panel, unit, series) in enumerate(_PANELS, start=1):
        for k, (column, name, color, stacked) in enumerate(series):
            values = frame[column].to_numpy(np.float64)
            y = values if raw else bin_mean(t, values, edges)
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=y,
                    name=name,
                    mode="lines",
                    connectgaps=False,
                    line={"color": color, "width": 1.2, "shape": "hv" if raw else "linear"},
                    stackgroup=f"stack{row}" if stacked else None,
                    legendgroup=panel,
                    legendgrouptitle_text=panel if k == 0 else None,
                    hovertemplate=hover_lines(
                        [f"<b>{escape(name)}</b>", f"%{{y:,.2f}} {unit}", "t = %{x:,.3f} s"]
                    ),
                ),
                row=row,
                col=1,
            )
        fig.update_yaxes(title_text=unit, rangemode="tozero", row=row, col=1)
    fig.update_xaxes(title_text="seconds from the run's start", row=len(_PANELS), col=1)
    phases = pd.Series(phase_of_steps(frame)).value_counts()
    counts = ", ".join(f"{phases.get(p, 0):,} {p}" for p in ("prefill", "decode", "mixed"))
    title = (
        f"Engine steps{f' of {escape(label)}' if label else ''}: {len(frame):,} steps ({counts}), "
        f"mean batch {fmt(float(frame['num_seqs'].mean()) if len(frame) else None)}, "
        f"mean step {fmt(float(frame['step_ms'].mean()) if len(frame) else None)} ms — {how}"
    )
    apply_layout(fig, title, 620, legend="right")
    # Stacked areas would reverse the legend; keep it in panel order, as drawn.
    fig.update_layout(hovermode="x", legend={"traceorder": "grouped", "groupclick": "toggleitem"})
    return fig
