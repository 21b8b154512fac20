"""Prometheus metrics of the reference engine, under vLLM's names where the meaning matches.

So that one set of dashboards and one adapter mapping read both engines: vllm:num_requests_running,
vllm:num_requests_waiting, vllm:kv_cache_usage_perc (0..1), vllm:prompt_tokens_total,
vllm:generation_tokens_total, vllm:num_preemptions_total, vllm:request_success_total and the
TTFT, inter-token and end-to-end latency histograms (seconds). Labels as vLLM's: model_name, engine.
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)

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


class EngineMetrics:
    """All metric objects of one engine, in a registry of their own."""

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        labels = ["model_name", "engine"]
        values = (model_name, "0")
        r = self.registry

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=r).labels(*values)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=r).labels(*values)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, labels, buckets=buckets, registry=r).labels(*values)

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
        self._request_success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*labels, "finished_reason"],
            registry=r,
        )
        self._label_values = values
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
        self._preemptions_seen = 0

    def record_step(
        self,
        num_running: int,
        num_waiting: int,
        kv_cache_usage: float,
        num_prefill_tokens: int,
        num_generated_tokens: int,
        num_preemptions_total: int,
    ) -> None:
        """Update gauges and counters from one engine step (thread-safe, a few microseconds)."""
        self.num_requests_running.set(num_running)
        self.num_requests_waiting.set(num_waiting)
        self.kv_cache_usage.set(kv_cache_usage)
        if num_prefill_tokens:
            self.prompt_tokens.inc(num_prefill_tokens)
        if num_generated_tokens:
            self.generation_tokens.inc(num_generated_tokens)
        if num_preemptions_total > self._preemptions_seen:
            self.num_preemptions.inc(num_preemptions_total - self._preemptions_seen)
            self._preemptions_seen = num_preemptions_total

    def record_idle(self, kv_cache_usage: float) -> None:
        """No request left in the engine: nothing running or waiting."""
        self.num_requests_running.set(0)
        self.num_requests_waiting.set(0)
        self.kv_cache_usage.set(kv_cache_usage)

    def record_finished(self, finish_reason: str) -> None:
        self._request_success.labels(*self._label_values, finish_reason).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
