"""Gate rules: metric names, directions, limits and clear errors for bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.gate.rules import DEFAULT_RULES, RulesError, load_rules, metric_spec, rules_from_dict
from tests.support.paths import REPO_ROOT

SMOKE_RULES = REPO_ROOT / "benchmarks" / "perf-gate" / "smoke-rules.toml"


def test_metric_names_parse_with_direction_and_unit() -> None:
    ttft = metric_spec("ttft_ms.p99.9")
    assert (ttft.statistic, ttft.percentile, ttft.higher_is_better, ttft.unit) == (
        "percentile",
        99.9,
        False,
        "ms",
    )
    assert metric_spec("itl_ms.mean").statistic == "mean"
    tps = metric_spec("per_user_tps.p10")
    assert tps.higher_is_better and tps.percentile == 10.0
    rate = metric_spec("throughput.output_tok_s")
    assert rate.statistic == "ratio" and rate.amount == "output_tokens" and rate.higher_is_better
    assert metric_spec("goodput.requests_per_s").amount == "good_requests"
    work = metric_spec("probes.cpu_work.engine_cpu_s_per_output_token")
    assert (work.statistic, work.amount, work.higher_is_better, work.unit) == (
        "ratio",
        "engine",
        False,
        "s/tok",
    )
    assert metric_spec("probes.cpu_work.client_cpu_s_per_output_token").amount == "client"


def test_cpu_work_is_lower_is_better() -> None:
    name = "probes.cpu_work.engine_cpu_s_per_output_token"
    with pytest.raises(RulesError, match="lower-is-better: give its limit as max_rise_pct"):
        rules_from_dict({"metrics": {name: {"max_drop_pct": 10}}})
    rule = rules_from_dict({"metrics": {name: {"max_rise_pct": 10}}}).rules[0]
    assert rule.limit_text == "rise <= 10%"
    close = r"did you mean 'probes\.cpu_work\.engine_cpu_s_per_output_token'"
    with pytest.raises(ValueError, match=close):
        metric_spec("probes.cpu_work.engine_cpu_s_per_token")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("tft_ms.p99", "did you mean 'ttft_ms.p99'"),
        ("ttft_ms.max", "cannot be bootstrapped"),
        ("ttft_ms.p100", "0 < Q < 100"),
        ("ttft_ms.median", "'mean' or pQ"),
    ],
)
def test_unknown_metrics_are_named(name: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        metric_spec(name)


def test_defaults_and_shipped_smoke_rules_load() -> None:
    names = [r.metric.name for r in DEFAULT_RULES.rules]
    assert names[:2] == ["throughput.output_tok_s", "ttft_ms.p99"]
    assert DEFAULT_RULES.confidence == 0.95 and DEFAULT_RULES.resamples == 2000
    smoke = load_rules(SMOKE_RULES)
    assert smoke.rules and smoke.source == str(SMOKE_RULES)


def test_a_rules_file_with_quoted_and_dotted_tables(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(
        "confidence = 0.9\nresamples = 500\nseed = 3\nsession_drift = false\n"
        '[metrics]\n"throughput.output_tok_s" = { max_drop_pct = 5 }\n'
        "[metrics.ttft_ms.p99]\nmax_rise_pct = 10\nmin_samples = 50\n"
    )
    rules = load_rules(path)
    assert (rules.confidence, rules.resamples, rules.seed, rules.session_drift) == (
        0.9,
        500,
        3,
        False,
    )
    by_name = {r.metric.name: r for r in rules.rules}
    assert by_name["throughput.output_tok_s"].max_regression_pct == 5.0
    assert by_name["ttft_ms.p99"].min_samples == 50
    assert by_name["ttft_ms.p99"].limit_text == "rise <= 10%"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[metrics]\n"ttft_ms.p99" = { max_drop_pct = 5 }', "lower-is-better: give its limit as"),
        ('[metrics]\n"throughput.output_tok_s" = { max_rise_pct = 5 }', "max_drop_pct"),
        ('[metrics]\n"ttft_ms.p99" = { }', "missing: how much may this metric regress"),
        ('[metrics]\n"ttft_ms.p99" = { max_rise_pct = -1 }', "must be > 0 percent"),
        ('[metrics]\n"ttft_ms.p99" = { max_rise_pct = 5, min_sample = 3 }', "min_samples"),
        ('confidnce = 0.9\n[metrics]\n"ttft_ms.p99" = { max_rise_pct = 5 }', "'confidence'"),
        ('confidence = 1.5\n[metrics]\n"ttft_ms.p99" = { max_rise_pct = 5 }', "(0.5, 1)"),
        ("seed = 0", "key 'metrics': missing"),
        ('pair_noise_floor_pct = -1\n[metrics]\n"ttft_ms.p99" = { max_rise_pct = 5 }', "lie in"),
        ("[metrics]", "lists no metric"),
        ('[metrics]\n"nope.p50" = { max_rise_pct = 5 }', "unknown metric 'nope.p50'"),
        ("[metrics\n", "not valid TOML"),
    ],
)
def test_bad_rules_files_are_rejected_naming_key_and_fix(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(text)
    with pytest.raises(RulesError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        load_rules(path)
    assert str(path) in str(info.value)


def test_a_missing_rules_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(RulesError, match="cannot be read"):
        load_rules(tmp_path / "absent.toml")


def test_the_ab_smoke_gate_judges_cpu_work_beside_wall_time() -> None:
    rules = load_rules(REPO_ROOT / "benchmarks" / "perf-gate" / "ab-rules.toml")
    families = {r.metric.family for r in rules.rules}
    assert "cpu_work" in families and families & {"throughput", "tpot_ms"}
    script = (REPO_ROOT / "benchmarks" / "perf-gate" / "ab-smoke.sh").read_text()
    # Without the probes no run has CPU readings, and the CPU rule could not be judged.
    assert "--no-probes" not in script
