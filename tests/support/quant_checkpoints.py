"""Test helpers: GPTQ and AWQ checkpoints in the Hugging Face layout, packed from known codes.

`write_packed_checkpoint(path, fmt, ...)` writes a tiny random Llama (tests.support.hf_fixtures)
whose decoder linear layers are replaced by integer codes, scales and zero points drawn by the
test, packed the way AutoGPTQ / AutoAWQ pack them (written here independently of the loader:
strided slices, not the loader's reshapes), plus config.json's quantization_config. It returns
the float32 weight each module stands for, computed from the codes by the format's formula, and
can write the same model with those float weights (the reference the loaded model must match).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from engine.model.checkpoints.readers import reader_for
from engine.model.checkpoints.scheme import quantization_config
from tests.support.hf_fixtures import make_hf_model

LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")  # fmt: skip
# Modules that read the same input share an act-order column order (the engine fuses them).
_INPUT_OF = {"self_attn.q_proj": "attn", "self_attn.k_proj": "attn", "self_attn.v_proj": "attn",
             "mlp.gate_proj": "mlp", "mlp.up_proj": "mlp"}  # fmt: skip
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # AutoAWQ GEMM: nibble i of a word holds column ORDER[i]


@dataclass(frozen=True)
class PackedCheckpoint:
    """The folder written and, per HF module name, the float32 weight [N, K] it stands for."""

    path: Path
    expected: dict[str, torch.Tensor]


def write_packed_checkpoint(
    path: Path,
    fmt: str,
    bits: int = 4,
    group_size: int = 32,
    desc_act: bool = False,
    checkpoint_format: str = "gptq",
    sym: bool = False,
    seed: int = 0,
    **config_overrides: Any,
) -> PackedCheckpoint:
    """A GPTQ (`fmt` "gptq") or AWQ GEMM (`fmt` "awq", 4-bit) checkpoint in `path` (module doc).
    group_size -1 is channel-wise; desc_act (GPTQ) draws a random column order per input; sym
    sets every zero point to 2**(bits - 1) (GPTQ's symmetric checkpoints, which vLLM requires);
    config_overrides change the model's shape (tests.support.hf_fixtures.TINY_HF_CONFIG)."""
    make_hf_model(path, seed=seed, **config_overrides)
    tensors = load_file(path / "model.safetensors")
    gen = torch.Generator().manual_seed(seed + 1)
    orders: dict[tuple[str, str], torch.Tensor] = {}
    expected: dict[str, torch.Tensor] = {}
    for name in sorted(tensors):
        module = name.removesuffix(".weight")
        if not module.endswith(LINEARS):
            continue
        n, k = tensors.pop(name).shape
        size = k if group_size == -1 else group_size
        groups = torch.arange(k) // size
        if desc_act:
            layer, sub = module.split(".", 3)[2:]
            key = (layer, _INPUT_OF.get(sub, sub))
            if key not in orders:
                orders[key] = torch.randperm(k, generator=gen)
            groups = torch.empty(k, dtype=torch.int64)
            groups[orders[key]] = torch.arange(k) // size  # column perm[i] is the i-th quantized
        q = torch.randint(0, 1 << bits, (k, n), generator=gen)
        low = 1 if checkpoint_format == "gptq" else 0  # v1 stores z - 1, which must not wrap
        zeros = torch.randint(low, 1 << bits, (k // size, n), generator=gen)
        if sym:
            zeros = torch.full_like(zeros, 1 << (bits - 1))
        scales = (0.002 + 0.01 * torch.rand(k // size, n, generator=gen)).half()
        weight_kn = (q - zeros[groups]).float() * scales[groups].float()
        expected[module] = weight_kn.T.contiguous()
        stored_zeros = zeros - (1 if fmt == "gptq" and checkpoint_format == "gptq" else 0)
        tensors[f"{module}.scales"] = scales
        if fmt == "gptq":
            tensors[f"{module}.qweight"] = _pack_rows(q, bits)
            tensors[f"{module}.qzeros"] = _pack_cols(stored_zeros, bits, range(32 // bits))
            tensors[f"{module}.g_idx"] = groups.to(torch.int32)
        else:
            tensors[f"{module}.qweight"] = _pack_cols(q, bits, AWQ_ORDER)
            tensors[f"{module}.qzeros"] = _pack_cols(stored_zeros, bits, AWQ_ORDER)
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((path / "config.json").read_text())
    if fmt == "gptq":
        config["quantization_config"] = {
            "quant_method": "gptq", "bits": bits, "group_size": group_size,
            "desc_act": desc_act, "sym": sym, "checkpoint_format": checkpoint_format,
        }  # fmt: skip
    else:
        config["quantization_config"] = {
            "quant_method": "awq", "bits": bits, "group_size": group_size,
            "zero_point": True, "version": "gemm",
        }  # fmt: skip
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return PackedCheckpoint(path, expected)


def write_float_twin(checkpoint: PackedCheckpoint, path: Path) -> Path:
    """The same model with each quantized module's expected float weight: the reference."""
    make_hf_model(path)  # same seed and shape: same embeddings, norms and lm_head
    tensors = load_file(path / "model.safetensors")
    for module, weight in checkpoint.expected.items():
        tensors[f"{module}.weight"] = weight
    save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    return path


def read_dequantized(directory: Path, modules: list[str]) -> dict[str, torch.Tensor]:
    """Each module's float32 weight as the checkpoint's format reader unpacks it (one file)."""
    reader = reader_for(directory, quantization_config(directory) or {})
    with safe_open(directory / "model.safetensors", framework="pt") as handle:
        names = set(handle.keys())

        def get(name: str) -> torch.Tensor:
            if name not in names:
                raise KeyError(name)  # what the loader's tensor source raises for an absent one
            return handle.get_tensor(name)

        return {module: reader.read(module, get).dequantize() for module in modules}


def set_quantization_field(path: Path, key: str, value: object) -> None:
    """Rewrite one field of config.json's quantization_config (for the refusal tests)."""
    config = json.loads((path / "config.json").read_text())
    config["quantization_config"][key] = value
    (path / "config.json").write_text(json.dumps(config, indent=2))


def _pack_rows(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """[K, N] codes -> int32 [K * bits / 32, N]: row r * per_word + i in bits i * bits."""
    per_word = 32 // bits
    words = torch.zeros(codes.shape[0] // per_word, codes.shape[1], dtype=torch.int64)
    for i in range(per_word):
        words |= codes[i::per_word].to(torch.int64) << (bits * i)
    return _as_int32(words)


def _pack_cols(codes: torch.Tensor, bits: int, order: tuple[int, ...] | range) -> torch.Tensor:
    """[R, C] codes -> int32 [R, C * bits / 32]: word j's field i holds column
    j * per_word + order[i]."""
    per_word = 32 // bits
    words = torch.zeros(codes.shape[0], codes.shape[1] // per_word, dtype=torch.int64)
    for i, column in enumerate(order):
        words |= codes[:, column::per_word].to(torch.int64) << (bits * i)
    return _as_int32(words)


def _as_int32(words: torch.Tensor) -> torch.Tensor:
    """Unsigned 32-bit words (held in int64) as the int32 bit patterns checkpoints store."""
    return torch.where(words >= 1 << 31, words - (1 << 32), words).to(torch.int32)
