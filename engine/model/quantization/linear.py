"""Weight-only quantized linear layers (int8 per output channel, int4 grouped) and their kernels.

Schemes (weights quantized in fp32, scales stored in the kernel's compute dtype):
  * int8: symmetric per output channel, w ~= q * s with q in [-127, 127] and
    s = max|w_row| / 127. Storage: 1 byte per weight plus one scale per output row.
  * int4: asymmetric per group of `group_size` consecutive input features,
    w ~= (q - 8) * s + z with q in [0, 15], s = (max - min) / 15 and z = min + 8 * s: the
    scales-and-zeros form torch's int4 kernels take. Storage: 0.5 byte per weight (two per
    byte) plus a scale and a zero per group.

Kernels, picked once per (method, device, dtype, group size) by `probe_kernel`, which runs the
packed kernel on a small synthetic weight and keeps it only if it agrees with the dequantized
matmul; anything else (an op missing on this device, a dtype or group size it refuses) falls
back to DEQUANT: rebuild the float weight (or, for int8, apply the row scales after a matmul
with the int8 values cast to float) on every call. The fallback is correct everywhere and slow.
"""

from __future__ import annotations

import functools
import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

INT8_PACK_MM = "torch._weight_int8pack_mm"
INT4_PACK_MM_CPU = "torch._weight_int4pack_mm_for_cpu"
INT4_PACK_MM_CUDA = "torch._weight_int4pack_mm"
DEQUANT = "dequantize+matmul"
_INT4_OFFSET = 8  # the kernels' zero point: stored nibble q means (q - 8) * s + z
_CAST_SPEEDUP = 2.0  # a cast-to-bf16 kernel must beat the model-dtype one by this factor
_MIN_SCALE = 1e-12  # keeps an all-zero row or a constant group from dividing by zero


@dataclass(frozen=True)
class KernelChoice:
    """The matmul a quantized layer uses: `kernel` (one of the names above), the dtype its
    activations and scales must be in (`compute_dtype`; activations are cast around the
    kernel when the model's dtype differs), and what the probe found (`reason`)."""

    kernel: str
    compute_dtype: torch.dtype
    reason: str
    # The most rows (tokens) a call may have to run on the packed kernel; above it the layer
    # dequantizes and multiplies in the activations' dtype (None: no limit). Set where the
    # kernel timed slower than the float matmul at larger sizes
    # (engine/model/quantization/timing.py).
    max_packed_rows: int | None = None
    # What the timing refused, in one line (None: nothing).
    refused: str | None = None


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-output-channel symmetric int8: (q int8 [N, K], scales fp32 [N])."""
    w = weight.float()
    scales = (w.abs().amax(dim=1) / 127).clamp(min=_MIN_SCALE)
    q = torch.round(w / scales[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scales


def quantize_int4(
    weight: torch.Tensor, group_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Grouped asymmetric int4: (q int32 [N, K] in 0..15, scales fp32 [N, K / group_size],
    zeros fp32 [N, K / group_size]); see the module docstring for the formula."""
    out_features, in_features = weight.shape
    if group_size < 1 or in_features % group_size:
        raise ValueError(
            f"int4 group size {group_size} does not divide in_features {in_features}; "
            "pick a group size that divides every layer's input width (32 divides Llama's)"
        )
    groups = weight.float().view(out_features, in_features // group_size, group_size)
    low, high = groups.amin(dim=-1), groups.amax(dim=-1)
    scales = ((high - low) / 15).clamp(min=_MIN_SCALE)
    q = torch.round((groups - low[..., None]) / scales[..., None]).clamp(0, 15)
    zeros = low + _INT4_OFFSET * scales
    return q.to(torch.int32).view(out_features, in_features), scales, zeros


def dequantize_int8(q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The fp32 weight [N, K] that `quantize_int8`'s codes stand for: q * s."""
    return q.float() * scales.float()[:, None]


def dequantize_int4(q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor) -> torch.Tensor:
    """The fp32 weight [N, K] that `quantize_int4`'s codes stand for: (q - 8) * s + z per
    group (the module docstring's formula)."""
    out_features, in_features = q.shape
    groups = q.float().view(out_features, scales.shape[1], -1) - _INT4_OFFSET
    return (groups * scales[..., None] + zeros[..., None]).view(out_features, in_features)


def pack_nibbles(q: torch.Tensor) -> torch.Tensor:
    """int4 values [N, K] (0..15) -> uint8 [N, K / 2], even column in the high nibble (the
    layout torch's CUDA packer takes)."""
    q = q.to(torch.uint8)
    return (q[:, 0::2] << 4) | q[:, 1::2]


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of `pack_nibbles`: uint8 [N, K / 2] -> uint8 [N, K]."""
    return torch.stack((packed >> 4, packed & 0x0F), dim=-1).flatten(1)


class Int8Linear(nn.Module):
    """y = x @ (q * s).T for an int8 weight with per-output-channel scales (no bias)."""

    def __init__(
        self,
        weight: torch.Tensor,
        choice: KernelChoice,
        codes: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        """codes: (q, scales) already quantized, in `quantize_int8`'s form (a checkpoint's);
        `weight` then only gives the shape (it may be on the meta device)."""
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.kernel, self.compute_dtype = choice.kernel, choice.compute_dtype
        self.max_packed_rows = choice.max_packed_rows
        q, scales = codes if codes is not None else quantize_int8(weight)
        self.register_buffer("qweight", q)  # int8 [N, K]: 1 byte per weight
        self.register_buffer("scales", scales.to(choice.compute_dtype))  # [N]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, self.in_features)
        if self.kernel == INT8_PACK_MM and _packed_fits(x2, self.max_packed_rows):
            x2 = x2.to(self.compute_dtype)
            y = torch._weight_int8pack_mm(x2, self.qweight, self.scales)
        else:  # the row scales commute with the matmul, so they apply to the small output
            if self.kernel == DEQUANT:
                x2 = x2.to(self.compute_dtype)
            y = F.linear(x2, self.qweight.to(x2.dtype)) * self.scales.to(x2.dtype)
        return y.to(x.dtype).view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, int8, kernel={self.kernel}"


class Int4Linear(nn.Module):
    """y = x @ dequant(q).T for a grouped int4 weight (no bias).

    Buffers: `qweight` (the kernel's packed form, or nibble pairs for the fallback: N * K / 2
    bytes either way) and `scales_and_zeros` [K / group_size, N, 2] in the compute dtype.
    """

    def __init__(
        self,
        weight: torch.Tensor,
        group_size: int,
        choice: KernelChoice,
        codes: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        """codes: (q, scales, zeros) already quantized, in `quantize_int4`'s form (a
        checkpoint's); `weight` then only gives the shape (it may be on the meta device)."""
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.group_size = group_size
        self.compute_dtype = choice.compute_dtype
        self.max_packed_rows = choice.max_packed_rows
        q, scales, zeros = codes if codes is not None else quantize_int4(weight, group_size)
        self.kernel, packed = _pack_int4(q, choice.kernel)
        self.register_buffer("qweight", packed)
        # Above max_packed_rows the layer dequantizes, which needs the nibble pairs too: 0.5
        # byte per weight more, counted in the weight bytes like any buffer.
        both = self.kernel != DEQUANT and self.max_packed_rows is not None
        self.register_buffer("nibbles", pack_nibbles(q) if both else None)
        self.nibbles: torch.Tensor | None
        sz = torch.stack((scales, zeros), dim=-1).transpose(0, 1).contiguous()
        self.register_buffer("scales_and_zeros", sz.to(choice.compute_dtype))

    def dequantized_weight(self, dtype: torch.dtype) -> torch.Tensor:
        """The float weight [N, K] this layer stands for (the dequantize path only)."""
        n, k, g = self.out_features, self.in_features, self.group_size
        pairs = self.qweight if self.nibbles is None else self.nibbles
        q = unpack_nibbles(pairs).view(n, k // g, g).to(dtype) - _INT4_OFFSET
        sz = self.scales_and_zeros.transpose(0, 1).to(dtype)  # [N, K / g, 2]
        return (q * sz[..., :1] + sz[..., 1:]).view(n, k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, self.in_features)
        g, sz = self.group_size, self.scales_and_zeros
        packed = self.kernel != DEQUANT and _packed_fits(x2, self.max_packed_rows)
        if packed or self.kernel == DEQUANT:
            x2 = x2.to(self.compute_dtype)
        if packed and self.kernel == INT4_PACK_MM_CPU:
            y = torch._weight_int4pack_mm_for_cpu(x2, self.qweight, g, sz)
        elif packed and self.kernel == INT4_PACK_MM_CUDA:
            y = torch._weight_int4pack_mm(x2, self.qweight, g, sz)
        else:
            y = F.linear(x2, self.dequantized_weight(x2.dtype))
        return y.to(x.dtype).view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (
            f"in={self.in_features}, out={self.out_features}, int4, "
            f"group_size={self.group_size}, kernel={self.kernel}"
        )


def _packed_fits(x2: torch.Tensor, max_rows: int | None) -> bool:
    return max_rows is None or x2.shape[0] <= max_rows


def _pack_int4(q: torch.Tensor, kernel: str) -> tuple[str, torch.Tensor]:
    """Pack int4 values for `kernel`; a shape the packer refuses (the CPU packer wants N % 16
    == 0, the CUDA one K % 32 == 0) falls back to nibble pairs for the dequant path."""
    try:
        if kernel == INT4_PACK_MM_CPU:
            return kernel, torch._convert_weight_to_int4pack_for_cpu(q, 1)
        if kernel == INT4_PACK_MM_CUDA:
            k = q.shape[1]
            inner_k_tiles = next(t for t in (8, 4, 2) if k % (16 * t) == 0)
            return kernel, torch._convert_weight_to_int4pack(pack_nibbles(q), inner_k_tiles)
    except (RuntimeError, StopIteration):
        pass
    return DEQUANT, pack_nibbles(q)


def _candidate_kernel(method: str, device: torch.device) -> str | None:
    if method == "int8":
        return INT8_PACK_MM
    if device.type == "cpu":
        return INT4_PACK_MM_CPU
    return INT4_PACK_MM_CUDA if device.type == "cuda" else None


@functools.lru_cache(maxsize=32)
def probe_kernel(
    method: str, device: torch.device, dtype: torch.dtype, group_size: int
) -> KernelChoice:
    """Find the packed kernel for `method` ("int8" | "int4") on `device` for a `dtype` model.

    Candidates are the kernel in the model's dtype and in bfloat16 (activations cast around
    it). A candidate must run on a synthetic [256, 1024] weight and match the dequantized
    matmul (relative L2 error under 1e-4 in fp32, 2e-2 in 16-bit). If both qualify, the
    bfloat16 one is taken only when it is over `_CAST_SPEEDUP`x faster at batch 1: torch's
    fp32 path of these CPU kernels is a slow generic loop (measured 3-9x slower than the fp32
    float matmul, while the bf16 path is 3-4x faster than it at 8B shapes, cast included), and
    the wide margin keeps the choice stable under timing noise. No candidate -> DEQUANT in
    the model's dtype, with the reason. Cached: one probe per process and setting.
    """
    kernel = _candidate_kernel(method, device)
    if kernel is None:
        return KernelChoice(DEQUANT, dtype, f"no packed {method} kernel for {device.type}")
    gen = torch.Generator().manual_seed(0)
    weight = (torch.randn(256, max(1024, 2 * group_size), generator=gen) * 0.02).to(device)
    x = torch.randn(4, weight.shape[1], generator=gen).to(device)
    failures, usable = [], {}
    for compute in dict.fromkeys((dtype, torch.bfloat16)):
        try:
            fast, slow = _probe_pair(method, weight, group_size, kernel, compute)
            if fast.kernel != kernel:
                raise RuntimeError(f"its weight packer refused a {list(weight.shape)} weight")
            expected = slow(x.to(compute)).float()
            err = (fast(x.to(compute)).float() - expected).norm() / expected.norm()
        except RuntimeError as exc:  # missing op, unsupported dtype or group size
            failures.append(f"{compute}: {str(exc).splitlines()[0][:160]}")
            continue
        if err < (1e-4 if compute == torch.float32 else 2e-2):
            usable[compute] = fast
        else:
            failures.append(f"{compute}: relative error {float(err):.2e} against dequant")
    if not usable:
        reason = f"{kernel} unusable on {device.type}: " + "; ".join(failures)
        return KernelChoice(DEQUANT, dtype, reason)
    if len(usable) == 1:
        compute = next(iter(usable))
        how = "" if compute == dtype else f", activations cast {_name(dtype)} -> {_name(compute)}"
        return KernelChoice(kernel, compute, f"{kernel} runs in {_name(compute)}{how}")
    x1 = x[:1].to(dtype)
    own_ms, cast_ms = (_median_ms(usable[c], x1) for c in (dtype, torch.bfloat16))
    timing = f"batch-1 probe {own_ms:.3f} ms in {_name(dtype)}, {cast_ms:.3f} ms cast to bf16"
    if own_ms > _CAST_SPEEDUP * cast_ms:
        reason = f"{kernel} with activations cast {_name(dtype)} -> bfloat16 ({timing})"
        return KernelChoice(kernel, torch.bfloat16, reason)
    return KernelChoice(kernel, dtype, f"{kernel} runs in {_name(dtype)} ({timing})")


def _median_ms(layer: nn.Module, x: torch.Tensor, reps: int = 5) -> float:
    """Median milliseconds of layer(x), synchronising a CUDA device around each call."""

    def sync() -> None:
        if x.device.type == "cuda":
            torch.cuda.synchronize(x.device)

    layer(x)  # warm-up
    times = []
    for _ in range(reps):
        sync()
        start = time.perf_counter_ns()
        layer(x)
        sync()
        times.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(times)


def _probe_pair(
    method: str, weight: torch.Tensor, group_size: int, kernel: str, compute: torch.dtype
) -> tuple[nn.Module, nn.Module]:
    fast_choice = KernelChoice(kernel, compute, "probe")
    slow_choice = KernelChoice(DEQUANT, compute, "probe")
    if method == "int8":
        return Int8Linear(weight, fast_choice), Int8Linear(weight, slow_choice)
    return (
        Int4Linear(weight, group_size, fast_choice),
        Int4Linear(weight, group_size, slow_choice),
    )


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
