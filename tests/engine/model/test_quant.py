"""Weight-only int8 / int4 quantization (engine/model/quantization/quantize.py,
engine/model/quantization/linear.py).

Error metric: relative L2 error of the logits, ||quantized - float|| / ||float||, over every
position of one 64-token prefill of the random tiny model (seed 0), in fp32. Measured on this
CPU for weight seeds 0-4: int8 0.018-0.022, int4 (group 32) 0.19-0.23; the bounds below leave
~1.5-2x margin. int4's error is large because the random model amplifies weight error: int4
with 16 levels per group of 32 Gaussian weights has a relative weight error of 7.8% (int8:
0.7%), and the logits come out ~3x that after four layers; trained models fare better, so read
the bound as a regression guard, not a quality figure.
"""

from __future__ import annotations

import pytest
import torch

from engine.model.attention import AttentionMetadata
from engine.model.llama import LlamaForCausalLM
from engine.model.quantization.linear import (
    DEQUANT,
    Int4Linear,
    Int8Linear,
    KernelChoice,
    pack_nibbles,
    probe_kernel,
    unpack_nibbles,
)
from engine.model.quantization.quantize import QUANT_METHODS, quantize_model, weight_bytes
from engine.model.weights import load_model
from perfmodel.presets import get_preset

TINY = get_preset("tiny")
CPU = torch.device("cpu")
LOGIT_REL_ERROR_BOUND = {"int8": 0.04, "int4": 0.35}
PROMPT_TOKENS, BLOCK_SIZE = 64, 16


def tiny_model(dtype: torch.dtype = torch.float32) -> LlamaForCausalLM:
    return load_model(TINY, None, dtype, CPU, seed=0)


def prefill_logits(model: LlamaForCausalLM) -> torch.Tensor:
    """fp32 logits [PROMPT_TOKENS, vocab] of one seeded prompt, prefilled through the cache."""
    ids = torch.randint(
        2, TINY.vocab_size, (PROMPT_TOKENS,), generator=torch.Generator().manual_seed(0)
    )
    num_blocks = PROMPT_TOKENS // BLOCK_SIZE
    meta = AttentionMetadata.build(
        [PROMPT_TOKENS], [PROMPT_TOKENS], [list(range(num_blocks))], BLOCK_SIZE, 0
    )
    dtype = model.embed_tokens.weight.dtype
    shape = (2, num_blocks, BLOCK_SIZE, TINY.num_key_value_heads, TINY.head_dim)
    caches = [torch.zeros(shape, dtype=dtype) for _ in range(TINY.num_hidden_layers)]
    with torch.inference_mode():
        return model.compute_logits(model(ids, meta.token_positions(), caches, meta))


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return float((actual.float() - expected.float()).norm() / expected.float().norm())


@pytest.fixture(scope="module")
def float_logits() -> torch.Tensor:
    return prefill_logits(tiny_model())


def test_unquantized_weight_bytes_are_the_parameter_count_times_the_element_size() -> None:
    assert weight_bytes(tiny_model()) == TINY.num_params() * 4
    assert weight_bytes(tiny_model(torch.bfloat16)) == TINY.num_params() * 2
    report = quantize_model(tiny_model(), "none")
    assert report.weight_bytes_after == report.weight_bytes_before == TINY.num_params() * 4
    assert report.bytes_per_quantized_weight is None


@pytest.mark.parametrize(("method", "group"), [("int8", None), ("int4", 32), ("int4", 64)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_byte_accounting_is_exact(method: str, group: int | None, dtype: torch.dtype) -> None:
    model = tiny_model(dtype)
    report = quantize_model(model, method, group or 32)
    expected_quantized = expected_scales = expected_nibbles = 0
    layers = [m for m in model.modules() if isinstance(m, Int8Linear | Int4Linear)]
    assert len(layers) == 4 * TINY.num_hidden_layers
    for layer in layers:
        n, k = layer.out_features, layer.in_features
        scale_bytes = layer.scales_and_zeros if method == "int4" else layer.scales
        assert scale_bytes.dtype == layer.compute_dtype
        # The weight itself: exactly 1 byte (int8) or 0.5 byte (int4) per element.
        assert layer.qweight.numel() * layer.qweight.element_size() == n * k * (
            1 if method == "int8" else 0.5
        )
        per_scale = scale_bytes.element_size()
        expected_scales += n * per_scale if method == "int8" else (k // group) * n * 2 * per_scale
        expected_quantized += n * k
        # An int4 layer refused above some size keeps nibble pairs to dequantize there.
        if getattr(layer, "nibbles", None) is not None:
            expected_nibbles += n * k // 2
    weight_part = expected_quantized * (1 if method == "int8" else 0.5) + expected_nibbles
    assert report.quantized_weights == expected_quantized
    assert report.quantized_bytes_after == weight_part + expected_scales
    assert report.quantized_bytes_before == expected_quantized * dtype.itemsize
    assert report.weight_bytes_after == weight_bytes(model)
    assert report.weight_bytes_after == (
        report.weight_bytes_before - report.quantized_bytes_before + report.quantized_bytes_after
    )
    # Embeddings, LM head and norms stay in the model dtype.
    assert model.embed_tokens.weight.dtype == model.lm_head_weight.dtype == dtype
    assert report.to_dict()["bytes_per_quantized_weight"] == report.bytes_per_quantized_weight


@pytest.mark.parametrize("method", ["int8", "int4"])
def test_logits_stay_within_the_stated_error(method: str, float_logits: torch.Tensor) -> None:
    model = tiny_model()
    report = quantize_model(model, method, 32)
    error = relative_error(prefill_logits(model), float_logits)
    assert 0 < error < LOGIT_REL_ERROR_BOUND[method], report.to_dict()


def test_packed_kernels_and_fallback_give_the_same_model(float_logits: torch.Tensor) -> None:
    for method in ("int8", "int4"):
        packed, fallback = tiny_model(), tiny_model()
        packed_report = quantize_model(packed, method, 32)
        fallback_report = quantize_model(fallback, method, 32, force_dequant=True)
        assert fallback_report.kernels == {DEQUANT: 16}
        assert sum(packed_report.kernels.values()) == 16
        packed_logits = prefill_logits(packed)
        # Same integers and scales; the packed path may cast activations to bf16 (~1e-2).
        assert relative_error(packed_logits, prefill_logits(fallback)) < 0.02, packed_report


@pytest.mark.parametrize("compute", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("method", ["int8", "int4"])
def test_each_kernel_matches_the_dequantized_matmul(method: str, compute: torch.dtype) -> None:
    kernel = probe_kernel(method, CPU, compute, 32).kernel
    if kernel == DEQUANT:
        pytest.skip(f"no packed {method} kernel in {compute} here")
    gen = torch.Generator().manual_seed(1)
    weight, x = torch.randn(96, 320, generator=gen), torch.randn(5, 320, generator=gen)
    choices = [KernelChoice(name, compute, "test") for name in (kernel, DEQUANT)]
    if method == "int8":
        layers = [Int8Linear(weight, c) for c in choices]
    else:
        layers = [Int4Linear(weight, 32, c) for c in choices]
    fast, slow = (layer(x.to(compute)) for layer in layers)
    assert layers[0].kernel == kernel
    assert relative_error(fast, slow) < (1e-5 if compute == torch.float32 else 1e-2)


def test_dequantized_weights_have_the_expected_rounding_error() -> None:
    """Uniform rounding: error std = step / sqrt(12), so for Gaussian rows int8 is ~0.7% and
    int4 in groups of 32 ~8% of the weight's norm; the zero point keeps every group's range."""
    weight = torch.randn(64, 256, generator=torch.Generator().manual_seed(2))
    fp32 = KernelChoice(DEQUANT, torch.float32, "test")
    int8 = Int8Linear(weight, fp32)
    assert relative_error(int8.qweight.float() * int8.scales[:, None], weight) < 0.01
    int4 = Int4Linear(weight, 32, fp32)
    assert relative_error(int4.dequantized_weight(torch.float32), weight) < 0.09
    q = torch.randint(0, 16, (8, 64), dtype=torch.int32)
    assert torch.equal(unpack_nibbles(pack_nibbles(q)).int(), q)


def test_probe_reports_its_choice_and_falls_back_for_a_group_size_the_kernel_refuses() -> None:
    choice = probe_kernel("int4", CPU, torch.float32, 32)
    assert choice.reason
    model = tiny_model()
    report = quantize_model(model, "int4", 16)  # divides every width; kernels take 32+
    assert report.kernels == {DEQUANT: 16}
    assert "unusable" in report.probe
    assert torch.isfinite(prefill_logits(model)).all()


def test_bad_settings_are_rejected_with_the_fix() -> None:
    with pytest.raises(ValueError, match="quantization must be one of none, int8, int4"):
        quantize_model(tiny_model(), "int3")
    with pytest.raises(ValueError, match=r"group size 128 does not divide .*down_proj.* 704"):
        quantize_model(tiny_model(), "int4", 128)
    model = tiny_model()
    quantize_model(model, "int8")
    with pytest.raises(ValueError, match="already quantized"):
        quantize_model(model, "int4")
    assert set(QUANT_METHODS) == {"none", "int8", "int4"}
