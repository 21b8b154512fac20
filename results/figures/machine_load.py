"""Whether other processes loaded the machine during a run: summary.json's "machine_load".

Definitions (over the measured window, from the CPU probe's counters in samples.parquet):
- capacity_cpu_s: the machine's CPU seconds, the increase of ``system_cpu_s_total`` (all
  logical CPUs' time, busy and idle: logical CPUs x seconds);
- system_busy_cpu_s: the increase of ``system_busy_cpu_s_total`` (every process's, the
  kernel's included; idle and iowait are not busy);
- run_cpu_s: the CPU seconds of the run's own processes, the increases of
  ``process_cpu_s_total`` summed over every process the probe followed (bench, its load
  generator workers and probe process: group "client"; the engine and its children: group
  "engine"), each between its first and last reading within the span;
- other_cpu_s = max(0, system_busy_cpu_s - run_cpu_s), and
  other_cpu_share = other_cpu_s / capacity_cpu_s (0..1 of the whole machine).

The run is *busy* when other_cpu_share >= :data:`BUSY_OTHER_CPU_SHARE`: other work then took
a quarter of the machine or more, and the run's figures say more about that work than about
the engine. The span is that of the system counter's readings inside the window, or of all of
them when the window holds fewer than two (a run shorter than two probe ticks).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from perfmodel.files import JSONObject, JSONView
from results.folder import sample_sources

# The share of the machine's CPU other processes may use before a run is marked busy.
BUSY_OTHER_CPU_SHARE = 0.25


def _counter_series(cpu: pd.DataFrame, name: str) -> list[np.ndarray]:
    """Per label set, the (t_s, value) readings of counter ``name``, ordered by time."""
    out = []
    for _, series in cpu[cpu["name"] == name].groupby("labels", sort=True):
        series = series.sort_values("t_s", kind="mergesort")
        out.append(series[["t_s", "value"]].to_numpy(dtype=np.float64))
    return out


def _increase_in(readings: np.ndarray, start_s: float, end_s: float) -> float:
    inside = readings[(readings[:, 0] >= start_s) & (readings[:, 0] <= end_s)]
    return float(inside[-1, 1] - inside[0, 1]) if len(inside) >= 2 else 0.0


def machine_load(samples: pd.DataFrame | None, window: JSONView) -> JSONObject:
    """summary.json's "machine_load" (module docstring); says why when it cannot be told."""
    if samples is None or samples.empty:
        return {"available": False, "reason": "no samples.parquet (no probe readings)"}
    cpu = samples[samples["source"] == sample_sources.CPU]
    system = _counter_series(cpu, "system_cpu_s_total")
    busy_series = _counter_series(cpu, "system_busy_cpu_s_total")
    if not system or not busy_series:
        return {"available": False,
                "reason": "samples.parquet has no CPU-seconds counters (recorded before the CPU"
                          " probe kept them, or without the CPU probe)"}  # fmt: skip
    times = system[0][:, 0]
    start, end = window.get("start_s"), window.get("end_s")
    inside = (
        times[(times >= start) & (times <= end)] if start is not None and end is not None else []
    )
    span = "window" if len(inside) >= 2 else "run"
    a, b = (float(inside[0]), float(inside[-1])) if span == "window" else (times[0], times[-1])
    capacity = _increase_in(system[0], a, b)
    if capacity <= 0:
        return {"available": False, "reason": "fewer than two CPU probe readings in the run"}
    busy = _increase_in(busy_series[0], a, b)
    run_cpu = sum(_increase_in(s, a, b) for s in _counter_series(cpu, "process_cpu_s_total"))
    other = max(0.0, busy - run_cpu)
    share = other / capacity
    marked = share >= BUSY_OTHER_CPU_SHARE
    return {
        "available": True,
        "span": span,
        "span_s": float(b - a),
        "capacity_cpu_s": capacity,
        "system_busy_cpu_s": busy,
        "run_cpu_s": run_cpu,
        "other_cpu_s": other,
        "other_cpu_share": share,
        "threshold": BUSY_OTHER_CPU_SHARE,
        "busy": marked,
        "message": (
            f"other processes used {100 * share:.0f}% of the CPU during this run"
            + (
                f" (at least {100 * BUSY_OTHER_CPU_SHARE:.0f}% marks a busy machine: its figures"
                " are not the engine's alone; run again on a quiet machine)"
                if marked
                else ""
            )
        ),
    }


def busy_line(summary: JSONView) -> str | None:
    """The one line that says a run's machine was busy, or None (quiet, or not known)."""
    load = summary.get("machine_load")
    if isinstance(load, dict) and load.get("busy"):
        return str(load.get("message"))
    return None


def busy_lines(summary: JSONView) -> list[str]:
    """What a report heads a busy run with (terminal, dashboard): one line, or none."""
    line = busy_line(summary)
    return [] if line is None else [f"busy machine: {line}"]


def _pairs(text: str) -> dict[str, str]:
    """``"group=engine,pid=12,process=engine-core"`` -> its dict (values hold no comma)."""
    out: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


def process_labels(text: str) -> dict[str, str]:
    """A CPU reading's labels: group ("client", "engine"), process and pid, from samples.parquet's
    JSON or the dashboards' ``k=v,k=v`` text of it. A folder recorded before the probe followed
    children labels the root only, its role as ``process``."""
    try:
        labels = json.loads(text) if text.startswith("{") else _pairs(text)
    except ValueError:  # no labels (a missing value read back as text)
        labels = {}
    labels.setdefault("group", labels.get("process", "unknown"))
    return labels
