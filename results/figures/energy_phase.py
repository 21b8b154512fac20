"""Energy by phase: the GPUs' joules split into prefill and decode, and goodput per watt.

summary.json's "energy_by_phase", from samples.parquet (NVML's energy counter, per GPU) and
steps.parquet (the engine's steps), inside the summary's measured window:

- The counters' sum over the engine's GPUs is read as one cumulative curve E(t), linear
  between readings; a step's joules are E(end_s) - E(start_s). Between two probe ticks that is
  the interval's mean power times the step's time: energy is split by the steps' time at the
  probe's resolution (the counter itself is exact; where within a tick the power peaked is not
  known).
- Each step's joules go to prefill and decode by the same shares as its time
  (results.figures.attribution.split_steps): one rule for time and energy.
- Joules outside any step (the engine idle between steps, or the host's work) are ``idle_j``.
- Per token: prefill joules per prompt token computed (the steps' prefill tokens), decode
  joules per generated token (the steps' decode tokens).
- Goodput per watt: good requests/s (the scenario's SLO, summary.json's goodput) over the mean
  power of the same readings, i.e. good requests per joule; and output tokens per joule.

Unavailable (with the reason) without energy readings, steps, or a measured window.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from perfmodel.files import JSONObject, JSONView
from results.figures.attribution import split_steps
from results.folder import sample_sources


def _energy_curve(samples: pd.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """Times and the summed cumulative joules of every GPU's energy counter at those times."""
    rows = samples[(samples["source"] == sample_sources.NVML) & (samples["name"] == "energy_j")]
    if rows.empty:
        return None
    series = [
        part.sort_values("t_s", kind="mergesort")[["t_s", "value"]].to_numpy(dtype=np.float64)
        for _, part in rows.groupby("labels", sort=True)
    ]
    # Every GPU's counter on the times all of them cover, each from its own first reading.
    start = max(s[0, 0] for s in series)
    end = min(s[-1, 0] for s in series)
    times = np.unique(np.concatenate([s[:, 0] for s in series]))
    times = times[(times >= start) & (times <= end)]
    if len(times) < 2:
        return None
    total = sum(np.interp(times, s[:, 0], s[:, 1] - s[0, 1]) for s in series)
    return times, np.asarray(total, dtype=np.float64)


def energy_by_phase(
    samples: pd.DataFrame | None,
    steps: pd.DataFrame | None,
    analytic: JSONView | None,
    window: JSONView,
    goodput_requests_per_s: float | None,
) -> JSONObject:
    """summary.json's "energy_by_phase" (module docstring)."""

    def unavailable(reason: str) -> JSONObject:
        return {"available": False, "reason": reason}

    if samples is None or samples.empty:
        return unavailable("no samples.parquet (no probe readings)")
    start, stop = window.get("start_s"), window.get("end_s")
    if start is None or stop is None:
        return unavailable("the run has no measured window")
    inside = samples[(samples["t_s"] >= start) & (samples["t_s"] <= stop)]
    curve = _energy_curve(inside)
    if curve is None:
        return unavailable("fewer than two NVML energy readings in the window (no GPU, or the "
                           "GPU reports no energy counter)")  # fmt: skip
    if steps is None or steps.empty:
        return unavailable("no steps.parquet: the engine records no steps to split energy by")
    if not analytic or not analytic.get("model_config"):
        return unavailable("run.json has no model shape to split steps into prefill and decode")
    times, joules = curve
    t_a, t_b = float(times[0]), float(times[-1])
    sel = steps[(steps["start_s"] >= t_a) & (steps["end_s"] <= t_b)]
    if sel.empty:
        return unavailable("no engine step falls between the window's energy readings")
    split = split_steps(sel, analytic)
    step_j = np.interp(sel["end_s"].to_numpy(np.float64), times, joules) - np.interp(
        sel["start_s"].to_numpy(np.float64), times, joules
    )
    share = split.prefill_share
    prefill_j = float(np.sum(step_j * share))
    decode_j = float(np.sum(step_j * (1.0 - share)))
    total_j = float(joules[-1] - joules[0])
    prefill_tokens = int(sel["num_prefill_tokens"].sum())
    decode_tokens = int(sel["num_decode_tokens"].sum())
    interval = t_b - t_a
    mean_power = total_j / interval if interval > 0 else None

    def per(num: float, den: float | None) -> float | None:
        return num / den if den else None

    return {
        "available": True,
        "interval_s": interval,
        "steps": len(sel),
        "joules": total_j,
        "prefill_j": prefill_j,
        "decode_j": decode_j,
        "idle_j": max(0.0, total_j - prefill_j - decode_j),
        "prefill_tokens": prefill_tokens,
        "decode_tokens": decode_tokens,
        "joules_per_prefill_token": per(prefill_j, prefill_tokens),
        "joules_per_decode_token": per(decode_j, decode_tokens),
        "mean_power_w": mean_power,
        "output_tokens_per_joule": per(decode_tokens, total_j),
        "good_requests_per_joule": (
            per(goodput_requests_per_s, mean_power) if goodput_requests_per_s is not None else None
        ),
        "split_by": f"steps' time at the probe's tick resolution; {split.apportioned_by}",
    }


def energy_phase_line(section: JSONView | None) -> str | None:
    """The split in one sentence (report.html and the terminal), or why there is none; None
    for an older summary."""
    if not isinstance(section, Mapping):
        return None
    if not section.get("available"):
        return f"No energy by phase: {section.get('reason')}."

    def fmt(value: Any, unit: str) -> str:
        return "-" if value is None else f"{value:.3g} {unit}"

    return (
        f"Energy by phase: prefill {fmt(section.get('joules_per_prefill_token'), 'J/token')}, "
        f"decode {fmt(section.get('joules_per_decode_token'), 'J/token')}, idle "
        f"{fmt(section.get('idle_j'), 'J')} of {fmt(section.get('joules'), 'J')}; goodput per "
        f"watt {fmt(section.get('good_requests_per_joule'), 'good requests/J')}."
    )
