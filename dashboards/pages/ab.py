"""`bench ab`'s page: the verdict per metric with its per-pair ratios, then `bench compare`'s page
of one pair's two runs (the first pair: A's run against B's).

The ratios section draws each gated metric's per-pair change B / A - 1 (one point per pair, in
pair order), its interval as a band and its allowance as a dashed line on the worse side, so
that a verdict can be read off the figure: fail when the band lies beyond the line, pass when
it lies within.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import plotly.graph_objects as go

from dashboards.pages.compare import build_compare_page
from dashboards.pages.page import Page, Section, html_table, write_page
from dashboards.runview import load_run_view
from dashboards.style import apply_layout, color_for, escape, hover_lines

__all__ = ["PairRatios", "build_ab_page", "pair_ratios_figure", "write_ab_page"]


@dataclass(frozen=True)
class PairRatios:
    """One gated metric of an A/B: per-pair ratios B / A and the paired verdict.

    Changes and interval bounds in percent (None where no interval was made); ``max_regression_pct``
    is the allowance on the worse side (a drop for higher-is-better metrics)."""

    metric: str
    unit: str
    higher_is_better: bool
    ratios: tuple[float, ...]
    change_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    max_regression_pct: float
    verdict: str
    # The verdict's reason as the A/B recorded it (ab.json's "reason"): for an inconclusive one,
    # a busy or not valid run, too few samples for the rule, or an interval too wide.
    reason: str = ""


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:+.1f}%"


def pair_ratios_figure(metrics: Sequence[PairRatios]) -> go.Figure | None:
    """Per-pair % change of each metric, with its interval band and allowance line."""
    if not metrics:
        return None
    fig = go.Figure()
    for index, m in enumerate(metrics):
        color = color_for(index)
        pairs = list(range(1, len(m.ratios) + 1))
        changes = [100 * (r - 1) for r in m.ratios]
        name = escape(m.metric)
        if m.ci_low_pct is not None and m.ci_high_pct is not None and pairs:
            fig.add_trace(
                go.Scatter(
                    x=[pairs[0], pairs[-1], pairs[-1], pairs[0]],
                    y=[m.ci_low_pct, m.ci_low_pct, m.ci_high_pct, m.ci_high_pct],
                    fill="toself",
                    line={"width": 0},
                    fillcolor=color,
                    opacity=0.15,
                    name=f"{name} CI",
                    legendgroup=name,
                    hoverinfo="skip",
                )
            )
        limit = -m.max_regression_pct if m.higher_is_better else m.max_regression_pct
        fig.add_trace(
            go.Scatter(
                x=[0.5, max(pairs, default=1) + 0.5],
                y=[limit, limit],
                mode="lines",
                line={"color": color, "dash": "dash", "width": 1},
                name=f"{name} allowed",
                legendgroup=name,
                hoverinfo="skip",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=pairs,
                y=changes,
                mode="markers+lines",
                marker={"color": color, "size": 9},
                line={"color": color, "width": 1},
                name=name,
                legendgroup=name,
                hovertemplate=hover_lines([f"<b>{name}</b>", "pair %{x}", "B / A: %{y:+.1f}%"]),
            )
        )
    fig.update_xaxes(title_text="pair", dtick=1)
    fig.update_yaxes(title_text="B / A − 1 (%)", ticksuffix="%", zeroline=True, zerolinewidth=2)
    apply_layout(fig, "Per-pair change of B against A (band: the CI; dashed: the allowance)", 420)
    return fig


def _ratios_table(metrics: Sequence[PairRatios]) -> str:
    header = ["metric", "verdict", "change", "CI", "allowed", "per-pair B / A", "why"]
    rows = []
    for m in metrics:
        ci = "–"
        if m.ci_low_pct is not None and m.ci_high_pct is not None:
            ci = f"{m.ci_low_pct:+.1f}% .. {m.ci_high_pct:+.1f}%"
        word = "drop" if m.higher_is_better else "rise"
        ratios = ", ".join(f"{r:.3f}" for r in m.ratios)
        rows.append(
            [
                f"{m.metric} ({m.unit})",
                m.verdict,
                _pct(m.change_pct),
                ci,
                f"{word} <= {m.max_regression_pct:g}%",
                ratios,
                m.reason if m.verdict == "inconclusive" else "",
            ]
        )
    return html_table(header, rows)


def build_ab_page(
    verdict: str,
    sides: tuple[str, str],
    metrics: Sequence[PairRatios],
    a_runs: Sequence[Path],
    b_runs: Sequence[Path],
) -> Page:
    """The page of an A/B whose verdict is ``verdict``; ``sides`` describe A and B."""
    compare = build_compare_page(
        [load_run_view(a_runs[0], "A (pair 1)"), load_run_view(b_runs[0], "B (pair 1)")]
    )
    ratios = Section(
        "pairs",
        f"Verdict: {verdict}, over {len(a_runs)} pair(s)",
        "Each pair is a run of A and a run of B made back to back; the change is the geometric"
        " mean of the per-pair ratios and its CI a bootstrap over pairs. The sections below"
        " compare the first pair's two runs.",
        pair_ratios_figure(metrics),
        html=_ratios_table(metrics),
    )
    facts = [("A", sides[0]), ("B", sides[1]), ("pairs", str(len(a_runs)))]
    return replace(
        compare,
        title=f"A/B: {verdict}",
        subtitle=f"{sides[0]} · {sides[1]}",
        facts=[*facts, *compare.facts],
        sections=[ratios, *compare.sections],
    )


def write_ab_page(
    path: Path,
    verdict: str,
    sides: tuple[str, str],
    metrics: Sequence[PairRatios],
    a_runs: Sequence[Path],
    b_runs: Sequence[Path],
) -> Path:
    """Write the A/B page to ``path`` and return it."""
    return write_page(build_ab_page(verdict, sides, metrics, a_runs, b_runs), path)
