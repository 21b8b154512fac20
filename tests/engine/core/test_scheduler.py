"""The scheduler and block bookkeeping, without a model: budgets, chunking, preemption."""

from __future__ import annotations

import pytest

from engine.core.block_pool import BlockPool, NoFreeBlocksError
from engine.core.kv_cache_manager import KVCacheManager
from engine.core.request import Request, RequestStatus, SamplingParams
from engine.core.scheduler import Scheduler


def make_scheduler(
    num_blocks: int = 64,
    block_size: int = 4,
    max_num_seqs: int = 8,
    budget: int = 32,
    chunked: bool = True,
) -> Scheduler:
    kv = KVCacheManager(BlockPool(num_blocks, block_size))
    return Scheduler(kv, max_num_seqs, budget, max_model_len=1024, enable_chunked_prefill=chunked)


def req(rid: str, prompt_len: int, max_tokens: int = 4) -> Request:
    return Request(rid, list(range(1, prompt_len + 1)), SamplingParams(max_tokens=max_tokens))


def step(s: Scheduler, token: int = 7) -> list[tuple[str, int, bool]]:
    out = s.schedule()
    sampled = {x.request.request_id: [token] for x in out.scheduled if x.samples}
    s.update_from_output(out, sampled)
    return [(x.request.request_id, x.num_new_tokens, x.samples) for x in out.scheduled]


def test_block_pool_ref_counts_and_free_queue() -> None:
    pool = BlockPool(4, 16)
    a = pool.allocate(3)
    assert pool.num_free_blocks == 1 and pool.usage == 0.75
    with pytest.raises(NoFreeBlocksError):
        pool.allocate(2)
    pool.free(a)
    assert pool.num_free_blocks == 4
    with pytest.raises(RuntimeError, match="freed more times"):
        pool.free([a[0]])


def test_chunked_prefill_respects_token_budget_and_decodes_first() -> None:
    s = make_scheduler(budget=10)
    s.add_request(req("a", 25))
    assert step(s) == [("a", 10, False)]
    assert step(s) == [("a", 10, False)]
    s.add_request(req("b", 3))
    # a finishes its prompt (5 tokens) and samples; b takes what is left of the budget.
    assert step(s) == [("a", 5, True), ("b", 3, True)]
    assert step(s) == [("a", 1, True), ("b", 1, True)]


def test_without_chunking_a_long_prompt_waits_for_a_whole_budget() -> None:
    s = make_scheduler(budget=10, chunked=False)
    s.add_request(req("a", 8))
    s.add_request(req("b", 8))
    assert step(s) == [("a", 8, True)]
    assert step(s) == [("a", 1, True), ("b", 8, True)]


def test_max_num_seqs_caps_the_batch() -> None:
    s = make_scheduler(max_num_seqs=2)
    for i in range(3):
        s.add_request(req(f"r{i}", 2))
    assert [x[0] for x in step(s)] == ["r0", "r1"]
    assert len(s.waiting) == 1


def test_finished_requests_free_their_blocks() -> None:
    s = make_scheduler()
    s.add_request(req("a", 5, max_tokens=2))
    step(s)
    assert s.kv.block_pool.num_used_blocks == 2
    step(s)
    assert s.num_unfinished == 0
    assert s.kv.block_pool.num_used_blocks == 0


def test_preemption_by_recompute_when_blocks_run_out() -> None:
    # 4 blocks of 4 tokens: two requests of 7 prompt tokens fit (2 blocks each) until the
    # first one needs its third block; then the later request is preempted.
    s = make_scheduler(num_blocks=4, block_size=4, budget=64)
    a, b = req("a", 7, max_tokens=8), req("b", 7, max_tokens=8)
    s.add_request(a)
    s.add_request(b)
    step(s)  # both prefilled (7 slots each) and sampled their first output
    step(s)  # the first output's K/V takes the 8th slot: both blocks of each are full
    assert s.kv.block_pool.num_free_blocks == 0
    step(s)  # a needs a third block: b is preempted
    assert b.status is RequestStatus.PREEMPTED
    assert b.num_computed_tokens == 0 and b.num_preemptions == 1
    assert list(s.waiting) == [b]
    assert s.num_preemptions_total == 1
    # b comes back once a has finished, recomputing prompt + outputs in one prefill.
    while a.status is not RequestStatus.FINISHED_LENGTH:
        step(s)
    scheduled = step(s)
    assert scheduled == [("b", 9, True)]


def test_abort_removes_and_frees() -> None:
    s = make_scheduler()
    s.add_request(req("a", 5))
    s.add_request(req("b", 5))
    step(s)
    assert s.abort("a") is not None
    assert s.abort("a") is None
    assert [r.request_id for r in s.running] == ["b"]
    assert s.kv.block_pool.num_used_blocks == 2


def test_duplicate_request_id_is_refused() -> None:
    s = make_scheduler()
    s.add_request(req("a", 2))
    with pytest.raises(ValueError, match="already"):
        s.add_request(req("a", 2))
