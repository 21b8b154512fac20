"""The unpacked form every checkpoint format is read into, and the bit unpacking they share.

`IntWeight` holds one linear layer as integer codes with per-group scales and zero points:

    w[n, k] = (q[n, k] - zeros[n, g(k)]) * scales[n, g(k)]

with q and zeros unsigned codes in 0 .. 2**bits - 1 and g(k) = k // group_size, or g_idx[k]
when the checkpoint was quantized in activation order (GPTQ's desc_act). Each format differs
only in how it packs these three tensors, so each reader unpacks into this one form and
engine/model/checkpoints/layers.py turns it into an engine layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SUPPORTED_BITS = (4, 8)  # the engine's int4 and int8 paths; both divide a 32-bit word


@dataclass(frozen=True)
class IntWeight:
    """One linear layer's weight as stored (unpacked). Shapes: q int32 [N, K]; scales fp32
    [N, G]; zeros int32 [N, G] (unsigned codes: 2**(bits - 1) for a symmetric scheme);
    g_idx int64 [K] or None (group of input column k; None means k // group_size).
    group_size is K for a channel-wise scheme (one group per output row)."""

    bits: int
    q: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor
    group_size: int
    g_idx: torch.Tensor | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.q.shape[0]), int(self.q.shape[1]))

    def dequantize(self) -> torch.Tensor:
        """The float32 weight [N, K] the codes stand for (the formula above)."""
        groups = self.group_index()
        zeros, scales = self.zeros[:, groups], self.scales[:, groups]
        return (self.q - zeros).float() * scales

    def group_index(self) -> torch.Tensor:
        """g(k) for every input column k: int64 [K]."""
        if self.g_idx is not None:
            return self.g_idx
        return torch.arange(self.shape[1]) // self.group_size


def unpack_int32(packed: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """Split each int32 word of `packed` into 32 / bits unsigned codes along `dim`, the lowest
    bits first (the order GPTQ's qweight/qzeros and compressed-tensors' pack-quantized use).
    Returns int32 with `dim` grown 32 / bits times."""
    shifts = torch.arange(0, 32, bits, dtype=torch.int32)
    moved = packed.to(torch.int32).movedim(dim, -1)
    codes = (moved.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)  # [..., words, per_word]
    return codes.flatten(-2).movedim(-1, dim).contiguous()


def fuse_rows(parts: list[IntWeight], names: list[str]) -> IntWeight:
    """Stack the row blocks of layers the engine fuses (q/k/v, gate/up), which share their
    input: they must agree on bits, group size and input column groups."""
    first = parts[0]
    for part, name in zip(parts[1:], names[1:], strict=True):
        if part.bits != first.bits or part.group_size != first.group_size:
            raise ValueError(
                f"{name} is stored with {part.bits} bits and groups of {part.group_size}, "
                f"{names[0]} with {first.bits} and {first.group_size}; the engine fuses them "
                "into one layer, so quantize them with one scheme"
            )
        if not torch.equal(part.group_index(), first.group_index()):
            raise ValueError(
                f"{name}'s g_idx differs from {names[0]}'s; the engine fuses them into one "
                "layer, which needs one activation order (quantize with the same g_idx)"
            )
    return IntWeight(
        bits=first.bits,
        q=torch.cat([p.q for p in parts]),
        scales=torch.cat([p.scales for p in parts]),
        zeros=torch.cat([p.zeros for p in parts]),
        group_size=first.group_size,
        g_idx=first.g_idx,
    )


def contiguous_order(weight: IntWeight) -> tuple[IntWeight, torch.Tensor | None]:
    """The same weight with its input columns reordered so that each group's columns are
    contiguous (group g = columns g * group_size ..), and the column order used (None when
    they already were). A layer then computes x[:, order] @ w[:, order].T, which equals
    x @ w.T exactly: a permutation of the reduction index."""
    groups = weight.group_index()
    k, size = weight.shape[1], weight.group_size
    if weight.g_idx is None or torch.equal(groups, torch.arange(k) // size):
        return IntWeight(weight.bits, weight.q, weight.scales, weight.zeros, size), None
    order = torch.argsort(groups, stable=True)
    if not torch.equal(groups[order], torch.arange(k) // size):
        raise ValueError(
            f"g_idx puts unequal numbers of columns in its groups (group_size {size}); "
            "this loader takes act-order checkpoints whose groups each hold group_size columns"
        )
    q = weight.q[:, order].contiguous()
    return IntWeight(weight.bits, q, weight.scales, weight.zeros, size), order
