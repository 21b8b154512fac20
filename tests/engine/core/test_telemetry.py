"""Per-step records: columns, bounded memory, reads from a step number on."""

from __future__ import annotations

import pandas as pd
import pytest

from engine.core.telemetry import STEP_COLUMNS, NvtxRanges, StepRecorder
from results.folder.engine_steps import decode_overhead_share


def _values(i: int) -> dict[str, int]:
    return {name: i for name in STEP_COLUMNS if name != "step"}


def test_records_are_numbered_and_read_since_a_step() -> None:
    rec = StepRecorder()
    for i in range(5):
        rec.record(**_values(i))
    cols = rec.since(3)
    assert cols["step"] == [3, 4]
    assert cols["num_seqs"] == [3, 4]
    assert set(cols) == set(STEP_COLUMNS)


def test_memory_is_bounded_by_dropping_the_oldest_half() -> None:
    rec = StepRecorder(max_steps=10)
    for i in range(25):
        rec.record(**_values(i))
    cols = rec.since(0)
    assert len(cols["step"]) <= 10
    assert cols["step"][-1] == 24 and cols["step"] == sorted(cols["step"])
    assert rec.since(24)["step"] == [24]
    with pytest.raises(ValueError):
        StepRecorder(max_steps=1)


def test_nvtx_ranges_nest_without_a_profiler() -> None:
    ranges = NvtxRanges()
    with ranges.range("step", 7), ranges.range("decode"):
        pass


def test_decode_overhead_share_counts_the_loop_between_busy_steps() -> None:
    # Three decode steps of 10 ms wall (8 ms executor) 2 ms apart while requests run, a
    # prefill step that does not count, then an idle gap after the last step that does not.
    steps = pd.DataFrame(
        {
            "start_s": [0.000, 0.012, 0.024, 0.036],
            "end_s": [0.010, 0.022, 0.034, 0.046],
            "forward_s": [0.008, 0.008, 0.002, 0.008],
            "num_prefill_tokens": [0, 0, 64, 0],
            "num_decode_tokens": [4, 4, 4, 4],
            "num_running": [4, 4, 4, 0],
        }
    )
    # Decode walls: 12 + 12 (to the next start) + 10 (its own end, nothing running) = 34 ms.
    assert decode_overhead_share(steps) == pytest.approx(1 - 0.024 / 0.034)
    assert decode_overhead_share(steps.iloc[0:0]) is None
    assert decode_overhead_share(steps.iloc[2:3]) is None  # prefill only


def test_a_drained_recorder_hands_every_step_over_once_and_holds_at_most_every() -> None:
    rec = StepRecorder(max_steps=10)
    for i in range(3):
        rec.record(**_values(i))
    batches: list[dict[str, list[int]]] = []
    rec.drain_to(batches.append, every=4)
    held = []
    for i in range(3, 25):  # past max_steps: nothing is dropped once a sink takes the steps
        rec.record(**_values(i))
        held.append(rec.kept)
    rec.drain()
    assert max(held) < 4 and rec.kept == 0
    assert [len(b["step"]) for b in batches] == [4, 4, 4, 4, 4, 4, 1]
    assert [s for b in batches for s in b["step"]] == list(range(25))
    assert set(batches[0]) == set(STEP_COLUMNS)
    with pytest.raises(ValueError, match="every"):
        rec.drain_to(batches.append, every=0)
