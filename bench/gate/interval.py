"""The confidence interval of a metric's relative change between two groups of runs.

The interval: the two groups are independent, so resample b of the candidate is paired with
resample b of the baseline and ratio_b = stat_cand_b / stat_base_b; the percentile interval of
log(ratio_b) at the given confidence is the bootstrap interval (the resamples themselves are
bench.gate.stats'). B and the seed are the caller's (the rules: 2000 and 0 by default; with
2000 resamples the 2.5% and 97.5% endpoints rest on 50 resamples each); the same inputs always
give the same interval.

Session drift. The bootstrap treats a group's runs as independent, but runs made one after the
other share the machine's state for minutes (a neighbour's job, thermal state, a noisy host).
Measured here: 8 consecutive smoke runs on a shared 2-core machine drifted in blocks, with a
run-to-run coefficient of variation of 11-21% (25-44% under heavy contention), and a whole
3-run session of an unchanged engine came out 34% slower than the baseline. A candidate session
can thus sit off the baseline by about one run's offset, which no within-session resampling
sees. So, unless the rules turn it off (``session_drift = false``, for interleaved A/B runs),
each side of the interval is widened in quadrature on the log scale by t * s: s is the
between-run standard deviation of the log statistic (:func:`between_run_log_sd`: the runs'
spread beyond what their own sampling noise explains) and t Student's quantile of the
confidence level for s's degrees of freedom (few runs give a poor s, and t allows for it). The
interval then allows the candidate session one run's worth of common offset. Runs that differ
by sampling noise alone give s = 0; a quiet dedicated machine gives s ~ 1%; a noisy one turns
would-be false alarms into "inconclusive". With one run per side s cannot be estimated and is
0 (the gate notes it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from bench.gate.stats import UnitData, bootstrap, point_estimate, run_slices

__all__ = ["Estimate", "between_run_log_sd", "bootstrap_change", "student_t_quantile"]


@dataclass(frozen=True)
class Estimate:
    """Point estimates of both groups, the relative change and its CI (fractions: 0.05 = +5%)."""

    baseline: float
    candidate: float
    change: float
    ci_low: float
    ci_high: float
    run_sd: float = 0.0  # between-run sd of the log statistic used for session drift


def between_run_log_sd(
    groups: Sequence[UnitData], resamples: int, rng: np.random.Generator
) -> tuple[float, int]:
    """The between-run sd of the log statistic and its degrees of freedom ((0.0, 0) when no
    group has two usable runs).

    One-way random-effects method of moments: the spread of the per-run log statistics (pooled
    over groups, each about its own mean) minus the mean within-run sampling variance of a
    run's log statistic (a bootstrap of each run alone), floored at 0. Runs that differ only by
    sampling noise thus give 0, and the session-drift term adds nothing.
    """
    squares, dof, within = 0.0, 0, []
    for data in groups:
        if len(data.units_per_run) < 2:
            continue
        logs, variances = [], []
        for run in run_slices(data):
            point = point_estimate(run)
            boot = bootstrap(run, resamples, rng)
            boot = boot[np.isfinite(boot) & (boot > 0)]
            if np.isfinite(point) and point > 0 and boot.size >= 2:
                logs.append(np.log(point))
                variances.append(float(np.var(np.log(boot), ddof=1)))
        if len(logs) >= 2:
            squares += float(np.sum((np.array(logs) - np.mean(logs)) ** 2))
            dof += len(logs) - 1
            within += variances
    if not dof:
        return 0.0, 0
    return float(np.sqrt(max(squares / dof - float(np.mean(within)), 0.0))), dof


def student_t_quantile(probability: float, dof: int) -> float:
    """Student's t quantile by its Cornish-Fisher series in 1/dof (Abramowitz & Stegun 26.7.5):
    within 1% for dof >= 3, and below the exact value (less conservative) for dof 1-2."""
    z = NormalDist().inv_cdf(probability)
    terms = (
        (z**3 + z) / 4,
        (5 * z**5 + 16 * z**3 + 3 * z) / 96,
        (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
        (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160,
    )
    return z + sum(term / dof ** (k + 1) for k, term in enumerate(terms))


def bootstrap_change(
    baseline: UnitData,
    candidate: UnitData,
    confidence: float,
    resamples: int,
    seed: int,
    stream: int = 0,
    session_drift: bool = True,
) -> Estimate:
    """Point estimates and the CI of candidate / baseline - 1 (see the module doc).

    ``stream`` separates the random streams of different metrics under one ``seed``, so that a
    metric's interval does not depend on which other metrics are gated. Raises ValueError when
    the baseline's point estimate is 0 or not finite (a relative change is then undefined).
    """
    if not 0.5 < confidence < 1:
        raise ValueError(f"confidence must lie in (0.5, 1), got {confidence}")
    point_base, point_cand = point_estimate(baseline), point_estimate(candidate)
    if not np.isfinite(point_base) or point_base == 0 or not np.isfinite(point_cand):
        raise ValueError(
            f"a relative change needs a finite, non-zero baseline value; got baseline"
            f" {point_base}, candidate {point_cand}"
        )
    base_rng, cand_rng, drift_rng = (
        np.random.default_rng(s) for s in np.random.SeedSequence([seed, stream]).spawn(3)
    )
    base = bootstrap(baseline, resamples, base_rng)
    cand = bootstrap(candidate, resamples, cand_rng)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = cand / base
    ratios = ratios[np.isfinite(ratios)]
    if ratios.size < resamples // 2:
        raise ValueError("most resamples gave no finite ratio (too few values with weight)")
    alpha = 1.0 - confidence
    low, high = np.quantile(ratios, [alpha / 2, 1 - alpha / 2])
    change = point_cand / point_base - 1
    run_sd, dof = 0.0, 0
    if session_drift:
        drift_resamples = max(200, resamples // 4)
        run_sd, dof = between_run_log_sd((baseline, candidate), drift_resamples, drift_rng)
    if run_sd > 0 and point_cand > 0 and low > 0:
        # Widen each side in quadrature on the log scale (see "Session drift").
        center, drift = np.log(change + 1), student_t_quantile(1 - alpha / 2, dof) * run_sd
        low = np.exp(center - np.hypot(center - np.log(low), drift))
        high = np.exp(center + np.hypot(np.log(high) - center, drift))
    return Estimate(point_base, point_cand, change, low - 1, high - 1, run_sd)
