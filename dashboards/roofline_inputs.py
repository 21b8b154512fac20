"""What the roofline needs, gathered from wherever a run recorded it.

Roofs (the hardware's peaks), first found wins:
  1. summary.json ``attribution.roofs`` / run.json ``analytic.roofs`` (bench.run.probing:
     {name, source, compute_dtype, flops_per_s, bytes_per_s})
  2. perfmodel.hardware's table for the run's GPU, or this machine's `bench calibrate` figures
     for its CPU (:mod:`dashboards.roofline_probes`, imported lazily): runs recorded before
     the probes wrote ``analytic``
Per-step FLOPs and bytes (the faint dots), first found wins:
  1. steps.parquet columns ``flops`` and ``bytes``
  2. perfmodel.roofline's analytic model over steps.parquet, with run.json's ``analytic`` inputs
     (model shape, precision, TP degree), else the engine's description
Phase points and attribution: summary.json ``attribution`` (results.attribution: prefill and
decode parts of every step, mixed steps apportioned by analytic cost; memory- and compute-bound
time; MFU, MBU) when available; else computed here from the per-step costs, steps classed
prefill / decode / mixed as a whole (the page says which).
Achieved FLOP/s is FLOPs over executor time (steps.parquet's forward_s), as MFU is; shares of
time are of step time (end - start). Nothing here raises for a missing input: it becomes a note.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from dashboards.roofline_probes import costs_from_probes, roofs_from_probes
from dashboards.runview import RunView
from dashboards.steps import phase_of_steps

__all__ = ["PhasePoint", "RooflineInputs", "Roofs", "phase_points", "roofline_inputs"]


@dataclass(frozen=True)
class Roofs:
    """A machine's peaks: FLOP/s and memory bytes/s, with where they came from."""

    name: str
    peak_flops_per_s: float
    peak_bytes_per_s: float
    source: str

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity where the memory roof meets the compute roof."""
        return self.peak_flops_per_s / self.peak_bytes_per_s


@dataclass(frozen=True)
class PhasePoint:
    """One phase's steps together: FLOPs, bytes, step time and executor time (seconds), and
    its share of step time."""

    phase: str
    flops: float
    bytes: float
    time_s: float
    share: float
    forward_s: float | None = None

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes > 0 else float("nan")

    @property
    def busy_s(self) -> float:
        return self.forward_s if self.forward_s else self.time_s

    @property
    def flops_per_s(self) -> float:
        return self.flops / self.busy_s if self.busy_s > 0 else float("nan")

    @property
    def bytes_per_s(self) -> float:
        return self.bytes / self.busy_s if self.busy_s > 0 else float("nan")


@dataclass
class RooflineInputs:
    """``steps``: per-step flops, bytes, time_s, busy_s, phase (or None); ``attribution``:
    prefill_s, decode_s, memory_bound_s, compute_bound_s (seconds), mfu, mbu (fractions)."""

    roofs: Roofs | None = None
    steps: pd.DataFrame | None = None
    points: list[PhasePoint] = field(default_factory=list)
    attribution: dict[str, Any] = field(default_factory=dict)
    attribution_source: str = ""
    costs_source: str = ""
    notes: list[str] = field(default_factory=list)


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and np.isfinite(value)
    return float(value) if ok else None


def _roofs_from(data: Any, source: str) -> Roofs | None:
    if not isinstance(data, Mapping):
        return None
    flops = _number(data.get("flops_per_s", data.get("peak_flops_per_s")))
    bw = _number(data.get("bytes_per_s", data.get("peak_bytes_per_s")))
    if flops is None or bw is None or min(flops, bw) <= 0:
        return None
    dtype = data.get("compute_dtype") or data.get("dtype")
    name = " ".join(str(x) for x in (data.get("name") or data.get("hardware"), dtype) if x)
    return Roofs(name or "peaks", flops, bw, str(data.get("source") or source))


def _find_roofs(view: RunView, recorded: Mapping[str, Any], notes: list[str]) -> Roofs | None:
    analytic = view.run_json.get("analytic") or {}
    roofs = _roofs_from(recorded.get("roofs"), "summary.json")
    roofs = roofs or _roofs_from(analytic.get("roofs"), "run.json")
    if roofs:
        return roofs
    if analytic:
        why = "; ".join(map(str, analytic.get("notes") or [])) or "run.json records no roofs"
        notes.append(f"The hardware's peaks are unknown, so no roofs are drawn: {why}.")
        return None
    found, why = roofs_from_probes(view.run_json)
    if found is None:
        notes.append(f"The hardware's peaks are unknown, so no roofs are drawn: {why}.")
        return None
    return _roofs_from(found, "perfmodel.hardware")


def _step_costs(view: RunView, notes: list[str]) -> tuple[pd.DataFrame | None, str]:
    steps = view.steps
    if steps is None or steps.empty:
        notes.append(
            "No steps.parquet (the engine exposed no per-step records): no per-step "
            "FLOPs and bytes."
        )
        return None, ""
    source = "steps.parquet"
    if {"flops", "bytes"} <= set(steps.columns):
        costs = steps[["flops", "bytes"]]
    else:
        costs, why = costs_from_probes(steps, view.run_json)
        if costs is None:
            notes.append(f"steps.parquet has no flops/bytes columns and {why}.")
            return None, ""
        source = "perfmodel.roofline's analytic model of each step"
    time_s = (steps["end_s"] - steps["start_s"]).to_numpy(np.float64)
    forward_s = steps["forward_s"].to_numpy(np.float64)
    frame = pd.DataFrame(
        {
            "flops": np.asarray(costs["flops"], dtype=np.float64),
            "bytes": np.asarray(costs["bytes"], dtype=np.float64),
            "time_s": time_s,
            "busy_s": np.where(forward_s > 0, forward_s, time_s),
            "phase": phase_of_steps(steps),
            "prefill_tokens": steps["num_prefill_tokens"].to_numpy(np.float64),
            "decode_tokens": steps["num_decode_tokens"].to_numpy(np.float64),
        }
    )
    keep = (frame["phase"] != "idle") & (frame["busy_s"] > 0) & (frame["bytes"] > 0)
    return frame[keep], source


def phase_points(steps: pd.DataFrame) -> list[PhasePoint]:
    """One point per step class (prefill, decode, mixed): sums of its steps' figures."""
    total = float(steps["time_s"].sum())
    out = []
    for phase in ("prefill", "decode", "mixed"):
        part = steps[steps["phase"] == phase]
        if len(part):
            t = float(part["time_s"].sum())
            busy = float(part["busy_s"].sum()) if "busy_s" in part else None
            out.append(
                PhasePoint(
                    phase,
                    float(part["flops"].sum()),
                    float(part["bytes"].sum()),
                    t,
                    t / total if total else 0.0,
                    busy,
                )
            )
    return out


def _recorded_points(recorded: Mapping[str, Any]) -> list[PhasePoint]:
    """Prefill and decode points from results.attribution's per-part sums."""
    parts = {p: recorded.get(p) for p in ("prefill", "decode")}
    rows = {p: v for p, v in parts.items() if isinstance(v, Mapping) and _number(v.get("flops"))}
    total = sum(_number(v.get("time_s")) or 0.0 for v in rows.values())
    out = []
    for phase, v in rows.items():
        t, moved = _number(v.get("time_s")) or 0.0, _number(v.get("bytes")) or 0.0
        if t > 0 and moved > 0:
            out.append(
                PhasePoint(
                    phase,
                    float(v["flops"]),
                    moved,
                    t,
                    t / total if total else 0.0,
                    _number(v.get("forward_s")),
                )
            )
    return out


def _recorded_attribution(recorded: Mapping[str, Any]) -> dict[str, Any]:
    bound = recorded.get("bound_time_s") or {}
    out = {
        "prefill_s": _number((recorded.get("prefill") or {}).get("time_s")),
        "decode_s": _number((recorded.get("decode") or {}).get("time_s")),
        "memory_bound_s": _number(bound.get("memory")),
        "compute_bound_s": _number(bound.get("compute")),
        "mfu": _number(recorded.get("mfu")),
        "mbu": _number(recorded.get("mbu")),
    }
    return {k: v for k, v in out.items() if v is not None}


def _attribution(steps: pd.DataFrame, roofs: Roofs | None) -> dict[str, Any]:
    tokens = steps["prefill_tokens"] + steps["decode_tokens"]
    prefill_share = np.where(tokens > 0, steps["prefill_tokens"] / tokens.where(tokens > 0, 1), 0)
    time_s = steps["time_s"].to_numpy(np.float64)
    out: dict[str, Any] = {
        "prefill_s": float(np.sum(time_s * prefill_share)),
        "decode_s": float(np.sum(time_s * (1 - prefill_share))),
    }
    if roofs is not None:
        compute = (steps["flops"] / steps["bytes"]).to_numpy() >= roofs.ridge_flops_per_byte
        out["compute_bound_s"] = float(time_s[compute].sum())
        out["memory_bound_s"] = float(time_s[~compute].sum())
        busy_s = float(steps["busy_s"].sum())
        if busy_s > 0:
            out["mfu"] = float(steps["flops"].sum()) / busy_s / roofs.peak_flops_per_s
            out["mbu"] = float(steps["bytes"].sum()) / busy_s / roofs.peak_bytes_per_s
    return out


def roofline_inputs(view: RunView) -> RooflineInputs:
    """Everything the roofline figure can use from ``view``, with notes for what is missing."""
    inputs = RooflineInputs()
    recorded = view.summary.get("attribution")
    recorded = recorded if isinstance(recorded, Mapping) else {}
    available = bool(recorded.get("available", bool(recorded)))
    inputs.roofs = _find_roofs(view, recorded if available else {}, inputs.notes)
    step_notes: list[str] = []
    inputs.steps, inputs.costs_source = _step_costs(view, step_notes)
    have_steps = inputs.steps is not None and len(inputs.steps) > 0
    if available:
        inputs.points = _recorded_points(recorded)
        inputs.attribution = _recorded_attribution(recorded)
        how = recorded.get("apportioned_by")
        inputs.attribution_source = "summary.json" + (
            f", mixed steps split by {how}" if how else ""
        )
    elif have_steps:
        inputs.points = phase_points(inputs.steps)
        inputs.attribution = _attribution(inputs.steps, inputs.roofs)
        inputs.attribution_source = (
            "computed here from the steps: each step classed prefill, decode or mixed as a "
            "whole; a mixed step's time split by its prefill and decode tokens"
        )
        if recorded.get("reason"):
            inputs.notes.append(f"summary.json has no attribution: {recorded['reason']}.")
    if not inputs.points:
        inputs.notes += step_notes or ["No per-step FLOPs and bytes were recorded."]
    return inputs
