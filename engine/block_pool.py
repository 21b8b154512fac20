"""The pool of fixed-size KV-cache blocks: reference counts and a free queue.

Block ids index the first dimension of every layer's KV tensor. A block is free when its ref
count is zero; the free queue hands out the least recently freed block first, which is the order
a prefix cache will want for LRU eviction.
"""

from __future__ import annotations

from collections import deque


class NoFreeBlocksError(RuntimeError):
    """Raised when more blocks are asked for than are free; the scheduler checks first."""


class BlockPool:
    """Owns ``num_blocks`` KV blocks of ``block_size`` token slots each."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be at least 1, got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.ref_cnt = [0] * num_blocks
        self._free_queue: deque[int] = deque(range(num_blocks))

    @property
    def num_free_blocks(self) -> int:
        return len(self._free_queue)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free_queue)

    @property
    def usage(self) -> float:
        """Fraction of blocks in use, 0..1 (vLLM's kv_cache_usage_perc)."""
        return self.num_used_blocks / self.num_blocks

    def allocate(self, n: int) -> list[int]:
        """Take ``n`` free blocks, each with ref count 1."""
        if n > len(self._free_queue):
            raise NoFreeBlocksError(f"asked for {n} blocks, {len(self._free_queue)} free")
        blocks = [self._free_queue.popleft() for _ in range(n)]
        for b in blocks:
            self.ref_cnt[b] = 1
        return blocks

    def free(self, block_ids: list[int]) -> None:
        """Drop one reference to each block; blocks that reach zero go back to the free queue.

        Freed in reverse so that a request's tail blocks, the least likely to be shared, are
        reused first.
        """
        for b in reversed(block_ids):
            if self.ref_cnt[b] <= 0:
                raise RuntimeError(f"block {b} freed more times than allocated")
            self.ref_cnt[b] -= 1
            if self.ref_cnt[b] == 0:
                self._free_queue.append(b)
