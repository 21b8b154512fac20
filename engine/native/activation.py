"""SwiGLU's activation in one C pass: engine/native/csrc/silu_and_mul.c (vLLM's silu_and_mul).

torch computes silu(gate) * up as two element-wise passes, each widening bfloat16 to float32
and back: in a 2,048-token prefill step of the tiny bf16 model the pair took 1.3 ms a layer on
two threads, a tenth of the layer. The kernel is one pass over the fused gate_up output.
"""

from __future__ import annotations

import torch

from engine.native.lib import SUFFIX, load


def covers(x: torch.Tensor) -> bool:
    """CPU float32 or bfloat16 rows [..., 2 * intermediate]."""
    return x.device.type == "cpu" and x.dtype in SUFFIX and x.shape[-1] % 2 == 0


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """silu(x[..., :d]) * x[..., d:] for x [..., 2d], in x's dtype, each op rounded to it as
    torch's silu and mul round (exp within a few ulp of torch's; see the C source)."""
    if not covers(x):
        raise ValueError(
            f"silu_and_mul covers CPU float32/bfloat16 rows of even width; got "
            f"{tuple(x.shape)} {x.dtype} on {x.device}"
        )
    x = x.contiguous()
    inter = x.shape[-1] // 2
    out = torch.empty((*x.shape[:-1], inter), dtype=x.dtype)
    fn = getattr(load(), f"silu_and_mul_{SUFFIX[x.dtype]}")
    fn(x.data_ptr(), out.data_ptr(), x.numel() // (2 * inter), inter, torch.get_num_threads())
    return out
