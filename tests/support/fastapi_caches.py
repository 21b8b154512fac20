"""What FastAPI keeps of an app after it stopped serving, released between test modules.

FastAPI keeps every route function it has classified in module-level lru_caches
(fastapi.dependencies.models, 4,096 entries each). engine.serving.server's route handlers are
closures over the engine, so every app a test served in this process would keep its engine,
and the engine its KV cache (512 MiB by default on the CPU), for the rest of the process:
measured, 512 MiB more per server, which two test processes on a 24 GiB machine could not
hold. `bench serve` builds one app per process, so only tests meet it.
"""

from __future__ import annotations

import gc
import sys

# The caches' names in FastAPI 0.165; a FastAPI without them has nothing of ours to release.
CALLABLE_CACHES = (
    "_is_gen_callable_cached",
    "_is_async_gen_callable_cached",
    "_is_coroutine_callable_cached",
)


def release_served_apps() -> int:
    """Clear FastAPI's callable caches and collect the cycles they kept; returns how many
    entries were cleared (0: nothing served, or no such caches, and nothing collected)."""
    models = sys.modules.get("fastapi.dependencies.models")
    cleared = 0
    for name in CALLABLE_CACHES:
        cache = getattr(models, name, None)
        if cache is not None and cache.cache_info().currsize:
            cleared += cache.cache_info().currsize
            cache.cache_clear()
    if cleared:
        gc.collect()  # the handlers and the engines they close over are in reference cycles
    return cleared
