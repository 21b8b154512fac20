"""The C silu_and_mul (engine/native/activation.py) against torch's silu(gate) * up."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from engine.native import lib as native_lib
from engine.native.activation import silu_and_mul
from tests.support.engine_fixtures import make_engine, ragged_workload

WHY = native_lib.available()
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"native kernels unavailable: {WHY}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 1408), (7, 64), (2048, 1408), (3, 5, 32)])
def test_matches_torch(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    """bf16: equal but for rare one-step ties (exp within a few ulp of torch's); fp32 within
    float rounding. Leading dimensions are kept."""
    x = (4 * torch.randn(shape, generator=torch.Generator().manual_seed(len(shape)))).to(dtype)
    gate, up = x.split(shape[-1] // 2, dim=-1)
    expected = F.silu(gate) * up
    ours = silu_and_mul(x)
    assert ours.shape == expected.shape and ours.dtype == dtype
    if dtype == torch.bfloat16:
        assert (ours == expected).float().mean() > 0.999
        two_steps = expected.float().abs() * 2**-6 + 1e-30  # silu a step off, then the product
        assert ((ours.float() - expected.float()).abs() <= two_steps).all()
    else:
        torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-6)


def test_non_contiguous_input_and_bad_width() -> None:
    x = torch.randn(8, 64).t()  # [64, 8], strided
    gate, up = x.split(4, dim=-1)
    torch.testing.assert_close(silu_and_mul(x), F.silu(gate) * up, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="even width"):
        silu_and_mul(torch.zeros(2, 7))


def test_engine_tokens_match_with_torch_activation() -> None:
    """Greedy tokens with the C activation in prefill and mixed steps equal torch's."""
    workload = ragged_workload(8, seed=5)
    prompts, params = [p for p, _ in workload], [s for _, s in workload]
    native = make_engine()
    assert native.executor.model.layers[0].mlp.native  # type: ignore[union-attr]
    torch_engine = make_engine()
    for layer in torch_engine.executor.model.layers:  # type: ignore[union-attr]
        layer.mlp.native = False
    assert native.generate(prompts, params) == torch_engine.generate(prompts, params)
