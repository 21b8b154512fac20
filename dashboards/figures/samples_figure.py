"""Every series samples.parquet holds, raw, one at a time through a dropdown.

The timeline shows the series it knows by name; this figure hides nothing a probe recorded, so a
new probe's data can be looked at before any panel is made for it.
"""

from __future__ import annotations

import plotly.graph_objects as go

from dashboards.figures.samples import all_series
from dashboards.figures.series import bin_centers, bin_edges, bin_mean, bin_width_s
from dashboards.runview import RunView
from dashboards.style import apply_layout, color_for, escape, hover_lines, top_right_menu

__all__ = ["MAX_RAW_POINTS", "samples_figure"]

MAX_RAW_POINTS = 2000


def samples_figure(view: RunView) -> go.Figure | None:
    """A dropdown over every recorded (source, name, labels) series; None without samples."""
    series = all_series(view.samples)
    if not series:
        return None
    fig = go.Figure()
    end_s = max(view.run_end_s, 1e-3)
    edges = bin_edges(0.0, end_s, bin_width_s(end_s, max_bins=600))
    for index, s in enumerate(series):
        if s.t_s.size > MAX_RAW_POINTS:
            x, y = bin_centers(edges), bin_mean(s.t_s, s.values, edges)
        else:
            x, y = s.t_s, s.values
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                mode="lines+markers" if x.size < 200 else "lines",
                name=escape(s.name),
                visible=index == 0,
                connectgaps=True,
                marker={"size": 4},
                line={"color": color_for(index), "width": 1.5},
                hovertemplate=hover_lines(
                    [f"<b>{escape(s.name)}</b>", "%{y:,.4g}", "t = %{x:,.2f} s"]
                ),
            )
        )
    buttons = [
        {
            "label": escape(s.name),
            "method": "update",
            "args": [{"visible": [j == i for j in range(len(series))]}],
        }
        for i, s in enumerate(series)
    ]
    fig.update_xaxes(title_text="seconds from the run's start", range=[0, end_s])
    apply_layout(
        fig,
        f"All recorded samples ({len(series)} series; pick one)",
        380,
        legend=False,
    )
    top_right_menu(fig, {"buttons": buttons, "direction": "down", "showactive": True})
    return fig
