"""llama.cpp's llama-server served through the llamacpp adapter's launch, driven by `bench run`.

Needs the engine cache's llama-server (benchmarks/engines/install-llama-server.sh, about 7.5 min
to build, once per machine); skipped with that reason otherwise. The tiny Llama is converted to
GGUF with the converter that comes with it (benchmarks/engines/hf_to_gguf.py). Under a minute.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine_adapters.engine_cache import llama_convert_dir, llama_server_binary
from engine_adapters.launch_command import launch_plan, start_engine
from engine_adapters.registry import get_adapter
from tests.support.paths import REPO_ROOT
from tests.support.real_engines import (
    REAL_ENGINE_MARKS,
    check_refused_past_context,
    check_run,
    run_scenario,
    tiny_model,
)

BINARY = llama_server_binary()
CONVERT = llama_convert_dir()
ROOT = REPO_ROOT
pytestmark = [
    *REAL_ENGINE_MARKS,
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        BINARY is None or CONVERT is None,
        reason="llama-server is not built; run benchmarks/engines/install-llama-server.sh",
    ),
]


def test_llama_server_queue_and_token_counts(tmp_path: Path) -> None:
    adapter = get_adapter("llamacpp")
    model_dir = tiny_model(tmp_path / "model")
    gguf = tmp_path / "model.gguf"
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "engines" / "hf_to_gguf.py"), str(model_dir),
         str(gguf), "--convert-dir", str(CONVERT)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    # 8 slots of 512 tokens; 12 users, so some requests wait for a slot. HTTP threads above
    # the users: llama-server closes connections it has no HTTP thread for.
    plan = launch_plan(
        adapter, model=str(gguf), executable=str(BINARY),
        extra_args=["-c", "4096", "-np", "8", "-t", "2", "--threads-http", "32", "--no-warmup"],
    )  # fmt: skip
    with start_engine(adapter, plan) as engine:
        # -c 4096 over 8 slots: one request gets 512 tokens, which /props states.
        check_refused_past_context(
            tmp_path, adapter, engine.base_url, model_dir, 512,
            "/props default_generation_settings.n_ctx",
        )  # fmt: skip
        folder, summary, generated = run_scenario(
            tmp_path, adapter, engine.base_url, model_dir, users=12, requests=36
        )
    samples = check_run(folder, summary, generated, 36)
    assert samples.loc[samples["name"] == "num_requests_running", "value"].max() <= 8
    # Current llama-server builds export no KV-cache gauge (the adapter maps the older name).
    assert not (samples["name"] == "kv_cache_usage").any()
    assert (samples["name"] == "decode_seconds_total").any()
