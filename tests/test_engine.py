"""LLMEngine end to end without HTTP: batching, chunked prefill and preemption change nothing.

Greedy decoding is deterministic, so a request's output tokens must be the same whether it runs
alone, in a batch of 32 ragged requests with chunked prefill, or after being preempted and
recomputed. The model is the tiny preset (random weights) in float32.
"""

from __future__ import annotations

import random

import pytest
import torch

from engine.engine import LLMEngine
from engine.engine_config import EngineConfig
from engine.model_runner import kv_bytes_per_block
from engine.request import SamplingParams


def _engine(**overrides: object) -> LLMEngine:
    settings: dict = {"model": "tiny", "dtype": "float32", "device": "cpu", "seed": 1}
    settings.update(overrides)
    return LLMEngine(EngineConfig(**settings))


@pytest.fixture(scope="module")
def workload() -> list[tuple[list[int], SamplingParams]]:
    rng = random.Random(7)
    out = []
    for _ in range(32):
        prompt = [rng.randrange(3, 4096) for _ in range(rng.randint(3, 90))]
        params = SamplingParams(max_tokens=rng.randint(1, 24), temperature=0.0, ignore_eos=True)
        out.append((prompt, params))
    return out


@pytest.fixture(scope="module")
def alone_outputs(workload: list[tuple[list[int], SamplingParams]]) -> list[list[int]]:
    engine = _engine()
    return [engine.generate([p], params)[0] for p, params in workload]


def test_outputs_have_the_requested_lengths(
    workload: list[tuple[list[int], SamplingParams]], alone_outputs: list[list[int]]
) -> None:
    assert [len(o) for o in alone_outputs] == [params.max_tokens for _, params in workload]


def test_batched_with_chunked_prefill_equals_alone(
    workload: list[tuple[list[int], SamplingParams]], alone_outputs: list[list[int]]
) -> None:
    # A 48-token budget splits most prompts into chunks and mixes them with decodes.
    engine = _engine(max_num_batched_tokens=48)
    batched = engine.generate([p for p, _ in workload], [params for _, params in workload])
    assert batched == alone_outputs


def test_preempted_and_recomputed_equals_alone(
    workload: list[tuple[list[int], SamplingParams]], alone_outputs: list[list[int]]
) -> None:
    engine0 = _engine()
    block_bytes = kv_bytes_per_block(engine0.model_config, 16, torch.float32)
    # 12 blocks of 16 tokens: the longest request (90 + 24 tokens) fits, 32 together do not.
    engine = _engine(kv_cache_memory_bytes=12 * block_bytes, max_num_batched_tokens=256)
    batched = engine.generate([p for p, _ in workload], [params for _, params in workload])
    assert engine.scheduler.num_preemptions_total > 0
    assert batched == alone_outputs
    assert engine.block_pool.num_used_blocks == 0


def test_engine_rejects_what_can_never_fit() -> None:
    engine = _engine(max_model_len=64)
    with pytest.raises(ValueError, match="maximum context length is 64"):
        engine.add_request("r", [5] * 60, SamplingParams(max_tokens=8))
    with pytest.raises(ValueError, match="prompt is empty"):
        engine.add_request("r", [], SamplingParams(max_tokens=8))


def test_eos_and_stop_token_ids_end_a_request() -> None:
    engine = _engine()
    prompt = [11, 12, 13, 14]
    first = engine.generate([prompt], SamplingParams(max_tokens=6, temperature=0))[0]
    stop_at = first[2]
    stopped = engine.generate(
        [prompt], SamplingParams(max_tokens=6, temperature=0, stop_token_ids=(stop_at,))
    )[0]
    assert stopped == first[: first.index(stop_at) + 1]
