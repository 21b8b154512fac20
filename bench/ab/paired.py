"""The paired comparison of `bench ab`: per-pair ratios, a bootstrap over pairs, gate verdicts.

Pair i is one run of A and one run of B made back to back (order A B, B A, A B, ... so that a
drift of the machine over the session weighs on both sides alike). For each gated metric, each
run's own statistic s (bench.gate.stats.point_estimate of that run alone) gives the pair's ratio
r_i = s_B,i / s_A,i. The change is the geometric mean of the ratios minus 1; its interval is a
bootstrap over pairs: pairs are drawn with replacement (``resamples`` times, the rules' seed),
and the percentile interval of the mean log ratio is taken at the rules' confidence.

The pairs, not the requests, are the independent unit: within-run noise and the run-to-run
noise that survives the pairing both show in the spread of the r_i, and drift common to a pair
cancels in its ratio. With few pairs a percentile bootstrap is too narrow (3 pairs have only 10
distinct resamples), so the interval is expanded about its centre by sqrt(n / (n - 1)) *
t(n - 1) / z, Hesterberg's expanded percentile interval (2015, "What teachers should know about
the bootstrap", sec. 5.3), which gives Student's interval its width for normal data. One pair
has no spread to measure and is inconclusive.

Three pairs that happen to agree (0.86, 0.87, 0.86 from two identical engines, one 3-pair A/B
of CI's gate on a loaded box) still give a narrow interval: the spread of so few pairs is itself
noisy. The rules' ``pair_noise_floor_pct`` bounds it from below: the interval is at least as
wide as Student's interval of n pairs whose log ratios had that standard deviation,
t(n - 1) * floor / sqrt(n) either side of the centre. A floor of the machine's pair-to-pair
noise makes a fail of few pairs need a change well past the allowance, while more pairs still
narrow it as 1 / sqrt(n).

The verdict of each interval is the gate's (bench.gate.verdict.classify, the same rules and
allowances), and the report is the gate's GateReport, with A as the baseline and B as the
candidate, so the terminal table, JUnit and Markdown are those of `bench gate`.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import NormalDist

import numpy as np

from bench.gate.baseline import RunGroup, load_run_group
from bench.gate.interval import student_t_quantile
from bench.gate.rules import GateRules, Rule
from bench.gate.stats import per_run_estimates
from bench.gate.verdict import (
    GateInputError,
    GateReport,
    MetricResult,
    check_compatible,
    classify,
    overall_verdict,
    rule_fields,
    too_few,
    unit_data,
)

__all__ = ["PairedMetric", "judge_pairs", "paired_interval", "per_run_values", "ratio_verdict"]

_REMEDY = "more pairs (--pairs, or --until-decided), longer runs or a quieter machine narrow it"


@dataclass(frozen=True)
class PairedMetric:
    """One metric's per-pair ratios (B / A, pairs in order) and its verdict."""

    metric: str
    ratios: tuple[float, ...]
    result: MetricResult


def paired_interval(
    ratios: Sequence[float],
    confidence: float,
    resamples: int,
    seed: int,
    stream: int,
    noise_floor: float = 0.0,
) -> tuple[float, float, float]:
    """(change, CI low, CI high) as fractions (0.05 = +5%) from per-pair ratios (module doc);
    ``noise_floor`` is the least standard deviation of one pair's log ratio (0.1 = 10%).

    Needs at least 2 finite, positive ratios; raises ValueError otherwise.
    """
    logs = np.log(np.asarray(ratios, dtype=np.float64))
    if logs.size < 2 or not np.all(np.isfinite(logs)):
        raise ValueError(
            f"a paired interval needs >= 2 pairs with a finite, positive ratio; got {logs.size}"
        )
    n = logs.size
    centre = float(logs.mean())
    rng = np.random.default_rng(np.random.SeedSequence([seed, stream]))
    means = logs[rng.integers(0, n, size=(resamples, n))].mean(axis=1)
    alpha = 1.0 - confidence
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    z = NormalDist().inv_cdf(1 - alpha / 2)
    t = student_t_quantile(1 - alpha / 2, n - 1)
    widen = np.sqrt(n / (n - 1)) * t / z
    least = t * noise_floor / np.sqrt(n)
    low = min(centre - widen * (centre - low), centre - least)
    high = max(centre + widen * (high - centre), centre + least)
    return float(np.expm1(centre)), float(np.expm1(low)), float(np.expm1(high))


def ratio_verdict(
    rule: Rule, rules: GateRules, ratios: Sequence[float]
) -> tuple[str, str, tuple[float, float, float] | None]:
    """The verdict, its reason and (change, CI low, CI high) of one metric's per-pair ratios B / A
    under ``rule`` (no interval: inconclusive, with the reason)."""
    try:
        stream = zlib.crc32(rule.metric.name.encode())
        interval = paired_interval(
            ratios, rules.confidence, rules.resamples, rules.seed, stream, rules.pair_noise_floor
        )
    except ValueError as exc:
        return "inconclusive", str(exc), None
    verdict, reason = classify(rule, rules.confidence, interval[1], interval[2], remedy=_REMEDY)
    return verdict, reason, interval


def per_run_values(group: RunGroup, rule: Rule) -> np.ndarray:
    """The metric's statistic in each run of ``group`` alone (NaN for a run without data)."""
    out = np.full(len(group.runs), np.nan)
    for index, run in enumerate(group.runs):
        one = RunGroup(group.label, (run,), {}, {}, {}, {}, ())
        data = unit_data(one, rule.metric)
        if data.num_units:
            out[index] = per_run_estimates(data)[0]
    return out


def _judge(rule: Rule, rules: GateRules, a: RunGroup, b: RunGroup) -> PairedMetric:
    spec = rule.metric
    a_values, b_values = per_run_values(a, rule), per_run_values(b, rule)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = tuple(float(r) for r in b_values / a_values)
    common = {
        **rule_fields(rule),
        "samples_baseline": len(a.runs),
        "samples_candidate": len(b.runs),
        "sample_unit": "runs, paired",
        "baseline": float(np.nanmean(a_values)) if np.isfinite(a_values).any() else None,
        "candidate": float(np.nanmean(b_values)) if np.isfinite(b_values).any() else None,
    }
    # The sides are A and B here, not the gate's baseline and candidate.
    for group, side in ((a, "side A"), (b, "side B")):
        reason = too_few(rule, rules, unit_data(group, spec), side)
        if reason:
            result = MetricResult(**common, verdict="inconclusive", reason=reason)
            return PairedMetric(spec.name, ratios, result)
    verdict, reason, interval = ratio_verdict(rule, rules, ratios)
    if interval is None:
        result = MetricResult(**common, verdict=verdict, reason=reason)
        return PairedMetric(spec.name, ratios, result)
    change, low, high = interval
    result = MetricResult(
        **common,
        verdict=verdict,
        reason=reason,
        change_pct=100 * change,
        ci_low_pct=100 * low,
        ci_high_pct=100 * high,
    )
    return PairedMetric(spec.name, ratios, result)


def judge_pairs(
    rules: GateRules,
    a_runs: Sequence[Path],
    b_runs: Sequence[Path],
    labels: tuple[str, str],
    allow_busy: bool = False,
    allow_invalid: bool = False,
) -> tuple[GateReport, tuple[PairedMetric, ...]]:
    """Judge pairs (a_runs[i], b_runs[i]) by ``rules``: the gate's report and each metric's ratios.

    Raises GateInputError when the runs cannot be compared (another workload, a metric they
    lack) or the sides have different numbers of runs.
    """
    if len(a_runs) != len(b_runs) or not a_runs:
        raise GateInputError(
            f"pairs need as many A runs as B runs, got {len(a_runs)} and {len(b_runs)}"
        )
    a, _ = load_run_group(list(a_runs), labels[0])
    b, _ = load_run_group(list(b_runs), labels[1])
    # Same machine and scenario by construction; the check still notes what differs.
    notes = check_compatible(a, b, force=True)
    notes = [n for n in notes if not n.startswith("forced:")]
    paired = tuple(_judge(rule, rules, a, b) for rule in rules.rules)
    busy = [f"{group.label}, {line}" for group in (a, b) for line in group.busy]
    notes.insert(
        0,
        f"paired: {len(a_runs)} pair(s) of runs made back to back (A B, B A, ...); the change"
        " is the geometric mean of the per-pair ratios B / A, its CI a bootstrap over pairs",
    )
    results = tuple(p.result for p in paired)
    # A run its summary marks not valid (throttling, powersave, XID, ECC, token counts apart)
    # leaves the A/B inconclusive, as in `bench gate`.
    invalid = [f"{group.label}, {line}" for group in (a, b) for line in group.invalid]
    verdict, notes, results = overall_verdict(
        results, busy, allow_busy, notes, invalid, allow_invalid=allow_invalid
    )
    # ab.json, ab.html and the tables read each metric's result: withheld ones included.
    paired = tuple(replace(p, result=r) for p, r in zip(paired, results, strict=True))
    report = GateReport(
        verdict=verdict,
        results=results,
        notes=tuple(notes),
        confidence=rules.confidence,
        resamples=rules.resamples,
        seed=rules.seed,
        baseline_label=labels[0],
        candidate_runs=tuple(r.run_id for r in b.runs),
        baseline_runs=len(a.runs),
        rules_source=rules.source,
    )
    return report, paired
