"""Errors: how many of each kind, and when they happened.

A kind is the status ("error" or "cancelled"), the HTTP status when a response started, and the
message. Left: counts by kind, most frequent first. Right: each failed request at the moment it
ended (else when it was sent), one row per kind, so bursts and their timing stand out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboards.runview import RunView
from dashboards.style import apply_layout, color_for, escape, hover_lines

__all__ = ["MAX_KINDS", "error_kinds", "errors_figure"]

MAX_KINDS = 12
_LABEL_CHARS = 60


def _kind(status: str, http_status: object, message: object) -> str:
    code = "" if pd.isna(http_status) else f"HTTP {int(http_status)}: "  # type: ignore[arg-type]
    text = "(no message)" if message is None or pd.isna(message) else str(message)
    return f"{status}: {code}{text}"


def error_kinds(view: RunView) -> pd.DataFrame:
    """Failed and cancelled requests with a ``kind`` column and ``t_s`` (when they ended)."""
    req = view.requests[view.requests["status"] != "ok"].copy()
    req["kind"] = [
        _kind(s, h, m)
        for s, h, m in zip(req["status"], req["http_status"], req["error"], strict=True)
    ]
    req["t_s"] = req["end_s"]
    # Rare kinds beyond the most frequent MAX_KINDS share one row, so the figure stays readable.
    counts = req["kind"].value_counts()
    top = list(counts.sort_values(ascending=False, kind="mergesort").index[:MAX_KINDS])
    req.loc[~req["kind"].isin(top), "kind"] = "(other kinds)"
    return req


def _short(text: str) -> str:
    return text if len(text) <= _LABEL_CHARS else text[: _LABEL_CHARS - 1] + "…"


def errors_figure(view: RunView) -> go.Figure | None:
    """The errors figure, or None when every request succeeded."""
    failed = error_kinds(view)
    if failed.empty:
        return None
    counts = failed.groupby("kind").agg(n=("request_id", "size"), status=("status", "first"))
    counts = counts.sort_values("n", ascending=True, kind="mergesort")
    kinds = list(counts.index)
    labels = [escape(_short(k)) for k in kinds]
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.4, 0.6],
        horizontal_spacing=0.04,
        shared_yaxes=True,
        subplot_titles=("Count by kind", "When (each failed request at its end)"),
    )
    colors = [color_for(3) if s == "error" else color_for(1) for s in counts["status"]]
    fig.add_trace(
        go.Bar(
            y=labels,
            x=counts["n"],
            orientation="h",
            marker_color=colors,
            showlegend=False,
            text=counts["n"],
            textposition="auto",
            name="count",
            customdata=[escape(k) for k in kinds],
            hovertemplate=hover_lines(["%{customdata}", "%{x} requests"]),
        ),
        row=1,
        col=1,
    )
    position = {k: labels[i] for i, k in enumerate(kinds)}
    for status, color in (("error", color_for(3)), ("cancelled", color_for(1))):
        part = failed[failed["status"] == status]
        if part.empty:
            continue
        fig.add_trace(
            go.Scatter(
                x=part["t_s"].to_numpy(np.float64),
                y=[position[k] for k in part["kind"]],
                mode="markers",
                name=status,
                marker={"color": color, "size": 8, "symbol": "x"},
                customdata=np.stack(
                    [part["request_id"].astype(str).map(escape), part["kind"].map(escape)], axis=1
                ),
                hovertemplate=hover_lines(
                    ["request %{customdata[0]}", "%{customdata[1]}", "t = %{x:,.2f} s"]
                ),
            ),
            row=1,
            col=2,
        )
    fig.update_xaxes(title_text="requests", row=1, col=1)
    fig.update_xaxes(
        title_text="seconds from the run's start", range=[0, view.run_end_s * 1.02], row=1, col=2
    )
    fig.update_yaxes(automargin=True, row=1, col=1)
    total = len(failed)
    errors = int((failed["status"] == "error").sum())
    apply_layout(
        fig,
        f"Errors: {errors:,} failed, {total - errors:,} cancelled of "
        f"{len(view.requests):,} requests",
        180 + 28 * len(kinds),
    )
    return fig
