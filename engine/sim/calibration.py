"""Calibrating the simulated device to the machine at hand (`bench sim-calibrate`).

`bench calibrate` measures this machine's roofs (best matmul FLOP/s, stream-triad bandwidth); a
real engine step reaches only part of them (small matmuls, many small kernels) and pays a fixed
cost per step and per sequence (Python scheduling, op dispatch, sampling). This module measures
real steps of the torch executor on a preset (or reads a run's steps.parquet) and fits

    step time = max(FLOPs / (e_f x peak FLOP/s), bytes / (e_b x peak bytes/s))
                + step overhead + sequence overhead x sequences

by weighted least squares on the relative error (a grid over the efficiencies e_f, e_b; the two
overheads, >= 0, in closed form for each). Other processes on the machine only ever slow a step
down, so the fit is refitted twice without the quarter of steps it under-predicts most: the
result describes the machine when it is not contended. The result is saved beside the calibration
(``sim-calibration-<model>.json``) and used by the simulated executor for ``gpu="cpu"``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from engine.sim.cost import DeviceRoofs, StepTimeModel
from perfmodel.cache import sim_calibration_path
from perfmodel.files import write_json
from perfmodel.model_config import ModelConfig
from perfmodel.roofline import Batch, Precision, StepCost

# Efficiencies above 1 are allowed: `bench calibrate`'s best-of-a-few matmul can miss the peak
# on a busy machine, and weights that fit in the CPU's caches stream faster than DRAM's triad.
_COMPUTE_GRID = np.geomspace(0.01, 4.0, 73)
_MEMORY_GRID = np.geomspace(0.05, 8.0, 61)
_TRIM_ROUNDS, _TRIM_SHARE = 2, 0.25


@dataclass(frozen=True)
class SimCalibration:
    """A fitted step-time model of ``model`` on this machine: the achieved rates (FLOP/s and
    bytes/s, and as efficiencies of the calibrated peaks they were fitted against) and the
    overheads (s); ``rms_relative_error`` is the fit's own error over the steps it kept."""

    model: str
    host: str
    dtype: str
    num_threads: int | None
    compute_efficiency: float
    memory_efficiency: float
    flops_per_s: float
    bytes_per_s: float
    step_overhead_s: float
    seq_overhead_s: float
    rms_relative_error: float
    num_steps: int
    source: str
    created_utc: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def steps_batch(columns: Mapping[str, Sequence[float]]) -> tuple[Batch, np.ndarray]:
    """Batches (arrays) and cycle times (s) from step records: engine.core.telemetry's columns
    (start_ns, end_ns) or steps.parquet's (start_s, end_s).

    A step's cycle runs to the next step's start when that comes within the step's own duration
    (a busy engine: the gap is its loop's work between steps, e.g. handing tokens to a server),
    else to its own end (the engine then waited for requests).
    """
    col = {k: np.asarray(v, dtype=np.float64) for k, v in columns.items()}
    if "start_s" in col:
        start, end = col["start_s"], col["end_s"]
    else:
        start, end = col["start_ns"] / 1e9, col["end_ns"] / 1e9
    order = np.argsort(start, kind="stable")
    col = {k: v[order] for k, v in col.items()}
    start, end = start[order], end[order]
    time_s = end - start
    gap = np.append(start[1:] - end[:-1], np.inf)
    busy = (gap >= 0) & (gap <= time_s)
    time_s = np.where(busy, time_s + np.where(busy, gap, 0.0), time_s)
    tokens = col["num_prefill_tokens"] + col["num_decode_tokens"]
    seqs = col["num_seqs"]
    batch = Batch(tokens, seqs, seqs, col["context_tokens"] - tokens, col["attn_pairs"])
    return batch, time_s


def _overheads(resid: np.ndarray, seqs: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """Non-negative (a, b) minimizing sum w (resid - a - b seqs)^2."""
    candidates = [(0.0, 0.0)]
    sw, sx, sy = w.sum(), (w * seqs).sum(), (w * resid).sum()
    sxx, sxy = (w * seqs * seqs).sum(), (w * seqs * resid).sum()
    det = sw * sxx - sx * sx
    if det > 0:
        candidates.append(((sy * sxx - sx * sxy) / det, (sw * sxy - sx * sy) / det))
    candidates.append((max(sy / sw, 0.0), 0.0))
    if sxx > 0:
        candidates.append((0.0, max(sxy / sxx, 0.0)))
    feasible = [(a, b) for a, b in candidates if a >= 0 and b >= 0]
    a, b = min(feasible, key=lambda ab: float((w * (resid - ab[0] - ab[1] * seqs) ** 2).sum()))
    return float(a), float(b)


def _select(batch: Batch, keep: np.ndarray) -> Batch:
    return Batch(*(np.asarray(getattr(batch, f))[keep] for f in batch.__dataclass_fields__))


def fit(
    config: ModelConfig, precision: Precision, roofs: DeviceRoofs, batch: Batch, time_s: np.ndarray
) -> tuple[float, float, float, float, float]:
    """(compute eff., memory eff., step overhead s, sequence overhead s, rms relative error) of
    the step times ``time_s`` of ``batch`` against ``roofs``' peaks (module docstring); the
    error is over the steps kept after trimming."""
    t = np.asarray(time_s, dtype=np.float64)
    keep = t > 0
    if keep.sum() < 8:
        raise ValueError(f"a calibration needs at least 8 timed steps, got {int(keep.sum())}")
    cost = StepTimeModel(config, precision, 1, roofs).cost
    seqs = np.asarray(batch.num_seqs, dtype=np.float64)
    for round_ in range(_TRIM_ROUNDS + 1):
        result = _fit_once(cost.step(_select(batch, keep)), seqs[keep], roofs, t[keep])
        if round_ == _TRIM_ROUNDS:
            break
        e_f, e_b, a, b, _ = result
        fitted = replace(
            roofs,
            flops_per_s=e_f * roofs.peak_flops_per_s,
            bytes_per_s=e_b * roofs.peak_bytes_per_s,
        )
        predicted = StepTimeModel(config, precision, 1, fitted, a, b).predict_many(batch)
        under = (t - predicted) / t  # > 0: the step was slower than predicted
        keep = (t > 0) & (under <= np.quantile(under[keep], 1 - _TRIM_SHARE))
    return result


def _fit_once(
    cost: StepCost, seqs: np.ndarray, roofs: DeviceRoofs, t: np.ndarray
) -> tuple[float, float, float, float, float]:
    flops, nbytes = np.asarray(cost.flops), np.asarray(cost.bytes)
    w = 1.0 / t**2
    best: tuple[float, float, float, float, float] | None = None
    for e_f in _COMPUTE_GRID:
        compute = flops / (e_f * roofs.peak_flops_per_s)
        for e_b in _MEMORY_GRID:
            kernels = np.maximum(compute, nbytes / (e_b * roofs.peak_bytes_per_s))
            a, b = _overheads(t - kernels, seqs, w)
            err = float(np.sqrt(np.mean(((kernels + a + b * seqs) - t) ** 2 * w)))
            if best is None or err < best[4]:
                best = (float(e_f), float(e_b), a, b, err)
    assert best is not None
    return best


def save(result: SimCalibration, path: Path | None = None) -> Path:
    path = path or sim_calibration_path(result.model)
    return write_json(path, result.to_dict())


def load(model: str, host: str | None = None, path: Path | None = None) -> SimCalibration | None:
    """The saved calibration of ``model`` (None when missing, unreadable, or made on another
    host than ``host``)."""
    try:
        data = json.loads((path or sim_calibration_path(model)).read_text(encoding="utf-8"))
        result = SimCalibration(**data)
    except (OSError, ValueError, TypeError):
        return None
    if result.model != model or (host is not None and result.host != host):
        return None
    return result


def calibration_from_steps(
    model: str, config: ModelConfig, precision: Precision, roofs: DeviceRoofs,
    columns: Mapping[str, Sequence[float]], host: str, source: str, num_threads: int | None = None,
) -> SimCalibration:  # fmt: skip
    """Fit the step records ``columns`` into a SimCalibration of ``model`` on ``host``."""
    batch, time_s = steps_batch(columns)
    e_f, e_b, a, b, err = fit(config, precision, roofs, batch, time_s)
    return SimCalibration(
        model, host, precision.activation_dtype, num_threads, e_f, e_b,
        e_f * roofs.peak_flops_per_s, e_b * roofs.peak_bytes_per_s, a, b, err, len(time_s), source,
        datetime.now(UTC).isoformat(timespec="seconds"),
    )  # fmt: skip
