"""Every engine switch leaves greedy outputs token-identical, including the combinations that
break engines: a prefix hit on blocks of a preempted request, a hit on a prefix another request
is still prefilling in chunks, and the eviction of a block a running request holds (never)."""

from __future__ import annotations

import pytest
import torch

from engine.llm_engine import LLMEngine
from engine.model.model_runner import kv_bytes_per_block
from tests.support.engine_fixtures import Workload, alone, make_engine, ragged_workload

SHARED = list(range(100, 164))  # 64 tokens: 4 full blocks


@pytest.fixture(scope="module")
def workload() -> Workload:
    return ragged_workload(24, seed=11, shared_prefix=SHARED)


@pytest.fixture(scope="module")
def reference(workload: Workload) -> list[list[int]]:
    """Each request alone on an engine with every optimization off."""
    return alone(make_engine(enable_prefix_caching=False), workload)


def check_block_invariants(engine: LLMEngine) -> None:
    """Held blocks are never free (so never evictable); cached keys point at their blocks."""
    pool = engine.block_pool
    for table in engine.kv_cache_manager.block_tables.values():
        for b in table:
            assert pool.ref_cnt[b] > 0 and not pool.is_free(b)
    for key, b in pool.cached.items():
        assert pool.block_key[b] == key


def run_checked(engine: LLMEngine, workload: Workload) -> list[list[int]]:
    ids = [f"r{i}" for i in range(len(workload))]
    outputs: dict[str, list[int]] = {i: [] for i in ids}
    for rid, (prompt, params) in zip(ids, workload, strict=True):
        engine.add_request(rid, prompt, params)
    while engine.has_unfinished_requests():
        for out in engine.step():
            outputs[out.request_id].extend(out.new_token_ids)
        check_block_invariants(engine)
    return [outputs[i] for i in ids]


@pytest.mark.parametrize(
    "settings",
    [
        {"batching": "static", "max_num_seqs": 8},
        {"kv_layout": "contiguous", "max_model_len": 256},
        {"enable_prefix_caching": True, "max_num_batched_tokens": 40},
        {"enable_chunked_prefill": False},
        {"kv_cache": False, "max_num_batched_tokens": 256},
        {"attention_backend": "naive"},
        {"speculative": "ngram", "num_speculative_tokens": 3},
        {"speculative": "draft", "draft_num_layers": 2, "num_speculative_tokens": 3},
        {"speculative": "draft", "draft_model": "tiny", "num_speculative_tokens": 2},
        {"speculative": "ngram", "enable_prefix_caching": True, "max_num_batched_tokens": 64},
    ],
    ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()),
)
def test_switch_keeps_greedy_outputs(
    settings: dict, workload: Workload, reference: list[list[int]]
) -> None:
    engine = make_engine(**settings)
    assert run_checked(engine, workload) == reference
    assert engine.block_pool.num_used_blocks == 0
    if settings.get("enable_prefix_caching"):
        assert engine.kv_cache_manager.prefix_cache_hits > 0
    if settings.get("speculative") in ("ngram", "draft"):
        stats = engine.spec_stats
        assert stats is not None and stats.num_drafts > 0
        if settings.get("draft_num_layers"):
            # Half the target's layers agree with it often on a random model.
            assert stats.num_accepted_tokens > 0


def test_prefix_hits_on_a_preempted_requests_blocks(
    workload: Workload, reference: list[list[int]]
) -> None:
    block_bytes = kv_bytes_per_block(make_engine().model_config, 16, torch.float32)
    engine = make_engine(
        kv_cache_memory_bytes=16 * block_bytes,
        max_num_batched_tokens=256,
        enable_prefix_caching=True,
    )
    assert run_checked(engine, workload) == reference
    assert engine.scheduler.num_preemptions_total > 0
    assert engine.kv_cache_manager.prefix_cache_hits > 0


def test_hit_on_a_prefix_still_being_prefilled_in_chunks(reference: list[list[int]]) -> None:
    # A long shared prefix prefilled 16 tokens a step: the second request arrives while the
    # first is mid-prompt and takes the blocks the first has finished so far.
    long_prefix = list(range(200, 328))  # 128 tokens
    work = ragged_workload(2, seed=5, shared_prefix=long_prefix)
    expected = alone(make_engine(enable_prefix_caching=False), work)
    engine = make_engine(enable_prefix_caching=True, max_num_batched_tokens=16)
    (p0, s0), (p1, s1) = work
    engine.add_request("a", p0, s0)
    out: dict[str, list[int]] = {"a": [], "b": []}
    for _ in range(3):  # three 16-token chunks of "a" computed and cached
        for o in engine.step():
            out[o.request_id].extend(o.new_token_ids)
    engine.add_request("b", p1, s1)
    while engine.has_unfinished_requests():
        for o in engine.step():
            out[o.request_id].extend(o.new_token_ids)
        check_block_invariants(engine)
    assert [out["a"], out["b"]] == expected
    assert engine.kv_cache_manager.prefix_cache_hits >= 32


def test_contiguous_layout_reserves_what_paging_does_not() -> None:
    work = ragged_workload(8, seed=3)
    paged = make_engine(max_model_len=512)
    contiguous = make_engine(kv_layout="contiguous", max_model_len=512)
    for engine in (paged, contiguous):
        for i, (prompt, params) in enumerate(work):
            engine.add_request(f"r{i}", prompt, params)
        engine.step()
    # Each contiguous request holds 512 slots whatever its length; paged ones what they use.
    assert contiguous.block_pool.num_used_blocks == 8 * 512 // 16
    assert paged.block_pool.num_used_blocks < contiguous.block_pool.num_used_blocks / 4


def test_contiguous_needs_a_free_run_not_just_free_blocks() -> None:
    from engine.core.block_pool import BlockPool

    pool = BlockPool(8, 16)
    a, _, c, _ = (pool.allocate(2) for _ in range(4))
    pool.free(a)
    pool.free(c)
    assert pool.num_free_blocks == 4
    assert pool.allocate_contiguous(3) is None  # fragmented: two runs of 2
    assert pool.allocate_contiguous(2) == [0, 1]


def test_bad_switch_values_are_refused() -> None:
    from engine.config import EngineConfig

    with pytest.raises(ValueError, match="batching must be one of"):
        EngineConfig.from_flat(dict(batching="dynamic"))
    with pytest.raises(ValueError, match="needs kv_layout='paged'"):
        EngineConfig.from_flat(dict(kv_layout="contiguous", enable_prefix_caching=True))
    with pytest.raises(ValueError, match="needs exactly one"):
        EngineConfig.from_flat(dict(speculative="draft"))


@pytest.mark.parametrize(
    "settings",
    [
        {"quantization": "int8"},
        {"quantization": "int4", "quant_group_size": 32},
        {"kv_cache_dtype": "fp8"},
        {"quantization": "int8", "speculative": "draft", "draft_num_layers": 2},
    ],
    ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()),
)
def test_lossy_switches_run_the_whole_engine(settings: dict) -> None:
    # Lossy on purpose: outputs may differ (their error is bounded in test_quant/test_kv_fp8);
    # here the engine must serve every request to its length with them on.
    work = ragged_workload(6, seed=4)
    engine = make_engine(**settings)
    outputs = run_checked(engine, work)
    assert [len(o) for o in outputs] == [p.max_tokens for _, p in work]
    described = engine.describe()
    plain = make_engine().describe()
    if "quantization" in settings:
        assert described["quantization"]["method"] == settings["quantization"]
        assert described["weight_bytes"] < plain["weight_bytes"]
    if "kv_cache_dtype" in settings:
        assert described["kv_bytes_per_token"] * 4 == plain["kv_bytes_per_token"]
        assert described["kv_capacity_tokens"] == 4 * plain["kv_capacity_tokens"]
