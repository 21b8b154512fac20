"""The readers of quantized checkpoints, by config.json's `quantization_config.quant_method`.

One table, above the format modules: a format is added here and in its own module, and the
format modules never import this one (engine.model.checkpoints.scheme holds what they share).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.model.checkpoints.awq import AwqReader
from engine.model.checkpoints.compressed_tensors import CompressedTensorsReader
from engine.model.checkpoints.gptq import GptqReader
from engine.model.checkpoints.scheme import CheckpointReader, Field

READERS: dict[str, Callable[[Field], CheckpointReader]] = {
    "compressed-tensors": CompressedTensorsReader,
    "gptq": GptqReader,
    "awq": AwqReader,
}


def reader_for(directory: Path, qc: dict[str, Any]) -> CheckpointReader:
    """The reader of `qc`'s quant_method; CheckpointError for any other method."""
    root = Field(directory / "config.json", qc, "quantization_config")
    method = root.get("quant_method", str)
    if method not in READERS:
        root.refuse("quant_method", method, f"this engine loads {', '.join(READERS)}")
    return READERS[method](root)
