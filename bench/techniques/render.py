"""techniques.json's cells as text, written into the document once (``cell_texts``) so that the
terminal table here and the HTML page (dashboards.pages.techniques) show the same words."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from bench.experiments.ablate import format_figure
from bench.experiments.ablation_metrics import ABLATION_COLUMNS
from bench.experiments.switch_quality import quality_text
from bench.run.messages import print_path
from bench.run.terminal import print_table
from bench.techniques.quality import WRONG_OUTPUT
from perfmodel.files import JSONObject

_UNITS = {key: (title, unit) for key, title, unit in ABLATION_COLUMNS}


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def claimed_text(row: JSONObject) -> str:
    low, high = row["claimed"]
    if low is None or high is None:
        return row["claim"]
    span = _x(low) if abs(high - low) < 1e-9 else f"{_x(low)}-{_x(high)}"
    return f"{row['claim']} [{span} {row['metric_title']} {row['ratio']}]"


def wrong_output(row: JSONObject) -> bool:
    """Whether the row's technique gave a wrong answer (bench.techniques.quality)."""
    return row.get("placement") == WRONG_OUTPUT


def measured_text(row: JSONObject) -> str:
    if wrong_output(row):
        return "wrong output: no speedup shown (see quality)"
    m = row["measured"]
    unit = row["unit"]
    parts = [
        f"{_x(m['value'])} ({row['metric_title']} {format_figure(m['off'], unit)} -> "
        f"{format_figure(m['on'], unit)})"
    ]
    for key, (off, on) in m["also"].items():
        title, also_unit = _UNITS[key]
        parts.append(f"{title} {format_figure(off, also_unit)} -> {format_figure(on, also_unit)}")
    est = m.get("speculation")
    if est:
        parts.append(
            f"formula E[acc+1]/(K T_draft + T_verify) = {_x(est['speedup'])} "
            f"(E[acc+1] {est['expected_tokens_per_step']:.2f}, K {est['k']})"
        )
    return "; ".join(parts)


def predicted_text(prediction: JSONObject) -> str:
    if prediction.get("value") is None:
        return f"- ({prediction.get('note', 'not predicted')})"
    return _x(prediction["value"])


def cell_texts(doc: JSONObject) -> JSONObject:
    """``doc`` with each row's ``text``: claimed, measured, one predicted per device, reason."""
    for row in doc["rows"]:
        row["text"] = {
            "claimed": claimed_text(row),
            "measured": measured_text(row),
            "quality": quality_text(row.get("quality")),
            "predicted": [predicted_text(p) for p in row["predictions"]],
            "reason": row["reason"] or "agrees",
        }
    return doc


def render_techniques(path: Path, console: Console) -> None:
    """Print techniques.json as one table."""
    doc = json.loads(path.read_text())
    quick = " (--quick)" if doc.get("quick") else ""
    table = Table(title=f"What each optimization buys{quick}: measured here, predicted on GPUs")
    table.add_column("technique", min_width=12)
    table.add_column("claim", overflow="fold", max_width=34)
    table.add_column("measured here", overflow="fold", max_width=40)
    table.add_column("quality", overflow="fold", max_width=40)
    for device in doc["devices"]:
        table.add_column(f"predicted {device}", justify="right", max_width=14, overflow="fold")
    table.add_column("why they differ", overflow="fold", max_width=48)
    for row in doc["rows"]:
        text = row["text"]
        cells = [
            row["title"],
            text["claimed"],
            text["measured"],
            text["quality"],
            *text["predicted"],
            text["reason"],
        ]
        # Text, not markup: "E[acc+1]" would read as a style tag.
        table.add_row(*(Text(c) for c in cells))
    print_table(console, table)
    print_path(console, "techniques", path)
