"""Model shapes by name or from a config.json, and the storage size of each dtype.

Names resolve through perfmodel.presets (which holds the published shapes of Llama-3-8B/70B/405B,
Llama-2-7B and Mistral-7B beside the tiny test model) without importing torch, so the analytic
commands start in a fraction of a second.
"""

from __future__ import annotations

from pathlib import Path

from perfmodel.model_config import ModelConfig
from perfmodel.presets import PRESETS

# Bytes per element. int4 packs two values a byte; group-wise scales and zero points (a few
# percent for group sizes of 64..128) are left out of every size computed from this table.
DTYPE_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "float32": 4.0,
    "bf16": 2.0,
    "bfloat16": 2.0,
    "fp16": 2.0,
    "float16": 2.0,
    "fp8": 1.0,
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "int8": 1.0,
    "int4": 0.5,
}

# Other spellings people use for the shapes in perfmodel.presets.
MODEL_ALIASES: dict[str, str] = {
    "llama-3.1-8b": "llama-3-8b",
    "llama-3.1-70b": "llama-3-70b",
    "llama-3.1-405b": "llama-3-405b",
    "meta-llama-3-8b": "llama-3-8b",
    "meta-llama-3-70b": "llama-3-70b",
    "llama-7b": "llama-2-7b",
    "mistral-7b-v0.3": "mistral-7b",
}


def dtype_bytes(name: str) -> float:
    """Storage bytes per element of dtype ``name``; ValueError listing the known names."""
    try:
        return DTYPE_BYTES[name.lower()]
    except KeyError:
        raise ValueError(
            f"unknown dtype {name!r}; known: {', '.join(sorted(DTYPE_BYTES))}"
        ) from None


def short_dtype(name: str) -> str:
    """``bfloat16`` -> ``bf16``, ``float16`` -> ``fp16``, ``float32`` -> ``fp32``; else as is."""
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(name.lower(), name)


def resolve_model(spec: str) -> ModelConfig:
    """A model by preset name (any case, e.g. ``Llama-3-70B``), alias, or a path to a Hugging
    Face ``config.json`` or the directory holding one. Raises ValueError naming the choices."""
    key = spec.strip().lower()
    key = MODEL_ALIASES.get(key, key)
    if key in PRESETS:
        return PRESETS[key]
    path = Path(spec).expanduser()
    if path.exists():
        return ModelConfig.from_hf_config(path)
    names = sorted({*PRESETS, *MODEL_ALIASES})
    raise ValueError(
        f"unknown model {spec!r}: not a known name ({', '.join(names)}) and no such file or "
        "directory (pass a Hugging Face config.json or its directory)"
    )
