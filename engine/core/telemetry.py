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
from collections.abc import Callable, Iterator
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


StepSink = Callable[[dict[str, list[int]]], None]


class StepRecorder:
    """Append-only columnar step records, readable from another thread.

    It keeps the last ``max_steps`` (older ones dropped half at a time), or, once
    :meth:`drain_to` gave it a sink, hands every ``every`` steps to the sink and forgets them.
    """

    def __init__(self, max_steps: int = 1_000_000) -> None:
        if max_steps < 2:
            raise ValueError(f"max_steps must be at least 2, got {max_steps}")
        self.max_steps = max_steps
        self._columns = {name: array(code) for name, code in STEP_COLUMNS.items()}
        self._lock = threading.Lock()
        self.num_steps = 0
        self._sink: StepSink | None = None
        self._every = max_steps

    @property
    def kept(self) -> int:
        """Steps held in memory now."""
        with self._lock:
            return len(self._columns["step"])

    def drain_to(self, sink: StepSink, every: int) -> None:
        """From now on hand the kept steps to ``sink`` (columns as :meth:`since` gives them)
        whenever ``every`` are kept, then forget them: at most ``every`` steps are held. The
        sink runs in the recording thread, under the recorder's lock."""
        if every < 1:
            raise ValueError(f"every must be at least 1, got {every}")
        with self._lock:
            self._sink, self._every = sink, every
            if len(self._columns["step"]) >= every:
                self._drain_locked()

    def drain(self) -> None:
        """Hand what is kept to the sink now (nothing without one, or when none is kept)."""
        with self._lock:
            self._drain_locked()

    def _drain_locked(self) -> None:
        if self._sink is None or not self._columns["step"]:
            return
        columns = {name: col.tolist() for name, col in self._columns.items()}
        for col in self._columns.values():
            del col[:]
        self._sink(columns)

    def record(self, **values: int) -> None:
        """Append one step; ``values`` has every STEP_COLUMNS key but ``step``."""
        with self._lock:
            cols = self._columns
            cols["step"].append(self.num_steps)
            for name, value in values.items():
                cols[name].append(value)
            self.num_steps += 1
            if self._sink is not None and len(cols["step"]) >= self._every:
                self._drain_locked()
            elif len(cols["step"]) > self.max_steps:
                drop = self.max_steps // 2
                for col in cols.values():
                    del col[:drop]

    def since(self, step: int = 0) -> dict[str, list[int]]:
        """Columns of the steps numbered ``step`` and later that are still kept."""
        with self._lock:
            first = self._columns["step"][0] if self._columns["step"] else self.num_steps
            start = max(0, step - first)
            return {name: col[start:].tolist() for name, col in self._columns.items()}
