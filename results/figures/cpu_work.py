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

:func:`cpu_work_windows` cuts the same span into equal windows of at least MIN_WINDOW_S, each
with its CPU seconds and output tokens, so that a gate can resample a run's work as it resamples
its throughput (bench.gate.samples); the windows add up to the figure.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from perfmodel.files import JSONObject
from results.figures.machine_load import process_labels
from results.folder import sample_sources
from results.folder.token_source import TokenSource, token_source

__all__ = ["GROUPS", "MIN_WINDOW_S", "cpu_work", "cpu_work_windows", "window_cpu_readings"]

# The process groups whose work is reported.
GROUPS: tuple[str, ...] = ("engine", "client")
_COUNTER = "process_cpu_s_total"
# Two of the CPU probe's ticks (0.5 s): a window's CPU seconds and its tokens then cover nearly
# the same time, although a tick reads each process a little apart.
MIN_WINDOW_S = 1.0


def window_cpu_readings(samples: pd.DataFrame | None, start_s: float, end_s: float) -> pd.DataFrame:
    """The CPU probe's rows of samples.parquet inside the measured window [start_s, end_s], as
    results.figures.samples_summary selects them for :func:`cpu_work`."""
    if samples is None:
        return pd.DataFrame({"t_s": [], "name": [], "labels": [], "value": []})
    inside = (samples["t_s"] >= start_s) & (samples["t_s"] <= end_s)
    return samples[inside & (samples["source"] == sample_sources.CPU)]


def _process_series(cpu_frame: pd.DataFrame) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(group, reading times, counter values) per engine or client process, in time order."""
    rows = cpu_frame[cpu_frame["name"] == _COUNTER]
    out = []
    for text, series in rows.groupby("labels", sort=True):
        group = process_labels(str(text))["group"]
        if group in GROUPS:
            series = series.sort_values("t_s", kind="mergesort")
            t = series["t_s"].to_numpy(dtype=np.float64)
            out.append((group, t, series["value"].to_numpy(dtype=np.float64)))
    return out


def cpu_work_windows(
    cpu_frame: pd.DataFrame, tokens: pd.DataFrame | TokenSource
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each process group's CPU seconds and the output tokens per window: group ->
    (cpu_s, output_tokens), one element per window (empty without readings; the tokens are
    the same for every group). The span is :func:`cpu_work`'s; a process's increase between
    two readings counts in the window of the later one (windows are (start, end], as tokens
    are counted), so the sums are the figure's numerator and denominator."""
    series = _process_series(cpu_frame)
    if not series:
        return {group: (np.zeros(0), np.zeros(0)) for group in GROUPS}
    t_a = min(float(t[0]) for _, t, _ in series)
    t_b = max(float(t[-1]) for _, t, _ in series)
    count = max(1, int((t_b - t_a) // MIN_WINDOW_S))
    edges = np.linspace(t_a, t_b, count + 1)
    cpu_s = {group: np.zeros(count) for group in GROUPS}
    for name, t, value in series:
        if t.size > 1:
            index = np.clip(np.searchsorted(edges, t[1:], side="left") - 1, 0, count - 1)
            increase = np.maximum(np.diff(value), 0.0)
            cpu_s[name] += np.bincount(index, weights=increase, minlength=count)
    counts = np.array(token_source(tokens).tokens_in_windows(edges.tolist()), dtype=np.float64)
    return {group: (cpu_s[group], counts) for group in GROUPS}


def cpu_work(cpu_frame: pd.DataFrame, tokens: pd.DataFrame | TokenSource) -> JSONObject:
    """``cpu_frame``: the CPU probe's readings inside the measured window; ``tokens``: the run's
    tokens.parquet. Per group: ``<group>_cpu_s`` (seconds) and
    ``<group>_cpu_s_per_output_token``; ``output_tokens`` and ``interval_s`` of the span."""
    if not (cpu_frame["name"] == _COUNTER).any():
        return {"available": False, "reason": "no process CPU counters in the window"}
    seconds = dict.fromkeys(GROUPS, 0.0)
    starts, ends, processes = [], [], dict.fromkeys(GROUPS, 0)
    for group, t, value in _process_series(cpu_frame):
        seconds[group] += max(0.0, float(value[-1] - value[0]))
        processes[group] += 1
        starts.append(float(t[0]))
        ends.append(float(t[-1]))
    if not starts:
        return {"available": False, "reason": "no engine or client process in the CPU readings"}
    t_a, t_b = min(starts), max(ends)
    out_tokens = token_source(tokens).tokens_between(t_a, t_b)
    out: JSONObject = {"available": True, "interval_s": t_b - t_a, "output_tokens": out_tokens}
    for group in GROUPS:
        if processes[group]:
            out[f"{group}_processes"] = processes[group]
            out[f"{group}_cpu_s"] = seconds[group]
            out[f"{group}_cpu_s_per_output_token"] = (
                seconds[group] / out_tokens if out_tokens else None
            )
    return out
