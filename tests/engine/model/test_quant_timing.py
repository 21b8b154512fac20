"""Packed quantized kernels are timed against the float matmul and refused where slower.

The timer is injected: it says how many milliseconds a layer takes on an input, so each test
decides the outcome ("slower everywhere", "slower above 16 rows", "never slower")."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import engine.model.quantization.quantize as quant
from engine.model.llama import LlamaForCausalLM
from engine.model.quantization.linear import (
    DEQUANT,
    INT8_PACK_MM,
    Int4Linear,
    Int8Linear,
    probe_kernel,
)
from engine.model.quantization.quantize import quantize_model
from engine.model.quantization.timing import TIMED_ROWS, limit_to_faster_sizes
from engine.model.weights import load_model
from perfmodel.presets import get_preset
from tests.support.cuda import gpu
from tests.support.engine_fixtures import make_engine

CPU = torch.device("cpu")


def slower_above(rows: int):  # type: ignore[no-untyped-def]
    """A timer under which the packed layer is slower than the float one above ``rows``."""

    def timer(layer: nn.Module, x: torch.Tensor) -> float:
        if isinstance(layer, nn.Linear):
            return 1.0
        return 2.0 if x.shape[0] > rows else 0.5

    return timer


def _model() -> LlamaForCausalLM:
    return load_model(get_preset("tiny"), None, torch.float32, CPU, seed=0)


def _quantized_layers(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if isinstance(m, Int8Linear | Int4Linear)]


@pytest.mark.parametrize("method", ["int8", "int4"])
def test_a_kernel_slower_at_every_size_is_refused_with_one_line(
    method: str, caplog: pytest.LogCaptureFixture
) -> None:
    if probe_kernel(method, CPU, torch.float32, 32).kernel == DEQUANT:
        pytest.skip(f"no packed {method} kernel on this CPU to refuse")
    model = _model()
    with caplog.at_level(logging.WARNING, logger="engine.model.quantization.quantize"):
        report = quantize_model(model, method, 32, timer=slower_above(0))
    assert report.kernel == DEQUANT and report.kernels == {DEQUANT: 16}
    assert report.refused is not None and "\n" not in report.refused
    assert "refused, slower than float32" in report.refused and "1 rows" in report.refused
    assert report.to_dict()["refused"] == report.refused
    assert any(report.refused in r.getMessage() for r in caplog.records)


def test_a_kernel_slower_above_a_size_keeps_it_below_and_dequantizes_above() -> None:
    if probe_kernel("int8", CPU, torch.float32, 32).kernel != INT8_PACK_MM:
        pytest.skip("no packed int8 kernel on this CPU")
    model = _model()
    report = quantize_model(model, "int8", timer=slower_above(16))
    assert report.kernel == INT8_PACK_MM and report.refused is not None
    assert "refused above 16 rows" in report.refused
    layer = _quantized_layers(model)[0]
    assert isinstance(layer, Int8Linear) and layer.max_packed_rows == 16
    gen = torch.Generator().manual_seed(3)
    for rows in (16, 17):
        x = torch.randn(rows, layer.in_features, generator=gen)
        if rows <= 16:
            x2 = x.to(layer.compute_dtype)
            expected = torch._weight_int8pack_mm(x2, layer.qweight, layer.scales).float()
        else:
            expected = F.linear(x, layer.qweight.float()) * layer.scales.float()
        torch.testing.assert_close(layer(x), expected, atol=0, rtol=0)


def test_an_int4_layer_refused_above_a_size_dequantizes_from_its_nibbles() -> None:
    if probe_kernel("int4", CPU, torch.float32, 32).kernel == DEQUANT:
        pytest.skip("no packed int4 kernel on this CPU")
    model = _model()
    quantize_model(model, "int4", 32, timer=slower_above(4))
    layer = _quantized_layers(model)[0]
    assert isinstance(layer, Int4Linear) and layer.max_packed_rows == 4
    assert layer.nibbles is not None
    x = torch.randn(9, layer.in_features, generator=torch.Generator().manual_seed(1))
    expected = F.linear(x, layer.dequantized_weight(torch.float32))
    torch.testing.assert_close(layer(x), expected, atol=0, rtol=0)
    small = layer(x[:4])  # the packed kernel: close to the dequantized matmul, not bit-equal
    torch.testing.assert_close(small, expected[:4], atol=2e-2, rtol=2e-2)


def test_a_kernel_never_slower_runs_at_every_size() -> None:
    choice = probe_kernel("int8", CPU, torch.float32, 32)
    if choice.kernel == DEQUANT:
        pytest.skip("no packed int8 kernel on this CPU")
    timed = limit_to_faster_sizes(choice, "int8", CPU, torch.float32, 32, slower_above(10**9))
    assert timed.kernel == choice.kernel and timed.max_packed_rows is None
    assert timed.refused is None and f"to {TIMED_ROWS['cpu'][-1]} rows" in timed.reason


def test_the_engine_describes_the_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    if probe_kernel("int8", CPU, torch.float32, 32).kernel == DEQUANT:
        pytest.skip("no packed int8 kernel on this CPU")

    def slow_everywhere(method, device, dtype, group):  # type: ignore[no-untyped-def]
        probed = probe_kernel(method, device, dtype, group)
        return limit_to_faster_sizes(probed, method, device, dtype, group, slower_above(0))

    monkeypatch.setattr(quant, "timed_kernel", slow_everywhere)
    described = make_engine(quantization="int8").describe()["quantization"]
    assert described["kernel"] == DEQUANT and "refused" in described["refused"]


@gpu
@pytest.mark.parametrize("method", ["int8", "int4"])
def test_cuda_kernels_are_timed_against_bf16_and_refused_where_slower(method: str) -> None:
    model = load_model(get_preset("tiny"), None, torch.bfloat16, torch.device("cuda"), seed=0)
    report = quantize_model(model, method, 32)
    # Either the kernel ran faster at every size timed, or the report says what was refused.
    assert report.refused is not None or "faster than bfloat16" in report.probe
    if report.refused is not None:
        assert "\n" not in report.refused and "bfloat16" in report.refused
