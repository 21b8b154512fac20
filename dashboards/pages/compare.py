"""`bench compare RUN RUN ...`: several runs on one page, each against the first.

Sections: the table of deltas (and the same as a bar chart of % changes, green where better),
overlaid latency CDFs, overlaid per-user TPS, and the runs' timelines overlaid on one shared
axis (each from its own start). A run that lacks a table another has is named in a note.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import plotly.graph_objects as go

from dashboards.figures.latency import latency_cdf_figure
from dashboards.figures.timeline import timeline_figure
from dashboards.figures.user_tps import per_user_tps_figure
from dashboards.pages.deltas import DeltaRow, delta_rows
from dashboards.pages.page import Page, Section, html_table, write_page
from dashboards.runview import RunView, load_run_view
from dashboards.style import apply_layout, color_for, escape, fmt, hover_lines

__all__ = [
    "build_compare_page",
    "default_compare_path",
    "deltas_figure",
    "deltas_table_html",
    "unique_labels",
    "write_compare_report",
]

_BETTER, _WORSE, _SAME = "#1a7f37", "#cf222e", "#8c959f"
_PATTERNS = ("", "/", "x", ".", "\\", "+")


def unique_labels(paths: Sequence[Path], labels: Sequence[str] | None = None) -> list[str]:
    """Labels for legends: the given ones, else each folder's name; duplicates get #2, #3..."""
    if labels is not None and len(labels) != len(paths):
        raise ValueError(f"got {len(labels)} labels for {len(paths)} runs; give one per run")
    base = list(labels) if labels is not None else [Path(p).name for p in paths]
    out: list[str] = []
    for name in base:
        candidate, n = name, 2
        while candidate in out:
            candidate, n = f"{name} #{n}", n + 1
        out.append(candidate)
    return out


def deltas_table_html(rows: Sequence[DeltaRow], labels: Sequence[str]) -> str:
    """The deltas as an HTML table: values, then each later run's change against the first."""
    header = ["metric", *(f"{label}" for label in labels), *(f"Δ {label}" for label in labels[1:])]
    cells, classes = [], []
    for row in rows:
        unit = row.metric.unit
        values = [f"{fmt(v)} {unit}" if v is not None else "–" for v in row.values]
        changes = ["–" if c is None else f"{c:+.1f}%" for c in row.change_pct[1:]]
        cells.append([f"{row.metric.label} ({row.metric.better} is better)", *values, *changes])
        classes.append(
            ["", *([""] * len(values)), *(row.verdict(i) for i in range(1, len(labels)))]
        )
    return html_table(header, cells, classes)


def deltas_figure(rows: Sequence[DeltaRow], labels: Sequence[str]) -> go.Figure | None:
    """% change of each metric against the first run, one bar group per later run."""
    if len(labels) < 2 or not rows:
        return None
    fig = go.Figure()
    names = [f"{r.metric.label} ({r.metric.unit})" for r in rows]
    for index in range(1, len(labels)):
        verdicts = [r.verdict(index) for r in rows]
        fig.add_trace(
            go.Bar(
                y=names,
                x=[r.change_pct[index] for r in rows],
                orientation="h",
                name=escape(labels[index]),
                marker={
                    "color": [
                        _BETTER if v == "better" else _WORSE if v == "worse" else _SAME
                        for v in verdicts
                    ],
                    "line": {"color": color_for(index), "width": 2},
                    # Color says better or worse; the hatching and outline say which run.
                    "pattern": {"shape": _PATTERNS[(index - 1) % len(_PATTERNS)]},
                },
                customdata=[
                    [fmt(r.values[0]), fmt(r.values[index]), v or "same"]
                    for r, v in zip(rows, verdicts, strict=True)
                ],
                hovertemplate=hover_lines(
                    [
                        f"<b>{escape(labels[index])}</b>",
                        "%{y}",
                        "%{customdata[0]} → %{customdata[1]}",
                        "%{x:+.1f}% (%{customdata[2]})",
                    ]
                ),
            )
        )
    fig.update_yaxes(autorange="reversed", automargin=True)
    fig.update_xaxes(
        title_text=f"change against {labels[0]} (%)", ticksuffix="%", zeroline=True, zerolinewidth=2
    )
    apply_layout(
        fig,
        "Change against the first run (green: better, red: worse)",
        120 + 26 * len(rows) * (len(labels) - 1),
    )
    fig.update_layout(barmode="group")
    return fig


def build_compare_page(views: Sequence[RunView]) -> Page:
    """The compare page of ``views`` (the first is the baseline)."""
    labels = [v.label for v in views]
    rows = delta_rows([v.summary for v in views])
    timeline, missing = timeline_figure(views)
    notes = [f"{v.label}: {n.text}" for v in views for n in v.notes if n.topic != "timeline"]
    if missing:
        notes.append("Timeline panels no run recorded: " + ", ".join(missing) + ".")
    sections = [
        Section(
            "deltas",
            "Deltas",
            f"Every run against the first ({labels[0]}).",
            deltas_figure(rows, labels),
            html=deltas_table_html(rows, labels),
        ),
        Section(
            "latency",
            "Latency distributions",
            "Overlaid CDFs, measured windows.",
            latency_cdf_figure(views),
        ),
        Section(
            "tps", "Per-user TPS", "Overlaid: the speed each user saw.", per_user_tps_figure(views)
        ),
        Section(
            "timeline",
            "Timelines",
            "Each run from its own start, on one shared axis; "
            "one color per run, one dash style per series.",
            timeline,
        ),
    ]
    return Page(
        title=f"Compare {len(views)} runs",
        subtitle=" · ".join(labels),
        facts=[(f"run {i + 1}", str(v.path)) for i, v in enumerate(views)],
        notes=notes,
        sections=sections,
        notes_heading="What these runs did not record",
    )


def default_compare_path(first_run: Path) -> Path:
    """``<runs dir>/compare-<UTC time>.html`` beside the first run's folder."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path(first_run).resolve().parent / f"compare-{stamp}.html"


def write_compare_report(
    run_folders: Sequence[Path], out: Path | None = None, labels: Sequence[str] | None = None
) -> Path:
    """Write the compare page of ``run_folders`` (2 or more) to ``out`` and return its path.

    Raises ValueError for fewer than two runs or a wrong number of labels, and
    results.folder.run_folder.RunFolderError for a path that is not a run folder.
    """
    if len(run_folders) < 2:
        raise ValueError(f"compare needs at least two run folders, got {len(run_folders)}")
    names = unique_labels([Path(p) for p in run_folders], labels)
    views = [load_run_view(p, label) for p, label in zip(run_folders, names, strict=True)]
    path = out or default_compare_path(Path(run_folders[0]))
    return write_page(build_compare_page(views), path)
