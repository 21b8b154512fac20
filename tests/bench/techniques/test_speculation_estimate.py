"""The lectures' estimate E[accepted + 1] x T_target / (K x T_draft + T_verify) from a pair of
runs' steps and acceptance counters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from bench.techniques.speculation_estimate import speculation_estimate
from results.folder.run_folder import RunData


def _run(steps: list[tuple[float, float, int, int, int]], stats: dict[str, int]) -> RunData:
    """Steps as (duration s, forward s, prefill tokens, decode seqs, decode tokens)."""
    t, rows = 0.0, []
    for duration, forward, prefill, seqs, decode in steps:
        rows.append({"start_s": t, "end_s": t + duration, "forward_s": forward,
                     "num_prefill_tokens": prefill, "num_decode_seqs": seqs,
                     "num_decode_tokens": decode})  # fmt: skip
        t += duration
    run_json: Any = {"engine": {"description": {"stats": {}}, "stats_end": stats}}
    return RunData(Path("."), run_json, pd.DataFrame(), pd.DataFrame(), None, pd.DataFrame(rows))


def test_formula_from_step_costs_and_acceptance() -> None:
    # Baseline: decodes of 10 ms (8 ms forward, 2 ms host); a prefill step is left out.
    baseline = _run([(0.05, 0.05, 100, 0, 0)] + [(0.010, 0.008, 0, 1, 1)] * 4, {})
    # Speculative: verify steps of 1 + K = 4 tokens, 14 ms forward, 2 + 3 ms host (3 ms drafting);
    # a decode step without drafts does not count.
    spec = _run(
        [(0.019, 0.014, 0, 1, 4)] * 5 + [(0.010, 0.008, 0, 1, 1)],
        {"spec_num_drafts": 5, "spec_num_draft_tokens": 15, "spec_num_accepted_tokens": 10},
    )
    est = speculation_estimate(baseline, spec, k=3)
    assert est is not None
    assert est.acceptance_rate == pytest.approx(10 / 15)
    assert est.expected_tokens_per_step == pytest.approx(3.0)
    assert est.draft_tokens_per_step == pytest.approx(3.0)
    assert est.t_target_s == pytest.approx(0.010)
    assert est.t_verify_s == pytest.approx(0.016)  # forward plus the baseline's host time
    assert est.t_draft_s == pytest.approx(0.001)
    assert est.speedup == pytest.approx(3.0 * 0.010 / (3 * 0.001 + 0.016))


def test_no_drafts_or_no_decode_steps_give_no_estimate() -> None:
    baseline = _run([(0.010, 0.008, 0, 1, 1)], {})
    no_drafts = _run([(0.010, 0.008, 0, 1, 1)], {"spec_num_drafts": 0})
    assert speculation_estimate(baseline, no_drafts, k=3) is None
    prefill_only = _run([(0.05, 0.05, 100, 0, 0)], {})
    spec = _run([(0.019, 0.014, 0, 1, 4)], {"spec_num_drafts": 1, "spec_num_draft_tokens": 3,
                                            "spec_num_accepted_tokens": 1})  # fmt: skip
    assert speculation_estimate(prefill_only, spec, k=3) is None
