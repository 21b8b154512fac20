"""The claims' ranges and ratios, and the reasons: placed from the figures, worded from them."""

from __future__ import annotations

import pytest

from bench.techniques.claims import CLAIMS, claim
from bench.techniques.reasons import place, verdict
from bench.techniques.studies import ROWS, STUDIES, study


def test_every_claim_has_a_row_whose_study_holds_its_values() -> None:
    assert [r.technique for r in ROWS] == [c.technique for c in CLAIMS]
    for row in ROWS:
        values = study(row.study).values
        assert row.off in values and row.on in values and row.off != row.on
    assert len({s.key for s in STUDIES}) == len(STUDIES)


def test_ratio_direction_and_scaled_bounds() -> None:
    kv, flash, gqa = claim("kv_cache"), claim("flash_attention"), claim("gqa")
    assert kv.ratio_of(10.0, 80.0) == 8.0  # tokens/s: on over off
    assert flash.ratio_of(300.0, 100.0) == 3.0  # TTFT: off over on
    assert kv.ratio_of(None, 1.0) is None
    assert kv.ratio_of(0.0, 1.0) is None  # no baseline to divide by
    assert kv.bounds(200.0) == (20.0, 200.0)
    assert gqa.bounds(0.25) == (0.25, 0.25)
    assert kv.bounds(None) == (None, None)
    assert claim("int8").bounds(None) == (1.5, 2.0)
    with pytest.raises(KeyError, match="known: kv_cache"):
        claim("flash")


def test_place() -> None:
    assert place(1.0, 1.5, 2.0) == "below"
    assert place(1.7, 1.5, 2.0) == "within"
    assert place(2.5, 1.5, 2.0) == "above"
    assert place(None, 1.5, 2.0) == place(1.0, None, None) == "unknown"


def test_an_exact_claim_holds_within_the_tolerance_and_per_model() -> None:
    assert place(0.2499, 0.25, 0.25) == "within"
    gqa = claim("gqa")
    preds = [{"value": 0.25, "claimed": [0.25, 0.25]}, {"value": 0.125, "claimed": [0.125, 0.125]}]
    assert verdict(gqa, (0.25, 0.25), {"value": 0.2499}, preds) == ("within", None)
    _, reason = verdict(gqa, (0.25, 0.25), {"value": 0.2499}, [{"value": 0.125}])
    assert reason is not None and "1 of 1 predictions outside" in reason


def test_agreement_gives_no_reason() -> None:
    preds = [{"device": "d", "value": 1.8}, {"device": "e", "value": 1.6}]
    assert verdict(claim("int8"), (1.5, 2.0), {"value": 1.7}, preds) == ("within", None)


def test_a_reason_names_the_figures_and_the_cause_they_point_at() -> None:
    measured = {
        "value": 0.8,
        "compute_bound_share": 0.93,
        "also": {"weight_bytes": [4_000_000, 1_000_000]},
    }
    preds = [{"device": "d", "value": 2.4, "memory_bound_share": 0.98}]
    where, reason = verdict(claim("int4"), (2.0, 3.0), measured, preds)
    assert where == "below"
    assert reason is not None
    assert reason.startswith("measured 0.80x below the claimed 2.00x-3.00x")
    assert "weights shrink to 0.25x" in reason and "93% of its step time compute-bound" in reason
    assert "98% memory-bound" in reason and "round-to-nearest" in reason


def test_speculation_reason_quotes_the_formula() -> None:
    est = {"acceptance_rate": 0.5, "expected_tokens_per_step": 2.5, "k": 3,
           "draft_tokens_per_step": 2.0,
           "t_verify_s": 0.004, "t_target_s": 0.002, "t_draft_s": 0.0, "speedup": 1.25}  # fmt: skip
    _, reason = verdict(claim("speculative"), (2.0, 3.0), {"value": 1.2, "speculation": est}, [])
    assert reason is not None
    assert "acceptance 50% of 2.00 tokens drafted per step (K=3" in reason
    assert "E[accepted+1] = 2.50" in reason
    assert "T_verify 4.00 ms vs T_target 2.00 ms" in reason and "1.25x" in reason


def test_a_claim_without_a_range_disagrees_only_beyond_the_factor() -> None:
    c = claim("prefix_caching")
    measured = {"value": 2.0, "prefix_hit_rate": 0.9}
    assert verdict(c, (None, None), measured, [{"value": 2.5}])[1] is None
    _, reason = verdict(c, (None, None), measured, [{"value": 6.0}])
    assert reason is not None and "90% of the prompt tokens came from the cache" in reason


def test_flash_reason_bounds_the_measurement_only_when_it_is_below() -> None:
    c = claim("flash_attention")
    facts = {"attention_flop_share": 0.25, "prompt_tokens": 900.0}
    preds = [{"value": 9.0}]
    _, below = verdict(c, (2.0, 4.0), {"value": 1.1, **facts}, preds)
    _, within = verdict(c, (2.0, 4.0), {"value": 2.5, **facts}, preds)
    assert below is not None and "could gain at most 1.33x" in below
    assert within is not None and "could gain" not in within
    assert "at 900 tokens naive attention moves the whole score matrix" in within


def test_batching_reason_names_the_batch_sizes_here_and_simulated() -> None:
    measured = {"value": 0.7, "compute_bound_share": 0.8,
                "also": {"max_running": [8, 29], "kv_waste": [0.62, 0.04]}}  # fmt: skip
    preds = [{"value": 1.0, "memory_bound_share": 0.93, "also": {"max_running": [32, 32]}}]
    _, reason = verdict(claim("paged_attention"), (2.0, 4.0), measured, preds)
    assert reason is not None
    assert "29 requests ran at once against 8, KV waste 62% -> 4%" in reason
    assert "80% of its step time compute-bound" in reason
    assert "on the first simulated GPU 32 ran at once against 32" in reason
