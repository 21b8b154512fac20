"""The least run size each gate rule can judge, and the warning when a side is smaller.

A rule judges nothing on a side below its least size: the gate reports it inconclusive with
"too few samples" (bench.gate.verdict.too_few). Saying so before the runs are made (`bench ab`,
from the scenario) or before they are judged (`bench gate`, from the runs) spares a session
that can only end inconclusive. The sizes, per side (all runs of the side together):

- a mean: ``min_samples`` requests with a value;
- a percentile pQ: that, and ``min_tail_samples`` values beyond pQ on its nearer tail, i.e.
  results.figures.percentile_samples.min_samples(max(Q, 100 - Q), beyond=min_tail_samples)
  values (p99 at the default 5: 500; p50: 10); ITL has one value per output token, the others
  one per request;
- a rate (throughput, goodput): ``min_windows`` throughput windows, each at least
  bench.gate.samples.MIN_WINDOW_S seconds of measured time; CPU work per token:
  ``min_windows`` CPU work windows, each at least results.figures.cpu_work.MIN_WINDOW_S.
"""

from __future__ import annotations

import math

from rich.console import Console

from bench.gate.baseline import RunGroup
from bench.gate.rules import GateRules, Rule
from bench.gate.samples import MIN_WINDOW_S
from bench.gate.verdict import (
    GateInputError,
    tail_samples_needed,
    too_few,
    unit_data,
    windows_name,
)
from bench.run.messages import print_warning
from bench.scenario.scenario import Scenario
from results.figures.cpu_work import MIN_WINDOW_S as CPU_WINDOW_S

__all__ = [
    "group_size_warnings",
    "least_size",
    "print_group_size_warnings",
    "print_scenario_size_warnings",
    "scenario_size_warnings",
]


def least_size(rule: Rule, rules: GateRules) -> tuple[int, str]:
    """The least per-side size ``rule`` can judge: (count, unit), unit "requests", "values"
    (a percentile: values of the metric's family), "throughput windows" or "CPU work windows"."""
    spec = rule.metric
    if spec.statistic == "ratio":
        return rules.min_windows, windows_name(spec)
    if spec.percentile is None:
        return rule.min_samples, "requests"
    need = tail_samples_needed(rule)
    if need <= rule.min_samples:
        return rule.min_samples, "requests"
    return need, "values"


def scenario_size_warnings(rules: GateRules, scenario: Scenario, runs_per_side: int) -> list[str]:
    """One line per rule that ``runs_per_side`` runs of ``scenario`` per side cannot judge.

    Counted from what the scenario fixes: ``num_requests`` bounds the requests (and the TTFT,
    TPOT and E2EL values) of a run, ``duration_s`` its throughput windows. A rule whose size the
    scenario leaves open (a duration-bound run's requests, ITL values) is not warned about.
    """
    lines = []
    for rule in rules.rules:
        need, unit = least_size(rule, rules)
        if rule.metric.statistic == "ratio":
            if scenario.duration_s is None:
                continue
            width = CPU_WINDOW_S if rule.metric.family == "cpu_work" else MIN_WINDOW_S
            have = runs_per_side * math.floor(scenario.duration_s / width)
            fix = "a longer duration_s or more runs"
        else:
            if scenario.num_requests is None or rule.metric.family == "itl_ms":
                continue
            have, unit = runs_per_side * scenario.num_requests, "requests"
            fix = "a larger num_requests or more runs"
        if have < need:
            lines.append(
                f"scenario {scenario.name} is too small for {rule.metric.name}: at most {have}"
                f" {unit} per side in {runs_per_side} run(s), the rule needs >= {need}; it will"
                f" be inconclusive ({fix})"
            )
    return lines


def print_scenario_size_warnings(
    console: Console, rules: GateRules, scenario: Scenario, runs_per_side: int
) -> None:
    """Print :func:`scenario_size_warnings` as warnings (`bench ab`, before its runs)."""
    for line in scenario_size_warnings(rules, scenario, runs_per_side):
        print_warning(console, line)


def group_size_warnings(rules: GateRules, base: RunGroup, cand: RunGroup) -> list[str]:
    """One line per rule and side too small to judge, from the loaded runs (the gate's own
    check, bench.gate.verdict.too_few); a metric the runs cannot give is left to the gate."""
    lines = []
    for rule in rules.rules:
        for group, side in ((base, "baseline"), (cand, "candidate")):
            try:
                reason = too_few(rule, rules, unit_data(group, rule.metric), side)
            except GateInputError:
                continue
            if reason:
                lines.append(f"{rule.metric.name} cannot be judged: {reason}")
    return lines


def print_group_size_warnings(
    console: Console, rules: GateRules, base: RunGroup, cand: RunGroup
) -> None:
    """Print :func:`group_size_warnings` as warnings (`bench gate`, before its verdicts)."""
    for line in group_size_warnings(rules, base, cand):
        print_warning(console, line)
