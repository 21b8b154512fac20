"""The look shared by every figure: colors, fonts, margins, the plotly.js config.

Figures use SVG traces only (no WebGL ``scattergl``): they render without a GPU, in headless
browsers and in CI, and the builders keep point counts small enough (binning, CDF thinning) for
SVG to stay fast.
"""

from __future__ import annotations

import html
import textwrap
from collections.abc import Sequence

import plotly.graph_objects as go

from perfmodel.files import JSONObject

__all__ = [
    "COLORS",
    "MENU_ROW_PX",
    "MODEBAR_BAND_PX",
    "PHASE_COLORS",
    "PLOT_CONFIG",
    "apply_layout",
    "color_for",
    "escape",
    "fmt",
    "hover_lines",
    "menu_top_px",
    "top_right_menu",
    "wrap",
]

# Colorblind-safe (Okabe-Ito), in the order runs and series take them.
COLORS: tuple[str, ...] = (
    "#0072B2",
    "#E69F00",
    "#009E73",
    "#D55E00",
    "#CC79A7",
    "#56B4E9",
    "#F0E442",
    "#000000",
)
PHASE_COLORS: dict[str, str] = {
    "prefill": "#D55E00",
    "decode": "#0072B2",
    "mixed": "#CC79A7",
    "memory-bound": "#56B4E9",
    "compute-bound": "#E69F00",
}
FONT_FAMILY = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"

# Offline: no "edit in Chart Studio" link, no logo; the PNG button saves at twice the resolution.
PLOT_CONFIG: JSONObject = {
    "displaylogo": False,
    "responsive": True,
    "toImageButtonOptions": {"format": "png", "scale": 2},
}


def color_for(index: int) -> str:
    """The ``index``-th color of the palette (it cycles)."""
    return COLORS[index % len(COLORS)]


def escape(text: object) -> str:
    """Text from a run (error messages, labels) made safe for plotly's pseudo-HTML: <, > and &
    become entities plotly renders back; quotes stay (plotly shows &quot; literally)."""
    return html.escape(str(text), quote=False)


def fmt(value: float | int | None, digits: int = 3) -> str:
    """A figure for a label: "–" for None, thousands separators, ``digits`` significant digits
    for small floats and none after the point for large ones."""
    if value is None:
        return "–"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    number = float(value)
    if number != number:  # NaN
        return "–"
    if abs(number) >= 10 ** (digits - 1):
        return f"{number:,.0f}"
    return f"{number:.{digits}g}"


def apply_layout(
    fig: go.Figure,
    title: str,
    height_px: int,
    legend: bool | str = True,
    margin_top_px: int | None = None,
) -> go.Figure:
    """Set the shared look on ``fig`` (in place) and return it.

    ``legend``: True or "top" (one row under the title, for a few series with long names),
    "right" (a column beside the plot, for many series), False (none). Positions are in
    pixels from the top of the figure, so they hold for any height and any subplot titles.
    """
    place = "top" if legend is True else legend or None
    top_px = margin_top_px or (110 if place == "top" else 70)
    legend_layout: dict[str, object] = {"font": {"size": 11}}
    if place == "top":
        legend_layout |= {
            "orientation": "h",
            "yref": "container",
            "y": 1 - 42 / height_px,
            "yanchor": "top",
            "x": 0.0,
            "xanchor": "left",
        }
    elif place == "right":
        legend_layout |= {
            "orientation": "v",
            "x": 1.01,
            "xanchor": "left",
            "y": 1.0,
            "yanchor": "top",
        }
    fig.update_layout(
        title={
            "text": title,
            "x": 0.0,
            "xanchor": "left",
            "font": {"size": 16},
            "yref": "container",
            "y": 1 - 12 / height_px,
            "yanchor": "top",
        },
        height=height_px,
        template="plotly_white",
        font={"family": FONT_FAMILY, "size": 12},
        margin={"l": 70, "r": 240 if place == "right" else 30, "t": top_px, "b": 50},
        showlegend=place is not None,
        legend=legend_layout,
        hoverlabel={"font": {"family": FONT_FAMILY}},
    )
    return fig


# The band at the top right of every figure that plotly's toolbar (the modebar: zoom, pan, PNG)
# takes when the pointer is over the figure, in pixels from the figure's top (its icons are 25 px
# tall, 2 px from the top). Menus sit below it, never under it.
MODEBAR_BAND_PX = 32
# One row of buttons or a closed dropdown, with its padding.
MENU_ROW_PX = 30


def top_right_menu(fig: go.Figure, menu: JSONObject) -> None:
    """Place an update menu (buttons, dropdown) at the right, just under the modebar's band.

    The top margin grows to hold the menu's row, and a legend laid out in one row under the
    title ("top") moves down under the menu, so neither the toolbar nor the legend covers it.
    Menus are positioned in plot-area fractions only, so the pixel offset is converted with the
    figure's height and margins (call after :func:`apply_layout`).
    """
    layout = fig.layout
    height, top, bottom = layout.height or 450, layout.margin.t or 0, layout.margin.b or 0
    menu_top_px = MODEBAR_BAND_PX
    needed_top = menu_top_px + MENU_ROW_PX + 8
    legend = layout.legend
    if layout.showlegend and legend.orientation == "h" and legend.yref == "container":
        legend_top_px = menu_top_px + MENU_ROW_PX
        top = max(top, needed_top) + MENU_ROW_PX
        fig.update_layout(legend={"y": 1 - legend_top_px / height})
    top = max(top, needed_top)
    fig.update_layout(margin={"t": top})
    plot_px = max(height - top - bottom, 1)
    placed = {"x": 1.0, "xanchor": "right", "y": 1 + (top - menu_top_px) / plot_px}
    fig.update_layout(updatemenus=[*layout.updatemenus, {**menu, **placed, "yanchor": "top"}])


def menu_top_px(fig: go.Figure, index: int = 0) -> float:
    """Where the top of update menu ``index`` lies, in pixels from the figure's top (the inverse
    of :func:`top_right_menu`'s placement; for tests and checks)."""
    layout = fig.layout
    height, top, bottom = layout.height or 450, layout.margin.t or 0, layout.margin.b or 0
    plot_px = max(height - top - bottom, 1)
    return top - (layout.updatemenus[index].y - 1) * plot_px


def wrap(text: str, width: int = 60) -> str:
    """``text`` escaped and wrapped into ``<br>``-separated lines of at most ``width`` chars."""
    return "<br>".join(escape(line) for line in textwrap.wrap(text, width)) if text else ""


def hover_lines(lines: Sequence[str]) -> str:
    """A hovertemplate from lines; ``<extra></extra>`` hides the trace-name box."""
    return "<br>".join(lines) + "<extra></extra>"
