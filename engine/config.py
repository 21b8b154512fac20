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
ATTENTION_BACKENDS = ("auto", "torch", "native")
CUSTOM_OPS = ("auto", "torch", "native")


@dataclass(frozen=True)
class EngineConfig:
    """Reference engine settings.

    model: a preset name (``tiny``, ``llama-3-8b``, ...) or a local Hugging Face directory.
    dtype "auto" is bfloat16 on CUDA; on a CPU, the checkpoint's bfloat16 where the CPU has
    native bf16 (AVX512-BF16 or AMX: 2-3x faster matmuls), else float32 (emulated bf16 matmuls
    are slower than fp32). kv_cache_memory_bytes None means 512 MiB on CPU and 90% of the
    GPU's free memory after the weights on CUDA.
    max_num_batched_tokens is the token budget of one step (2048, vLLM's default for its CPU
    OpenAI server); max_num_seqs caps the running batch.

    device "sim" runs the scheduler on a simulated device (engine.sim.executor): no weights are
    loaded (``model`` may be any perfmodel.models name, e.g. llama-3-70b); ``gpu`` names the part (a
    perfmodel.hardware key, or "cpu" for this machine as `bench calibrate` measured it), ``tp`` how
    many of them share the model (tensor parallel), ``gpu_memory_utilization`` the share of each
    GPU's memory the engine may use (KV capacity as `bench capacity`). ``sim_speedup`` 1 runs in
    real time, s > 1 s times faster, 0 on a virtual clock (no sleeping: `bench simulate`).
    ``sim_acceptance_rate`` is the probability each draft token is accepted (speculative
    decoding); ``sim_step_overhead_ms`` the host time per step (default: the calibration's for
    gpu="cpu", else none).
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
    max_num_batched_tokens: int = 2048
    enable_chunked_prefill: bool = True
    num_threads: int | None = None
    # torch threads for a step that is mostly prefill (at least BURST_PREFILL_RATIO prefill
    # tokens per decode token): a burst of arrivals, when few streams are being served and
    # the HTTP front's core is free for the matmuls. None: num_threads throughout.
    prefill_num_threads: int | None = None
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
    # Decode attention: "native" is the C kernel reading K/V straight from the block table
    # (engine/native/attention.py; CPU, fp32 and bf16), "torch" gathers them and runs batched
    # matmuls, "auto" takes native where it builds and covers the dtypes, else torch.
    attention_backend: str = "auto"
    # vLLM's "custom ops", the layer's own kernels besides attention: "native" runs linear
    # layers of 1..4 rows (single-stream decode) in a C matrix-vector kernel that streams the
    # weights faster than oneDNN's (engine/native/linear.py), and each residual add + RMSNorm
    # in one C call (engine/native/norm.py); CPU, fp32 and bf16. "torch" is plain torch ops;
    # "auto" takes native where it builds and covers the dtype.
    custom_ops: str = "auto"
    # Sleep this long in every step: a deliberately slower engine, to test that regression
    # gates catch a real slowdown. Never set it for a measurement.
    step_delay_ms: float = 0.0
    # The simulated device (device="sim"): see the class docstring.
    gpu: str | None = None
    tp: int = 1
    gpu_memory_utilization: float = 0.9
    sim_speedup: float = 1.0
    sim_acceptance_rate: float | None = None
    sim_step_overhead_ms: float | None = None

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.block_size < 1 or self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size must be a power of two, got {self.block_size}")
        for name in ("num_threads", "prefill_num_threads"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1 (or unset), got {value}")
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
        _choice("attention_backend", self.attention_backend, ATTENTION_BACKENDS)
        _choice("custom_ops", self.custom_ops, CUSTOM_OPS)
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
        self._check_simulation()

    def _check_simulation(self) -> None:
        sim = self.device == "sim"
        if sim and not self.gpu:
            raise ValueError(
                "device='sim' needs gpu: a GPU of the hardware table (a100-80gb, h100-sxm, ...) "
                "or 'cpu' for this machine as `bench calibrate` measured it"
            )
        if not sim and self.gpu is not None:
            raise ValueError(f"gpu={self.gpu!r} names a simulated device; set device='sim' too")
        if self.tp < 1 or (self.tp > 1 and not sim):
            raise ValueError(
                f"tp must be >= 1, and above 1 only on the simulated device (device='sim'); "
                f"got tp={self.tp}"
            )
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )
        if self.sim_speedup < 0:
            raise ValueError(f"sim_speedup must be >= 0 (0: virtual time), got {self.sim_speedup}")
        rate = self.sim_acceptance_rate
        if rate is not None and not 0 <= rate <= 1:
            raise ValueError(f"sim_acceptance_rate must be in [0, 1], got {rate}")
        if sim and self.speculative != "off" and rate is None:
            raise ValueError(
                "speculative decoding on the simulated device needs sim_acceptance_rate "
                "(the probability that each draft token is accepted, 0..1)"
            )
        if self.sim_step_overhead_ms is not None and self.sim_step_overhead_ms < 0:
            raise ValueError(f"sim_step_overhead_ms must be >= 0, got {self.sim_step_overhead_ms}")

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
