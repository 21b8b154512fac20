"""The ablation page: what each switch bought.

Input contract (:class:`AblationInput`): run folders of one scenario (same seed, same requests),
one per setting, with a label per setting ("batching=static"); the first is the baseline.
Optional ``extra`` figures per run (weight bytes, prefix hit rate, acceptance rate, KV memory:
whatever the ablation measured beside summary.json) are drawn and tabulated too.
Figures: each key metric per setting as bars, labelled with its ratio to the baseline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dashboards.pages.compare import deltas_table_html
from dashboards.pages.deltas import delta_rows, summary_value
from dashboards.pages.page import Page, Section, html_table, write_page
from dashboards.runview import load_run_view
from dashboards.style import apply_layout, color_for, escape, fmt, hover_lines
from results.figures.machine_load import busy_lines

__all__ = [
    "KEY_METRICS",
    "AblationInput",
    "ablation_input_from_json",
    "build_ablation_page",
    "write_ablation_report",
]

# (summary path, title, better): the ablation table's figures that summary.json holds.
KEY_METRICS: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("throughput", "output_tok_s"), "Output tokens/s", "higher"),
    (("per_user_tps", "p50"), "Per-user TPS p50 (tok/s)", "higher"),
    (("ttft_ms", "p50"), "TTFT p50 (ms)", "lower"),
    (("ttft_ms", "p99"), "TTFT p99 (ms)", "lower"),
)


@dataclass(frozen=True)
class AblationInput:
    """An ablation to draw.

    runs: one run folder per setting; settings: a label per run (the first is the baseline).
    extra: optional, per run, more figures by name ({"weight_bytes": 1.2e9,
    "prefix_hit_rate": 0.62}), drawn and tabulated with their ratio to the baseline; a name a
    run lacks (or None) shows as "–".
    """

    runs: Sequence[Path]
    settings: Sequence[str]
    title: str = ""
    extra: Sequence[Mapping[str, float | None]] | None = None

    def __post_init__(self) -> None:
        if len(self.runs) != len(self.settings) or not self.runs:
            raise ValueError(
                f"AblationInput: {len(self.runs)} runs and {len(self.settings)} "
                "settings; give one setting label per run (at least one)"
            )
        if self.extra is not None and len(self.extra) != len(self.runs):
            raise ValueError(
                f"AblationInput: extra has {len(self.extra)} entries for {len(self.runs)} runs"
            )


def _ratio(value: float | None, base: float | None) -> str:
    if value is None or base is None or base == 0:
        return "–"
    return f"×{value / base:.2f}"


def _bars(
    titles: Sequence[str],
    columns: Sequence[Sequence[float | None]],
    settings: Sequence[str],
    title: str,
) -> go.Figure:
    """One bar panel per metric; each bar one setting, labelled value and ratio to the first."""
    ncols = 2
    nrows = -(-len(titles) // ncols)
    fig = make_subplots(
        rows=nrows,
        cols=ncols,
        subplot_titles=[escape(t) for t in titles],
        vertical_spacing=0.18 if nrows > 1 else 0.1,
        horizontal_spacing=0.08,
    )
    names = [escape(s) for s in settings]
    for k, values in enumerate(columns):
        base = values[0]
        fig.add_trace(
            go.Bar(
                x=names,
                y=values,
                marker_color=[color_for(i) for i in range(len(values))],
                text=[f"{fmt(v)} ({_ratio(v, base)})" if v is not None else "–" for v in values],
                textposition="auto",
                showlegend=False,
                name=escape(titles[k]),
                hovertemplate=hover_lines(
                    [f"<b>{escape(titles[k])}</b>", "%{x}: %{y:,.4g}", "%{text} of the baseline"]
                ),
            ),
            row=k // ncols + 1,
            col=k % ncols + 1,
        )
    fig.update_yaxes(rangemode="tozero")
    apply_layout(fig, title, 300 * nrows + 90, legend=False)
    return fig


def build_ablation_page(ablation: AblationInput) -> Page:
    """The ablation page; the first setting is the baseline every ratio divides by."""
    views = [load_run_view(p, s) for p, s in zip(ablation.runs, ablation.settings, strict=True)]
    settings = [v.label for v in views]
    summaries = [v.summary for v in views]
    key = _bars(
        [title for _, title, _ in KEY_METRICS],
        [[summary_value(s, path) for s in summaries] for path, _, _ in KEY_METRICS],
        settings,
        f"What each setting bought (ratios to {settings[0]})",
    )
    sections = [
        Section(
            "key",
            "Key figures",
            "Same scenario, same requests; only the setting differs. "
            "Higher is better for tokens/s, lower for TTFT.",
            key,
        ),
        Section(
            "table",
            "All figures against the baseline",
            "",
            html=deltas_table_html(delta_rows(summaries), settings),
        ),
    ]
    if ablation.extra and any(_number(v) is not None for e in ablation.extra for v in e.values()):
        # Figures no setting recorded (no steps, no speculation) would be empty panels.
        names = sorted(
            {n for extra in ablation.extra for n, v in extra.items() if _number(v) is not None}
        )
        columns = [[_number(extra.get(n)) for extra in ablation.extra] for n in names]
        rows = [
            [n, *(fmt(v) for v in col), *(_ratio(v, col[0]) for v in col[1:])]
            for n, col in zip(names, columns, strict=True)
        ]
        header = ["figure", *settings, *(f"{s} / {settings[0]}" for s in settings[1:])]
        sections.append(
            Section(
                "extra",
                "What the ablation measured beside the summary",
                "",
                _bars(names, columns, settings, "Other figures per setting"),
                html=html_table(header, rows),
            )
        )
    notes = [f"{v.label}: {n.text}" for v in views for n in v.notes if n.topic == "run"]
    return Page(
        title=ablation.title or "Ablation: " + " vs ".join(settings),
        subtitle=f"baseline: {settings[0]}",
        facts=[(s, str(p)) for s, p in zip(settings, ablation.runs, strict=True)],
        notes=notes,
        notes_heading="What these runs did not record",
        sections=sections,
        # As on a run's page: a setting measured on a busy machine heads the page.
        banner=[f"{v.label}: {line}" for v in views for line in busy_lines(v.summary)],
    )


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


# ablation.json's columns that summary.json already holds (drawn as key figures above).
_SUMMARY_COLUMNS = frozenset({"output_tok_s", "tps_p50", "ttft_p50_ms", "ttft_p99_ms"})


def ablation_input_from_json(path: Path) -> AblationInput:
    """The AblationInput of an ``ablation.json`` written by `bench ablate`
    (bench.experiments.ablate): its rows' run folders and labels, and its other columns as
    ``extra`` figures.

    Raises ValueError naming the file when it is not such a document.
    """
    import json

    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        rows, columns = doc["rows"], doc.get("columns") or []
        names = {c["key"]: f"{c.get('title', c['key'])} ({c.get('unit', '')})" for c in columns}
        runs = [Path(row["run"]) for row in rows]
        settings = [str(row.get("label") or row["run"]) for row in rows]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not an ablation.json of `bench ablate`: {exc}") from exc
    extra = [
        {names[k]: _number(row.get(k)) for k in names if k not in _SUMMARY_COLUMNS} for row in rows
    ]
    title = "Ablation: " + ", ".join(
        f"{k}={'/'.join(map(str, v))}" for k, v in (doc.get("switches") or {}).items()
    )
    return AblationInput(runs=runs, settings=settings, title=title, extra=extra)


def write_ablation_report(ablation: AblationInput, out: Path) -> Path:
    """Write the ablation page to ``out`` and return its path."""
    return write_page(build_ablation_page(ablation), out)
