"""Gate rules: which metrics are gated, how much each may regress, and the statistics' settings.

A rules file is TOML::

    confidence = 0.95        # level of the bootstrap CI of each relative change
    resamples = 2000         # bootstrap resamples per metric
    seed = 0                 # the same inputs and seed give the same verdicts
    min_samples = 20         # per side: measured requests (per-request metrics)
    min_tail_samples = 5     # per side: samples beyond a percentile (p99 needs n * 1% >= 5)
    min_windows = 4          # per side: throughput windows, over all runs
    session_drift = true     # widen CIs by the run-to-run spread (see bench.gate.stats);
                             # false only for interleaved A/B runs made in one session
    pair_noise_floor_pct = 0 # `bench ab` only: the least spread of one pair's ratio B / A
                             # (bench.ab.paired), so that a few pairs that happen to agree
                             # cannot make the interval narrower than the machine's noise

    [metrics]
    "throughput.output_tok_s" = { max_drop_pct = 5 }
    "ttft_ms.p99" = { max_rise_pct = 10, min_samples = 50 }

A metric is ``<family>.<statistic>``: families ttft_ms, tpot_ms, itl_ms, e2el_ms,
e2el_from_scheduled_ms, queueing_delay_ms (lower is better: give ``max_rise_pct``) and
per_user_tps (higher is better: ``max_drop_pct``), statistics ``mean`` or ``pQ`` (any 0 < Q <
100: p50, p99, p99.9); or a rate: throughput.output_tok_s, throughput.total_tok_s,
throughput.requests_per_s, goodput.requests_per_s (higher is better); or the CPU seconds a
process group spent per output token, probes.cpu_work.engine_cpu_s_per_output_token and
probes.cpu_work.client_cpu_s_per_output_token (summary.json's names, results.figures.cpu_work;
lower is better), a rate over windows as throughput is. ``[metrics]`` lists every metric
gated; without a rules file :data:`DEFAULT_RULES` apply.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bench.scenario.toml_table import ScenarioError, Table, suggest
from perfmodel.files import JSONObject, JSONView
from results.figures.cpu_work import GROUPS

__all__ = [
    "DEFAULT_RULES",
    "GateRules",
    "MetricSpec",
    "Rule",
    "RulesError",
    "load_rules",
    "metric_spec",
    "rules_from_dict",
]

LOWER_IS_BETTER: tuple[str, ...] = (
    "ttft_ms",
    "tpot_ms",
    "itl_ms",
    "e2el_ms",
    "e2el_from_scheduled_ms",
    "queueing_delay_ms",
)
# Rates: the window amount each one sums, and its unit.
RATES: dict[str, tuple[str, str]] = {
    "throughput.output_tok_s": ("output_tokens", "tok/s"),
    "throughput.total_tok_s": ("total_tokens", "tok/s"),
    "throughput.requests_per_s": ("requests", "req/s"),
    "goodput.requests_per_s": ("good_requests", "req/s"),
}
# CPU work: the process group whose CPU seconds each one sums over its windows.
CPU_WORK: dict[str, str] = {
    f"probes.cpu_work.{group}_cpu_s_per_output_token": group for group in GROUPS
}


class RulesError(ValueError):
    """Unusable rules: the message names the file, the key and the fix."""


@dataclass(frozen=True)
class MetricSpec:
    """What a metric name means. ``statistic`` is mean, percentile or ratio (a rate over windows:
    ``amount`` names what a window sums, or for family cpu_work the process group)."""

    name: str
    family: str
    statistic: str
    higher_is_better: bool
    unit: str
    percentile: float | None = None
    amount: str | None = None


@dataclass(frozen=True)
class Rule:
    """One gated metric: it may regress by at most ``max_regression_pct`` percent."""

    metric: MetricSpec
    max_regression_pct: float
    min_samples: int
    min_tail_samples: int

    @property
    def limit_text(self) -> str:
        word = "drop" if self.metric.higher_is_better else "rise"
        return f"{word} <= {self.max_regression_pct:g}%"


@dataclass(frozen=True)
class GateRules:
    rules: tuple[Rule, ...]
    confidence: float = 0.95
    resamples: int = 2000
    seed: int = 0
    min_windows: int = 4
    session_drift: bool = True
    source: str = "<defaults>"
    # The least standard deviation of one pair's log ratio, as a fraction (0.1 = 10%).
    pair_noise_floor: float = 0.0


def _known_names() -> list[str]:
    stats = ("mean", "p50", "p90", "p99")
    names = [f"{f}.{s}" for f in (*LOWER_IS_BETTER, "per_user_tps") for s in stats]
    return names + list(RATES) + list(CPU_WORK)


def metric_spec(name: str) -> MetricSpec:
    """Parse a metric name; raises ValueError naming the known forms."""
    if name in RATES:
        amount, unit = RATES[name]
        return MetricSpec(name, name.split(".")[0], "ratio", True, unit, amount=amount)
    if name in CPU_WORK:
        return MetricSpec(name, "cpu_work", "ratio", False, "s/tok", amount=CPU_WORK[name])
    family, _, stat = name.partition(".")
    if family not in (*LOWER_IS_BETTER, "per_user_tps"):
        raise ValueError(f"unknown metric {name!r}{suggest(name, _known_names())}")
    higher, unit = (True, "tok/s") if family == "per_user_tps" else (False, "ms")
    if stat == "mean":
        return MetricSpec(name, family, "mean", higher, unit)
    try:
        q = float(stat[1:]) if stat.startswith("p") else float("nan")
    except ValueError:
        q = float("nan")
    if not 0 < q < 100:
        raise ValueError(
            f"metric {name!r}: the statistic must be 'mean' or pQ with 0 < Q < 100 (p50, p99,"
            f" p99.9); max, min and std cannot be bootstrapped reliably"
        )
    return MetricSpec(name, family, "percentile", higher, unit, percentile=q)


def _flatten(table: JSONView, prefix: str = "") -> JSONObject:
    """``[metrics.ttft_ms.p99]`` (unquoted dots) parses as nested tables: join them back."""
    out: JSONObject = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        limits = isinstance(value, Mapping) and any(k.startswith("max_") for k in value)
        if isinstance(value, Mapping) and value and not limits:
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def _read_rule(table: Table, name: str, min_samples: int, min_tail: int) -> Rule:
    try:
        spec = metric_spec(name)
    except ValueError as exc:
        raise table.error(name, str(exc)) from None
    sub = table.table(name, required=True)
    assert sub is not None
    drop = sub.get("max_drop_pct", float, None)
    rise = sub.get("max_rise_pct", float, None)
    rule_min = sub.get("min_samples", int, min_samples)
    rule_tail = sub.get("min_tail_samples", int, min_tail)
    sub.finish()
    right, wrong = ("max_drop_pct", "max_rise_pct")
    if not spec.higher_is_better:
        right, wrong = wrong, right
    if (rise if spec.higher_is_better else drop) is not None:
        better = "higher" if spec.higher_is_better else "lower"
        raise sub.error(wrong, f"'{name}' is {better}-is-better: give its limit as {right}")
    limit = drop if spec.higher_is_better else rise
    if limit is None:
        raise sub.error(right, "missing: how much may this metric regress, in percent?")
    sub.check(right, limit > 0, "must be > 0 percent", limit)
    if spec.higher_is_better:
        sub.check(right, limit < 100, "must be < 100 percent", limit)
    sub.check("min_samples", rule_min >= 2, "must be >= 2", rule_min)
    sub.check("min_tail_samples", rule_tail >= 1, "must be >= 1", rule_tail)
    return Rule(spec, limit, rule_min, rule_tail)


def rules_from_dict(data: JSONView, source: str = "<dict>") -> GateRules:
    """Validate parsed rules (see the module doc); raises RulesError naming key and fix."""
    try:
        top = Table(data, source)
        confidence = top.get("confidence", float, 0.95)
        resamples = top.get("resamples", int, 2000)
        seed = top.get("seed", int, 0)
        min_samples = top.get("min_samples", int, 20)
        min_tail = top.get("min_tail_samples", int, 5)
        min_windows = top.get("min_windows", int, 4)
        session_drift = top.get("session_drift", bool, True)
        noise_floor_pct = top.get("pair_noise_floor_pct", float, 0.0)
        top.table("metrics", required=True)  # checks that it is a table
        top.finish()
        top.check("confidence", 0.5 < confidence < 1, "must lie in (0.5, 1)", confidence)
        top.check("resamples", resamples >= 200, "must be >= 200", resamples)
        top.check("seed", seed >= 0, "must be >= 0", seed)
        top.check("min_samples", min_samples >= 2, "must be >= 2", min_samples)
        top.check("min_tail_samples", min_tail >= 1, "must be >= 1", min_tail)
        top.check("min_windows", min_windows >= 2, "must be >= 2", min_windows)
        floor_ok = 0 <= noise_floor_pct < 100
        top.check("pair_noise_floor_pct", floor_ok, "must lie in [0, 100)", noise_floor_pct)
        names = _flatten(data["metrics"])
        flat = Table(names, source, "metrics.")
        rules = [_read_rule(flat, name, min_samples, min_tail) for name in names]
        if not rules:
            raise top.error("metrics", "lists no metric; a gate needs at least one")
    except ScenarioError as exc:
        raise RulesError(str(exc)) from None
    return GateRules(
        tuple(rules), confidence, resamples, seed, min_windows, session_drift, source,
        pair_noise_floor=noise_floor_pct / 100,
    )  # fmt: skip


def load_rules(path: Path | str | None) -> GateRules:
    """Rules from a TOML file, or :data:`DEFAULT_RULES` for None."""
    if path is None:
        return DEFAULT_RULES
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RulesError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise RulesError(f"{path}: not valid TOML: {exc}") from None
    return rules_from_dict(data, str(path))


DEFAULT_RULES = rules_from_dict(
    {
        "metrics": {
            "throughput.output_tok_s": {"max_drop_pct": 5.0},
            "ttft_ms.p99": {"max_rise_pct": 10.0},
            "tpot_ms.p50": {"max_rise_pct": 10.0},
            "e2el_ms.p50": {"max_rise_pct": 10.0},
        }
    },
    "<defaults>",
)
