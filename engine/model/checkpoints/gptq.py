"""GPTQ checkpoints in the Hugging Face layout (AutoGPTQ / GPTQModel, `quant_method: gptq`).

Per quantized linear module `m`, with K inputs, N outputs, G groups and b bits:
  * m.qweight int32 [K * b / 32, N]: codes packed along the input dim, lowest bits first;
  * m.qzeros  int32 [G, N * b / 32]: zero points packed along the output dim;
  * m.scales  float16 [G, N];
  * m.g_idx   int32 [K]: the group of each input column (k // group_size unless desc_act).
The classic format (`checkpoint_format: gptq`) stores each zero point minus one, so
w = (q - (z + 1)) * s; `gptq_v2` stores z itself. desc_act (act-order) checkpoints permute
which columns form a group; the engine reorders the columns (int_weight.contiguous_order).
"""

from __future__ import annotations

from engine.model.checkpoints.int_weight import IntWeight, unpack_int32
from engine.model.checkpoints.scheme import Field, GetTensor, check_shape, group_size_of

ZERO_OFFSET = {"gptq": 1, "gptq_v2": 0}  # what the stored zero point lacks, per format


class GptqReader:
    format = "gptq"

    def __init__(self, root: Field) -> None:
        self.bits = root.bits("bits", root.get("bits", int))
        self.group_size = root.get("group_size", int, -1)
        self.desc_act = bool(root.get("desc_act", bool, False))
        self.sym = bool(root.get("sym", bool, True))
        key = "checkpoint_format" if "checkpoint_format" in root.table else "format"
        self.checkpoint_format = root.get(key, str, "gptq")
        if self.checkpoint_format not in ZERO_OFFSET:
            root.refuse(key, self.checkpoint_format, f"one of {', '.join(ZERO_OFFSET)}")
        if root.get("dynamic", dict):
            root.refuse("dynamic", "(set)", "one scheme for every module")

    def marker(self, module: str) -> str:
        return f"{module}.qweight"

    def describe(self) -> str:
        groups = "channel-wise" if self.group_size == -1 else f"group {self.group_size}"
        order = ", act-order" if self.desc_act else ""
        zeros = "symmetric" if self.sym else "asymmetric"
        return f"gptq ({self.checkpoint_format}) {self.bits}-bit {groups} {zeros}{order}"

    def read(self, module: str, get: GetTensor) -> IntWeight:
        bits, per_word = self.bits, 32 // self.bits
        qweight = get(f"{module}.qweight")
        k, n = int(qweight.shape[0]) * per_word, int(qweight.shape[1])
        group = group_size_of(self.group_size, k, module)
        num_groups = k // group
        q = unpack_int32(qweight, bits, dim=0).T  # [N, K]
        qzeros = get(f"{module}.qzeros")
        check_shape(module, "qzeros", qzeros, (num_groups, n // per_word))
        zeros = unpack_int32(qzeros, bits, dim=1).T + ZERO_OFFSET[self.checkpoint_format]
        scales = get(f"{module}.scales")
        check_shape(module, "scales", scales, (num_groups, n))
        g_idx = get(f"{module}.g_idx").long() if self.desc_act else None
        if g_idx is not None:
            check_shape(module, "g_idx", g_idx, (k,))
            if int(g_idx.min()) < 0 or int(g_idx.max()) >= num_groups:
                raise ValueError(f"{module}.g_idx names a group outside 0..{num_groups - 1}")
        return IntWeight(bits, q.contiguous(), scales.float().T.contiguous(),
                         zeros.contiguous(), group, g_idx)  # fmt: skip
