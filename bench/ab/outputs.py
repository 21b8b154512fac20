"""What a finished `bench ab` shows and leaves: the gate's table in the terminal, junit.xml and
report.md (bench.gate.report's JUnit and Markdown), and ab.html (dashboards.pages.ab)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from bench.ab.session import AbResult
from bench.gate.report import (
    input_error_junit,
    input_error_markdown,
    render_gate,
    to_junit_xml,
    to_markdown,
    write_text,
)
from bench.run.messages import print_error, print_path
from dashboards.pages.ab import PairRatios, write_ab_page

__all__ = ["JUNIT_XML", "REPORT_HTML", "REPORT_MD", "pairs_line", "write_outputs", "write_page"]

JUNIT_XML = "junit.xml"
REPORT_MD = "report.md"
REPORT_HTML = "ab.html"


def _pairs_line(result: AbResult, until_decided: bool) -> str:
    verdict = result.report.verdict if result.report else "unusable"
    if until_decided and verdict in ("pass", "fail"):
        return f"decided ({verdict}) after {result.pairs} pair(s)"
    if until_decided and result.stopped_by == "budget":
        return f"not decided after {result.pairs} pair(s): one more would pass --budget-s"
    if until_decided:
        return f"not decided after {result.pairs} pair(s), the cap (--max-pairs)"
    return f"{verdict} after {result.pairs} pair(s)"


def pairs_line(result: AbResult, until_decided: bool) -> str:
    """The line under the verdict table: how many pairs it took, and why it stopped."""
    return _pairs_line(result, until_decided)


def write_page(result: AbResult, console: Console) -> Path | None:
    """Write the A/B's ab.html (none without a verdict or runs) and print where it is."""
    if result.report is None or not result.a_runs or not result.b_runs:
        return None
    metrics = [
        PairRatios(
            p.metric,
            p.result.unit,
            p.result.higher_is_better,
            p.ratios,
            p.result.change_pct,
            p.result.ci_low_pct,
            p.result.ci_high_pct,
            p.result.max_regression_pct,
            p.result.verdict,
            p.result.reason,
        )
        for p in result.paired
    ]
    page = write_ab_page(
        result.folder / REPORT_HTML,
        result.report.verdict,
        result.labels,
        metrics,
        result.a_runs,
        result.b_runs,
    )
    print_path(console, "comparison", page, f"(opens offline: {page.resolve().as_uri()})")
    return page


def write_outputs(
    result: AbResult,
    until_decided: bool,
    console: Console,
    junit: Path | None = None,
    markdown: Path | None = None,
) -> None:
    """Print the verdict and write the reports into the A/B's folder (and to ``junit`` and
    ``markdown`` too, when given: a CI's own report paths)."""
    folder = result.folder
    line = _pairs_line(result, until_decided)
    if result.report is None:
        message = f"unusable: {result.unusable}"
        print_error(console, message)
        xml, md = input_error_junit(message), input_error_markdown(message)
    else:
        render_gate(result.report, console)
        console.print(line)
        xml = to_junit_xml(result.report)
        md = to_markdown(result.report).replace("### Performance gate", "### A/B gate", 1)
        md += f"- {line}\n"
    for path, text in ((folder / JUNIT_XML, xml), (folder / REPORT_MD, md)):
        write_text(path, text)
    for path, text in ((junit, xml), (markdown, md)):
        if path is not None:
            write_text(path, text)
    write_page(result, console)
    print_path(console, "A/B folder", folder)
