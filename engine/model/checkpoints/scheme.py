"""A checkpoint's `quantization_config` (config.json) read into the reader of its format.

Each format module (compressed_tensors, gptq, awq) provides a reader: which linear modules the
checkpoint stores quantized, how to read one into an `IntWeight`, and a one-line description.
This module holds what they share (the `CheckpointReader` protocol, `Field`, the shape checks);
engine.model.checkpoints.readers, above them, picks one by `quant_method`. Every value this
project cannot load is refused before a tensor is read, with one line naming the config.json
field and what would load.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import torch

from engine.model.checkpoints.int_weight import SUPPORTED_BITS, IntWeight
from engine.model.weights import WeightsError

GetTensor = Callable[[str], torch.Tensor]


class CheckpointError(WeightsError):
    """A quantized checkpoint this loader cannot read (names the config field or tensor)."""


class CheckpointReader(Protocol):
    """What a format module gives the loader."""

    format: str  # "compressed-tensors" | "gptq" | "awq"

    def marker(self, module: str) -> str:
        """The tensor whose presence says `module` (an HF name, e.g.
        'model.layers.0.self_attn.q_proj') is stored quantized."""
        ...

    def read(self, module: str, get: GetTensor) -> IntWeight:
        """`module`'s weight, unpacked (`get` returns a tensor of the checkpoint by name)."""
        ...

    def describe(self) -> str:
        """One line: the format and scheme (bits, groups, zero points, act order)."""
        ...


def quantization_config(directory: Path) -> dict[str, Any] | None:
    """config.json's `quantization_config`, or None for a float checkpoint."""
    config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    qc = config.get("quantization_config")
    if qc is not None and not isinstance(qc, dict):
        raise CheckpointError(f"{directory}/config.json: quantization_config is not a table")
    return qc


class Field:
    """A table of config.json under its dotted path, whose refusals name the field."""

    def __init__(self, file: Path, table: dict[str, Any], path: str) -> None:
        self.file, self.table, self.path = file, table, path

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
        value = self.table.get(key, default)
        if value is not None and not isinstance(value, kind):
            names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
            raise CheckpointError(
                f"{self.file}: {self.path}.{key} = {value!r} is not a {names}; fix config.json"
            )
        return value

    def sub(self, key: str) -> Field:
        value = self.get(key, dict)
        if value is None:
            raise CheckpointError(f"{self.file}: {self.path}.{key} is missing; fix config.json")
        return Field(self.file, value, f"{self.path}.{key}")

    def bits(self, key: str, value: int) -> int:
        if value not in SUPPORTED_BITS:
            self.refuse(key, value, "the engine runs 4-bit and 8-bit weights")
        return value

    def refuse(self, key: str, value: Any, supported: str) -> None:
        raise CheckpointError(
            f"{self.file}: {self.path}.{key} = {value!r} is not supported; {supported}"
        )


def group_size_of(size: int | None, in_features: int, module: str) -> int:
    """A group size as configs state it (None or -1: channel-wise) -> columns per group,
    checking that it divides the layer's input width."""
    if size is None or size == -1:
        return in_features
    if size < 1 or in_features % size:
        raise CheckpointError(
            f"{module}: group_size {size} does not divide its input width {in_features}"
        )
    return size


def check_shape(module: str, name: str, tensor: torch.Tensor, shape: tuple[int, ...]) -> None:
    """Refuse a stored tensor whose shape does not match the one its scheme implies."""
    if tuple(tensor.shape) != shape:
        raise CheckpointError(
            f"{module}.{name} has shape {tuple(tensor.shape)}, expected {shape} from the "
            "quantization_config and the model's config.json"
        )
