"""SGLang: OpenAI-compatible server (`python -m sglang.launch_server`), sglang:* metrics.

Metrics need ``--enable-metrics``. Names from SGLang's production-metrics reference
(docs/references/production_metrics.md) and its metrics collector; SGLang cannot run on this
CPU-only machine (its wheel is CUDA-only), so the map is tested against a fixture built from
those documented names (tests/fixtures/sglang-metrics.txt).
"""

from __future__ import annotations

from engine_adapters.base import EngineAdapter

SGLANG_METRICS: dict[str, tuple[str, ...]] = {
    # Fraction of the KV token pool in use (0..1).
    "kv_cache_usage": ("sglang:token_usage",),
    "kv_cache_used_tokens": ("sglang:num_used_tokens",),
    "num_requests_running": ("sglang:num_running_reqs",),
    "num_requests_waiting": ("sglang:num_queue_reqs",),
    "prompt_tokens_total": ("sglang:prompt_tokens_total",),
    "generation_tokens_total": ("sglang:generation_tokens_total",),
    "cached_tokens_total": ("sglang:cached_tokens_total",),
    # Radix-cache hit rate over recent prefills (0..1).
    "prefix_cache_hit_rate": ("sglang:cache_hit_rate",),
    # Mean accepted tokens per speculative step (>= 1).
    "spec_accept_length": ("sglang:spec_accept_length",),
    "gen_throughput_tok_s": ("sglang:gen_throughput",),
    "time_to_first_token_seconds": ("sglang:time_to_first_token_seconds",),
    "time_per_output_token_seconds": ("sglang:time_per_output_token_seconds",),
    "e2e_request_latency_seconds": ("sglang:e2e_request_latency_seconds",),
}

SGLANG = EngineAdapter(
    name="sglang",
    metric_names=SGLANG_METRICS,
    description="SGLang (python -m sglang.launch_server --enable-metrics)",
    version_path="/get_server_info",
    reset_prefix_cache_path="/flush_cache",
    executable="python3",
    launch_template=(
        "{exe}",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "{model}",
        "--host",
        "{host}",
        "--port",
        "{port}",
        "--enable-metrics",
    ),
    launch_timeout_s=900.0,
)
