"""Model configuration for Llama-family decoders.

`ModelConfig` is the one description of a model's shape that the engine, the weight loader and the
analytic (roofline) model share. It is built either from a preset (`perfmodel.presets`) or from a
Hugging Face `config.json` (`ModelConfig.from_hf_config`), which is validated here so that a
checkpoint the engine cannot run is refused before any weight is read.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from perfmodel.files import JSONObject, JSONView

SUPPORTED_DTYPES = ("bfloat16", "float16", "float32")
SUPPORTED_MODEL_TYPES = ("llama",)
# Keys that a llama3 rope_scaling block must carry (Llama-3.1 config.json uses exactly these).
LLAMA3_ROPE_KEYS = (
    "factor",
    "low_freq_factor",
    "high_freq_factor",
    "original_max_position_embeddings",
)


class ConfigError(ValueError):
    """A config.json (or dict) that does not describe a Llama model this engine can run."""


@dataclass(frozen=True)
class ModelConfig:
    """Shape and hyper-parameters of a Llama-family decoder.

    Contract:
      * `num_attention_heads` is a multiple of `num_key_value_heads` (grouped-query attention).
      * `rope_scaling` is None (plain RoPE) or a dict with `rope_type == "llama3"` and the keys in
        `LLAMA3_ROPE_KEYS`; it is excluded from hashing because dicts are unhashable.
      * `dtype` is the checkpoint's storage dtype name, not necessarily the compute dtype.
      * `eos_token_ids` lists every token id that ends generation (Llama-3 instruct has several).
    """

    name: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: JSONObject | None = field(default=None, hash=False)
    tie_word_embeddings: bool = False
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    dtype: str = "bfloat16"

    def __post_init__(self) -> None:
        for key in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "max_position_embeddings",
        ):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{self.name}: '{key}' must be a positive integer, got {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(
                f"{self.name}: num_attention_heads ({self.num_attention_heads}) must be a multiple "
                f"of num_key_value_heads ({self.num_key_value_heads})"
            )
        if self.head_dim % 2:
            raise ConfigError(f"{self.name}: head_dim must be even for RoPE, got {self.head_dim}")
        if not (self.rms_norm_eps > 0 and self.rope_theta > 0):
            raise ConfigError(
                f"{self.name}: rms_norm_eps ({self.rms_norm_eps}) and rope_theta "
                f"({self.rope_theta}) must be positive"
            )
        if self.dtype not in SUPPORTED_DTYPES:
            raise ConfigError(
                f"{self.name}: dtype {self.dtype!r} is not one of {', '.join(SUPPORTED_DTYPES)}"
            )
        if self.rope_scaling is not None:
            _check_llama3_rope(self.name, self.rope_scaling)

    def to_dict(self) -> JSONObject:
        """JSON-safe fields (tuples become lists); from_dict() reads it back."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: JSONView) -> ModelConfig:
        """The inverse of to_dict(), e.g. for a model recorded in a run folder's run.json."""
        values = dict(data)
        values["eos_token_ids"] = tuple(values.get("eos_token_ids", ()))
        return cls(**values)

    @property
    def num_queries_per_kv(self) -> int:
        """Query heads sharing one KV head (the GQA group size)."""
        return self.num_attention_heads // self.num_key_value_heads

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """Bytes of KV cache one token occupies across all layers (K and V), at `dtype_bytes`."""
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * dtype_bytes

    def num_params(self) -> int:
        """Exact parameter count, counting a tied lm_head once (matches HF's num_parameters())."""
        h, q_dim = self.hidden_size, self.num_attention_heads * self.head_dim
        kv_dim = self.num_key_value_heads * self.head_dim
        attention = h * q_dim + 2 * h * kv_dim + q_dim * h
        mlp = 3 * h * self.intermediate_size
        per_layer = attention + mlp + 2 * h  # + input and post-attention RMSNorm weights
        embeddings = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return embeddings + self.num_hidden_layers * per_layer + h  # + final norm

    @classmethod
    def from_hf_config(
        cls, path_or_dict: str | Path | JSONView, name: str | None = None
    ) -> ModelConfig:
        """Build from a Llama `config.json`: a path to the file or its directory, or a parsed dict.

        Accepts both spellings of RoPE settings: `rope_theta` + `rope_scaling` (transformers 4.x,
        Llama-3.1's published file) and `rope_parameters` (transformers 5.x). Raises ConfigError
        naming the missing or invalid key.
        """
        source: str
        if isinstance(path_or_dict, Mapping):
            raw = dict(path_or_dict)
            source = "config dict"
            default_name = str(raw.get("_name_or_path") or "model")
        else:
            path = Path(path_or_dict)
            if path.is_dir():
                path = path / "config.json"
            if not path.is_file():
                raise ConfigError(
                    f"{path}: not found; pass a Hugging Face model directory or its config.json"
                )
            try:
                raw = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}: not valid JSON ({exc})") from exc
            source = str(path)
            default_name = path.parent.name
        return _parse(raw, source, name or default_name)


def _parse(raw: JSONObject, source: str, name: str) -> ModelConfig:
    def need(key: str) -> Any:
        if key not in raw or raw[key] is None:
            raise ConfigError(f"{source}: required key '{key}' is missing")
        return raw[key]

    model_type = raw.get("model_type", "llama")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ConfigError(
            f"{source}: model_type {model_type!r} is not supported; this engine runs "
            f"{', '.join(SUPPORTED_MODEL_TYPES)} checkpoints"
        )
    if raw.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"{source}: hidden_act {raw['hidden_act']!r} unsupported; need 'silu'")
    for flag in ("attention_bias", "mlp_bias"):
        if raw.get(flag):
            raise ConfigError(f"{source}: '{flag}: true' is unsupported (Llama has no biases)")

    heads = int(need("num_attention_heads"))
    hidden = int(need("hidden_size"))
    head_dim = raw.get("head_dim") or (hidden // heads if hidden % heads == 0 else None)
    if head_dim is None:
        raise ConfigError(
            f"{source}: 'head_dim' missing and hidden_size % num_attention_heads != 0"
        )

    rope_params = raw.get("rope_parameters") or {}
    rope_theta = raw.get("rope_theta", rope_params.get("rope_theta", 10000.0))
    scaling = raw.get("rope_scaling") or rope_params or None
    rope_scaling = _normalise_rope_scaling(scaling, source)

    eos = raw.get("eos_token_id")
    eos_ids = (
        () if eos is None else tuple(int(e) for e in (eos if isinstance(eos, list) else [eos]))
    )
    dtype = raw.get("torch_dtype") or raw.get("dtype") or "float32"  # HF's default is float32
    return ModelConfig(
        name=name,
        vocab_size=int(need("vocab_size")),
        hidden_size=hidden,
        intermediate_size=int(need("intermediate_size")),
        num_hidden_layers=int(need("num_hidden_layers")),
        num_attention_heads=heads,
        num_key_value_heads=int(raw.get("num_key_value_heads") or heads),
        head_dim=int(head_dim),
        max_position_embeddings=int(need("max_position_embeddings")),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        rope_theta=float(rope_theta),
        rope_scaling=rope_scaling,
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        bos_token_id=None if raw.get("bos_token_id") is None else int(raw["bos_token_id"]),
        eos_token_ids=eos_ids,
        dtype=str(dtype),
    )


def _normalise_rope_scaling(scaling: JSONView | None, source: str) -> dict | None:
    """Reduce HF's rope block to None (plain RoPE) or a validated llama3 dict."""
    if not scaling:
        return None
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type == "default":
        return None
    if rope_type != "llama3":
        raise ConfigError(
            f"{source}: rope type {rope_type!r} is unsupported; use 'default' or 'llama3'"
        )
    out: JSONObject = {"rope_type": "llama3"}
    for key in LLAMA3_ROPE_KEYS:
        if key not in scaling:
            raise ConfigError(f"{source}: llama3 rope scaling needs key '{key}'")
        out[key] = scaling[key]
    _check_llama3_rope(source, out)
    return out


def _check_llama3_rope(source: str, scaling: JSONView) -> None:
    if scaling.get("rope_type") != "llama3":
        raise ConfigError(f"{source}: rope_scaling must have rope_type 'llama3', got {scaling!r}")
    missing = [k for k in LLAMA3_ROPE_KEYS if k not in scaling]
    if missing:
        raise ConfigError(f"{source}: llama3 rope_scaling lacks {', '.join(missing)}")
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    if not (float(scaling["factor"]) > 0 and high > low > 0) or not math.isfinite(high):
        raise ConfigError(
            f"{source}: llama3 rope_scaling needs factor > 0 and high_freq_factor > "
            f"low_freq_factor > 0, got {dict(scaling)!r}"
        )
