"""compressed-tensors checkpoints as llm-compressor writes them: the `pack-quantized` format.

Per quantized linear module `m` (compressed-tensors' PackedQuantizationCompressor):
  * m.weight_packed  int32 [N, K * bits / 32]: signed codes + 2**(bits - 1), `bits` per code,
    lowest bits first along each row;
  * m.weight_shape   int [2]: (N, K);
  * m.weight_scale   float [N, G] (G = 1 channel-wise, K / group_size grouped);
  * m.weight_zero_point int32 [N * bits / 32, G] (asymmetric only): signed zero points +
    2**(bits - 1), packed the same way along the output dim;
  * m.weight_g_idx   int [K] (optional; older llm-compressor's actorder="group").
Dequantized: w = (q - zero_point) * scale, which is `IntWeight`'s formula on the unsigned codes.
Weight-only integer schemes (W4A16, W8A16; llm-compressor's RTN, GPTQ and AWQ all write them)
load; activation quantization, float formats, sparsity and transforms are refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from engine.model.checkpoints.int_weight import IntWeight, unpack_int32
from engine.model.checkpoints.scheme import Field, GetTensor, check_shape, group_size_of

PACKED = "pack-quantized"
STRATEGIES = ("channel", "group")


@dataclass(frozen=True)
class WeightScheme:
    """One config group's weight arguments, checked."""

    targets: tuple[str, ...]
    bits: int
    symmetric: bool
    group_size: int | None  # None: channel-wise

    def describe(self) -> str:
        groups = "channel-wise" if self.group_size is None else f"group {self.group_size}"
        zeros = "symmetric" if self.symmetric else "asymmetric"
        return f"W{self.bits}A16 {groups} {zeros}"


class CompressedTensorsReader:
    format = "compressed-tensors"

    def __init__(self, root: Field) -> None:
        top_format = root.get("format", str)
        for key in ("sparsity_config", "transform_config"):
            if root.get(key, dict):
                root.refuse(key, "(set)", "dense, untransformed checkpoints load")
        groups = root.sub("config_groups")
        if not groups.table:
            root.refuse("config_groups", {}, "at least one weight-quantization group")
        self.schemes = [self._scheme(groups.sub(name), top_format) for name in groups.table]
        self.ignore = tuple(root.get("ignore", list, []))

    @staticmethod
    def _scheme(group: Field, top_format: str | None) -> WeightScheme:
        fmt = group.get("format", str) or top_format
        if fmt != PACKED:
            group.refuse("format", fmt, f"this engine reads {PACKED} (weight-only int)")
        for key in ("input_activations", "output_activations"):
            if group.get(key, dict):
                group.refuse(key, "(set)", "weight-only schemes (W4A16, W8A16) load")
        weights = group.sub("weights")
        if weights.get("type", str) != "int":
            weights.refuse("type", weights.table.get("type"), "integer weights load")
        strategy = weights.get("strategy", str)
        if strategy not in STRATEGIES:
            weights.refuse("strategy", strategy, f"one of {', '.join(STRATEGIES)}")
        size = weights.get("group_size", int) if strategy == "group" else None
        if strategy == "group" and size is None:
            weights.refuse("group_size", None, "strategy 'group' needs a group_size")
        return WeightScheme(
            targets=tuple(group.get("targets", list, [])),
            bits=weights.bits("num_bits", weights.get("num_bits", int)),
            symmetric=bool(weights.get("symmetric", bool, True)),
            group_size=size,
        )

    def marker(self, module: str) -> str:
        return f"{module}.weight_packed"

    def describe(self) -> str:
        return f"{self.format} {PACKED} " + ", ".join(s.describe() for s in self.schemes)

    def scheme_for(self, module: str) -> WeightScheme:
        """The config group whose targets match `module` (by name, 're:' pattern, or the
        class name Linear, in that order of precedence, as compressed-tensors matches)."""
        for rank in range(3):
            for scheme in self.schemes:
                if any(_rank(t, module) == rank for t in scheme.targets):
                    return scheme
        raise ValueError(f"{module} is stored quantized but no config_groups target matches it")

    def read(self, module: str, get: GetTensor) -> IntWeight:
        scheme = self.scheme_for(module)
        bits = scheme.bits
        n, k = (int(v) for v in get(f"{module}.weight_shape").tolist())
        group = group_size_of(scheme.group_size, k, module)
        num_groups = k // group
        packed = get(f"{module}.weight_packed")
        check_shape(module, "weight_packed", packed, (n, -(-k * bits // 32)))
        q = unpack_int32(packed, bits, dim=1)[:, :k]
        scales = get(f"{module}.weight_scale").float()
        check_shape(module, "weight_scale", scales, (n, num_groups))
        offset = 1 << (bits - 1)
        if scheme.symmetric:
            zeros = torch.full((n, num_groups), offset, dtype=torch.int32)
        else:
            zp = get(f"{module}.weight_zero_point")
            check_shape(module, "weight_zero_point", zp, (-(-n * bits // 32), num_groups))
            zeros = unpack_int32(zp, bits, dim=0)[:n]
        g_idx = _optional(get, f"{module}.weight_g_idx")
        return IntWeight(bits, q, scales, zeros, group, None if g_idx is None else g_idx.long())


def _rank(target: str, module: str) -> int | None:
    if target == module:
        return 0
    if target.startswith("re:"):
        return 1 if re.match(target[3:], module) else None
    return 2 if target == "Linear" else None


def _optional(get: GetTensor, name: str) -> torch.Tensor | None:
    try:
        return get(name)
    except KeyError:
        return None
