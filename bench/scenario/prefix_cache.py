"""The scenario's ``[prefix_cache]`` table: the engine's prefix cache before the measured load.

::

    [prefix_cache]
    state = "flush"        # empty it (the adapter's reset endpoint), so the run's hit rate is
                           # the workload's own, not what earlier runs left behind
    state = "prime"        # empty it, then send a first pass of the plan's requests (one output
                           # token each, not recorded), so the load starts on a warm cache
    state = "leave"        # (default) touch nothing
    prime_requests = 32    # prime only: the first N requests of the plan (default: all)

bench.run.endpoint.cache_state does it and records what was done in run.json's ``prefix_cache``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

from bench.scenario.toml_table import Table

__all__ = ["CACHE_STATES", "CacheState", "PrefixCacheSection", "read_prefix_cache"]

CacheState = Literal["flush", "prime", "leave"]
CACHE_STATES: tuple[str, ...] = get_args(CacheState)


@dataclass(frozen=True)
class PrefixCacheSection:
    """``state`` (module docstring) and, for ``prime``, how many of the plan's first requests
    prime the cache (None: all of them)."""

    state: CacheState = "leave"
    prime_requests: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "prime_requests": self.prime_requests}


def read_prefix_cache(table: Table) -> PrefixCacheSection | None:
    """The ``[prefix_cache]`` table, or None (leave the cache as it is) when absent."""
    sub = table.table("prefix_cache")
    if sub is None:
        return None
    state = sub.choice("state", CACHE_STATES)
    prime_requests = sub.get("prime_requests", int, None)
    sub.finish()
    if prime_requests is not None:
        sub.check("prime_requests", state == "prime", "is for state 'prime' only", state)
        sub.check("prime_requests", prime_requests >= 1, "must be >= 1", prime_requests)
    return PrefixCacheSection(state, prime_requests)
