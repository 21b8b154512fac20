"""The least run size of each gate rule, the warnings of a scenario or runs below it, and a gate
that shows no pass beside runs it did not judge."""

from __future__ import annotations

import io

from rich.console import Console

from bench.gate.report import render_gate, to_junit_xml, to_markdown
from bench.gate.rules import DEFAULT_RULES, rules_from_dict
from bench.gate.run_size import least_size, scenario_size_warnings
from bench.gate.verdict import GateReport, MetricResult, overall_verdict
from bench.scenario.scenario import scenario_from_dict
from results.figures.percentile_samples import min_samples


def test_default_rules_state_their_least_run_size() -> None:
    sizes = {r.metric.name: least_size(r, DEFAULT_RULES) for r in DEFAULT_RULES.rules}
    assert sizes == {
        "throughput.output_tok_s": (4, "throughput windows"),
        "ttft_ms.p99": (500, "values"),
        "tpot_ms.p50": (20, "requests"),
        "e2el_ms.p50": (20, "requests"),
    }


def test_the_tail_rule_is_percentile_samples_rule() -> None:
    assert min_samples(99) == 100 and min_samples(99, beyond=5) == 500
    # p10's tail is the low one: as many as p90's.
    rules = rules_from_dict({"metrics": {"ttft_ms.p10": {"max_rise_pct": 5}}})
    assert least_size(rules.rules[0], rules) == (min_samples(90, beyond=5), "values")


def _scenario(**size: object) -> object:
    data = {"name": "small", "users": 2, **size, "output_len": {"kind": "fixed", "value": 4}}
    data["input_len"] = {"kind": "fixed", "value": 8}
    return scenario_from_dict(data)


def test_a_scenario_too_small_for_a_rule_is_named_before_running() -> None:
    lines = scenario_size_warnings(DEFAULT_RULES, _scenario(num_requests=40), runs_per_side=3)
    assert len(lines) == 1
    assert "ttft_ms.p99" in lines[0] and "120 requests" in lines[0] and ">= 500" in lines[0]
    assert scenario_size_warnings(DEFAULT_RULES, _scenario(num_requests=200), 3) == []
    # 1 s runs give at most 2 windows each: 2 runs, 4 windows, enough; 1 run is not.
    assert scenario_size_warnings(DEFAULT_RULES, _scenario(duration_s=1.0), 2) == []
    (short,) = scenario_size_warnings(DEFAULT_RULES, _scenario(duration_s=1.0), 1)
    assert "throughput.output_tok_s" in short


def _result(verdict: str) -> MetricResult:
    return MetricResult("tpot_ms.p50", "ms", False, 10.0, "rise <= 10%", verdict, "the CI is in")


def test_a_busy_run_leaves_no_pass_in_any_report() -> None:
    busy = ["candidate, run-1: other processes used 60% of the CPU"]
    results = (_result("pass"), _result("fail"), _result("inconclusive"))
    verdict, notes, judged = overall_verdict(results, busy, False, [])
    assert verdict == "inconclusive"
    assert [r.verdict for r in judged] == ["inconclusive"] * 3
    assert judged[0].reason.startswith("not judged (busy machine)")
    report = GateReport(verdict, judged, tuple(notes), 0.95, 2000, 0, "baseline", ("run-1",), 1)
    out = io.StringIO()
    render_gate(report, Console(file=out, width=200))
    rows = [line for line in out.getvalue().splitlines() if line.startswith("  tpot")]
    assert len(rows) == 3 and all(row.rstrip().endswith("inconclusive") for row in rows)
    md_rows = [line for line in to_markdown(report).splitlines() if line.startswith("| `tpot")]
    assert len(md_rows) == 3 and all("inconclusive" in row for row in md_rows)
    assert "<system-out>baseline" not in to_junit_xml(report)
    # Allowed, the rules judge the runs as they are.
    _, _, allowed = overall_verdict(results, busy, True, [])
    assert [r.verdict for r in allowed] == ["pass", "fail", "inconclusive"]


def test_the_docs_state_the_default_rules_least_sizes() -> None:
    from tests.support.paths import REPO_ROOT

    text = (REPO_ROOT / "docs" / "gates-and-ab.md").read_text(encoding="utf-8")
    for rule in DEFAULT_RULES.rules:
        count, unit = least_size(rule, DEFAULT_RULES)
        row = next(line for line in text.splitlines() if line.startswith(f"| `{rule.metric.name}`"))
        assert f"| {count} {unit}" in row, row
