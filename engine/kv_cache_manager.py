"""Block tables: which KV blocks hold which request's tokens."""

from __future__ import annotations

from engine.block_pool import BlockPool
from engine.request import Request


class KVCacheManager:
    """Maps each running request to its block table and grows it as tokens are scheduled."""

    def __init__(self, block_pool: BlockPool) -> None:
        self.block_pool = block_pool
        self.block_size = block_pool.block_size
        self.block_tables: dict[str, list[int]] = {}

    def blocks_needed(self, request: Request, num_new_tokens: int) -> int:
        """New blocks required to hold ``num_new_tokens`` more tokens of ``request``."""
        total_tokens = request.num_computed_tokens + num_new_tokens
        needed = -(-total_tokens // self.block_size)
        return max(0, needed - len(self.block_tables.get(request.request_id, ())))

    def allocate_slots(self, request: Request, num_new_tokens: int) -> bool:
        """Make room for ``num_new_tokens`` more tokens; False (and nothing changed) if it can't."""
        needed = self.blocks_needed(request, num_new_tokens)
        if needed > self.block_pool.num_free_blocks:
            return False
        table = self.block_tables.setdefault(request.request_id, [])
        if needed:
            table.extend(self.block_pool.allocate(needed))
        return True

    def free(self, request: Request) -> None:
        """Release every block of ``request`` (finished, aborted or preempted)."""
        table = self.block_tables.pop(request.request_id, None)
        if table:
            self.block_pool.free(table)

    def get_block_table(self, request_id: str) -> list[int]:
        return self.block_tables[request_id]
