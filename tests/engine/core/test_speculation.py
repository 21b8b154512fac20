"""The speculation counters the verifiers keep (engine.core.speculation)."""

from __future__ import annotations

from engine.core.speculation import SpecStats


def test_spec_stats_count_acceptance_per_position() -> None:
    stats = SpecStats()
    stats.record(3, 2)
    stats.record(3, 0)
    stats.record(2, 2)
    assert (stats.num_drafts, stats.num_draft_tokens, stats.num_accepted_tokens) == (3, 8, 4)
    assert stats.accepted_per_position == [2, 2, 0]
    assert stats.acceptance_rate == 0.5
