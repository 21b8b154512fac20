"""llama.cpp's llama-server: OpenAI-compatible, llamacpp:* metrics with ``--metrics``.

Checked against a real build (shared/fixtures/llama-server-metrics-under-load.txt). Current
builds export counters and the busy/deferred request gauges but no KV-cache gauge; builds before
mid-2025 exported ``llamacpp:kv_cache_usage_ratio`` and ``llamacpp:kv_cache_tokens``, kept here
for those. The usual launch serves a GGUF file with ``--metrics --slots`` on 127.0.0.1.

Concurrency: llama-server answers at most ``--threads-http`` connections at once and closes the
others; add ``--threads-http N`` (N above the users) and ``-np`` (parallel slots) to the launch.
It also closes the connection after each streamed answer (the client reconnects).
"""

from __future__ import annotations

from engine_adapters.base import EngineAdapter

LLAMACPP_METRICS: dict[str, tuple[str, ...]] = {
    "kv_cache_usage": ("llamacpp:kv_cache_usage_ratio",),
    "kv_cache_used_tokens": ("llamacpp:kv_cache_tokens",),
    "num_requests_running": ("llamacpp:requests_processing",),
    "num_requests_waiting": ("llamacpp:requests_deferred",),
    "prompt_tokens_total": ("llamacpp:prompt_tokens_total",),
    "generation_tokens_total": ("llamacpp:tokens_predicted_total",),
    "cached_tokens_total": ("llamacpp:prompt_tokens_cached_total",),
    # Seconds spent on prompts (prefill) and on generation (decode), cumulative.
    "prefill_seconds_total": ("llamacpp:prompt_seconds_total",),
    "decode_seconds_total": ("llamacpp:tokens_predicted_seconds_total",),
    "decode_calls_total": ("llamacpp:n_decode_total",),
    "busy_slots_per_decode": ("llamacpp:n_busy_slots_per_decode",),
    "spec_decode_num_drafts_total": ("llamacpp:spec_decode_num_drafts_total",),
    "spec_decode_num_draft_tokens_total": ("llamacpp:spec_decode_num_draft_tokens_total",),
    "spec_decode_num_accepted_tokens_total": ("llamacpp:spec_decode_num_accepted_tokens_total",),
}

LLAMACPP = EngineAdapter(
    name="llamacpp",
    metric_names=LLAMACPP_METRICS,
    description="llama.cpp llama-server (--metrics)",
    version_path="/props",
    executable="llama-server",
    launch_template=(
        "{exe}",
        "-m",
        "{model}",
        "--host",
        "{host}",
        "--port",
        "{port}",
        "--metrics",
        "--slots",
    ),
    launch_timeout_s=120.0,
    context_path="/props",
)
