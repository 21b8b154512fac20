"""Load a model with its weight quantization: a quantized checkpoint's own, or the engine's.

`load_quantized_model` is what the engine calls. A directory whose config.json has a
`quantization_config` is read by its format's reader (compressed-tensors, GPTQ, AWQ): the
float tensors load as usual, then each decoder linear layer the checkpoint stores quantized
is unpacked, its parts fused as the engine fuses them (q/k/v, gate/up), and replaced by the
engine layer of engine/model/checkpoints/layers.py. Any other directory, or a preset, loads in
float and `quantization` (the engine switch) is applied by engine/model/quantization/quantize.py.

The float layers a checkpoint replaces are materialised, unfilled, before being replaced (the
same peak as the engine's own quantization): the model is built once, in one place.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from engine.model.checkpoints.int_weight import IntWeight, fuse_rows
from engine.model.checkpoints.layers import engine_layer
from engine.model.checkpoints.readers import reader_for
from engine.model.checkpoints.scheme import CheckpointError, CheckpointReader, quantization_config
from engine.model.llama import LlamaForCausalLM
from engine.model.quantization.quantize import (
    QuantReport,
    decoder_linears,
    quantize_model,
    weight_bytes,
)
from engine.model.quantization.timing import timed_kernel
from engine.model.weights import load_model, tensor_locations
from perfmodel.model_config import ModelConfig


def load_quantized_model(
    config: ModelConfig,
    weights_dir: Path | None,
    dtype: torch.dtype,
    device: torch.device,
    seed: int,
    quantization: str,
    group_size: int,
) -> tuple[LlamaForCausalLM, QuantReport]:
    """The ready model and what its quantization is (module docstring).

    Raises CheckpointError (a WeightsError) naming the config field or tensor for a quantized
    checkpoint this engine cannot read, and when `quantization` is set on a checkpoint that
    is already quantized (quantizing twice compounds the error; leave it at none).
    """
    qc = quantization_config(weights_dir) if weights_dir is not None else None
    if weights_dir is None or qc is None:
        model = load_model(config, weights_dir, dtype, device, seed)
        return model, quantize_model(model, quantization, group_size)
    reader = reader_for(weights_dir, qc)
    if quantization != "none":
        raise CheckpointError(
            f"{weights_dir} is already quantized ({reader.describe()}); "
            f"leave quantization at none instead of {quantization}"
        )
    locations = tensor_locations(weights_dir)
    fused, quantized = _quantized_layout(config, reader, locations, weights_dir)
    model = load_model(config, weights_dir, dtype, device, seed, frozenset(quantized))
    before = weight_bytes(model)
    count = bytes_before = bytes_after = 0
    kernels: Counter[str] = Counter()
    first: IntWeight | None = None
    with torch.no_grad(), ExitStack() as stack:
        tensors = _TensorSource(locations, stack)
        for name, parent, attr, linear in decoder_linears(model):
            parts = fused[name]
            if parts[0] not in quantized:
                continue
            weight = _read_linear(reader, tensors, name, parts, linear, weights_dir)
            new = engine_layer(weight, dtype, device)
            setattr(parent, attr, new)
            count += linear.weight.numel()
            bytes_before += linear.weight.numel() * linear.weight.element_size()
            bytes_after += sum(b.numel() * b.element_size() for b in new.buffers())
            kernels[new.kernel] += 1  # type: ignore[index]
            first = weight if first is None else first
            del linear
    if first is None:
        raise CheckpointError(f"{weights_dir}: config.json says quantized, but no decoder "
                              "layer has quantized tensors")  # fmt: skip
    method = f"int{first.bits}"
    group = first.group_size if first.bits == 4 else None
    choice = timed_kernel(method, device, dtype, first.group_size if first.bits == 4 else 0)
    return model, QuantReport(
        method=method,
        group_size=group,
        kernel=kernels.most_common(1)[0][0],
        compute_dtype=str(choice.compute_dtype).removeprefix("torch."),
        probe=choice.reason,
        weight_bytes_before=before,
        weight_bytes_after=weight_bytes(model),
        quantized_weights=count,
        quantized_bytes_before=bytes_before,
        quantized_bytes_after=bytes_after,
        kernels=dict(kernels),
        checkpoint=reader.describe(),
        refused=choice.refused,
    )


def _quantized_layout(
    config: ModelConfig, reader: CheckpointReader, locations: Mapping[str, Path], weights_dir: Path
) -> tuple[dict[str, list[str]], set[str]]:
    """The fused layout of ``config`` (engine linear -> the checkpoint modules fused into it)
    and the checkpoint modules stored quantized. Raises CheckpointError where a fused linear's
    parts are partly quantized or the LM head is."""
    with torch.device("meta"):  # the fused layout of this config, before any weight is read
        fused = _fused_parts(LlamaForCausalLM(config))
    quantized = {m for parts in fused.values() for m in parts if reader.marker(m) in locations}
    _check_all_or_none(fused, quantized, weights_dir)
    if reader.marker("lm_head") in locations:
        raise CheckpointError(
            f"{weights_dir}: lm_head is stored quantized; the engine keeps the LM head in float "
            "(quantize with lm_head in the ignore list)"
        )
    return fused, quantized


def _read_linear(
    reader: CheckpointReader,
    tensors: _TensorSource,
    name: str,
    parts: Sequence[str],
    linear: torch.nn.Linear,
    weights_dir: Path,
) -> IntWeight:
    """The quantized weight of the engine linear ``name``, its ``parts`` read and fused; raises
    CheckpointError where it cannot be unpacked or its shape is not the config's."""
    try:
        weight = fuse_rows([reader.read(m, tensors.get) for m in parts], parts)
    except ValueError as exc:
        raise CheckpointError(f"{weights_dir}: {exc}") from exc
    if weight.shape != tuple(linear.weight.shape):
        raise CheckpointError(
            f"{weights_dir}: {name} unpacks to {weight.shape}, expected "
            f"{tuple(linear.weight.shape)} from config.json"
        )
    return weight


def _fused_parts(model: LlamaForCausalLM) -> dict[str, list[str]]:
    """Each engine decoder layer's name -> the HF modules whose rows it stacks, in row order
    (derived from the model's own HF weight map)."""
    slots = model.hf_weight_slots()
    parts: dict[str, list[str]] = {}
    for name, _, _, linear in decoder_linears(model):
        mine = [(s.row_start, n) for n, s in slots.items() if s.param is linear.weight]
        parts[name] = [n.removesuffix(".weight") for _, n in sorted(mine)]
    return parts


def _check_all_or_none(fused: dict[str, list[str]], quantized: set[str], directory: Path) -> None:
    for parts in fused.values():
        stored = [m in quantized for m in parts]
        if any(stored) and not all(stored):
            q, f = parts[stored.index(True)], parts[stored.index(False)]
            raise CheckpointError(
                f"{directory}: {q} is quantized but {f} is not; the engine fuses them into one "
                "layer, so quantize both or neither (quantization_config's ignore list)"
            )


class _TensorSource:
    """Tensors by name from the checkpoint's files, each file opened once (closed with
    `stack`)."""

    def __init__(self, locations: dict[str, Path], stack: ExitStack) -> None:
        self.locations, self.stack = locations, stack
        self.handles: dict[Path, Any] = {}

    def get(self, name: str) -> torch.Tensor:
        file = self.locations[name]  # KeyError: the reader treats the tensor as absent
        if file not in self.handles:
            opened = safe_open(file, framework="pt", device="cpu")
            self.handles[file] = self.stack.enter_context(opened)
        return self.handles[file].get_tensor(name)
