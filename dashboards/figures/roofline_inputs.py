"""What the run dashboard's roofline draws, read from the run folder; nothing is computed here.

- Roofs: summary.json's ``attribution.roofs``, else run.json's ``analytic.roofs``
  (perfmodel.roofs; for a folder written before run.json had "analytic", rebuilt by
  results.figures.analytic.run_analytic, the lookup `bench run` makes).
- Attribution (prefill and decode parts, memory- and compute-bound time, MFU, MBU):
  summary.json's ``attribution``, as results.figures.attribution computed it; for a folder whose
  summary.json lacks it, results.figures.attribution.step_attribution over the folder. Either way
  each
  step's time is split between prefill and decode by the roofline time of each part (by FLOPs
  when the run has no roofs), the definition of docs/probes.md ("Attribution").
- The faint per-step dots: steps.parquet's ``flops`` and ``bytes`` columns when the engine
  wrote them, else results.figures.attribution.step_costs (the same analytic model), each step
  classed
  prefill, decode or mixed by its tokens for its color.

Achieved FLOP/s is FLOPs over executor time (steps.parquet's forward_s), as MFU is; shares of
time are of step time (end - start). Nothing here raises for a missing input: it becomes a note.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from dashboards.figures.steps import phase_of_steps
from dashboards.runview import RunView
from perfmodel.files import JSONObject, JSONView
from perfmodel.roofs import Roofs
from results.figures.analytic import roofs_reason, run_analytic
from results.figures.attribution import step_attribution, step_costs

__all__ = ["PhasePoint", "RooflineInputs", "phase_points", "roofline_inputs"]


@dataclass(frozen=True)
class PhasePoint:
    """One part (prefill or decode) of all the steps together: FLOPs, bytes, step time and
    executor time (seconds), and its share of step time."""

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
    results.figures.attribution.step_attribution's dict (summary.json's "attribution"), or {}."""

    roofs: Roofs | None = None
    steps: pd.DataFrame | None = None
    points: list[PhasePoint] = field(default_factory=list)
    attribution: JSONObject = field(default_factory=dict)
    attribution_source: str = ""
    costs_source: str = ""
    notes: list[str] = field(default_factory=list)


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def _attribution(view: RunView, analytic: JSONView, notes: list[str]) -> tuple[JSONObject, str]:
    """summary.json's attribution, else results.figures.attribution's over the folder; and
    whence."""
    recorded = view.summary.get("attribution")
    if isinstance(recorded, Mapping) and recorded.get("available"):
        return dict(recorded), "summary.json"
    if view.steps is None:
        return {}, ""  # the steps' note says why
    try:
        computed = step_attribution(view.steps, analytic, view.summary.get("window") or {})
    except (ValueError, KeyError, TypeError) as exc:
        notes.append(f"The attribution could not be computed: {exc}.")
        return {}, ""
    if not computed.get("available"):
        notes.append(f"No attribution: {computed.get('reason')}.")
        return {}, ""
    return computed, "results.figures.attribution over this folder (its summary.json has none)"


def _roofs(attribution: JSONView, analytic: JSONView, notes: list[str]) -> Roofs | None:
    roofs = Roofs.from_dict(attribution.get("roofs")) or Roofs.from_dict(analytic.get("roofs"))
    if roofs is None:
        why = roofs_reason(analytic)
        notes.append(f"The hardware's peaks are unknown, so no roofs are drawn: {why}.")
    return roofs


def _step_costs(
    view: RunView, analytic: JSONView, notes: list[str]
) -> tuple[pd.DataFrame | None, str]:
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
        try:
            costs = step_costs(steps, analytic)
        except (ValueError, KeyError, TypeError) as exc:
            notes.append(f"The analytic model could not cost the steps: {exc}.")
            return None, ""
        source = "results.figures.attribution's analytic model of each step"
    time_s = (steps["end_s"] - steps["start_s"]).to_numpy(np.float64)
    forward_s = steps["forward_s"].to_numpy(np.float64)
    frame = pd.DataFrame(
        {
            "flops": np.asarray(costs["flops"], dtype=np.float64),
            "bytes": np.asarray(costs["bytes"], dtype=np.float64),
            "time_s": time_s,
            "busy_s": np.where(forward_s > 0, forward_s, time_s),
            "phase": phase_of_steps(steps),
        }
    )
    keep = (frame["phase"] != "idle") & (frame["busy_s"] > 0) & (frame["bytes"] > 0)
    return frame[keep], source


def phase_points(attribution: JSONView) -> list[PhasePoint]:
    """The prefill and decode points of an attribution (results.figures.attribution's per-part
    sums),
    each sized by its part's share of step time."""
    parts = {p: attribution.get(p) for p in ("prefill", "decode")}
    rows = {p: v for p, v in parts.items() if isinstance(v, Mapping) and _number(v.get("flops"))}
    total = sum(_number(v.get("time_s")) or 0.0 for v in rows.values())
    out = []
    for phase, v in rows.items():
        t, moved = _number(v.get("time_s")) or 0.0, _number(v.get("bytes")) or 0.0
        if t > 0 and moved > 0:
            share = t / total if total else 0.0
            out.append(
                PhasePoint(phase, float(v["flops"]), moved, t, share, _number(v.get("forward_s")))
            )
    return out


def _source_text(origin: str, attribution: JSONView) -> str:
    how = attribution.get("apportioned_by") or "roofline time of each part"
    return f"{origin}; each step's time split between prefill and decode by the {how}"


def roofline_inputs(view: RunView) -> RooflineInputs:
    """Everything the roofline figure can use from ``view``, with notes for what is missing."""
    inputs = RooflineInputs()
    analytic = run_analytic(view.run_json)
    inputs.attribution, origin = _attribution(view, analytic, inputs.notes)
    inputs.roofs = _roofs(inputs.attribution, analytic, inputs.notes)
    step_notes: list[str] = []
    inputs.steps, inputs.costs_source = _step_costs(view, analytic, step_notes)
    if inputs.attribution:
        inputs.points = phase_points(inputs.attribution)
        inputs.attribution_source = _source_text(origin, inputs.attribution)
    if not inputs.points:
        inputs.notes += step_notes or ["No per-step FLOPs and bytes were recorded."]
    return inputs
