"""A gate's verdicts as a rich table (terminal), JUnit XML (CI test reports) and Markdown (a CI
step summary, e.g. ``$GITHUB_STEP_SUMMARY``).

JUnit mapping: one testcase per metric; fail is a ``<failure>``, inconclusive an ``<error
type="inconclusive">``. Inconclusive is not a pass (the gate exits 2), and test reporters show
skipped tests as harmless, so it is reported as an error that names its reason.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from bench.gate.verdict import GateReport, MetricResult
from bench.run.terminal import print_table

__all__ = [
    "input_error_junit",
    "input_error_markdown",
    "render_gate",
    "to_junit_xml",
    "to_markdown",
    "write_text",
]

_STYLE = {"pass": "green", "fail": "bold red", "inconclusive": "yellow"}
_MARK = {"pass": "✅ pass", "fail": "❌ fail", "inconclusive": "⚠️ inconclusive"}


def _num(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    if 0 < abs(value) < 0.1:  # CPU seconds per token: 0.00153, not 0.00
        return f"{value:.3g}"
    return f"{value:,.2f}" if abs(value) < 1000 else f"{value:,.0f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def _ci(result: MetricResult) -> str:
    if result.ci_low_pct is None or result.ci_high_pct is None:
        return "-"
    return f"{result.ci_low_pct:+.1f}% .. {result.ci_high_pct:+.1f}%"


def _samples(result: MetricResult) -> str:
    return f"{result.samples_baseline} / {result.samples_candidate} {result.sample_unit}"


def _reason(result: MetricResult) -> str:
    """The verdict's reason, with the between-run spread that widened the CI, if any."""
    if result.run_sd_pct:
        return f"{result.reason} (between-run sd {result.run_sd_pct:.1f}%)"
    return result.reason


def _header(report: GateReport) -> str:
    runs = len(report.candidate_runs)
    return (
        f"{report.verdict.upper()}: {runs} run(s) against {report.baseline_label}"
        f" ({report.baseline_runs} run(s)); {100 * report.confidence:g}% bootstrap CIs,"
        f" {report.resamples} resamples, seed {report.seed}; rules: {report.rules_source}"
    )


def render_gate(report: GateReport, console: Console) -> None:
    """Print the verdict table, the notes and the overall verdict."""
    table = Table(title="Performance gate", box=box.SIMPLE_HEAD, title_justify="left")
    for column in ("metric", "baseline", "candidate", "change", "CI", "allowed", "n (base/cand)"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    table.add_column("verdict")
    for r in report.results:
        table.add_row(
            escape(f"{r.metric} [{r.unit}]"),
            _num(r.baseline),
            _num(r.candidate),
            _pct(r.change_pct),
            _ci(r),
            escape(r.limit_text),
            _samples(r),
            f"[{_STYLE[r.verdict]}]{r.verdict}[/]",
        )
    print_table(console, table)
    for r in report.results:
        if r.verdict != "pass":
            console.print(f"[{_STYLE[r.verdict]}]{escape(r.metric)}[/]: {escape(_reason(r))}")
    for note in report.notes:
        console.print(f"note: {escape(note)}")
    console.print(f"[{_STYLE[report.verdict]}]{escape(_header(report))}[/]")


def to_markdown(report: GateReport) -> str:
    """A Markdown section: overall verdict, one table row per metric, reasons and notes."""
    lines = [
        f"### Performance gate: {_MARK[report.verdict]}",
        "",
        _header(report),
        "",
        "| metric | baseline | candidate | change | CI | allowed | n (base/cand) | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in report.results:
        cells = [f"`{r.metric}` ({r.unit})", _num(r.baseline), _num(r.candidate)]
        cells += [_pct(r.change_pct), _ci(r), r.limit_text, _samples(r), _MARK[r.verdict]]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    lines.append("")
    lines += [f"- **{r.metric}**: {_reason(r)}" for r in report.results]
    lines += [f"- note: {note}" for note in report.notes]
    return "\n".join(lines) + "\n"


def to_junit_xml(report: GateReport) -> str:
    """JUnit XML: a testsuite "perf-gate" with one testcase per metric (see the module doc)."""
    failures = sum(r.verdict == "fail" for r in report.results)
    errors = sum(r.verdict == "inconclusive" for r in report.results)
    suite = ET.Element(
        "testsuite",
        name="perf-gate",
        tests=str(len(report.results)),
        failures=str(failures),
        errors=str(errors),
        skipped="0",
    )
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("verdict", report.verdict),
        ("baseline", report.baseline_label),
        ("confidence", f"{report.confidence:g}"),
        ("resamples", str(report.resamples)),
        ("seed", str(report.seed)),
        ("rules", report.rules_source),
    ):
        ET.SubElement(properties, "property", name=name, value=value)
    for r in report.results:
        case = ET.SubElement(suite, "testcase", classname="perf-gate", name=r.metric, time="0")
        detail = (
            f"baseline {_num(r.baseline)} {r.unit}, candidate {_num(r.candidate)} {r.unit},"
            f" change {_pct(r.change_pct)}, CI {_ci(r)}, allowed {r.limit_text},"
            f" n {_samples(r)}: {_reason(r)}"
        )
        if r.verdict == "fail":
            ET.SubElement(case, "failure", message=r.reason, type="regression").text = detail
        elif r.verdict == "inconclusive":
            ET.SubElement(case, "error", message=r.reason, type="inconclusive").text = detail
        else:
            ET.SubElement(case, "system-out").text = detail
    if report.notes:
        ET.SubElement(suite, "system-out").text = "\n".join(report.notes)
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, "unicode") + "\n"


def input_error_markdown(message: str) -> str:
    """The Markdown of a gate that could not judge its input (exit code 2)."""
    return f"### Performance gate: ⚠️ unusable input\n\n{message}\n"


def input_error_junit(message: str) -> str:
    """JUnit XML of a gate that could not judge its input: one errored testcase."""
    suite = ET.Element("testsuite", name="perf-gate", tests="1", failures="0", errors="1")
    case = ET.SubElement(suite, "testcase", classname="perf-gate", name="input", time="0")
    ET.SubElement(case, "error", message=message, type="unusable-input").text = message
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, "unicode") + "\n"


def write_text(path: Path, text: str) -> None:
    """Write a report file, creating its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
