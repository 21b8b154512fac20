"""The paired comparison: the interval over pairs, and verdicts on real run folders (synthetic
requests written by the real writers) judged by the gate's rules."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bench.ab.paired import judge_pairs, paired_interval, ratio_verdict
from bench.ab.session import pair_order
from bench.gate.interval import student_t_quantile
from bench.gate.report import to_junit_xml, to_markdown
from bench.gate.rules import rules_from_dict
from tests.support.gate_fakes import write_fake_run

RULES = rules_from_dict(
    {
        "min_samples": 20,
        "metrics": {
            "throughput.output_tok_s": {"max_drop_pct": 10.0},
            "tpot_ms.mean": {"max_rise_pct": 10.0},
        },
    }
)


def _pairs(root: Path, n: int, slowdown: float) -> tuple[list[Path], list[Path]]:
    a = [write_fake_run(root / "A", seed=2 * i) for i in range(n)]
    b = [write_fake_run(root / "B", seed=2 * i + 1, slowdown=slowdown) for i in range(n)]
    return a, b


def test_the_order_alternates_a_b_then_b_a() -> None:
    assert [pair_order(i) for i in range(4)] == [("A", "B"), ("B", "A"), ("A", "B"), ("B", "A")]


def test_the_change_is_the_geometric_mean_of_the_ratios() -> None:
    change, low, high = paired_interval([1.1, 1.21, 1.331], 0.95, 2000, 0, 0)
    assert change == pytest.approx(1.21 - 1)
    assert low < change < high


def test_few_pairs_widen_the_interval_beyond_the_plain_percentile_one() -> None:
    ratios = [1.02, 0.97, 1.05]
    _, low, high = paired_interval(ratios, 0.95, 2000, 0, 0)
    logs = np.log(ratios)
    # The plain percentile interval of the mean lies within the observed means' range.
    assert np.expm1(logs.min()) > low and np.expm1(logs.max()) < high


def test_a_noise_floor_keeps_three_agreeing_pairs_from_failing() -> None:
    # Output tok/s ratios of one 3-pair A/B of two identical engines on a loaded box.
    agreeing = [0.864, 0.870, 0.859]
    rule = RULES.rules[0]
    assert ratio_verdict(rule, RULES, agreeing)[0] == "fail"
    floored = replace(RULES, pair_noise_floor=0.10)
    verdict, _, interval = ratio_verdict(rule, floored, agreeing)
    assert verdict == "inconclusive" and interval is not None
    change, low, high = interval
    # The floor's Student half-width: t(2) * 0.10 / sqrt(3) in log terms, either side.
    half = student_t_quantile(0.975, 2) * 0.10 / np.sqrt(3)
    centre = np.log1p(change)
    assert (np.log1p(low), np.log1p(high)) == pytest.approx((centre - half, centre + half))
    # A 25% drop over six pairs still fails under the floor; a wider real spread is kept.
    slower = [0.74, 0.77, 0.72, 0.76, 0.75, 0.73]
    assert ratio_verdict(rule, floored, slower)[0] == "fail"
    spread = [0.6, 1.3, 0.9, 1.1]
    assert paired_interval(spread, 0.95, 2000, 0, 0, 0.10) == paired_interval(
        spread, 0.95, 2000, 0, 0
    )


def test_one_pair_has_no_interval() -> None:
    with pytest.raises(ValueError, match=">= 2 pairs"):
        paired_interval([1.0], 0.95, 2000, 0, 0)
    verdict, reason, interval = ratio_verdict(RULES.rules[0], RULES, [1.0])
    assert (verdict, interval) == ("inconclusive", None)
    assert ">= 2 pairs" in reason


def test_the_same_ratios_and_seed_give_the_same_interval() -> None:
    ratios = [0.9, 1.1, 1.0, 0.95]
    assert paired_interval(ratios, 0.95, 2000, 3, 7) == paired_interval(ratios, 0.95, 2000, 3, 7)


def test_a_slower_b_fails_and_an_identical_one_passes(tmp_path: Path) -> None:
    a, b = _pairs(tmp_path / "slow", 4, slowdown=1.6)
    report, paired = judge_pairs(RULES, a, b, ("A: this checkout", "B: slowed"))
    assert report.verdict == "fail" and report.exit_code == 1
    tpot = next(p for p in paired if p.metric == "tpot_ms.mean")
    assert len(tpot.ratios) == 4 and all(r > 1.4 for r in tpot.ratios)
    assert tpot.result.verdict == "fail" and tpot.result.ci_low_pct > 10

    a, b = _pairs(tmp_path / "same", 4, slowdown=1.0)
    report, _ = judge_pairs(RULES, a, b, ("A: this checkout", "B: this checkout"))
    assert report.verdict == "pass" and report.exit_code == 0
    assert report.notes[0].startswith("paired: 4 pair(s)")


def test_the_reports_are_the_gates(tmp_path: Path) -> None:
    a, b = _pairs(tmp_path, 3, slowdown=1.6)
    report, _ = judge_pairs(RULES, a, b, ("A: this checkout", "B: slowed"))
    xml, md = to_junit_xml(report), to_markdown(report)
    assert '<failure message="regression' in xml and 'name="tpot_ms.mean"' in xml
    assert "| `tpot_ms.mean` (ms) |" in md and "3 / 3 runs, paired" in md


def test_too_few_requests_are_inconclusive_naming_the_side(tmp_path: Path) -> None:
    a = [write_fake_run(tmp_path / "A", seed=i, requests=8) for i in range(2)]
    b = [write_fake_run(tmp_path / "B", seed=9 + i, requests=8) for i in range(2)]
    report, _ = judge_pairs(RULES, a, b, ("A", "B"))
    assert report.verdict == "inconclusive" and report.exit_code == 2
    assert any("too few samples: the side A " in r.reason for r in report.results)
    assert not any("baseline" in r.reason or "candidate" in r.reason for r in report.results)
