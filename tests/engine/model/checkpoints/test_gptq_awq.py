"""GPTQ and AWQ checkpoints packed by the test from known codes: the readers unpack them exactly,
and the engine built from them computes what the float model of the same weights computes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from bench.experiments.quant_eval import float32_model, logit_error, prompt_logits
from engine.model.checkpoints.layers import ActOrderLinear, GroupedInt8Linear
from engine.model.checkpoints.load import load_quantized_model
from engine.model.checkpoints.scheme import CheckpointError
from engine.model.quantization.linear import Int4Linear
from engine.model.weights import load_hf_directory
from tests.support.quant_checkpoints import (
    read_dequantized,
    set_quantization_field,
    write_float_twin,
    write_packed_checkpoint,
)

CPU = torch.device("cpu")
PROMPT = torch.randint(2, 500, (40,), generator=torch.Generator().manual_seed(3)).tolist()

CASES = {
    "gptq-4bit-g32": dict(fmt="gptq", bits=4, group_size=32),
    "gptq-4bit-g32-act-order": dict(fmt="gptq", bits=4, group_size=32, desc_act=True),
    "gptq-4bit-g32-sym-act-order": dict(fmt="gptq", bits=4, group_size=32, desc_act=True, sym=True),
    "gptq-4bit-channel-v2": dict(fmt="gptq", bits=4, group_size=-1, checkpoint_format="gptq_v2"),
    "gptq-8bit-g32-act-order": dict(fmt="gptq", bits=8, group_size=32, desc_act=True),
    "awq-4bit-g32": dict(fmt="awq", bits=4, group_size=32),
}


@pytest.mark.parametrize("case", list(CASES))
def test_reader_unpacks_the_known_codes_exactly(tmp_path: Path, case: str) -> None:
    checkpoint = write_packed_checkpoint(tmp_path / case, **CASES[case])
    read = read_dequantized(checkpoint.path, list(checkpoint.expected))
    assert set(read) == set(checkpoint.expected)
    for module, weight in checkpoint.expected.items():
        assert torch.equal(read[module], weight), module


@pytest.mark.parametrize("case", list(CASES))
def test_engine_matches_the_float_model_of_the_same_weights(tmp_path: Path, case: str) -> None:
    checkpoint = write_packed_checkpoint(tmp_path / case, **CASES[case])
    twin = write_float_twin(checkpoint, tmp_path / "float")
    quantized = float32_model(checkpoint.path)
    error = logit_error([prompt_logits(float32_model(twin), PROMPT)],
                        [prompt_logits(quantized, PROMPT)])  # fmt: skip
    # The packed int4 kernel may run in bf16 (engine/model/quantization/linear.py): a few 1e-3 of
    # logit KL at most; a wrong unpacking order or zero point gives O(1).
    assert error.mean_kl < 1e-3, error
    layer = quantized.layers[0].self_attn.qkv_proj
    if CASES[case].get("desc_act"):
        assert isinstance(layer, ActOrderLinear)
        layer = layer.inner
    expected_type = GroupedInt8Linear if CASES[case]["bits"] == 8 else Int4Linear
    assert isinstance(layer, expected_type)


def test_report_names_the_checkpoint_scheme(tmp_path: Path) -> None:
    checkpoint = write_packed_checkpoint(tmp_path / "g", "gptq", bits=4, desc_act=True)
    config, directory = load_hf_directory(checkpoint.path)
    _, report = load_quantized_model(config, directory, torch.float32, CPU, 0, "none", 32)
    assert report.method == "int4" and report.group_size == 32
    assert report.checkpoint == "gptq (gptq) 4-bit group 32 asymmetric, act-order"
    assert sum(report.kernels.values()) == 2 * 4  # 2 layers x qkv, o, gate_up, down
    # Packed 4-bit codes (half a byte a weight), plus the nibble pairs an int4 layer keeps where
    # timing at start found its kernel slower (engine/model/quantization/timing.py), plus scales:
    # well under half of fp32's 4 bytes whatever the timing found.
    assert report.quantized_bytes_after < report.quantized_bytes_before / 2


@pytest.mark.parametrize(
    ("fmt", "key", "value", "named"),
    [
        ("gptq", "bits", 3, "quantization_config.bits = 3"),
        ("gptq", "checkpoint_format", "marlin", "quantization_config.checkpoint_format"),
        ("awq", "version", "gemv", "quantization_config.version = 'gemv'"),
        ("awq", "quant_method", "bitsandbytes", "quantization_config.quant_method"),
    ],
)
def test_unsupported_variants_are_refused_naming_the_field(
    tmp_path: Path, fmt: str, key: str, value: object, named: str
) -> None:
    checkpoint = write_packed_checkpoint(tmp_path / "q", fmt, bits=4)
    set_quantization_field(checkpoint.path, key, value)
    config, directory = load_hf_directory(checkpoint.path)
    with pytest.raises(CheckpointError, match=named.replace(".", r"\.")) as caught:
        load_quantized_model(config, directory, torch.float32, CPU, 0, "none", 32)
    assert "\n" not in str(caught.value)


def test_quantizing_a_quantized_checkpoint_again_is_refused(tmp_path: Path) -> None:
    checkpoint = write_packed_checkpoint(tmp_path / "q", "awq")
    config, directory = load_hf_directory(checkpoint.path)
    with pytest.raises(CheckpointError, match=r"already quantized .*leave quantization at none"):
        load_quantized_model(config, directory, torch.float32, CPU, 0, "int4", 32)


def test_a_quantized_lm_head_is_refused(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    checkpoint = write_packed_checkpoint(tmp_path / "q", "gptq")
    weights = checkpoint.path / "model.safetensors"
    tensors = load_file(weights)
    tensors["lm_head.qweight"] = torch.zeros(8, 512, dtype=torch.int32)
    save_file(tensors, weights, metadata={"format": "pt"})
    config, directory = load_hf_directory(checkpoint.path)
    with pytest.raises(CheckpointError, match="lm_head is stored quantized"):
        load_quantized_model(config, directory, torch.float32, CPU, 0, "none", 32)
