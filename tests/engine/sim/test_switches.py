"""Every engine switch works on the simulated device, and moves the prediction the right way."""

from __future__ import annotations

import numpy as np
import pytest

from engine.core.request import SamplingParams
from engine.llm_engine import LLMEngine
from tests.support.sim_fixtures import a100_engine


def decode_step_s(engine: LLMEngine) -> float:
    """Median predicted time of the decode-only steps run so far."""
    steps = engine.steps.since(0)
    times = [
        (end - start) / 1e9
        for start, end, prefill in zip(
            steps["start_ns"], steps["end_ns"], steps["num_prefill_tokens"], strict=True
        )
        if prefill == 0
    ]
    return float(np.median(times))


def most_running(engine: LLMEngine) -> int:
    return max(engine.steps.since(0)["num_seqs"])


PARAMS = SamplingParams(max_tokens=16, ignore_eos=True)


def test_static_batching_admits_nobody_until_the_batch_is_done() -> None:
    prompts = [[11 + i] * 64 for i in range(8)]
    lengths = [SamplingParams(max_tokens=4 + 4 * i, ignore_eos=True) for i in range(8)]
    static = a100_engine(batching="static", max_num_seqs=4)
    continuous = a100_engine(max_num_seqs=4)
    static.generate(prompts, lengths)
    continuous.generate(prompts, lengths)
    assert most_running(static) == most_running(continuous) == 4
    assert static.clock_ns() > continuous.clock_ns()  # the static batch waits for its longest


def test_contiguous_kv_holds_fewer_requests_than_paged() -> None:
    # 513,056 KV tokens on 4 A100-80GB (80 GiB each): 62 reservations of the 8,192-token context.
    prompts = [[5 + i] * 32 for i in range(70)]
    paged, contiguous = a100_engine(), a100_engine(kv_layout="contiguous")
    paged.generate(prompts, PARAMS)
    contiguous.generate(prompts, PARAMS)
    assert most_running(paged) == 70
    assert most_running(contiguous) == 62


def test_prefix_caching_skips_the_shared_prefix() -> None:
    shared = list(range(1000, 3048))  # 2,048 tokens = 128 full blocks
    prompts = [[*shared, 7, i] for i in range(4)]
    cached, uncached = a100_engine(), a100_engine(enable_prefix_caching=False)
    for engine in (cached, uncached):
        for prompt in prompts:  # one after the other, as users of one system prompt
            engine.generate([prompt], SamplingParams(max_tokens=1))
    assert cached.stats()["prefix_cache_hits"] == 3 * 2048
    assert uncached.stats()["prefix_cache_hits"] == 0
    assert cached.clock_ns() < 0.4 * uncached.clock_ns()  # one prefill of 2,048 tokens, not 4


@pytest.mark.parametrize(
    "settings",
    [
        {"speculative": "ngram"},
        {"speculative": "draft", "draft_num_layers": 8},
        {"speculative": "draft", "draft_model": "llama-3-8b"},
    ],
)
def test_speculation_saves_steps_at_its_acceptance_rate(settings: dict) -> None:
    spec = a100_engine(num_speculative_tokens=3, sim_acceptance_rate=0.8, **settings)
    plain = a100_engine()
    params = SamplingParams(max_tokens=64, ignore_eos=True)
    spec.generate([[9] * 32], params)
    plain.generate([[9] * 32], params)
    assert spec.steps.num_steps < 0.6 * plain.steps.num_steps
    assert spec.stats()["spec_num_accepted_tokens"] > 0
    draft_s = spec.executor.draft_s_total  # type: ignore[attr-defined]
    assert (draft_s > 0) == (settings["speculative"] == "draft")


def test_quantized_weights_make_decode_faster() -> None:
    times = {}
    for quantization in ("none", "int8", "int4"):
        engine = a100_engine(quantization=quantization)
        engine.generate([[3] * 32], PARAMS)
        times[quantization] = decode_step_s(engine)
    assert times["int4"] < times["int8"] < times["none"]
    assert times["int8"] / times["none"] == pytest.approx(0.55, abs=0.1)


def test_fp8_kv_doubles_the_capacity() -> None:
    bf16, fp8 = a100_engine(), a100_engine(kv_cache_dtype="fp8")
    assert fp8.block_pool.num_blocks == pytest.approx(2 * bf16.block_pool.num_blocks, abs=1)
    assert fp8.describe()["kv_cache_dtype"] == "float8_e4m3fn"


def test_without_chunked_prefill_a_long_prompt_takes_one_step() -> None:
    chunked = a100_engine(max_num_batched_tokens=1024)
    whole = a100_engine(enable_chunked_prefill=False, max_num_batched_tokens=4096)
    for engine in (chunked, whole):
        engine.generate([[4] * 4096], SamplingParams(max_tokens=1))
    assert chunked.steps.num_steps == 4 and whole.steps.num_steps == 1
