"""Hugging Face Text Generation Inference: Messages API (/v1/chat/completions), tgi_* metrics.

Names from TGI's metrics reference (docs/source/reference/metrics.md). TGI cannot run here (a
CUDA/Rust server shipped as a container), so the map is tested against a fixture built from the
documented names (tests/fixtures/tgi-metrics.txt). TGI exports no KV-cache usage gauge; the
closest is the token budget of the running batch (tgi_batch_current_max_tokens), kept under its
own name. Its token counts are per-request histograms (their _sum is the total).
"""

from __future__ import annotations

from engine_adapters.base import EngineAdapter

TGI_METRICS: dict[str, tuple[str, ...]] = {
    "num_requests_running": ("tgi_batch_current_size",),
    "num_requests_waiting": ("tgi_queue_size",),
    "batch_max_tokens": ("tgi_batch_current_max_tokens",),
    "requests_total": ("tgi_request_count",),
    "request_generated_tokens": ("tgi_request_generated_tokens",),
    "request_input_length": ("tgi_request_input_length",),
    "request_queue_duration_seconds": ("tgi_request_queue_duration",),
    "request_inference_duration_seconds": ("tgi_request_inference_duration",),
    "request_mean_time_per_token_seconds": ("tgi_request_mean_time_per_token_duration",),
    "request_duration_seconds": ("tgi_request_duration",),
    # Per-method (prefill/decode) histograms: the `method` label tells them apart.
    "batch_forward_duration_seconds": ("tgi_batch_forward_duration",),
}

TGI = EngineAdapter(
    name="tgi",
    default_api="chat",
    metric_names=TGI_METRICS,
    # Its OpenAI-compatible routes know no ignore_eos.
    accepts_ignore_eos=False,
    description="Text Generation Inference (text-generation-launcher)",
    version_path="/info",
    executable="text-generation-launcher",
    launch_template=(
        "{exe}",
        "--model-id",
        "{model}",
        "--hostname",
        "{host}",
        "--port",
        "{port}",
    ),
    launch_timeout_s=900.0,
    context_path="/info",
)
