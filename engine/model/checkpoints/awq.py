"""AWQ checkpoints in the Hugging Face layout (AutoAWQ, `quant_method: awq`, version GEMM).

Per quantized linear module `m`, with K inputs, N outputs and G groups (4-bit only):
  * m.qweight int32 [K, N / 8]: eight codes per word along the output dim, in AutoAWQ's
    interleaved order: the word's i-th nibble (lowest first) holds column 8j + ORDER[i];
  * m.qzeros  int32 [G, N / 8]: zero points, packed the same way;
  * m.scales  float16 [G, N].
w = (q - z) * s. GEMV, Marlin and other kernels' layouts (`version`) are refused.
"""

from __future__ import annotations

import torch

from engine.model.checkpoints.int_weight import IntWeight, unpack_int32
from engine.model.checkpoints.scheme import Field, GetTensor, check_shape, group_size_of

ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # AutoAWQ GEMM: nibble i of a word holds column ORDER[i]
# column c of a block of eight is nibble REVERSE[c] (the inverse permutation of ORDER)
REVERSE = tuple(ORDER.index(c) for c in range(8))
BITS = 4


class AwqReader:
    format = "awq"

    def __init__(self, root: Field) -> None:
        bits_key = "bits" if "bits" in root.table else "w_bit"
        bits = root.get(bits_key, int, BITS)
        if bits != BITS:
            root.refuse(bits_key, bits, "AWQ GEMM checkpoints are 4-bit")
        size_key = "group_size" if "group_size" in root.table else "q_group_size"
        self.group_size = root.get(size_key, int, 128)
        self.zero_point = bool(root.get("zero_point", bool, True))
        self.version = str(root.get("version", str, "gemm")).lower()
        if self.version != "gemm":
            root.refuse("version", self.version, "this engine reads the GEMM layout")

    def marker(self, module: str) -> str:
        return f"{module}.qweight"

    def describe(self) -> str:
        groups = "channel-wise" if self.group_size == -1 else f"group {self.group_size}"
        zeros = "asymmetric" if self.zero_point else "symmetric"
        return f"awq (GEMM) {BITS}-bit {groups} {zeros}"

    def read(self, module: str, get: GetTensor) -> IntWeight:
        qweight = get(f"{module}.qweight")
        k, n = int(qweight.shape[0]), int(qweight.shape[1]) * 32 // BITS
        group = group_size_of(self.group_size, k, module)
        num_groups = k // group
        q = _unpack_interleaved(qweight).T  # [N, K]
        scales = get(f"{module}.scales")
        check_shape(module, "scales", scales, (num_groups, n))
        if self.zero_point:
            qzeros = get(f"{module}.qzeros")
            check_shape(module, "qzeros", qzeros, (num_groups, n * BITS // 32))
            zeros = _unpack_interleaved(qzeros).T
        else:
            zeros = torch.full((n, num_groups), 1 << (BITS - 1), dtype=torch.int32)
        return IntWeight(BITS, q.contiguous(), scales.float().T.contiguous(),
                         zeros.contiguous(), group)  # fmt: skip


def _unpack_interleaved(packed: torch.Tensor) -> torch.Tensor:
    """int32 [R, C / 8] in AutoAWQ's order -> codes [R, C] in column order."""
    codes = unpack_int32(packed, BITS, dim=1)  # nibble order within each word
    rows, cols = codes.shape
    return codes.view(rows, cols // 8, 8)[:, :, list(REVERSE)].reshape(rows, cols)
