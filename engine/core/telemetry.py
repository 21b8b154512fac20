"""Per-step records of the engine, kept in process, and NVTX ranges for Nsight Systems.

NVTX ranges cannot be read back, so the same boundaries are also recorded here with
time.perf_counter_ns (CLOCK_MONOTONIC on Linux, shared by every process of the machine, so a
load generator on the same host can place steps on its own run clock). Records are columnar
arrays of 8-byte numbers: about 130 bytes a step, and the oldest half is dropped past
``max_steps`` so that a server left running cannot grow without bound.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Iterator
from contextlib import contextmanager

import nvtx

from results.folder.table_columns import STEP_RECORD_COLUMNS

NVTX_DOMAIN = "llm-perf-lab"

# Column name -> array typecode: every column of a step's record (declared with steps.parquet,
# results.folder.table_columns) is an 8-byte signed integer. Times are perf_counter_ns.
STEP_COLUMNS: dict[str, str] = {name: "q" for name in STEP_RECORD_COLUMNS}


# The ranges a step pushes: step > schedule, execute > (prefill | decode | mixed), update,
# propose. The phase range names what the forward computes, so an nsys timeline shows prefill
# and decode kernels apart.
RANGE_NAMES = ("step", "schedule", "execute", "update", "propose", "prefill", "decode", "mixed")


def step_phase(num_prefill_tokens: int, num_decode_tokens: int) -> tuple[str, int]:
    """The phase range of a step's forward and its payload, in tokens.

    "prefill" (payload: prompt tokens) when the step computes prompt tokens only, "decode"
    (payload: decode tokens, one per sequence plus drafts) when it computes decode tokens only,
    "mixed" (payload: prompt tokens) for a chunked-prefill step that carries decodes beside
    its prompt chunk: one forward computes both, so no range can split them.
    """
    if num_prefill_tokens and num_decode_tokens:
        return "mixed", num_prefill_tokens
    if num_prefill_tokens:
        return "prefill", num_prefill_tokens
    return "decode", num_decode_tokens


class NvtxRanges:
    """Pre-built NVTX event attributes, so a range costs a push and a pop (~200 ns)."""

    def __init__(self) -> None:
        self.domain = nvtx.get_domain(NVTX_DOMAIN)
        self._attrs = {name: self.domain.get_event_attributes(message=name) for name in RANGE_NAMES}

    @contextmanager
    def range(self, name: str, payload: int | None = None) -> Iterator[None]:
        if payload is None:
            attrs = self._attrs[name]
        else:
            attrs = self.domain.get_event_attributes(message=name, payload=payload)
        self.domain.push_range(attrs)
        try:
            yield
        finally:
            self.domain.pop_range()


class StepRecorder:
    """Append-only columnar step records, readable from another thread."""

    def __init__(self, max_steps: int = 1_000_000) -> None:
        if max_steps < 2:
            raise ValueError(f"max_steps must be at least 2, got {max_steps}")
        self.max_steps = max_steps
        self._columns = {name: array(code) for name, code in STEP_COLUMNS.items()}
        self._lock = threading.Lock()
        self.num_steps = 0

    def record(self, **values: int) -> None:
        """Append one step; ``values`` has every STEP_COLUMNS key but ``step``."""
        with self._lock:
            cols = self._columns
            cols["step"].append(self.num_steps)
            for name, value in values.items():
                cols[name].append(value)
            self.num_steps += 1
            if len(cols["step"]) > self.max_steps:
                drop = self.max_steps // 2
                for col in cols.values():
                    del col[:drop]

    def since(self, step: int = 0) -> dict[str, list[int]]:
        """Columns of the steps numbered ``step`` and later that are still kept."""
        with self._lock:
            first = self._columns["step"][0] if self._columns["step"] else self.num_steps
            start = max(0, step - first)
            return {name: col[start:].tolist() for name, col in self._columns.items()}
