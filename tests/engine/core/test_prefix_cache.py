"""The prefix cache's LRU under pressure, simulated through the real scheduler and KV manager.

1,000 requests, 60% of them sharing one of 5 long prefixes, the rest unique; a cache too small to
hold every request's blocks. LRU keeps the popular prefixes; an unbounded cache is the ceiling.
"""

from __future__ import annotations

import random

from engine.core.block_pool import BlockPool
from engine.core.kv_cache_manager import KVCacheManager
from engine.core.request import Request, SamplingParams
from engine.core.scheduler import Scheduler

BLOCK = 16
PREFIX_TOKENS = 31 * BLOCK
SUFFIX_TOKENS = BLOCK


def token_hit_rate(num_blocks: int, seed: int = 0) -> float:
    rng = random.Random(seed)
    prefixes = [[rng.randrange(5, 4096) for _ in range(PREFIX_TOKENS)] for _ in range(5)]
    kv = KVCacheManager(BlockPool(num_blocks, BLOCK, enable_caching=True))
    sched = Scheduler(kv, max_num_seqs=4, max_num_batched_tokens=4096, max_model_len=4096)
    for i in range(1000):
        if rng.random() < 0.6:
            head = prefixes[rng.randrange(5)]
        else:
            head = [rng.randrange(5, 4096) for _ in range(PREFIX_TOKENS)]
        prompt = head + [rng.randrange(5, 4096) for _ in range(SUFFIX_TOKENS)]
        sched.add_request(Request(f"r{i}", prompt, SamplingParams(max_tokens=1)))
        if len(sched.waiting) >= 4 or i == 999:
            while sched.num_unfinished:
                out = sched.schedule()
                sched.update_from_output(
                    out, {s.request.request_id: [7] for s in out.scheduled if s.samples}
                )
    return kv.prefix_cache_hits / kv.prefix_cache_queries


def test_lru_keeps_shared_prefixes_under_pressure() -> None:
    blocks_per_request = (PREFIX_TOKENS + SUFFIX_TOKENS) // BLOCK
    all_blocks = 1000 * blocks_per_request
    # 640 blocks: 2% of the 32,000 the requests fill, 4 requests in flight taking 128 of them.
    bounded = token_hit_rate(num_blocks=all_blocks // 50)
    tight = token_hit_rate(num_blocks=all_blocks // 100)
    unbounded = token_hit_rate(num_blocks=all_blocks)
    # The ceiling: 60% of requests can hit 31 of their 32 blocks, less each prefix's first miss.
    assert unbounded <= 0.6 * 31 / 32
    assert bounded >= 0.55
    assert tight < bounded <= unbounded
