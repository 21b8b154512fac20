"""The gate: for each rule, a bootstrap CI of the relative change, and a verdict.

The verdict rule. Let t be a metric's allowed regression (e.g. 5% for "may not drop more than
5%") and [lo, hi] the confidence interval of its regression (the relative change, sign-flipped
for higher-is-better metrics so that positive means worse):

- fail          when lo > t: the whole interval lies beyond the allowance;
- pass          when hi <= t: the whole interval lies within it (improvements of any size pass);
- inconclusive  otherwise (the interval straddles t), or when a side has too few samples.

The interval is the hierarchical bootstrap's, widened for session drift (bench.gate.stats
explains what is resampled and why runs are the independent unit, bench.gate.interval the
interval and the drift term).

Why: each decision is a one-sided test at (1 - confidence) / 2 (2.5% at the default 95%).
A false alarm needs the interval to clear t although the true change is at most t: that has
probability <= 2.5% when the true regression is exactly t, and far less for an unchanged build
(its change is 0, t below the interval's lower end). A pass likewise certifies, at 97.5%, that
the regression is below t. What cannot be told apart from noise is neither: it is reported as
inconclusive (exit 2) with the reason, so CI neither ships an unproven build nor blames one on
noise. The remedy is more or longer runs, or a quieter machine, which narrow the interval.

A busy machine: when any run of either side was marked busy (summary.json's machine_load),
the verdict is inconclusive whatever the intervals say (`bench gate --allow-busy` judges it).
So for a run with any other violation of summary.json's validity (results.validity.run_validity: GPU
throttling, a powersave governor, XID or ECC errors, token counts apart): `--allow-invalid`.

Minimum samples: per side, ``min_samples`` measured requests for per-request metrics,
``min_tail_samples`` values beyond a percentile (a p99 from 120 requests rests on one or two
values; the bootstrap cannot see the tail it never sampled), ``min_windows`` throughput windows.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from bench.gate.baseline import HARDWARE_KEYS, RunGroup, differences, workloads
from bench.gate.interval import bootstrap_change
from bench.gate.rules import GateRules, MetricSpec, Rule
from bench.gate.samples import RunSamples, throughput_windows
from bench.gate.stats import UnitData, point_estimate
from results.figures.percentile_samples import min_samples

__all__ = [
    "EXIT_CODES",
    "GateInputError",
    "GateReport",
    "MetricResult",
    "OtherHardwareError",
    "check_compatible",
    "classify",
    "evaluate",
    "overall_verdict",
    "tail_samples_needed",
    "too_few",
    "unit_data",
    "windows_name",
    "withhold",
]

EXIT_CODES = {"pass": 0, "fail": 1, "inconclusive": 2}


class GateInputError(ValueError):
    """Input the gate cannot judge (other hardware, another workload, a missing metric)."""


class OtherHardwareError(GateInputError):
    """The baseline was made on other hardware (refused unless forced)."""


@dataclass(frozen=True)
class MetricResult:
    """One rule's outcome. Values in the metric's unit; changes and CI bounds in percent."""

    metric: str
    unit: str
    higher_is_better: bool
    max_regression_pct: float
    limit_text: str
    verdict: str
    reason: str
    baseline: float | None = None
    candidate: float | None = None
    change_pct: float | None = None
    ci_low_pct: float | None = None
    ci_high_pct: float | None = None
    samples_baseline: int = 0
    samples_candidate: int = 0
    sample_unit: str = "requests"
    run_sd_pct: float | None = None


@dataclass(frozen=True)
class GateReport:
    verdict: str
    results: tuple[MetricResult, ...]
    notes: tuple[str, ...]
    confidence: float
    resamples: int
    seed: int
    baseline_label: str
    candidate_runs: tuple[str, ...]
    baseline_runs: int
    rules_source: str = "<defaults>"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]


def unit_data(group: RunGroup, spec: MetricSpec) -> UnitData:
    """The metric's resampling units over the group's runs (runs without any are left out)."""
    if spec.statistic == "ratio":
        assert spec.amount is not None
        if spec.amount == "good_requests" and any(r.good is None for r in group.runs):
            raise GateInputError(
                f"{spec.name}: the {group.label} runs have no SLO, so no goodput; add an [slo]"
                " table to the scenario, or gate another metric"
            )
        if spec.family == "cpu_work":
            windows = [_cpu_windows(r, spec, group.label) for r in group.runs]
        else:
            windows = [throughput_windows(r, spec.amount) for r in group.runs]
        windows = [w for w in windows if w[0].size]
        return UnitData(
            "ratio",
            tuple(w[0].size for w in windows),
            numerator=np.concatenate([w[0] for w in windows]) if windows else np.zeros(0),
            denominator=np.concatenate([w[1] for w in windows]) if windows else np.zeros(0),
        )
    per_run = [_values_per_unit(run, spec) for run in group.runs]
    per_run = [(values, sizes) for values, sizes in per_run if sizes.size]
    sizes = np.concatenate([s for _, s in per_run]) if per_run else np.zeros(0, dtype=np.int64)
    return UnitData(
        "mean" if spec.statistic == "mean" else "percentile",
        tuple(s.size for _, s in per_run),
        values=np.concatenate([v for v, _ in per_run]) if per_run else np.zeros(0),
        value_unit=np.repeat(np.arange(sizes.size), sizes),
        percentile=spec.percentile,
    )


def _values_per_unit(run: RunSamples, spec: MetricSpec) -> tuple[np.ndarray, np.ndarray]:
    """A run's values of ``spec``'s family, units in order, and how many values each unit
    owns: ITL, a request's values (requests without any left out); the others, one value a
    request that has one (flat arrays, never one array a request)."""
    if spec.family == "itl_ms":
        units = [gaps for gaps in run.itl_ms if gaps.size]
        values = np.concatenate(units) if units else np.zeros(0)
        return values, np.array([u.size for u in units], dtype=np.int64)
    per_user = spec.family == "per_user_tps"
    values = run.per_user_tps() if per_user else getattr(run, spec.family)
    values = values[~np.isnan(values)]
    return values, np.ones(values.size, dtype=np.int64)


def _cpu_windows(run: RunSamples, spec: MetricSpec, label: str) -> tuple[np.ndarray, np.ndarray]:
    """A run's CPU work windows of ``spec``'s group as (CPU seconds, output tokens)."""
    assert spec.amount is not None
    if spec.amount not in run.cpu_windows:
        raise GateInputError(
            f"{spec.name}: run {run.run_id} of the {label} has no CPU readings of its"
            f" {spec.amount} processes (made with --no-probes, or a baseline file written"
            " before CPU work was kept); make the runs with the probes on, or gate another metric"
        )
    return run.cpu_windows[spec.amount]


def windows_name(spec: MetricSpec) -> str:
    """What a rate's windows are called in messages: CPU work or throughput windows."""
    return "CPU work windows" if spec.family == "cpu_work" else "throughput windows"


def tail_samples_needed(rule: Rule) -> int:
    """Values per side that a percentile rule needs: ``min_tail_samples`` beyond the percentile
    on its nearer tail (p10 and p90 alike), by results.figures.percentile_samples' rule."""
    q = rule.metric.percentile
    assert q is not None
    return min_samples(max(q, 100 - q), beyond=rule.min_tail_samples)


def too_few(rule: Rule, rules: GateRules, data: UnitData, side: str) -> str | None:
    """Why ``side``'s ``data`` is too small for ``rule`` to judge, or None when it is not."""
    spec = rule.metric
    if spec.statistic == "ratio":
        if data.num_units < rules.min_windows:
            return (
                f"too few samples: the {side} has {data.num_units} {windows_name(spec)},"
                f" at least {rules.min_windows} needed (longer or more runs)"
            )
        return None
    if data.num_units < rule.min_samples:
        return (
            f"too few samples: the {side} has {data.num_units} requests with a"
            f" {spec.family} value, at least {rule.min_samples} needed"
        )
    if spec.percentile is not None:
        need = tail_samples_needed(rule)
        if data.num_values < need:
            return (
                f"too few samples: {spec.name} needs >= {need} values per side to have"
                f" {rule.min_tail_samples} beyond the percentile; the {side} has"
                f" {data.num_values}"
            )
    return None


def classify(
    rule: Rule,
    confidence: float,
    ci_low: float,
    ci_high: float,
    remedy: str = "more runs (--repeat), longer runs or a quieter machine narrow it",
) -> tuple[str, str]:
    """The verdict and its reason for a CI of the relative change (fractions: 0.05 = +5%) of
    ``rule``'s metric, by the rule of the module doc; ``remedy`` says what narrows a too-wide CI."""
    sign = -1.0 if rule.metric.higher_is_better else 1.0
    worse_low, worse_high = sorted((sign * ci_low, sign * ci_high))
    allowed = rule.max_regression_pct / 100
    ci = f"{100 * ci_low:+.1f}%..{100 * ci_high:+.1f}%"
    level = f"{100 * confidence:g}% CI"
    if worse_low > allowed:
        return "fail", f"regression: the whole {level} ({ci}) is beyond {rule.limit_text}"
    if worse_high <= allowed:
        better = " (improved)" if worse_high < 0 else ""
        return "pass", f"the whole {level} ({ci}) is within {rule.limit_text}{better}"
    if worse_high - worse_low > allowed:
        return "inconclusive", (
            f"too noisy: the {level} ({ci}) is wider than the allowance and straddles"
            f" {rule.limit_text}; {remedy}"
        )
    return "inconclusive", f"close to the limit: the {level} ({ci}) straddles {rule.limit_text}"


def rule_fields(rule: Rule) -> dict[str, Any]:
    """The MetricResult fields that describe ``rule`` itself (metric, unit, direction, limit),
    shared by the gate's and bench ab's results."""
    spec = rule.metric
    return {
        "metric": spec.name,
        "unit": spec.unit,
        "higher_is_better": spec.higher_is_better,
        "max_regression_pct": rule.max_regression_pct,
        "limit_text": rule.limit_text,
    }


def _judge(rule: Rule, rules: GateRules, base: RunGroup, cand: RunGroup) -> MetricResult:
    spec = rule.metric
    common = rule_fields(rule)
    base_data, cand_data = unit_data(base, spec), unit_data(cand, spec)
    counts = {
        "samples_baseline": base_data.num_units,
        "samples_candidate": cand_data.num_units,
        "sample_unit": "windows" if spec.statistic == "ratio" else "requests",
    }
    for data, side in ((base_data, "baseline"), (cand_data, "candidate")):
        reason = too_few(rule, rules, data, side)
        if reason:
            points = [point_estimate(base_data), point_estimate(cand_data)]
            base_value, cand_value = (v if np.isfinite(v) else None for v in points)
            return MetricResult(
                **common,
                **counts,
                verdict="inconclusive",
                reason=reason,
                baseline=base_value,
                candidate=cand_value,
            )
    try:
        est = bootstrap_change(
            base_data,
            cand_data,
            rules.confidence,
            rules.resamples,
            rules.seed,
            stream=zlib.crc32(spec.name.encode()),
            session_drift=rules.session_drift,
        )
    except ValueError as exc:
        return MetricResult(**common, **counts, verdict="inconclusive", reason=str(exc))
    verdict, reason = classify(rule, rules.confidence, est.ci_low, est.ci_high)
    return MetricResult(
        **common,
        **counts,
        verdict=verdict,
        reason=reason,
        baseline=est.baseline,
        candidate=est.candidate,
        change_pct=100 * est.change,
        ci_low_pct=100 * est.ci_low,
        ci_high_pct=100 * est.ci_high,
        run_sd_pct=100 * est.run_sd,
    )


def check_compatible(base: RunGroup, cand: RunGroup, force: bool) -> list[str]:
    """Refuse other hardware or another workload unless ``force``; returns notes to show."""
    notes: list[str] = []
    hardware = differences(
        {k: base.hardware.get(k) for k in HARDWARE_KEYS},
        {k: cand.hardware.get(k) for k in HARDWARE_KEYS},
        "hardware",
    )
    workload = differences(*workloads([base.scenario, cand.scenario]), "scenario")
    for diff, what, fix in (
        (hardware, "was made on other hardware", "make a baseline on this hardware"),
        (workload, "ran another workload", "run the baseline's scenario"),
    ):
        if diff and not force:
            error = OtherHardwareError if diff is hardware else GateInputError
            raise error(
                f"the {base.label} {what}: {'; '.join(diff)}. Figures are not comparable: {fix},"
                " or pass --force to compare anyway"
            )
        if diff:
            notes.append(f"forced: the baseline {what}: {'; '.join(diff)}")
    engine = differences(base.engine, cand.engine, "engine", shared_only=True)
    if engine:
        notes.append("engine configuration differs: " + "; ".join(engine))
    versions = differences(base.versions, cand.versions, "versions", shared_only=True)
    if versions:
        notes.append("versions differ: " + "; ".join(versions))
    commits = [sorted({str(c) for c in group.git_commits}) for group in (base, cand)]
    if commits[0] != commits[1]:
        notes.append(f"git commit: baseline {', '.join(commits[0])} -> {', '.join(commits[1])}")
    return notes


def withhold(results: tuple[MetricResult, ...], what: str) -> tuple[MetricResult, ...]:
    """``results`` with every pass and fail made inconclusive: the rules were not allowed to
    judge the runs (``what``: "busy machine", ...), so no row may say pass or fail. The reason
    keeps what the interval alone would have said."""
    return tuple(
        r
        if r.verdict == "inconclusive"
        else replace(
            r, verdict="inconclusive", reason=f"not judged ({what}); by the CI alone: {r.reason}"
        )
        for r in results
    )


def overall_verdict(
    results: tuple[MetricResult, ...],
    busy: list[str],
    allow_busy: bool,
    notes: list[str],
    invalid: Sequence[str] = (),
    allow_invalid: bool = False,
) -> tuple[str, list[str], tuple[MetricResult, ...]]:
    """The report's verdict (any fail, else any inconclusive, else pass), its notes and its
    results; ``busy`` lines ("<side>, <run>: other processes used ...") make it inconclusive
    unless allowed, and so do ``invalid`` lines ("<side>, <run>: <kind>: ...", the runs' other
    validity violations) unless ``allow_invalid``: then every result is withheld
    (:func:`withhold`)."""
    verdicts = {r.verdict for r in results}
    verdict = next(v for v in ("fail", "inconclusive", "pass") if v in verdicts | {"pass"})
    for lines, allowed, what, flag, remedy in (
        (busy, allow_busy, "busy machine", "--allow-busy", "run again on a quiet machine"),
        (invalid, allow_invalid, "not a valid measurement", "--allow-invalid",
         "fix the cause and run again"),
    ):  # fmt: skip
        if lines and not allowed:
            notes = [f"not judged, {what}: {line}" for line in lines] + notes
            notes.append(
                f"a run marked '{what}' makes the verdict inconclusive: {remedy}, or pass {flag}"
                " to judge it anyway"
            )
            verdict = "inconclusive"
            results = withhold(results, what)
        elif lines:
            notes = [f"{what}, judged by {flag}: {line}" for line in lines] + notes
    return verdict, notes, results


def evaluate(
    rules: GateRules,
    base: RunGroup,
    cand: RunGroup,
    force: bool = False,
    allow_busy: bool = False,
    allow_invalid: bool = False,
) -> GateReport:
    """Judge every rule (see the module doc). Raises GateInputError for unusable input.

    A run whose machine was busy (other processes used results.figures.machine_load's
    BUSY_OTHER_CPU_SHARE of its CPU or more), in the candidate or the baseline, makes the
    verdict inconclusive, whatever the rules say: its figures measure the other work as much
    as the build. With
    ``allow_busy`` the rules decide and the busy runs are noted. Any other violation of a run
    (summary.json's validity: throttling, powersave, XID, ECC, token counts apart) does the
    same unless ``allow_invalid``, which also covers a busy machine."""
    notes = check_compatible(base, cand, force)
    allow_busy = allow_busy or allow_invalid
    busy = [f"{group.label}, {line}" for group in (base, cand) for line in group.busy]
    invalid = [f"{group.label}, {line}" for group in (base, cand) for line in group.invalid]
    if len(base.runs) == 1 or len(cand.runs) == 1:
        notes.append(
            "a side has a single run: intervals cover within-run noise only;"
            " use bench run --repeat N for run-to-run noise"
        )
    results = tuple(_judge(rule, rules, base, cand) for rule in rules.rules)
    allow_busy = allow_busy or allow_invalid
    invalid = [f"{group.label}, {line}" for group in (base, cand) for line in group.invalid]
    verdict, notes, results = overall_verdict(
        results, busy, allow_busy, notes, invalid, allow_invalid
    )
    return GateReport(
        verdict=verdict,
        results=results,
        notes=tuple(notes),
        confidence=rules.confidence,
        resamples=rules.resamples,
        seed=rules.seed,
        baseline_label=base.label,
        candidate_runs=tuple(r.run_id for r in cand.runs),
        baseline_runs=len(base.runs),
        rules_source=rules.source,
    )
