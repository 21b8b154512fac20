"""Emptying the prefix cache: refused while a block is held, complete once none is."""

from __future__ import annotations

from engine.core.block_pool import BlockPool
from engine.core.kv_cache_manager import KVCacheManager
from engine.core.request import Request, SamplingParams
from engine.core.scheduler import Scheduler

BLOCK = 16


def run_to_end(sched: Scheduler) -> None:
    while sched.num_unfinished:
        out = sched.schedule()
        sched.update_from_output(
            out, {s.request.request_id: [7] for s in out.scheduled if s.samples}
        )


def test_reset_forgets_cached_blocks_only_when_none_is_held() -> None:
    pool = BlockPool(32, BLOCK, enable_caching=True)
    kv = KVCacheManager(pool)
    sched = Scheduler(kv, max_num_seqs=4, max_num_batched_tokens=4096, max_model_len=512)
    prompt = list(range(10, 10 + 4 * BLOCK + 1))
    sched.add_request(Request("a", prompt, SamplingParams(max_tokens=1)))
    run_to_end(sched)
    assert pool.cached
    # A repeat hits; while it holds its blocks the cache cannot be emptied.
    sched.add_request(Request("b", prompt, SamplingParams(max_tokens=2)))
    sched.schedule()
    assert kv.prefix_cache_hits == 4 * BLOCK
    cached = dict(pool.cached)
    assert pool.reset_prefix_cache() is False and pool.cached == cached
    run_to_end(sched)
    assert pool.reset_prefix_cache() is True
    assert not pool.cached and all(key is None for key in pool.block_key)
    # The same prompt now computes every token again, and is cached anew.
    sched.add_request(Request("c", prompt, SamplingParams(max_tokens=1)))
    run_to_end(sched)
    assert kv.prefix_cache_hits == 4 * BLOCK and len(pool.cached) == 4
    assert pool.num_free_blocks == pool.num_blocks
