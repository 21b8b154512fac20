"""Prometheus metrics of the reference engine, under vLLM's names where the meaning matches.

So that one set of dashboards and one adapter mapping read both engines: vllm:num_requests_running,
vllm:num_requests_waiting, vllm:kv_cache_usage_perc (0..1), vllm:prompt_tokens_total,
vllm:generation_tokens_total, vllm:num_preemptions_total, vllm:request_success_total and the
TTFT, inter-token and end-to-end latency histograms (seconds). Labels as vLLM's: model_name, engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)

if TYPE_CHECKING:
    from engine.llm_engine import StepStats

# vLLM's bucket edges (seconds), so that histograms from both engines can be compared bucket by
# bucket.
TTFT_BUCKETS_S = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS_S = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
E2E_BUCKETS_S = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip


class _Families:
    """Makes metric families in one registry, labelled as vLLM's, and returns each one's child
    for this engine's label values."""

    def __init__(self, registry: CollectorRegistry, model_name: str) -> None:
        self.registry = registry
        self.labels = ["model_name", "engine"]
        self.values = (model_name, "0")

    def gauge(self, name: str, doc: str) -> Gauge:
        return Gauge(name, doc, self.labels, registry=self.registry).labels(*self.values)

    def counter(self, name: str, doc: str) -> Counter:
        return Counter(name, doc, self.labels, registry=self.registry).labels(*self.values)

    def histogram(self, name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
        family = Histogram(name, doc, self.labels, buckets=buckets, registry=self.registry)
        return family.labels(*self.values)

    def labelled_counter(self, name: str, doc: str, extra_label: str) -> Counter:
        """A family with one more label than vLLM's two, whose children the caller makes."""
        return Counter(name, doc, [*self.labels, extra_label], registry=self.registry)


class EngineMetrics:
    """All metric objects of one engine, in a registry of their own."""

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        families = _Families(self.registry, model_name)
        self._label_values = families.values
        # Registered in this order, the order /metrics lists them in.
        self._add_request_metrics(families)
        self._add_cache_and_spec_metrics(families)
        self._seen: dict[str, int] = {}

    def _add_request_metrics(self, f: _Families) -> None:
        gauge, counter, histogram = f.gauge, f.counter, f.histogram
        self.num_requests_running = gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches."
        )
        self.num_requests_waiting = gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed."
        )
        self.kv_cache_usage = gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."
        )
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        )
        self.num_preemptions = counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine."
        )
        self._request_success = f.labelled_counter(
            "vllm:request_success", "Count of successfully processed requests.", "finished_reason"
        )
        self.ttft_s = histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            TTFT_BUCKETS_S,
        )  # fmt: skip
        self.itl_s = histogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            ITL_BUCKETS_S,
        )  # fmt: skip
        self.e2e_s = histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            E2E_BUCKETS_S,
        )

    def _add_cache_and_spec_metrics(self, f: _Families) -> None:
        counter = f.counter
        self.prefix_cache_queries = counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
        )
        self.prefix_cache_hits = counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        )
        self.spec_decode_num_drafts = counter(
            "vllm:spec_decode_num_drafts", "Number of spec decoding drafts."
        )
        self.spec_decode_num_draft_tokens = counter(
            "vllm:spec_decode_num_draft_tokens", "Number of draft tokens."
        )
        self.spec_decode_num_accepted_tokens = counter(
            "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens."
        )
        self._accepted_per_pos = f.labelled_counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            "position",
        )

    def record_step(self, stats: StepStats) -> None:
        """Update gauges and counters from one engine step (thread-safe, a few microseconds)."""
        self.num_requests_running.set(stats.num_running)
        self.num_requests_waiting.set(stats.num_waiting)
        self.kv_cache_usage.set(stats.kv_cache_usage)
        if stats.num_prefill_tokens:
            self.prompt_tokens.inc(stats.num_prefill_tokens)
        if stats.num_generated_tokens:
            self.generation_tokens.inc(stats.num_generated_tokens)
        # Counters mirror the engine's cumulative ones: add what grew since the last step.
        seen = self._seen
        for name, value in (
            ("num_preemptions", stats.num_preemptions_total),
            ("prefix_cache_queries", stats.prefix_cache_queries_total),
            ("prefix_cache_hits", stats.prefix_cache_hits_total),
            ("spec_decode_num_drafts", stats.spec_num_drafts_total),
            ("spec_decode_num_draft_tokens", stats.spec_num_draft_tokens_total),
            ("spec_decode_num_accepted_tokens", stats.spec_num_accepted_tokens_total),
        ):
            if value > seen.get(name, 0):
                getattr(self, name).inc(value - seen.get(name, 0))
                seen[name] = value
        for position, value in enumerate(stats.spec_accepted_per_position_total):
            key = f"pos{position}"
            if value > seen.get(key, 0):
                self._accepted_per_pos.labels(*self._label_values, str(position)).inc(
                    value - seen.get(key, 0)
                )
                seen[key] = value

    def record_idle(self, kv_cache_usage: float) -> None:
        """No request left in the engine: nothing running or waiting."""
        self.num_requests_running.set(0)
        self.num_requests_waiting.set(0)
        self.kv_cache_usage.set(kv_cache_usage)

    def record_finished(self, finish_reason: str) -> None:
        self._request_success.labels(*self._label_values, finish_reason).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
