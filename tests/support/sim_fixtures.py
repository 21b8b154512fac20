"""Helpers for the simulated-device tests: sim engines and step logs.

The sim engines time steps from a calibration: tests use the ``fake_calibration`` fixture.
"""

from __future__ import annotations

from typing import Any

from engine.config import EngineConfig
from engine.core.request import SamplingParams
from engine.core.scheduler import SchedulerOutput
from engine.llm_engine import LLMEngine


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
