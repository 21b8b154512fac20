"""The CPU work of a run: CPU seconds its processes spent per output token, summary.json's
``probes.cpu_work``.

Wall-clock figures (tokens/s, latencies) move with whatever else runs on a shared machine; the
CPU time a process spends per token does much less, since time the process waits for a core is
not its CPU time. The CPU probe (probes/cpu.py) records each process's ``process_cpu_s_total``,
its user + system seconds since it started (a counter; threads included). Per group (``engine``:
the engine's processes, ``client``: the load generator's) the figure is the sum over its
processes of each counter's increase over the measured window's readings, divided by the
output tokens received over the span those readings cover (as energy per token is, from NVML's
energy counter, results.figures.samples_summary.energy).

What it cannot see: a regression that waits (a sleep, a lock, I/O) costs wall time and no CPU
time; one that burns CPU (a spin, extra work per step) shows in both.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from results.figures.machine_load import process_labels
from results.folder.token_source import TokenSource, token_source

__all__ = ["GROUPS", "cpu_work"]

# The process groups whose work is reported.
GROUPS: tuple[str, ...] = ("engine", "client")
_COUNTER = "process_cpu_s_total"


def cpu_work(cpu_frame: pd.DataFrame, tokens: pd.DataFrame | TokenSource) -> dict[str, Any]:
    """``cpu_frame``: the CPU probe's readings inside the measured window; ``tokens``: the run's
    tokens.parquet. Per group: ``<group>_cpu_s`` (seconds) and
    ``<group>_cpu_s_per_output_token``; ``output_tokens`` and ``interval_s`` of the span."""
    rows = cpu_frame[cpu_frame["name"] == _COUNTER]
    if rows.empty:
        return {"available": False, "reason": "no process CPU counters in the window"}
    seconds = dict.fromkeys(GROUPS, 0.0)
    starts, ends, processes = [], [], dict.fromkeys(GROUPS, 0)
    for text, series in rows.groupby("labels", sort=True):
        group = process_labels(str(text))["group"]
        if group not in seconds:
            continue
        series = series.sort_values("t_s", kind="mergesort")
        seconds[group] += max(0.0, float(series["value"].iloc[-1] - series["value"].iloc[0]))
        processes[group] += 1
        starts.append(float(series["t_s"].iloc[0]))
        ends.append(float(series["t_s"].iloc[-1]))
    if not starts:
        return {"available": False, "reason": "no engine or client process in the CPU readings"}
    t_a, t_b = min(starts), max(ends)
    out_tokens = token_source(tokens).tokens_between(t_a, t_b)
    out: dict[str, Any] = {"available": True, "interval_s": t_b - t_a, "output_tokens": out_tokens}
    for group in GROUPS:
        if processes[group]:
            out[f"{group}_processes"] = processes[group]
            out[f"{group}_cpu_s"] = seconds[group]
            out[f"{group}_cpu_s_per_output_token"] = (
                seconds[group] / out_tokens if out_tokens else None
            )
    return out
