"""The trend page of `bench history trend METRIC`: one metric over time, a point per run.

A line per series (scenario, engine, model, hardware: a figure of one is not compared with
another's) and, within it, per group (engine version, commit or hardware); runs marked not
valid or not usable, where asked for, are drawn apart (grey crosses, their own legend entry)
and left out of the change points; each change point is a dashed line at its run, labelled
with its size. Clicking a point opens its run's report.html; the table below links to each.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

import plotly.graph_objects as go

from dashboards.pages.page import Page, Section, write_page
from dashboards.style import apply_layout, color_for, escape, fmt
from perfmodel.files import JSONView

__all__ = ["SERIES_KEYS", "build_trend_page", "series_label", "write_trend_page"]

# What makes a series (results.history.series): runs differing in one are on separate lines.
SERIES_KEYS = ("scenario", "engine", "model", "hardware")

_INVALID = "#9aa0a6"
# Opens a clicked point's report (its customdata) in a new tab.
_CLICK = (
    "<script>document.getElementById('fig-trend').on('plotly_click', function (e) {"
    " var url = e.points[0].customdata; if (url) { window.open(url, '_blank'); } });</script>"
)


def _report_url(run: JSONView) -> str:
    return (Path(str(run["path"])) / "report.html").resolve().as_uri()


def _hover(run: JSONView, metric: str) -> str:
    lines = [
        f"{metric}: {fmt(run['value'])}",
        f"run {run['run_id']}",
        str(run["started_utc"]),
        f"commit {run.get('git_commit') or '-'}",
        f"engine {run.get('engine_version') or '-'}",
        str(run.get("hardware_label") or ""),
    ]
    return "<br>".join(escape(x) for x in lines)


def series_label(run: JSONView, runs: Sequence[JSONView]) -> str:
    """``run``'s series among ``runs``: its scenario, and each other series key in which
    ``runs`` differ."""
    keys = [k for k in SERIES_KEYS[1:] if len({str(r.get(k)) for r in runs}) > 1]
    return " · ".join(str(run.get(k) or "-") for k in ("scenario", *keys))


def _figure(
    runs: Sequence[JSONView], metric: str, by: str, changes: Sequence[JSONView]
) -> go.Figure:
    fig = go.Figure()
    good = [r for r in runs if r["valid"] and r["usable"]]
    several = len({series_label(r, runs) for r in runs}) > 1

    def line(r: JSONView) -> tuple[str, str]:
        return series_label(r, runs), str(r.get(by) or "-")

    for i, (series, group) in enumerate(dict.fromkeys(line(r) for r in good)):
        members = [r for r in good if line(r) == (series, group)]
        fig.add_trace(
            go.Scatter(
                x=[r["started_utc"] for r in members],
                y=[r["value"] for r in members],
                mode="markers+lines",
                name=f"{series} · {by} {group}" if several else f"{by} {group}",
                marker={"color": color_for(i), "size": 9},
                line={"width": 1, "color": color_for(i)},
                customdata=[_report_url(r) for r in members],
                hovertext=[_hover(r, metric) for r in members],
                hoverinfo="text",
            )
        )
    bad = [r for r in runs if not (r["valid"] and r["usable"])]
    if bad:
        fig.add_trace(
            go.Scatter(
                x=[r["started_utc"] for r in bad],
                y=[r["value"] for r in bad],
                mode="markers",
                name="not valid or not usable",
                marker={"color": _INVALID, "symbol": "x", "size": 9},
                customdata=[_report_url(r) for r in bad],
                hovertext=[_hover(r, metric) for r in bad],
                hoverinfo="text",
            )
        )
    for change in changes:
        fig.add_vline(x=change["first_run"]["started_utc"], line={"dash": "dash", "width": 1})
        fig.add_annotation(
            x=change["first_run"]["started_utc"],
            y=1.0,
            yref="paper",
            showarrow=False,
            text=escape(f"{change['change_pct']:+.1f}% (p={change['pvalue']:.1g})"),
        )
    apply_layout(fig, f"{metric} over time", 480)
    fig.update_xaxes(title_text="run started (UTC)")
    fig.update_yaxes(title_text=metric)
    return fig


def _table(runs: Sequence[JSONView], by: str) -> str:
    columns = ("started (UTC)", "run", "series", by, "valid", "value")
    head = "".join(f"<th>{h}</th>" for h in columns)
    body = []
    for r in runs:
        link = f'<a href="{html.escape(_report_url(r))}">{html.escape(str(r["run_id"]))}</a>'
        ok = "yes" if r["valid"] and r["usable"] else "no"
        cells = [
            html.escape(str(r["started_utc"])),
            link,
            html.escape(series_label(r, runs)),
            html.escape(str(r.get(by) or "-")),
            ok,
            html.escape(fmt(r["value"])),
        ]
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return (
        f'<table class="data"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    )


def build_trend_page(
    runs: Sequence[JSONView],
    metric: str,
    by: str,
    changes: Sequence[JSONView] = (),
    history: str = "",
) -> Page:
    """The page of ``runs`` (results.history.query.metric_series' rows as dicts: run_id, path,
    started_utc, valid, usable, value, the series keys and the column ``by``), with ``changes``
    (results.history.series.SeriesChange.to_dict) marked."""
    found = [
        f"{c['metric']}: {c['change_pct']:+.1f}% at run {c['first_run']['run_id']} "
        f"(commit {c['first_run']['git_commit'] or '-'}, "
        f"was {c['last_run_before']['git_commit'] or '-'}),"
        f" p = {c['pvalue']:.2g}"
        for c in changes
    ]
    return Page(
        title=f"Trend of {metric}",
        subtitle=f"{len(runs)} runs of the history {history}, grouped by {by}",
        sections=[
            Section(
                "trend",
                f"{metric} per run",
                "Each point is a run: click it for its report. "
                "Dashed lines are change points (E-divisive means, Student t-test).",
                _figure(runs, metric, by, changes),
                findings=found,
                html=_CLICK + _table(runs, by),
            ),
        ],
    )


def write_trend_page(page: Page, out: Path) -> Path:
    """Write the trend page to ``out``; returns its path."""
    return write_page(page, out)
