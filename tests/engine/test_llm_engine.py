"""LLMEngine end to end without HTTP: batching, chunked prefill and preemption change nothing.

Greedy decoding is deterministic, so a request's output tokens must be the same whether it runs
alone, in a batch of 32 ragged requests with chunked prefill, or after being preempted and
recomputed. The model is the tiny preset (random weights) in float32.
"""

from __future__ import annotations

import pytest
import torch

from engine.core.request import SamplingParams
from engine.model.model_runner import kv_bytes_per_block
from tests.support.engine_fixtures import Workload, alone, make_engine, ragged_workload, run


@pytest.fixture(scope="module")
def workload() -> Workload:
    return ragged_workload()


@pytest.fixture(scope="module")
def alone_outputs(workload: Workload) -> list[list[int]]:
    return alone(make_engine(enable_prefix_caching=False), workload)


def test_outputs_have_the_requested_lengths(
    workload: Workload, alone_outputs: list[list[int]]
) -> None:
    assert [len(o) for o in alone_outputs] == [params.max_tokens for _, params in workload]


def test_batched_with_chunked_prefill_equals_alone(
    workload: Workload, alone_outputs: list[list[int]]
) -> None:
    # A 48-token budget splits most prompts into chunks and mixes them with decodes.
    engine = make_engine(max_num_batched_tokens=48)
    batched = run(engine, workload)
    assert batched == alone_outputs


def test_preempted_and_recomputed_equals_alone(
    workload: Workload, alone_outputs: list[list[int]]
) -> None:
    engine0 = make_engine()
    block_bytes = kv_bytes_per_block(engine0.model_config, 16, torch.float32)
    # 12 blocks of 16 tokens: the longest request (90 + 24 tokens) fits, 32 together do not.
    engine = make_engine(kv_cache_memory_bytes=12 * block_bytes, max_num_batched_tokens=256)
    batched = run(engine, workload)
    assert engine.scheduler.num_preemptions_total > 0
    assert batched == alone_outputs
    assert engine.block_pool.num_used_blocks == 0


def test_engine_rejects_what_can_never_fit() -> None:
    engine = make_engine(max_model_len=64)
    with pytest.raises(ValueError, match="maximum context length is 64"):
        engine.add_request("r", [5] * 60, SamplingParams(max_tokens=8))
    with pytest.raises(ValueError, match="prompt is empty"):
        engine.add_request("r", [], SamplingParams(max_tokens=8))


def test_eos_and_stop_token_ids_end_a_request() -> None:
    engine = make_engine()
    prompt = [11, 12, 13, 14]
    first = engine.generate([prompt], SamplingParams(max_tokens=6, temperature=0))[0]
    stop_at = first[2]
    stopped = engine.generate(
        [prompt], SamplingParams(max_tokens=6, temperature=0, stop_token_ids=(stop_at,))
    )[0]
    assert stopped == first[: first.index(stop_at) + 1]


def test_burst_steps_take_the_prefill_threads() -> None:
    before = torch.get_num_threads()
    try:
        engine = make_engine(num_threads=1, prefill_num_threads=2)
        params = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)
        engine.add_request("a", list(range(3, 100)), params)
        engine.step()  # the whole prompt, no decode: a burst
        assert torch.get_num_threads() == 2
        engine.step()  # one decode token
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ValueError, match="prefill_num_threads must be at least 1"):
        make_engine(prefill_num_threads=0)
