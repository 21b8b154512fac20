"""The scheduler decides the same under the torch executor and the simulated one: same batches,
same chunks, same preemptions, for the same sequence of arrivals (greedy, ignore_eos, so that
only the scheduler and the KV cache decide how long each request runs)."""

from __future__ import annotations

import pytest

from engine.model.model_runner import kv_bytes_per_block
from tests.support.engine_fixtures import make_engine, ragged_workload
from tests.support.sim_fixtures import Arrivals, sim_engine, step_log

SHARED = list(range(200, 232))  # two full blocks shared by half of the requests


def arrivals() -> Arrivals:
    """20 requests, two arriving every other step; every second one starts with SHARED."""
    work = ragged_workload(20, seed=5)
    out: Arrivals = {}
    for i, (prompt, params) in enumerate(work):
        prompt = SHARED + prompt if i % 2 else prompt
        out.setdefault(i // 2 * 2, []).append((f"r{i}", prompt, params))
    return out


@pytest.mark.parametrize(
    "settings",
    [
        # 36 blocks of 16 tokens for requests of up to 146 tokens: preemption is certain.
        {"kv_blocks": 36, "max_num_batched_tokens": 96},
        {"kv_blocks": 36, "max_num_batched_tokens": 64, "batching": "static", "max_num_seqs": 6},
        {"kv_blocks": 80, "kv_layout": "contiguous", "max_model_len": 160},
    ],
)
@pytest.mark.usefixtures("fake_calibration")
def test_same_decisions_under_both_executors(settings: dict) -> None:
    settings = dict(settings)
    blocks = settings.pop("kv_blocks")
    torch_engine = make_engine(**settings)
    per_block = kv_bytes_per_block(torch_engine.model_config, 16, torch_engine.dtype)
    torch_engine = make_engine(kv_cache_memory_bytes=blocks * per_block, **settings)
    simulated = sim_engine(kv_cache_memory_bytes=blocks * per_block, **settings)
    assert simulated.block_pool.num_blocks == torch_engine.block_pool.num_blocks == blocks

    real_log = step_log(torch_engine, arrivals())
    sim_log = step_log(simulated, arrivals())
    assert sim_log == real_log
    if settings.get("batching") != "static" and settings.get("kv_layout") != "contiguous":
        assert any(preempted for _, preempted in real_log), "the budget should force preemption"
    assert simulated.stats()["num_preemptions"] == torch_engine.stats()["num_preemptions"]
    assert simulated.stats()["prefix_cache_hits"] == torch_engine.stats()["prefix_cache_hits"]
