"""Summary figures from samples.parquet: energy per output token, GPU, CPU and engine gauges.

Readings inside the summary's measured window count (t_s in [start_s, end_s]).
- Energy (NVML's energy counter, per GPU): the increase between the first and last reading in
  the window, summed over GPUs; joules per output token divide it by the tokens received
  (tokens.parquet) between those two readings; mean power = joules / seconds between them.
- CPU (the probe's processes, grouped "client" and "engine"): each group's CPU and RSS are the
  sum over its processes at each tick, then mean and max over ticks; each process beside them.
  Whether other processes loaded the machine is results.figures.machine_load; the CPU seconds
  each group spent per output token, ``cpu_work``, results.figures.cpu_work.
- GPUs: samples.parquet holds the engine's GPUs only (probes.gpu_scope), each its own series, so
  every GPU figure is over them (``gpu.gpus`` lists them). Another compute process on them
  (``process_gpu_memory_bytes``, labels pid and process) is named in ``gpu.other_processes`` and
  in a warning (:func:`gpu_warnings`): it shares the readings.
- Gauges (utilization, power, clocks, KV usage, running/waiting): mean and max over readings
  (all GPUs or all series together). Counters (prefix cache, speculative decoding, preemptions):
  increase over the window. Histograms (vLLM's per-request prefill/decode/queue times): mean =
  increase of _sum / increase of _count, and p50/p90/p99 interpolated in the buckets' increases
  as Prometheus' histogram_quantile does.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from perfmodel.files import JSONObject, JSONView
from results.figures.cpu_work import cpu_work
from results.figures.machine_load import process_labels
from results.folder import sample_sources
from results.folder.token_source import TokenSource, token_source

NVML_GAUGES = ("gpu_util_pct", "mem_util_pct", "power_w", "sm_clock_mhz", "temperature_c")
GPM_GAUGES = (
    "dram_bw_util_pct",
    "dram_bytes_per_s",
    "sm_util_pct",
    "sm_occupancy_pct",
    "tensor_util_pct",
)
ENGINE_GAUGES = ("kv_cache_usage", "num_requests_running", "num_requests_waiting")
ENGINE_HISTOGRAMS = (
    "request_prefill_time_seconds",
    "request_decode_time_seconds",
    "request_queue_time_seconds",
)


def _labels(text: str) -> dict[str, str]:
    return json.loads(text) if text else {}


def _gauge(frame: pd.DataFrame, name: str) -> dict[str, float] | None:
    values = frame.loc[frame["name"] == name, "value"].to_numpy(dtype=np.float64)
    if values.size == 0:
        return None
    return {"mean": float(values.mean()), "max": float(values.max())}


def _increase(frame: pd.DataFrame, name: str) -> float | None:
    """Sum over series (label sets) of last - first reading of counter ``name``."""
    rows = frame[frame["name"] == name]
    if rows.empty:
        return None
    total = 0.0
    for _, series in rows.groupby("labels", sort=True):
        values = series.sort_values("t_s", kind="mergesort")["value"].to_numpy()
        total += float(values[-1] - values[0])
    return total


def energy(samples: pd.DataFrame, tokens: pd.DataFrame | TokenSource) -> JSONObject:
    """Joules per output token and mean power from NVML's energy counters (module docstring)."""
    rows = samples[(samples["source"] == sample_sources.NVML) & (samples["name"] == "energy_j")]
    if rows.empty:
        return {"available": False, "reason": "no NVML energy readings in the window"}
    joules, starts, ends = 0.0, [], []
    for _, series in rows.groupby("labels", sort=True):
        series = series.sort_values("t_s", kind="mergesort")
        joules += float(series["value"].iloc[-1] - series["value"].iloc[0])
        starts.append(float(series["t_s"].iloc[0]))
        ends.append(float(series["t_s"].iloc[-1]))
    t_a, t_b = min(starts), max(ends)
    out_tokens = token_source(tokens).tokens_between(t_a, t_b)
    return {
        "available": True,
        "gpus": int(rows["labels"].nunique()),
        "joules": joules,
        "interval_s": t_b - t_a,
        "output_tokens": out_tokens,
        "joules_per_output_token": joules / out_tokens if out_tokens else None,
        "mean_power_w": joules / (t_b - t_a) if t_b > t_a else None,
    }


def other_gpu_processes(nvml: pd.DataFrame) -> list[JSONObject]:
    """Each compute process NVML saw on the engine's GPUs that is not the engine's: gpu, pid,
    process name and the most GPU memory it held (bytes)."""
    rows = nvml[nvml["name"] == "process_gpu_memory_bytes"]
    out = []
    for text, part in rows.groupby("labels", sort=True):
        label = _labels(str(text))
        out.append({"gpu": label.get("gpu"), "pid": int(label.get("pid", 0)),
                    "process": label.get("process"),
                    "memory_bytes_max": float(part["value"].max())})  # fmt: skip
    return sorted(out, key=lambda p: (str(p["gpu"]), p["pid"]))


def gpu_scope(run_json: JSONView) -> JSONObject | None:
    """run.json's GPU scope (probes.gpu_scope: which GPUs, how found, why), or None."""
    nvml = ((run_json.get("probes") or {}).get("samplers") or {}).get(sample_sources.NVML) or {}
    scope = nvml.get("scope")
    return dict(scope) if isinstance(scope, Mapping) else None


def gpu_scope_line(summary: JSONView) -> str | None:
    """One sentence: which GPUs the run measured and why (None without a scope)."""
    scope = ((summary.get("probes") or {}).get("gpu") or {}).get("scope")
    if not scope:
        return None
    return f"GPUs measured ({scope['how']}): {scope['reason']}"


def gpu_warnings(summary: JSONView) -> list[str]:
    """One line per other process on the engine's GPUs (summary.json's probes.gpu)."""
    gpu = (summary.get("probes") or {}).get("gpu") or {}
    return [
        f"another process shares the engine's GPU {p['gpu']}: pid {p['pid']} ({p['process']}, "
        f"up to {p['memory_bytes_max'] / 2**30:.1f} GiB); its work is in the GPU readings"
        for p in gpu.get("other_processes") or []
    ]


def histogram_quantile(bounds: np.ndarray, counts: np.ndarray, q: float) -> float | None:
    """Quantile ``q`` from cumulative bucket counts at upper bounds (the last one +Inf),
    interpolating linearly inside a bucket (Prometheus' histogram_quantile)."""
    order = np.argsort(bounds)
    bounds, counts = bounds[order], counts[order]
    total = counts[-1] if counts.size else 0.0
    if total <= 0:
        return None
    rank = q * total
    i = int(np.searchsorted(counts, rank, side="left"))
    if i >= len(bounds) - 1 and math.isinf(bounds[-1]):
        return float(bounds[-2]) if len(bounds) > 1 else None
    lower = bounds[i - 1] if i > 0 else 0.0
    below = counts[i - 1] if i > 0 else 0.0
    in_bucket = counts[i] - below
    fraction = (rank - below) / in_bucket if in_bucket > 0 else 1.0
    return float(lower + (bounds[i] - lower) * fraction)


def _histogram(frame: pd.DataFrame, name: str) -> JSONObject | None:
    total_s, count = _increase(frame, name + "_sum"), _increase(frame, name + "_count")
    if not count:
        return None
    out: JSONObject = {"requests": count, "mean_s": total_s / count if total_s else None}
    buckets = frame[frame["name"] == name + "_bucket"]
    by_bound: dict[float, float] = {}
    for labels, series in buckets.groupby("labels", sort=True):
        bound = float(_labels(str(labels)).get("le", "nan"))
        values = series.sort_values("t_s", kind="mergesort")["value"].to_numpy()
        by_bound[bound] = by_bound.get(bound, 0.0) + float(values[-1] - values[0])
    if by_bound:
        bounds = np.array(list(by_bound), dtype=np.float64)
        counts = np.array(list(by_bound.values()), dtype=np.float64)
        for q in (0.5, 0.9, 0.99):
            out[f"p{q * 100:g}_s"] = histogram_quantile(bounds, counts, q)
    return out


def _ratio(num: float | None, den: float | None) -> float | None:
    return num / den if num is not None and den else None


def _group_sum(rows: pd.DataFrame) -> dict[str, float] | None:
    """Mean and max over ticks of the sum over a group's processes at each tick."""
    if rows.empty:
        return None
    per_tick = rows.groupby("t_s", sort=True)["value"].sum().to_numpy(dtype=np.float64)
    return {"mean": float(per_tick.mean()), "max": float(per_tick.max())}


def cpu_summary(cpu_frame: pd.DataFrame) -> JSONObject:
    """The CPU probe's figures: the system's CPU; each group's ("client", "engine") CPU and RSS
    as the sum over its processes at each tick (``<group>_cpu_pct``, % of one core, and
    ``<group>_rss_bytes``); and each process beside them (``processes``: group, process, pid,
    cpu_pct, rss_bytes), so the engine's core and front are told apart."""
    cpu: JSONObject = {"system_cpu_pct": _gauge(cpu_frame, "system_cpu_pct")}
    rows = cpu_frame[cpu_frame["name"].isin(("process_cpu_pct", "process_rss_bytes"))]
    if rows.empty:
        return cpu
    labels = {text: process_labels(str(text)) for text in rows["labels"].unique()}
    group = rows["labels"].map(lambda text: labels[text]["group"])
    for (name, role), part in rows.groupby([rows["name"], group], sort=True):
        suffix = "cpu_pct" if name == "process_cpu_pct" else "rss_bytes"
        cpu[f"{role}_{suffix}"] = _group_sum(part)
    if not any('"group"' in str(text) for text in labels):
        return cpu  # recorded before the probe followed each process: the roots only
    processes = []
    for text, part in rows.groupby("labels", sort=True):
        label = labels[text]
        processes.append(
            {
                "group": label["group"],
                "process": label.get("process"),
                "pid": int(label["pid"]) if str(label.get("pid", "")).isdigit() else None,
                "cpu_pct": _gauge(part, "process_cpu_pct"),
                "rss_bytes": _gauge(part, "process_rss_bytes"),
            }
        )
    cpu["processes"] = sorted(
        processes, key=lambda p: (p["group"], p["process"] or "", p["pid"] or 0)
    )
    return cpu


def samples_summary(
    samples: pd.DataFrame | None,
    tokens: pd.DataFrame | TokenSource,
    window: JSONView,
) -> JSONObject:
    """summary.json's "probes" (module docstring); says so when nothing was sampled."""
    if samples is None or samples.empty:
        return {"available": False, "reason": "no samples.parquet (no probe readings)"}
    start, stop = window.get("start_s"), window.get("end_s")
    if start is None or stop is None:
        return {"available": False, "reason": "the run has no measured window"}
    win = samples[(samples["t_s"] >= start) & (samples["t_s"] <= stop)]
    nvml, gpm, cpu_frame, eng = (
        win[win["source"] == s]
        for s in (
            sample_sources.NVML,
            sample_sources.GPM,
            sample_sources.CPU,
            sample_sources.ENGINE,
        )
    )
    gpu: JSONObject = {name: _gauge(nvml, name) for name in NVML_GAUGES}
    if not nvml.empty:  # a run without GPU readings keeps the summary it always had
        gpu["gpus"] = sorted({str(_labels(str(t)).get("gpu")) for t in nvml["labels"].unique()})
        gpu["other_processes"] = other_gpu_processes(nvml)
    gpu["memory_used_bytes_max"] = (_gauge(nvml, "memory_used_bytes") or {}).get("max")
    gpu.update({name: _gauge(gpm, name) for name in GPM_GAUGES})
    reasons = nvml.loc[nvml["name"] == "clocks_event_reasons", "value"]
    gpu["clocks_event_reasons_seen"] = sorted({int(v) for v in reasons if v})
    engine: JSONObject = {name: _gauge(eng, name) for name in ENGINE_GAUGES}
    hits = _increase(eng, "prefix_cache_hits_total")
    queries = _increase(eng, "prefix_cache_queries_total")
    accepted = _increase(eng, "spec_decode_num_accepted_tokens_total")
    drafted = _increase(eng, "spec_decode_num_draft_tokens_total")
    engine.update(
        prefix_cache_hit_rate=_ratio(hits, queries),
        spec_acceptance_rate=_ratio(accepted, drafted),
        preemptions=_increase(eng, "num_preemptions_total"),
        generation_tokens=_increase(eng, "generation_tokens_total"),
    )
    engine.update({name: _histogram(eng, name) for name in ENGINE_HISTOGRAMS})
    return {
        "available": True,
        "energy": energy(win, tokens),
        "gpu": gpu,
        "cpu": cpu_summary(cpu_frame),
        "cpu_work": cpu_work(cpu_frame, tokens),
        "engine": engine,
    }


def engine_flops_increase(samples: pd.DataFrame | None) -> float | None:
    """The increase of the engine's estimated FLOPs counter over the whole run, or None."""
    if samples is None:
        return None
    return _increase(
        samples[samples["source"] == sample_sources.ENGINE], "estimated_flops_per_gpu_total"
    )
