"""The pool of fixed-size KV-cache blocks: ref counts, an LRU free queue, and the prefix cache.

Block ids index the first dimension of every layer's KV tensor. A block is free when its ref count
is zero. With prefix caching, a full block keeps its content hash after it is freed, so a later
request with the same prefix can take it back (a hit) until the block is handed out again
(evicted). The free queue is ordered by eviction priority: blocks freed longest ago leave first,
and a request's blocks are freed tail first, so shared prefixes outlive the tails that follow
them. Blocks with a ref count above zero are never in the free queue, so a block that a running
request holds can never be evicted.
"""

from __future__ import annotations

from collections import OrderedDict

# (hash of the parent block's key, the block's token ids): equal keys mean equal K/V, since a
# block's K/V depend on every token before it. The token ids make the key collision-free.
BlockKey = tuple[int | None, tuple[int, ...]]


class NoFreeBlocksError(RuntimeError):
    """Raised when more blocks are asked for than are free; the scheduler checks first."""


class BlockPool:
    """Owns ``num_blocks`` KV blocks of ``block_size`` token slots each."""

    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = False) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be at least 1, got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.ref_cnt = [0] * num_blocks
        self.block_key: list[BlockKey | None] = [None] * num_blocks
        self.cached: dict[BlockKey, int] = {}
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.num_evictions = 0

    @property
    def num_free_blocks(self) -> int:
        """Blocks that can be handed out now (free, cached or not)."""
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    @property
    def usage(self) -> float:
        """Fraction of blocks in use, 0..1 (vLLM's kv_cache_usage_perc)."""
        return self.num_used_blocks / self.num_blocks

    def is_free(self, block_id: int) -> bool:
        return block_id in self._free

    def allocate(self, n: int) -> list[int]:
        """Take ``n`` free blocks (least recently freed first), each with ref count 1."""
        if n > len(self._free):
            raise NoFreeBlocksError(f"asked for {n} blocks, {len(self._free)} free")
        blocks = [self._free.popitem(last=False)[0] for _ in range(n)]
        for b in blocks:
            self._take(b)
        return blocks

    def allocate_contiguous(self, n: int) -> list[int] | None:
        """``n`` free blocks with consecutive ids (first fit), or None if no run is long enough.

        For the contiguous KV layout: a free run must exist, not only enough free blocks, which
        is the external fragmentation paging avoids.
        """
        run_start, run_len = 0, 0
        for b in sorted(self._free):
            if run_len and b == run_start + run_len:
                run_len += 1
            else:
                run_start, run_len = b, 1
            if run_len == n:
                blocks = list(range(run_start, run_start + n))
                for block in blocks:
                    del self._free[block]
                    self._take(block)
                return blocks
        return None

    def _take(self, block: int) -> None:
        key = self.block_key[block]
        if key is not None:  # evict: this block's old content is about to be overwritten
            if self.cached.get(key) == block:
                del self.cached[key]
            self.block_key[block] = None
            self.num_evictions += 1
        self.ref_cnt[block] = 1

    def touch(self, blocks: list[int]) -> None:
        """Take one more reference to each block (prefix-cache hits); free ones leave the queue."""
        for b in blocks:
            if self.ref_cnt[b] == 0:
                del self._free[b]
            self.ref_cnt[b] += 1

    def free(self, block_ids: list[int]) -> None:
        """Drop one reference to each block, tail first; blocks at zero join the free queue."""
        for b in reversed(block_ids):
            if self.ref_cnt[b] <= 0:
                raise RuntimeError(f"block {b} freed more times than allocated")
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                self._free[b] = None

    def cache_block(self, block: int, key: BlockKey) -> None:
        """Record that ``block`` holds the full block ``key`` (no-op when caching is off or the
        same content is already cached in another block)."""
        if not self.enable_caching or key in self.cached:
            return
        self.block_key[block] = key
        self.cached[key] = block

    def reset_prefix_cache(self) -> bool:
        """Forget every cached block's content (vLLM's reset_prefix_cache), so that the next
        request computes its whole prompt. Refused (False, nothing changed) while any block is
        held, since a running request's blocks must keep their keys; True once reset."""
        if any(self.ref_cnt):
            return False
        self.cached.clear()
        self.block_key = [None] * self.num_blocks
        return True

    def lookup(self, key: BlockKey) -> int | None:
        return self.cached.get(key)
