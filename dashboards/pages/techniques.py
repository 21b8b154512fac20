"""The techniques page: what each optimization buys, measured here, predicted on GPUs.

Input contract: a techniques.json as `bench techniques` writes it (bench.techniques.table):
``rows``, each with ``title``, ``claimed`` [low, high] (None where the lectures give no
figure), ``measured.value``, ``predictions`` [{``device``, ``value``}], and ``text`` (the
claimed, measured, predicted and reason cells, worded once by bench.techniques.render);
``devices``, ``hardware``, ``quick``, ``started_utc``.
Figures: each technique's ratio measured here and predicted per device against the claimed
range (log scale, so 0.25x and 4x sit equally far from 1x); the table below holds every cell.
"""

from __future__ import annotations

import json
from pathlib import Path

import plotly.graph_objects as go

from dashboards.pages.page import Page, Section, html_table, write_page
from dashboards.style import apply_layout, color_for
from perfmodel.files import JSONObject

__all__ = ["build_techniques_page", "write_techniques_page"]


def _figure(doc: JSONObject) -> go.Figure:
    rows = doc["rows"]
    titles = [r["title"] for r in rows]
    fig = go.Figure()
    claimed = [r["claimed"] for r in rows]
    fig.add_trace(
        go.Bar(
            name="claimed range",
            x=titles,
            base=[c[0] if c[0] is not None else None for c in claimed],
            y=[(c[1] - c[0]) if None not in c else None for c in claimed],
            marker={"color": "rgba(120,120,120,0.25)"},
            hovertemplate="%{x}: claimed %{base:.2f}x and up<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            name="measured here",
            x=titles,
            y=[r["measured"]["value"] for r in rows],
            mode="markers",
            marker={"size": 14, "symbol": "diamond", "color": color_for(0)},
        )
    )
    for i, device in enumerate(doc["devices"]):
        fig.add_trace(
            go.Scatter(
                name=f"predicted: {device}",
                x=titles,
                y=[r["predictions"][i]["value"] for r in rows],
                mode="markers",
                marker={"size": 9, "color": color_for(i + 1)},
            )
        )
    fig.update_yaxes(type="log", title_text="ratio (technique on vs off)")
    return apply_layout(fig, "Measured, predicted and claimed ratio per technique", 520)


def build_techniques_page(doc: JSONObject) -> Page:
    """The page of one techniques.json document."""
    header = ["technique", "claim", "measured here", "quality",
              *(f"predicted: {d}" for d in doc["devices"]), "why they differ"]  # fmt: skip
    rows = [
        [
            r["title"],
            r["text"]["claimed"],
            r["text"]["measured"],
            r["text"].get("quality", "-"),
            *r["text"]["predicted"],
            r["text"]["reason"],
        ]
        for r in doc["rows"]
    ]
    hw = doc.get("hardware") or {}
    facts = [
        ("measured on", f"{hw.get('cpu', '?')} ({hw.get('cpu_count_logical', '?')} logical CPUs)"),
        ("started", str(doc.get("started_utc", ""))),
        ("workloads", "--quick" if doc.get("quick") else "full"),
    ]
    busy = [
        f"{r['title']}: other processes used {load['other_cpu_share']:.0%} of the CPU"
        for r in doc["rows"]
        if isinstance(load := r["measured"].get("machine_load"), dict) and load.get("busy")
    ]
    return Page(
        title="What each optimization buys",
        subtitle="The lectures' claims, measured here with the reference engine (one fresh "
        "engine per setting, same requests) and predicted by the simulated device.",
        facts=facts,
        notes=busy,
        notes_heading="Runs on a busy machine",
        sections=[
            Section("ratios", "Ratios against the claims", "", _figure(doc)),
            Section("table", "The table", "", html=html_table(header, rows)),
        ],
    )


def write_techniques_page(techniques_json: Path, out: Path) -> Path:
    """Write the page of ``techniques_json`` to ``out``; returns ``out``."""
    doc = json.loads(Path(techniques_json).read_text())
    return write_page(build_techniques_page(doc), out)
