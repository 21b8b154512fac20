"""Helpers for the simulated-device tests: a fixed CPU calibration, sim engines, step logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.config import EngineConfig
from engine.core.request import SamplingParams
from engine.core.scheduler import SchedulerOutput
from engine.llm_engine import LLMEngine
from perfmodel.calibration import CALIBRATION_ENV

# A made-up CPU (fixed figures, so tests do not depend on this machine's calibration).
FAKE_CALIBRATION: dict[str, Any] = {
    "version": 1,
    "created_utc": "2026-01-01T00:00:00+00:00",
    "host": {"cpu": "Test CPU"},
    "num_threads": 1,
    "cpu": {"matmul_flops_per_s": {"fp32": 50e9, "bf16": 100e9}, "triad_bytes_per_s": 10e9},
    "gpus": [],
}


def use_fake_calibration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point `bench calibrate`'s file (and so the sim calibration's folder) into tmp_path."""
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(FAKE_CALIBRATION))
    monkeypatch.setenv(CALIBRATION_ENV, str(path))
    return path


def sim_engine(**overrides: Any) -> LLMEngine:
    """The tiny preset on the simulated (fake) CPU in virtual time."""
    settings: dict[str, Any] = {
        "model": "tiny",
        "dtype": "float32",
        "device": "sim",
        "gpu": "cpu",
        "sim_speedup": 0.0,
        "seed": 1,
    }
    settings.update(overrides)
    return LLMEngine(EngineConfig.from_flat(settings))


def a100_engine(**overrides: Any) -> LLMEngine:
    """Llama-3-70B on 4 simulated A100-80GB in virtual time."""
    settings: dict[str, Any] = {
        "model": "llama-3-70b",
        "device": "sim",
        "gpu": "a100-80gb",
        "tp": 4,
        "sim_speedup": 0.0,
        "max_num_seqs": 128,
    }
    settings.update(overrides)
    return LLMEngine(EngineConfig.from_flat(settings))


Arrivals = dict[int, list[tuple[str, list[int], SamplingParams]]]
StepLog = list[tuple[tuple[tuple[str, int], ...], tuple[str, ...]]]


def step_log(engine: LLMEngine, arrivals: Arrivals) -> StepLog:
    """Run the engine, adding ``arrivals[n]`` before step n, until it is empty; per step, the
    (request, new tokens) it scheduled and the requests it preempted.

    Reads the scheduler's decisions by wrapping its schedule(), so nothing else changes.
    """
    log: StepLog = []
    schedule = engine.scheduler.schedule

    def recording() -> SchedulerOutput:
        out = schedule()
        scheduled = tuple((s.request.request_id, s.num_new_tokens) for s in out.scheduled)
        log.append((scheduled, tuple(r.request_id for r in out.preempted)))
        return out

    engine.scheduler.schedule = recording  # type: ignore[method-assign]
    step = 0
    while engine.has_unfinished_requests() or step <= max(arrivals, default=0):
        for rid, prompt, params in arrivals.get(step, []):
            engine.add_request(rid, prompt, params)
        if engine.has_unfinished_requests():
            engine.step()
        step += 1
    return log
