"""The values of samples.parquet's ``source`` column: which sampler took each reading.

A sampler's ``source`` (probes.sampler.Sampler) is one of these; the readers of samples.parquet
(results.figures, results.validity, dashboards) select a sampler's readings by them, and
run.json's ``probes.samplers`` is keyed by them. They are the on-disk vocabulary of old run
folders too, so a value never changes once written.
"""

from __future__ import annotations

__all__ = ["CPU", "ENGINE", "GPM", "NVML", "SAMPLE_SOURCES"]

NVML = "nvml"
"""Per-GPU NVML readings: utilization, memory, power, energy, clocks (probes.nvml)."""

GPM = "gpm"
"""NVML's GPU performance monitoring, per GPU or MIG instance: SM activity, occupancy, DRAM
bandwidth (probes.gpm, sampled by probes.nvml)."""

CPU = "cpu"
"""The system's CPU and each process group's CPU and RSS (probes.cpu)."""

ENGINE = "engine"
"""The engine's Prometheus /metrics, one series per mapped metric (probes.engine_metrics)."""

SAMPLE_SOURCES: tuple[str, ...] = (NVML, GPM, CPU, ENGINE)
"""Every source, in the order the probes start their samplers."""
