"""What every engine adapter provides: how to reach the engine, start it, and read its metrics.

An adapter is small on purpose: the API flavour, an optional launch command, and the map from
the engine's Prometheus names to ours (kv_cache_usage 0..1, num_requests_running,
num_requests_waiting, prefix cache hits and queries, spec decode counters, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Api = Literal["completions", "chat"]


@dataclass(frozen=True)
class EngineAdapter:
    """Static description of one engine family.

    metric_names maps each of our normalized names to the engine's Prometheus names, newest
    first (older releases of an engine renamed some; the first one present wins).
    """

    name: str
    default_api: Api = "completions"
    health_path: str = "/health"
    metric_names: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Whether the engine accepts vLLM's `ignore_eos` extension; others reject unknown fields.
    accepts_ignore_eos: bool = True
