"""Linear layers at one to four rows on the CPU: engine/native/csrc/small_batch_linear.c.

At one token per step a linear layer is a matrix-vector product bound by how fast its weights
stream from memory. torch's CPU GEMV (oneDNN / MKL) reached 6 to 7 GB/s on this machine once the
model's weights no longer fit the cache, which made the 17 linear layers of a tiny-model step
two thirds of the step's time; the kernel walks each thread's rows in order and prefetches
ahead. Larger batches are matrix-matrix products, where oneDNN's kernels are the right tool,
so they keep F.linear.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.native.lib import SUFFIX, load

MAX_ROWS = 4  # MAX_M in the C source


def covers(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether the kernel computes F.linear(x, weight) (no bias): CPU, float32 or bfloat16 for
    both, 1..MAX_ROWS rows of x, an input width that is a multiple of 16."""
    return (
        x.device.type == "cpu"
        and x.dim() == 2
        and 1 <= x.shape[0] <= MAX_ROWS
        and x.dtype == weight.dtype
        and x.dtype in SUFFIX
        and weight.shape[1] % 16 == 0
        and weight.is_contiguous()
    )


def small_batch_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x [m, k] @ weight [n, k]^T -> [m, n] in x's dtype (float32 accumulation)."""
    if not covers(x, weight):
        raise ValueError(
            f"small_batch_linear covers 1..{MAX_ROWS} CPU rows of float32/bfloat16 with k a "
            f"multiple of 16; got x {tuple(x.shape)} {x.dtype}, weight {tuple(weight.shape)} "
            f"{weight.dtype}"
        )
    x = x.contiguous()
    m, k = x.shape
    n = weight.shape[0]
    out = torch.empty((m, n), dtype=x.dtype)
    fn = getattr(load(), f"small_batch_linear_{SUFFIX[x.dtype]}")
    fn(x.data_ptr(), weight.data_ptr(), out.data_ptr(), m, n, k, torch.get_num_threads())
    return out


class SmallBatchLinear(nn.Linear):
    """nn.Linear (no bias) that runs small batches in the C kernel when ``native`` is set (by
    the engine, from its custom_ops setting) and the tensors are covered; F.linear otherwise."""

    native: bool = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.native and covers(x, self.weight):
            return small_batch_linear(x, self.weight)
        return F.linear(x, self.weight, self.bias)
