"""The settings of one reference-engine instance (what `bench serve` flags map to)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

DTYPES = ("auto", "float32", "bfloat16", "float16")
BATCHING = ("continuous", "static")
KV_LAYOUTS = ("paged", "contiguous")
SPECULATIVE = ("off", "ngram", "draft")
QUANTIZATION = ("none", "int8", "int4")
KV_CACHE_DTYPES = ("auto", "fp8", "fp8_e4m3")


@dataclass(frozen=True)
class EngineConfig:
    """Reference engine settings.

    model: a preset name (``tiny``, ``llama-3-8b``, ...) or a local Hugging Face directory.
    dtype "auto" is float32 on CPU (bf16 matmuls are slower than fp32 on CPUs without native
    bf16) and bfloat16 on CUDA. kv_cache_memory_bytes None means 512 MiB on CPU and 90% of the
    GPU's free memory after the weights on CUDA.
    max_num_batched_tokens is the token budget of one step; max_num_seqs caps the running batch.
    """

    model: str = "tiny"
    served_model_name: str | None = None
    dtype: str = "auto"
    device: str = "auto"
    seed: int = 0
    block_size: int = 16
    kv_cache_memory_bytes: int | None = None
    max_model_len: int | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 1024
    enable_chunked_prefill: bool = True
    num_threads: int | None = None
    # Optimizations, each a switch so that ablations compare like with like (issue: engine
    # switches). None for enable_prefix_caching means on for the paged layout, off otherwise.
    batching: str = "continuous"
    kv_layout: str = "paged"
    enable_prefix_caching: bool | None = None
    speculative: str = "off"
    num_speculative_tokens: int = 3
    prompt_lookup_min: int = 2
    prompt_lookup_max: int = 4
    draft_model: str | None = None
    draft_num_layers: int | None = None
    # Weight-only quantization of the decoder's linear layers; int4 groups along the input.
    quantization: str = "none"
    quant_group_size: int = 32
    # The KV cache's storage: the model's dtype ("auto") or fp8 e4m3 with per-layer scales.
    kv_cache_dtype: str = "auto"
    # Sleep this long in every step: a deliberately slower engine, to test that regression
    # gates catch a real slowdown. Never set it for a measurement.
    step_delay_ms: float = 0.0

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.block_size < 1 or self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size must be a power of two, got {self.block_size}")
        for name in ("max_num_seqs", "max_num_batched_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.kv_cache_memory_bytes is not None and self.kv_cache_memory_bytes < 1:
            raise ValueError(
                f"kv_cache_memory_bytes must be positive, got {self.kv_cache_memory_bytes}"
            )
        _choice("batching", self.batching, BATCHING)
        _choice("kv_layout", self.kv_layout, KV_LAYOUTS)
        _choice("speculative", self.speculative, SPECULATIVE)
        _choice("quantization", self.quantization, QUANTIZATION)
        _choice("kv_cache_dtype", self.kv_cache_dtype, KV_CACHE_DTYPES)
        if self.quant_group_size < 1:
            raise ValueError(f"quant_group_size must be at least 1, got {self.quant_group_size}")
        if self.kv_layout == "contiguous" and self.enable_prefix_caching:
            raise ValueError(
                "enable_prefix_caching needs kv_layout='paged': a contiguous reservation "
                "cannot share blocks"
            )
        if self.speculative == "draft" and (self.draft_model is None) == (
            self.draft_num_layers is None
        ):
            raise ValueError(
                "speculative='draft' needs exactly one of draft_model (a preset or HF directory)"
                " or draft_num_layers (the target's first L layers as a self-speculative draft)"
            )
        if self.num_speculative_tokens < 1:
            raise ValueError(
                f"num_speculative_tokens must be at least 1, got {self.num_speculative_tokens}"
            )
        if self.step_delay_ms < 0:
            raise ValueError(f"step_delay_ms must be >= 0, got {self.step_delay_ms}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len must be at least 2, got {self.max_model_len}")

    @property
    def prefix_caching(self) -> bool:
        """Whether prefix caching is on, with the default resolved."""
        if self.enable_prefix_caching is None:
            return self.kv_layout == "paged"
        return self.enable_prefix_caching

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
