"""One KV budget: the torch engine's sizing, the simulated device and `bench capacity` agree on
the block count for the same memory, and the hardware table's sizes are NVML's bytes."""

from __future__ import annotations

import json
import sys

import pytest
import torch
import typer
from typer.testing import CliRunner

from bench.cli.analytic import register
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.model.model_runner import kv_bytes_per_block, num_kv_blocks_for
from perfmodel.capacity import kv_cache_budget_bytes, num_kv_blocks
from perfmodel.hardware import MIB, get_gpu
from perfmodel.models import resolve_model
from tests.support.fake_nvml import FakeGpu, FakeNvml

BLOCK = 16


def test_the_budget_is_the_share_of_the_total_less_what_is_in_use() -> None:
    # 100 B total, 40 B in use after the weights: 90 - 40 = 50 B for the KV cache.
    assert kv_cache_budget_bytes(100, 60, 0.9) == pytest.approx(50)
    # Another process holding memory shrinks the budget; nothing left is 0, not negative.
    assert kv_cache_budget_bytes(100, 50, 0.9) == pytest.approx(40)
    assert kv_cache_budget_bytes(100, 5, 0.9) == 0
    assert num_kv_blocks(50, 16) == 3 and num_kv_blocks(0, 16) == 0
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        kv_cache_budget_bytes(100, 60, 0.0)
    with pytest.raises(ValueError, match="free memory"):
        kv_cache_budget_bytes(100, 160, 0.9)


@pytest.fixture(autouse=True)
def no_gpu_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """`bench capacity` reads NVML's total of a GPU of the part on this host: here none is."""
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([]).module())


def _capacity_json(model: str, gpu: str, share: float) -> dict:
    app = typer.Typer()
    register(app)
    args = ["capacity", "--model", model, "--gpu", gpu, "--kv-dtype", "bf16", "--dtype", "bf16"]
    args += ["--gpu-memory-utilization", str(share), "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _sim_blocks(model: str, gpu: str, share: float) -> int:
    flat = {"model": model, "device": "sim", "gpu": gpu, "dtype": "bfloat16",
            "sim_speedup": 0.0, "block_size": BLOCK, "gpu_memory_utilization": share}  # fmt: skip
    return LLMEngine(EngineConfig.from_flat(flat)).block_pool.num_blocks


@pytest.mark.parametrize(("model", "gpu"), [("llama-3-8b", "h100-sxm"), ("llama-3-8b", "h200")])
def test_engine_simulator_and_capacity_agree_on_the_block_count(
    model: str, gpu: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    capacity = _capacity_json(model, gpu, 0.9)
    total = get_gpu(gpu).memory_bytes
    free = total - capacity["weights_bytes_per_gpu"]
    # The torch engine on CUDA reads (free, total) from torch once its weights are loaded: here
    # the same memory as the other two are given.
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (int(free), int(total)))
    config = resolve_model(model)
    engine = num_kv_blocks_for(config, BLOCK, torch.bfloat16, torch.device("cuda", 0), None)
    per_block = kv_bytes_per_block(config, BLOCK, torch.bfloat16)
    assert per_block == capacity["kv_bytes_per_token_per_gpu"] * BLOCK
    sim = _sim_blocks(model, gpu, 0.9)
    assert engine == sim == capacity["max_tokens"] // BLOCK
    assert engine > 0


def test_simulator_and_capacity_agree_at_another_share() -> None:
    capacity = _capacity_json("llama-3-8b", "a100-80gb", 0.6)
    assert _sim_blocks("llama-3-8b", "a100-80gb", 0.6) == capacity["max_tokens"] // BLOCK
    assert capacity["max_tokens"] < _capacity_json("llama-3-8b", "a100-80gb", 0.9)["max_tokens"]


def test_bench_capacity_takes_nvmls_total_of_the_gpu_here(monkeypatch: pytest.MonkeyPatch) -> None:
    table = _capacity_json("llama-3-8b", "h100-sxm", 0.9)
    assert table["gpu_memory_bytes"] == get_gpu("h100-sxm").memory_bytes
    # This host's H100 reports less (a driver reserving more, say): its figure is the one used.
    here = FakeGpu(uuid="GPU-a", memory_total=80_000 * MIB)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([here]).module())
    measured = _capacity_json("llama-3-8b", "h100-sxm", 0.9)
    assert measured["gpu_memory_bytes"] == 80_000 * MIB
    assert measured["gpu_memory_source"] == "nvml"
    assert measured["max_tokens"] < table["max_tokens"]


def test_sizes_are_nvmls_bytes_not_datasheet_gigabytes() -> None:
    # nvidia-smi's totals: an H100 80GB shows 81,559 MiB, an H200 143,771 MiB, an A100 80GB
    # 81,920 MiB (80 GiB).
    assert get_gpu("h100-sxm").memory_bytes == 81559 * MIB == pytest.approx(85.52e9, rel=1e-4)
    assert get_gpu("h200").memory_bytes == pytest.approx(150.75e9, rel=1e-4)
    assert get_gpu("a100-80gb").memory_bytes == 80 * 2**30
    assert get_gpu("h100-sxm").memory_source == "nvml"
    assert get_gpu("gh200").memory_source == "datasheet"


@pytest.mark.parametrize("key", ["h100-nvl", "h200-nvl", "gh200"])
def test_the_added_parts_have_every_peak(key: str) -> None:
    spec = get_gpu(key)
    for dtype in ("fp32", "tf32", "bf16", "fp16", "fp8", "int8"):
        assert spec.peak_for(dtype) > 0
    # TF32 is half of BF16 on Hopper's tensor cores, FP8 twice.
    assert spec.peak_for("tf32") == pytest.approx(spec.peak_for("bf16") / 2, rel=0.01)
    assert spec.peak_for("fp8") == pytest.approx(spec.peak_for("bf16") * 2, rel=0.01)
