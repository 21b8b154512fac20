"""What every engine adapter provides: how to reach the engine, start it, and read its metrics.

An adapter is small on purpose: the API flavour, an optional launch command, and the map from
the engine's Prometheus names to ours (kv_cache_usage 0..1, num_requests_running,
num_requests_waiting, prefix cache hits and queries, spec decode counters, ...).

Normalized names (the keys of ``metric_names``), where an engine has them:
    kv_cache_usage (0..1), num_requests_running, num_requests_waiting, prompt_tokens_total,
    generation_tokens_total, prefix_cache_hits_total / prefix_cache_queries_total or
    prefix_cache_hit_rate (0..1), spec_decode_* counters or spec_decode_acceptance_rate,
    prefill and decode time (``request_prefill_time_seconds`` / ``..._decode_...`` histograms, or
    ``prefill_seconds_total`` / ``decode_seconds_total`` counters).
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

    Launching (``bench run --engine NAME --launch ...``): ``launch_template`` is the engine's
    usual command line, with ``{exe}`` (the engine's executable: ``executable`` found on PATH or
    in the engine cache, or the one given), ``{model}``, ``{host}`` and ``{port}`` filled in;
    ``launch_env`` are environment defaults for it (the caller's environment wins).
    """

    name: str
    default_api: Api = "completions"
    health_path: str = "/health"
    metric_names: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Whether the engine accepts vLLM's `ignore_eos` extension (others reject unknown fields);
    # None: not known, so the pre-flight sends it once and keeps it where the server takes it
    # (bench.run.endpoint.preflight_fields).
    accepts_ignore_eos: bool | None = True
    metrics_path: str = "/metrics"
    description: str = ""
    executable: str | None = None
    launch_template: tuple[str, ...] | None = None
    launch_env: dict[str, str] = field(default_factory=dict)
    # Seconds a launched engine may take to become healthy (model load, warm-up, compiling).
    launch_timeout_s: float = 300.0
    # A JSON document beside /v1/models that states the context a request may fill, for engines
    # whose /v1/models does not (llama.cpp's /props, TGI's /info); read by bench's pre-flight.
    context_path: str | None = None
    # A JSON document naming the engine's version (vLLM's /version, TGI's /info, llama.cpp's
    # /props build_info, SGLang's /get_server_info): recorded in run.json's fingerprint.
    version_path: str | None = "/version"
    # The POST endpoint that empties the engine's prefix cache (vLLM's /reset_prefix_cache,
    # SGLang's /flush_cache), which a scenario's [prefix_cache] state calls before the load;
    # None: the engine has none.
    reset_prefix_cache_path: str | None = None
