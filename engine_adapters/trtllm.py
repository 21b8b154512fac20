"""TensorRT-LLM's `trtllm-serve`: OpenAI-compatible, trtllm_* metrics at /prometheus/metrics.

Names from TensorRT-LLM's metrics collector (tensorrt_llm/metrics/collector.py) and its
Prometheus example (examples/serve/prometheus_metrics.py). TensorRT-LLM needs an NVIDIA GPU, so
the map is tested against a fixture built from those documented names
(tests/fixtures/trtllm-metrics.txt). Older names: early releases exported the metrics
unprefixed and Dynamo re-exported them as ``trtllm:<name>``; both are kept as fallbacks.
"""

from __future__ import annotations

from engine_adapters.base import EngineAdapter


def _names(metric: str) -> tuple[str, ...]:
    return (f"trtllm_{metric}", f"trtllm:{metric}")


TRTLLM_METRICS: dict[str, tuple[str, ...]] = {
    "kv_cache_usage": _names("kv_cache_utilization"),
    "prefix_cache_hit_rate": _names("kv_cache_hit_rate"),
    "num_requests_running": _names("num_requests_running"),
    "num_requests_waiting": _names("num_requests_waiting"),
    "prompt_tokens_total": _names("prompt_tokens_total"),
    "generation_tokens_total": _names("generation_tokens_total"),
    "request_success_total": _names("request_success_total"),
    "spec_decode_num_draft_tokens_total": _names("spec_decode_num_draft_tokens_total"),
    "spec_decode_num_accepted_tokens_total": _names("spec_decode_num_accepted_tokens_total"),
    "request_queue_time_seconds": _names("request_queue_time_seconds"),
    "request_prefill_time_seconds": _names("request_prefill_time_seconds"),
    "request_decode_time_seconds": _names("request_decode_time_seconds"),
    "time_to_first_token_seconds": _names("time_to_first_token_seconds"),
    "time_per_output_token_seconds": _names("time_per_output_token_seconds"),
    "e2e_request_latency_seconds": _names("e2e_request_latency_seconds"),
}

TRTLLM = EngineAdapter(
    name="trtllm",
    metric_names=TRTLLM_METRICS,
    metrics_path="/prometheus/metrics",
    description="TensorRT-LLM (trtllm-serve)",
    executable="trtllm-serve",
    launch_template=("{exe}", "serve", "{model}", "--host", "{host}", "--port", "{port}"),
    launch_timeout_s=1800.0,
)
