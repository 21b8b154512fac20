"""The definitions shown on hover, worded as docs/metrics.md, "Metric definitions".

One place for the text, so that a headline tile, a CDF panel and a comparison table all say the
same thing about a figure. Keys are summary.json's keys where the figure comes from there.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFINITIONS", "MetricDefinition", "definition"]


@dataclass(frozen=True)
class MetricDefinition:
    """What a figure is called, its unit, and how it is computed (plain text, no markup)."""

    label: str
    unit: str
    text: str


DEFINITIONS: dict[str, MetricDefinition] = {
    "ttft_ms": MetricDefinition(
        "TTFT", "ms", "Time to first token: first content chunk − sent, per ok request."
    ),
    "itl_ms": MetricDefinition(
        "ITL",
        "ms",
        "Inter-token latency: the gaps between a request's content chunks; a chunk holding "
        "n > 1 tokens contributes its gap divided by n, n times.",
    ),
    "tpot_ms": MetricDefinition(
        "TPOT",
        "ms",
        "Time per output token: (done − first token) / (output tokens − 1), for requests "
        "with more than one token.",
    ),
    "e2el_ms": MetricDefinition(
        "E2EL", "ms", "End-to-end latency: done − sent (the whole request as the user sees it)."
    ),
    "e2el_from_scheduled_ms": MetricDefinition(
        "E2EL from scheduled", "ms", "done − scheduled: E2EL plus any queueing in the client."
    ),
    "queueing_delay_ms": MetricDefinition(
        "Queueing delay",
        "ms",
        "sent − scheduled: how late the client sent a request it meant to send.",
    ),
    "per_user_tps": MetricDefinition(
        "Per-user TPS",
        "tok/s",
        "1 / TPOT of each request: the speed one user sees; its distribution across requests "
        "is reported, not just a mean.",
    ),
    "time_to_first_answer_token_ms": MetricDefinition(
        "Time to first answer token",
        "ms",
        "First answer (content, not reasoning) chunk − sent, per ok request: TTFT plus the "
        "model's reasoning. TTFT stays the first token of any kind.",
    ),
    "answer_per_user_tps": MetricDefinition(
        "Answer per-user TPS",
        "tok/s",
        "The speed the answer streams at once it has begun: 1 / answer TPOT = (answer tokens "
        "− 1) / (done − first answer token), per request with more than one answer token.",
    ),
    "reasoning_share": MetricDefinition(
        "Reasoning share",
        "%",
        "Reasoning tokens / output tokens of the ok requests in the measured window; "
        "reasoning tokens from usage.completion_tokens_details.reasoning_tokens when the "
        "server sends it, else counted from the stream's reasoning chunks.",
    ),
    "tool_calls": MetricDefinition(
        "Requests with tool calls",
        "%",
        "Ok requests in the measured window whose answer made one or more tool calls "
        "(streamed delta.tool_calls, Responses function_call items, Anthropic tool_use "
        "blocks), over all of them; calls per calling request beside it.",
    ),
    "ttft_ms_calling": MetricDefinition(
        "TTFT of tool-calling requests",
        "ms",
        "TTFT (first generated token of any kind: a tool call's name or argument fragment "
        "counts) of the ok requests in the measured window that made a tool call.",
    ),
    "images": MetricDefinition(
        "Images sent",
        "images",
        "Images the ok requests of the measured window sent in their last user turn (a "
        "scenario's [images], a dataset's images column), and how many requests carried any.",
    ),
    "image_tokens_per_image": MetricDefinition(
        "Prompt tokens per image",
        "tokens",
        "The server's usage.prompt_tokens beyond the text's own tokens (the workload "
        "tokenizer's count), summed over the requests with images, per image sent; it holds "
        "the chat template's few tokens too, which the second figure takes off (the same "
        "excess of the requests without images).",
    ),
    "images.ttft_by_images": MetricDefinition(
        "TTFT by images per request",
        "ms",
        "TTFT of the ok requests in the measured window at each number of images they sent: "
        "what the images' prefill and the vision encoder add before the first token.",
    ),
    "sessions.ttft_by_turn": MetricDefinition(
        "TTFT by turn",
        "ms",
        "TTFT of the ok requests of each turn index of the sessions: turn k sends the whole "
        "history of turns 0..k-1, so its prefill grows unless the prefix cache holds it.",
    ),
    "sessions.cache_hit_rate": MetricDefinition(
        "Prefix cache hit rate by turn",
        "%",
        "Cached prompt tokens / prompt tokens of a turn index's ok requests, over those whose "
        "server reported usage.prompt_tokens_details.cached_tokens.",
    ),
    "sessions.duration_s": MetricDefinition(
        "Session duration",
        "s",
        "A session's first turn's scheduled time to its last turn's end: its answers and "
        "the delays between its turns (tool run times, user thinking).",
    ),
    "output_tok_s": MetricDefinition(
        "Output throughput",
        "tok/s",
        "Output tokens of ok requests in the measured window (warm-up and cool-down cut), "
        "divided by the window's duration.",
    ),
    "total_tok_s": MetricDefinition(
        "Total throughput",
        "tok/s",
        "Prompt plus output tokens of ok requests in the measured window, per second.",
    ),
    "requests_per_s": MetricDefinition(
        "Request throughput",
        "req/s",
        "Ok requests in the measured window, divided by the window's duration.",
    ),
    "goodput": MetricDefinition(
        "Goodput",
        "req/s",
        "Requests per second that meet every SLO given (TTFT, TPOT, E2EL).",
    ),
    "error_rate": MetricDefinition(
        "Error rate",
        "%",
        "Failed requests / all requests in the measured window. A failed request is counted, "
        "never dropped.",
    ),
    "output_tokens": MetricDefinition(
        "Output tokens",
        "tokens",
        "From the server's usage when it sends one, else from the tokenizer; the source is "
        "shown beside the count.",
    ),
    "mfu": MetricDefinition(
        "MFU",
        "%",
        "Model FLOPs utilization: achieved FLOP/s (analytic FLOPs / forward time, inside "
        "the executor) over the hardware's peak FLOP/s.",
    ),
    "mbu": MetricDefinition(
        "MBU",
        "%",
        "Model bandwidth utilization: achieved bytes/s (weights, KV read and write, "
        "activations / forward time) over the hardware's peak memory bandwidth.",
    ),
    "joules_per_output_token": MetricDefinition(
        "Energy per output token",
        "J/token",
        "The GPUs' energy counters' increase over the measured window, divided by the output "
        "tokens received in the same span (NVML).",
    ),
    "inputs_per_s": MetricDefinition(
        "Input throughput",
        "inputs/s",
        "A pooling run (embeddings, rerank): the texts embedded, or documents ranked, by ok "
        "requests in the measured window, per second.",
    ),
    "input_tok_s": MetricDefinition(
        "Input token throughput",
        "tok/s",
        "A pooling run: the input tokens of ok requests in the measured window (the server's "
        "usage, else the workload's count), per second.",
    ),
    "arithmetic_intensity": MetricDefinition(
        "Arithmetic intensity",
        "FLOP/byte",
        "FLOPs / bytes moved. Below the ridge point (peak FLOP/s / peak bytes/s) a step is "
        "memory-bound, above it compute-bound.",
    ),
}


def definition(key: str) -> MetricDefinition:
    """The definition of ``key``; a plain label for a key without one (never raises)."""
    found = DEFINITIONS.get(key)
    if found is not None:
        return found
    return MetricDefinition(key.replace("_", " "), "", "")
