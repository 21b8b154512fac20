"""vLLM: OpenAI-compatible server with the vllm:* Prometheus metrics."""

from __future__ import annotations

from engine_adapters.base import EngineAdapter

# Newest name first: vLLM renamed gpu_cache_usage_perc to kv_cache_usage_perc in its v1 engine.
VLLM_METRICS: dict[str, tuple[str, ...]] = {
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "num_requests_running": ("vllm:num_requests_running",),
    "num_requests_waiting": ("vllm:num_requests_waiting",),
    "prompt_tokens_total": ("vllm:prompt_tokens_total",),
    "generation_tokens_total": ("vllm:generation_tokens_total",),
    "num_preemptions_total": ("vllm:num_preemptions_total",),
    "prefix_cache_queries_total": ("vllm:prefix_cache_queries_total",),
    "prefix_cache_hits_total": ("vllm:prefix_cache_hits_total",),
}

VLLM = EngineAdapter(name="vllm", metric_names=VLLM_METRICS)
