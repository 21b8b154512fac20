"""Shared helpers for engine tests: a tiny float32 engine and ragged greedy workloads."""

from __future__ import annotations

import random

from engine.config import EngineConfig
from engine.core.request import SamplingParams
from engine.llm_engine import LLMEngine

Workload = list[tuple[list[int], SamplingParams]]


def make_engine(**overrides: object) -> LLMEngine:
    settings: dict = {"model": "tiny", "dtype": "float32", "device": "cpu", "seed": 1}
    settings.update(overrides)
    return LLMEngine(EngineConfig.from_flat(settings))


def ragged_workload(n: int = 32, seed: int = 7, shared_prefix: list[int] | None = None) -> Workload:
    """``n`` greedy requests of 3..90 prompt tokens and 1..24 outputs (ignore_eos)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        prompt = [rng.randrange(3, 4096) for _ in range(rng.randint(3, 90))]
        if shared_prefix is not None:
            prompt = shared_prefix + prompt
        params = SamplingParams(max_tokens=rng.randint(1, 24), temperature=0.0, ignore_eos=True)
        out.append((prompt, params))
    return out


def run(engine: LLMEngine, workload: Workload) -> list[list[int]]:
    return engine.generate([p for p, _ in workload], [params for _, params in workload])


def alone(engine: LLMEngine, workload: Workload) -> list[list[int]]:
    return [engine.generate([p], params)[0] for p, params in workload]
