"""The timing truth of the GPU check: each step's time as torch.profiler saw it, a clock the
engine does not own, against the engine's own ``forward_s``.

The profiled run (engine_runs.run_profiled) wraps every ``execute_model`` call in a
``record_function`` range named ``STEP_MARK#i``; the profiler's chrome trace then holds, on one
timeline (kineto puts the device's timestamps on the host's clock, microseconds):

- the range itself (``cat`` "user_annotation"): when the step started and its call returned;
- each kernel, copy and memset the device ran (``cat`` "kernel", "gpu_memcpy", "gpu_memset"),
  tied by its ``args.correlation`` to the runtime call that launched it (``cat``
  "cuda_runtime" / "cuda_driver"), which lies inside one step's range.

A step's truth is from its range's start to the later of the range's end and its last device
activity's end: a host clock that stopped before the device finished (the step-timing fix
reverted: a step that samples nothing never syncs) reads less than that, and a skewed clock
reads more or less. The device's share of a step is its activities' union over the truth; the
host's (preparation, launch, waiting on nothing) is the rest: MBU and MFU are computed from
``forward_s``, so a large host share says the step is host-bound, not memory-bound.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

STEP_MARK = "gpu_check.step"
DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})
# The largest |sum(forward_s) / sum(truth) - 1| allowed, per kind of step (sampling or not).
TIMING_TOLERANCE = 0.02


@dataclass(frozen=True)
class StepSpan:
    """One profiled step, microseconds on the trace's clock: the range's start and end, the end
    of the last device activity it launched (None: it launched none) and the time the device
    was busy for it (the union of its activities)."""

    start_us: float
    end_us: float
    device_end_us: float | None
    device_busy_us: float

    @property
    def truth_s(self) -> float:
        """The step's time, seconds: start to the later of the call's and the device's end."""
        end = max(self.end_us, self.device_end_us or self.end_us)
        return (end - self.start_us) / 1e6


def _union_us(intervals: list[tuple[float, float]]) -> float:
    total, reach = 0.0, -np.inf
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def step_spans(trace: Mapping[str, Any], steps: int) -> list[StepSpan]:
    """The spans of the ranges ``STEP_MARK#0`` .. ``STEP_MARK#{steps-1}`` in a chrome trace
    (``prof.export_chrome_trace``'s JSON, loaded). Raises ValueError naming what is missing."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    ranges: dict[int, tuple[float, float]] = {}
    for e in events:
        name = str(e.get("name", ""))
        if e.get("cat") == "user_annotation" and name.startswith(STEP_MARK + "#"):
            start = float(e["ts"])
            ranges[int(name.rpartition("#")[2])] = (start, start + float(e.get("dur", 0)))
    missing = [i for i in range(steps) if i not in ranges]
    if missing:
        raise ValueError(f"the profiler's trace has no range for steps {missing[:5]} of {steps}")
    order = sorted(range(steps), key=lambda i: ranges[i][0])
    starts = np.array([ranges[i][0] for i in order])

    def owner(ts: float) -> int | None:
        k = int(np.searchsorted(starts, ts, side="right")) - 1
        return order[k] if k >= 0 and ts <= ranges[order[k]][1] else None

    launched: dict[Any, int] = {}
    for e in events:
        corr = (e.get("args") or {}).get("correlation")
        if e.get("cat") in LAUNCH_CATS and corr is not None:
            step = owner(float(e["ts"]))
            if step is not None:
                launched[corr] = step
    work: dict[int, list[tuple[float, float]]] = {i: [] for i in range(steps)}
    for e in events:
        corr = (e.get("args") or {}).get("correlation")
        if e.get("cat") in DEVICE_CATS and corr in launched:
            start = float(e["ts"])
            work[launched[corr]].append((start, start + float(e.get("dur", 0))))
    return [
        StepSpan(ranges[i][0], ranges[i][1],
                 max((b for _, b in work[i]), default=None), _union_us(work[i]))
        for i in range(steps)
    ]  # fmt: skip


def timing_against_device(
    forward_s: Sequence[float], spans: Sequence[StepSpan], sampled: Sequence[bool]
) -> dict[str, Any]:
    """``forward_s`` of each step against its span's truth, per kind of step ("sampling",
    "not sampling": ``sampled``), all three in the same order.

    For each kind: ``steps``, ``total_rel_error`` (sum(forward_s) / sum(truth) - 1),
    ``device_share`` (the device's busy time over the truth) and ``host_share`` (1 -
    device_share). ``ok``: both kinds have steps and every |total_rel_error| <= TIMING_TOLERANCE.
    Raises ValueError for lists of different lengths.
    """
    if not len(forward_s) == len(spans) == len(sampled):
        raise ValueError(
            f"{len(forward_s)} forward_s, {len(spans)} profiled steps, {len(sampled)} flags"
        )
    host = np.asarray(forward_s, dtype=np.float64)
    truth = np.array([s.truth_s for s in spans])
    busy = np.array([s.device_busy_us / 1e6 for s in spans])
    flags = np.asarray(sampled, dtype=bool)
    kinds: dict[str, Any] = {}
    for kind, mask in (("sampling", flags), ("not sampling", ~flags)):
        if not mask.any():
            kinds[kind] = {"steps": 0}
            continue
        share = float(busy[mask].sum() / truth[mask].sum())
        kinds[kind] = {
            "steps": int(mask.sum()),
            "total_rel_error": float(host[mask].sum() / truth[mask].sum() - 1.0),
            "device_share": share,
            "host_share": 1.0 - share,
        }
    ok = all(k["steps"] and abs(k["total_rel_error"]) <= TIMING_TOLERANCE for k in kinds.values())
    return {"kinds": kinds, "ok": ok}
