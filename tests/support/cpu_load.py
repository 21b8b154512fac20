"""Synthetic CPU probe readings, as the CPU probe writes them to samples.parquet: the machine's
CPU-seconds counters and one process counter per followed process, for machine_load's tests."""

from __future__ import annotations

import json
import math

import pandas as pd

LOGICAL_CPUS = 2


def cpu_readings(other_share: float, ticks: int = 6, tick_s: float = 1.0) -> pd.DataFrame:
    """Readings every ``tick_s`` seconds from t = 0 on a 2-CPU machine whose own run uses 0.2
    (client) + 0.6 (engine front) + 0.4 (engine core) CPU seconds per second, and other processes
    ``other_share`` (0..1) of the machine's CPU on top."""
    per_s = {
        ("client", "bench", 100): 0.2,
        ("engine", "engine-front", 200): 0.6,
        ("engine", "engine-core", 201): 0.4,
    }
    run_per_s = sum(per_s.values())
    busy_per_s = run_per_s + other_share * LOGICAL_CPUS
    if busy_per_s > LOGICAL_CPUS and not math.isclose(busy_per_s, LOGICAL_CPUS):
        raise ValueError(f"other_share {other_share} exceeds the machine beside the run's 1.2 CPUs")
    rows = []
    for k in range(ticks):
        t = k * tick_s
        rows.append((t, "system_cpu_s_total", LOGICAL_CPUS * t, "{}"))
        rows.append((t, "system_busy_cpu_s_total", busy_per_s * t, "{}"))
        for (group, process, pid), rate in per_s.items():
            labels = json.dumps({"group": group, "process": process, "pid": str(pid)})
            rows.append((t, "process_cpu_s_total", rate * t, labels))
    frame = pd.DataFrame(rows, columns=["t_s", "name", "value", "labels"])
    frame["source"] = "cpu"
    return frame[["t_s", "source", "name", "value", "labels"]]
