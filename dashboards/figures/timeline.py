"""One timeline on a shared time axis: zooming one panel zooms them all.

Panels, each drawn only when some run recorded its data (the rest are named in a note):
requests in flight (client) with the engine's running and waiting queues; output tokens/s;
the client's read delay (how long after the kernel stamped a chunk the client read it, mean and
max per bin, where the chunks have kernel receive stamps); KV cache occupancy; GPU, SM, tensor
and CPU utilization; DRAM bandwidth; power.
Every series is averaged over the same nice-width bins (see :func:`series.bin_width_s`), so a
long run stays a few hundred points per line. With several runs (``bench compare``) each run
keeps one color and each series a dash style; times are seconds from each run's own start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import plotly.graph_objects as go
import pyarrow as pa
import pyarrow.compute as pc
from plotly.subplots import make_subplots

from dashboards.figures import samples as smp
from dashboards.figures.series import (
    bin_centers,
    bin_edges,
    bin_mean,
    bin_width_s,
    binned_rate,
    intervals_mean,
)
from dashboards.runview import RunView
from dashboards.style import apply_layout, color_for, escape, hover_lines
from results.folder.token_source import token_source

__all__ = ["PANELS", "Line", "panel_title", "timeline_figure", "timeline_lines"]

# Panel key -> (title, y-axis title). Order is top to bottom.
PANELS: dict[str, tuple[str, str]] = {
    "requests": ("Requests in flight / running / waiting", "requests"),
    "tokens": ("Output tokens/s", "tok/s"),
    "read": ("Client read delay (kernel receive stamp to read)", "ms"),
    "kv": ("KV cache occupancy", "% of KV blocks used"),
    "util": ("Utilization: GPU, SM, tensor, CPU", "%"),
    "dram": ("DRAM bandwidth", "GB/s (or % of peak)"),
    "power": ("GPU power", "W"),
}
# What each utilization concept measures, for the panel's title: it names only what was recorded.
_UTIL_SUBJECT: dict[str, str] = {
    "gpu_util": "GPU",
    "mem_util": "GPU memory",
    "sm_util": "SM",
    "sm_occupancy": "SM",
    "tensor": "tensor",
    "cpu_process": "CPU",
    "cpu_system": "CPU",
}
_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
_SAMPLE_PANELS: dict[str, tuple[str, ...]] = {
    "requests": ("running", "waiting"),
    "kv": ("kv_cache",),
    "util": (
        "gpu_util",
        "mem_util",
        "sm_util",
        "sm_occupancy",
        "tensor",
        "cpu_process",
        "cpu_system",
    ),
    "dram": ("dram_bytes", "dram_util"),
    "power": ("power",),
}


@dataclass(frozen=True)
class Line:
    """One binned series of one run: ``values`` at ``t_s`` (bin centers, seconds)."""

    panel: str
    name: str
    t_s: np.ndarray
    values: np.ndarray
    unit: str
    gaps: bool = field(default=False)  # sampled data: connect across empty bins
    concept: str = ""  # the samples concept it came from (samples.CONCEPTS), "" for others


def _client_lines(view: RunView, edges: np.ndarray) -> list[Line]:
    req = view.requests
    centers = bin_centers(edges)
    in_flight = intervals_mean(
        req["sent_s"].to_numpy(np.float64), req["end_s"].to_numpy(np.float64), edges
    )
    # The chunk rows a batch at a time: the page's memory does not grow with the run.
    rate = np.zeros(len(edges) - 1)
    for batch in token_source(view.tokens).batches(["t_s", "n_tokens"]):
        t_s = batch.column(0).to_numpy(zero_copy_only=False).astype(np.float64)
        rate += binned_rate(t_s, batch.column(1).to_numpy(zero_copy_only=False), edges)
    return [
        Line("requests", "in flight (client)", centers, in_flight, "requests"),
        Line("tokens", "output tok/s", centers, rate, "tok/s"),
    ]


def _read_delay_lines(view: RunView, edges: np.ndarray) -> list[Line]:
    """Mean and max read delay per bin over the kernel-stamped chunks (none without them),
    tokens.parquet read a batch at a time."""
    req, source = view.requests, token_source(view.tokens)
    if "stamps" not in req or "read_s" not in source.columns():
        return []
    ids = req.loc[req["stamps"] == "kernel", "request_id"].astype(str).tolist()
    if not ids:
        return []
    kernel = pa.array(ids, type=pa.string())
    bins = len(edges) - 1
    total, count, worst = np.zeros(bins), np.zeros(bins), np.full(bins, np.nan)
    for batch in source.batches(["request_id", "t_s", "read_s"]):
        ids_here = kernel.cast(batch.column(0).type)
        stamped = pc.is_in(batch.column(0), value_set=ids_here).to_numpy(zero_copy_only=False)
        t = batch.column(1).to_numpy(zero_copy_only=False).astype(np.float64)[stamped]
        read = batch.column(2).to_numpy(zero_copy_only=False).astype(np.float64)[stamped]
        delay_ms = (read - t) * 1e3
        idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, bins - 1)
        np.add.at(total, idx, delay_ms)
        np.add.at(count, idx, 1)
        np.fmax.at(worst, idx, delay_ms)
    if not count.any():
        return []
    centers = bin_centers(edges)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / count, np.nan)
    return [
        Line("read", "read delay, mean", centers, mean, "ms"),
        Line("read", "read delay, max", centers, worst, "ms"),
    ]


def _kv_name(total_blocks: np.ndarray) -> str:
    """The KV line's legend name, with the pool's size: 0.1% reads right next to "of 4,096"."""
    finite = total_blocks[np.isfinite(total_blocks)]
    return f"KV blocks used (of {int(finite.max()):,})" if finite.size else "KV blocks used"


def _step_lines(view: RunView, edges: np.ndarray) -> list[Line]:
    steps = view.steps
    if steps is None or steps.empty:
        return []
    centers = bin_centers(edges)
    t = steps["start_s"].to_numpy(np.float64)
    total = steps["kv_blocks_total"].to_numpy(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        kv_pct = np.where(
            total > 0, steps["kv_blocks_used"].to_numpy(np.float64) / total * 100, np.nan
        )
    return [
        Line(
            "requests",
            "running (engine)",
            centers,
            bin_mean(t, steps["num_running"], edges),
            "requests",
            gaps=True,
        ),
        Line(
            "requests",
            "waiting (engine)",
            centers,
            bin_mean(t, steps["num_waiting"], edges),
            "requests",
            gaps=True,
        ),
        # Binned as the others: one value a step would grow the page with the run (11 MB of
        # 10^6 steps), and pair one step's value with another bin's center.
        Line("kv", _kv_name(total), centers, bin_mean(t, kv_pct, edges), "%", gaps=True),
    ]


def timeline_lines(view: RunView, edges: np.ndarray) -> list[Line]:
    """Every line of ``view`` on bins ``edges``: client, engine steps, then probe samples.

    The engine's steps are preferred to its scraped metrics for running/waiting and KV, being
    exact per step; scraped series fill in for engines without steps.
    """
    lines = _client_lines(view, edges) + _read_delay_lines(view, edges) + _step_lines(view, edges)
    centers = bin_centers(edges)
    for panel, keys in _SAMPLE_PANELS.items():
        for key in keys:
            if view.steps is not None and key in ("running", "waiting", "kv_cache"):
                continue
            if key == "dram_util" and smp.find(view.samples, "dram_bytes"):
                continue  # bytes/s says more than % of peak; one unit per panel
            for series in smp.find(view.samples, key):
                unit = "%" if smp.CONCEPTS[key].percent else PANELS[panel][1]
                values = bin_mean(series.t_s, series.values, edges)
                lines.append(
                    Line(panel, series.name, centers, values, unit, gaps=True, concept=key)
                )
    return lines


def panel_title(panel: str, lines: Sequence[Line]) -> str:
    """The title of ``panel`` for the lines drawn in it: the utilization panel names only what
    was recorded ("Utilization: CPU" on a machine without GPU probes); the others are fixed."""
    if panel != "util":
        return PANELS[panel][0]
    subjects = dict.fromkeys(_UTIL_SUBJECT[ln.concept] for ln in lines if ln.panel == "util")
    return "Utilization: " + ", ".join(subjects) if subjects else PANELS[panel][0]


def _edges_for(views: Sequence[RunView]) -> np.ndarray:
    end_s = max((v.run_end_s for v in views), default=0.0) or 1.0
    return bin_edges(0.0, end_s, bin_width_s(end_s, max_bins=300))


def timeline_figure(views: Sequence[RunView]) -> tuple[go.Figure, list[str]]:
    """The shared-x timeline of ``views`` and the names of panels no run recorded."""
    edges = _edges_for(views)
    per_view = [timeline_lines(v, edges) for v in views]
    panels = [p for p in PANELS if any(line.panel == p for lines in per_view for line in lines)]
    missing = [PANELS[p][0] for p in PANELS if p not in panels]
    every_line = [line for lines in per_view for line in lines]
    fig = make_subplots(
        rows=len(panels),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.035,
        subplot_titles=[panel_title(p, every_line) for p in panels],
    )
    single = len(views) == 1
    width_s = float(edges[1] - edges[0])
    for index, (view, lines) in enumerate(zip(views, per_view, strict=True)):
        drawn = 0
        for panel in panels:
            mine = [line for line in lines if line.panel == panel]
            for k, line in enumerate(mine):
                color = color_for(drawn if single else index)
                drawn += 1
                name = line.name if single else f"{view.label}: {line.name}"
                # One legend group per panel (one run) or per run (several): a click on the
                # group's title hides or shows it whole.
                group = panel_title(panel, every_line) if single else view.label
                first = k == 0 if single else (panel == panels[0] and k == 0)
                fig.add_trace(
                    go.Scatter(
                        x=line.t_s,
                        y=line.values,
                        mode="lines",
                        name=escape(line.name),  # the group's title names the run
                        legendgroup=group,
                        legendgrouptitle_text=escape(group) if first else None,
                        connectgaps=line.gaps,
                        line={
                            "color": color,
                            "width": 1.6,
                            "dash": "solid" if single else _DASHES[k % len(_DASHES)],
                        },
                        hovertemplate=hover_lines(
                            [
                                f"<b>{escape(name)}</b>",
                                f"%{{y:,.2f}} {escape(line.unit)}",
                                f"t = %{{x:,.2f}} s (mean over {width_s:g} s bin)",
                            ]
                        ),
                    ),
                    row=panels.index(panel) + 1,
                    col=1,
                )
    for row, panel in enumerate(panels, start=1):
        # Percent panels say so on every tick ("0.1%"), so a small share is not read as a
        # 0..1 fraction.
        percent = all(ln.unit == "%" for ln in every_line if ln.panel == panel)
        fig.update_yaxes(
            title_text=PANELS[panel][1],
            rangemode="tozero",
            ticksuffix="%" if percent else "",
            row=row,
            col=1,
        )
    fig.update_xaxes(showspikes=True, spikemode="across", spikethickness=1, spikedash="dot")
    fig.update_xaxes(title_text="seconds from the run's start", row=len(panels), col=1)
    if single:
        _shade_window(fig, views[0])
    apply_layout(
        fig, "Timeline (zoom any panel: all follow)", 170 * len(panels) + 130, legend="right"
    )
    fig.update_layout(hovermode="x", legend={"groupclick": "toggleitem"})
    return fig, missing


def _shade_window(fig: go.Figure, view: RunView) -> None:
    """Grey the warm-up and cool-down, which the summary's figures leave out (named once, in
    the top panel)."""
    window = view.summary.get("window") or {}
    start, stop = window.get("start_s"), window.get("end_s")
    run_start, run_end = window.get("run_start_s"), window.get("run_end_s")
    spans = [(run_start, start, "warm-up"), (stop, run_end, "cool-down")]
    for x0, x1, what in spans:
        if x0 is None or x1 is None or x1 <= x0:
            continue
        fig.add_vrect(
            x0=x0, x1=x1, fillcolor="#8c959f", opacity=0.15, line_width=0, row="all", col=1
        )
        fig.add_annotation(
            x=x0,
            y=1.0,
            xref="x",
            yref="y domain",
            text=what,
            showarrow=False,
            xanchor="left",
            yanchor="top",
            font={"size": 10, "color": "#57606a"},
        )
