"""Per-step records: columns, bounded memory, reads from a step number on."""

from __future__ import annotations

import pytest

from engine.telemetry import STEP_COLUMNS, NvtxRanges, StepRecorder


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
