"""Block tables: which KV blocks hold which request's tokens; prefix-cache lookups.

Two layouts. ``paged`` (vLLM's): blocks are taken as tokens arrive, from anywhere in the pool.
``contiguous`` (the pre-PagedAttention way): a request reserves one run of consecutive blocks
for max_model_len tokens when admitted; the unused part of the reservation is the waste that
paging removes.
"""

from __future__ import annotations

from typing import Literal

from engine.core.block_pool import BlockKey, BlockPool
from engine.core.request import Request

KVLayout = Literal["paged", "contiguous"]


class KVCacheManager:
    """Maps each running request to its block table and grows it as tokens are scheduled."""

    def __init__(
        self,
        block_pool: BlockPool,
        layout: KVLayout = "paged",
        max_model_len: int | None = None,
    ) -> None:
        if layout not in ("paged", "contiguous"):
            raise ValueError(f"kv layout must be 'paged' or 'contiguous', got {layout!r}")
        if layout == "contiguous" and max_model_len is None:
            raise ValueError("the contiguous layout reserves max_model_len: give max_model_len")
        if layout == "contiguous" and block_pool.enable_caching:
            raise ValueError("prefix caching shares blocks, which the contiguous layout cannot")
        self.block_pool = block_pool
        self.block_size = block_pool.block_size
        self.layout = layout
        self.max_model_len = max_model_len
        self.block_tables: dict[str, list[int]] = {}
        # Token counts, as vLLM's vllm:prefix_cache_queries / vllm:prefix_cache_hits.
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0

    @property
    def enable_prefix_caching(self) -> bool:
        return self.block_pool.enable_caching

    def _block_key(self, request: Request, i: int) -> BlockKey:
        keys = request.block_keys
        while len(keys) <= i:
            j = len(keys)
            parent = hash(keys[j - 1]) if j else None
            bs = self.block_size
            keys.append((parent, tuple(request.all_token_ids[j * bs : (j + 1) * bs])))
        return keys[i]

    def get_computed_blocks(self, request: Request) -> list[int]:
        """Cached blocks holding the longest prefix of ``request``'s tokens (none if off).

        At least the last token is always left to compute, since its logits give the next
        token, so a fully cached prompt hits one block less.
        """
        if not self.enable_prefix_caching:
            return []
        hits: list[int] = []
        for i in range((request.num_tokens - 1) // self.block_size):
            block = self.block_pool.lookup(self._block_key(request, i))
            if block is None:
                break
            hits.append(block)
        return hits

    def blocks_needed(self, request: Request, num_tokens: int) -> int:
        """New blocks required for ``num_tokens`` more tokens of ``request``."""
        total_tokens = request.num_computed_tokens + num_tokens
        needed = -(-total_tokens // self.block_size)
        return max(0, needed - len(self.block_tables.get(request.request_id, ())))

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        computed_blocks: list[int] | None = None,
        num_lookahead_tokens: int = 0,
    ) -> bool:
        """Make room for ``num_new_tokens`` (+ lookahead) more tokens; False if it can't.

        ``computed_blocks`` (from get_computed_blocks, for a request being admitted) are taken
        as its first blocks and its num_computed_tokens set past them. Nothing changes on False.
        """
        rid = request.request_id
        if self.layout == "contiguous":
            if rid in self.block_tables:
                return True
            assert self.max_model_len is not None
            reserved = self.block_pool.allocate_contiguous(
                -(-self.max_model_len // self.block_size)
            )
            if reserved is None:
                return False
            self.block_tables[rid] = reserved
            return True
        hits = computed_blocks or []
        computed = len(hits) * self.block_size
        total = (request.num_computed_tokens or computed) + num_new_tokens + num_lookahead_tokens
        have = len(self.block_tables.get(rid, ())) or len(hits)
        needed = max(0, -(-total // self.block_size) - have)
        # Free cached hits are about to leave the free queue: they cannot serve as new blocks.
        free_hits = sum(1 for b in hits if self.block_pool.is_free(b))
        if needed > self.block_pool.num_free_blocks - free_hits:
            return False
        if hits:
            self.block_pool.touch(hits)
            self.block_tables[rid] = list(hits)
            request.num_computed_tokens = computed
            request.num_cached_blocks = len(hits)
        table = self.block_tables.setdefault(rid, [])
        if needed:
            table.extend(self.block_pool.allocate(needed))
        return True

    def record_prefix_lookup(self, request: Request, num_hit_tokens: int) -> None:
        """Count one admission's lookup: the request's tokens queried, the hits found."""
        if self.enable_prefix_caching:
            self.prefix_cache_queries += request.num_tokens
            self.prefix_cache_hits += num_hit_tokens

    def cache_full_blocks(self, request: Request) -> None:
        """Offer the request's newly completed blocks (all slots computed) to the prefix cache."""
        if not self.enable_prefix_caching:
            return
        table = self.block_tables[request.request_id]
        num_full = request.num_computed_tokens // self.block_size
        for i in range(request.num_cached_blocks, num_full):
            self.block_pool.cache_block(table[i], self._block_key(request, i))
        request.num_cached_blocks = max(request.num_cached_blocks, num_full)

    def free(self, request: Request) -> None:
        """Release every block of ``request`` (finished, aborted or preempted)."""
        table = self.block_tables.pop(request.request_id, None)
        request.num_cached_blocks = 0
        if table:
            self.block_pool.free(table)

    def get_block_table(self, request_id: str) -> list[int]:
        return self.block_tables[request_id]

    def num_reserved_slots(self) -> int:
        """Token slots held by requests' blocks (what they reserve)."""
        return sum(len(t) for t in self.block_tables.values()) * self.block_size
