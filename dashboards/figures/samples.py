"""Finding the series a timeline needs in samples.parquet (long format: t_s, source, name, value,
labels), whatever small variations of naming a probe uses.

A concept (GPU utilization, power, ...) is matched by source and a name pattern; units come from
the name's suffix (``_pct``, ``_w``, ``_bytes_per_s``), and a percentage recorded as a 0..1
fraction (vLLM's ``kv_cache_usage``) is scaled to 0..100. One series per (source, name, labels),
so each GPU of a machine gets its own line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from results.figures.machine_load import process_labels
from results.folder.sample_sources import CPU, ENGINE, GPM, NVML

__all__ = ["CONCEPTS", "Concept", "Series", "all_series", "find"]


@dataclass(frozen=True)
class Concept:
    """A quantity a timeline panel shows. ``pattern`` is matched against the whole sample name,
    case-insensitively; ``percent`` says the result is shown in % (0..100)."""

    key: str
    label: str
    sources: tuple[str, ...]
    pattern: str
    percent: bool = False
    scale: float = 1.0


@dataclass(frozen=True)
class Series:
    """One line: times (s), values in the concept's unit, and a legend name."""

    name: str
    t_s: np.ndarray
    values: np.ndarray


_PCT = r"(_pct|_percent|_perc|_frac|_ratio)?"
CONCEPTS: dict[str, Concept] = {
    c.key: c
    for c in (
        Concept("gpu_util", "GPU util", (NVML,), rf"(gpu_)?util(ization)?(_gpu)?{_PCT}", True),
        Concept("mem_util", "GPU memory busy", (NVML,), rf"mem(ory)?_util(ization)?{_PCT}", True),
        Concept(
            "sm_util", "SM active", (GPM,), rf"sm_(util(ization)?|activity|active){_PCT}", True
        ),
        Concept("sm_occupancy", "SM occupancy", (GPM,), rf"sm_occupancy{_PCT}", True),
        Concept(
            "tensor",
            "Tensor active",
            (GPM,),
            rf"tensor_(util(ization)?|activity|active){_PCT}",
            True,
        ),
        Concept(
            "cpu_process",
            "CPU",
            (CPU,),
            rf"(process_cpu|cpu_process){_PCT}",
            True,
        ),
        Concept("cpu_system", "CPU (system)", (CPU,), rf"(system_cpu|cpu_system|cpu){_PCT}", True),
        Concept(
            "dram_bytes",
            "DRAM GB/s",
            (GPM, NVML),
            r"dram_(bw|bandwidth|bytes)(_bytes)?_per_s",
            False,
            1e-9,
        ),
        Concept(
            "dram_util",
            "DRAM bandwidth used",
            (GPM,),
            rf"dram_(bw|bandwidth)_util(ization)?{_PCT}",
            True,
        ),
        Concept("power", "Power W", (NVML,), r"power(_usage|_draw)?(_w|_watts)", False),
        Concept("kv_cache", "KV cache used", (ENGINE,), rf"kv_cache_usage{_PCT}", True),
        Concept("running", "Running (engine)", (ENGINE,), r"num_requests_running", False),
        Concept("waiting", "Waiting (engine)", (ENGINE,), r"num_requests_waiting", False),
    )
}


def _fraction_scale(name: str, values: np.ndarray) -> float:
    """100 when a percentage concept was recorded as a fraction, else 1."""
    if re.search(r"(_pct|_percent)$", name, re.IGNORECASE):
        return 1.0
    finite = values[np.isfinite(values)]
    return 100.0 if finite.size and float(np.max(np.abs(finite))) <= 1.0 else 1.0


def find(samples: pd.DataFrame | None, key: str) -> list[Series]:
    """Every series of samples matching concept ``key``, in the concept's unit; [] if none."""
    if samples is None or samples.empty:
        return []
    concept = CONCEPTS[key]
    regex = re.compile(concept.pattern, re.IGNORECASE)
    picked = samples[
        samples["source"].str.lower().isin(concept.sources)
        & samples["name"].map(lambda n: regex.fullmatch(n) is not None)
    ]
    out: list[Series] = []
    for (name, labels), group in picked.groupby(["name", "labels"], sort=True):
        values = group["value"].to_numpy(dtype=np.float64)
        scale = _fraction_scale(str(name), values) if concept.percent else concept.scale
        legend = concept.label + (f" [{labels}]" if labels else "")
        if key == "cpu_process":
            legend = f"{concept.label} {_process_legend(str(labels))}"
        out.append(Series(legend, group["t_s"].to_numpy(dtype=np.float64), values * scale))
    if key == "cpu_process":
        out += _group_totals(picked, concept.label)
    return out


def _process_legend(labels: str) -> str:
    """ "engine-core (engine, pid 12)": what the process is, its group and its pid."""
    label = process_labels(labels)
    process = label.get("process") or label["group"]
    parts = [label["group"]] if label["group"] != process else []
    parts += [f"pid {label['pid']}"] if label.get("pid") else []
    return f"{process} ({', '.join(parts)})" if parts else process


def _group_totals(picked: pd.DataFrame, label: str) -> list[Series]:
    """A group's CPU summed over its processes at each tick, for groups of several processes
    (the engine's front and core): what the engine used in all."""
    groups = picked["labels"].map(lambda text: process_labels(str(text))["group"])
    out = []
    for group, part in picked.groupby(groups, sort=True):
        if part["labels"].nunique() < 2:
            continue
        total = part.groupby("t_s", sort=True)["value"].sum()
        out.append(
            Series(
                f"{label} {group} (all {part['labels'].nunique()} processes)",
                total.index.to_numpy(dtype=np.float64),
                total.to_numpy(dtype=np.float64),
            )
        )
    return out


def all_series(samples: pd.DataFrame | None, limit: int = 60) -> list[Series]:
    """Every (source, name, labels) series as recorded, raw values, at most ``limit``."""
    if samples is None or samples.empty:
        return []
    out: list[Series] = []
    for (source, name, labels), group in samples.groupby(["source", "name", "labels"], sort=True):
        legend = f"{source}/{name}" + (f" [{labels}]" if labels else "")
        out.append(
            Series(
                legend,
                group["t_s"].to_numpy(dtype=np.float64),
                group["value"].to_numpy(dtype=np.float64),
            )
        )
        if len(out) >= limit:
            break
    return out
