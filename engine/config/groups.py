"""EngineConfig's groups, one per subsystem (vLLM's ModelConfig, CacheConfig, SchedulerConfig,
ParallelConfig, SpeculativeConfig, ...): each field declares its type, default, help and rule
once (engine.config.setting), and each group checks the rules between its own fields.

The groups are called ``*Settings``, not ``*Config``: ``perfmodel.model_config.ModelConfig`` is
the model's shapes, which the engine loads beside these settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from engine.config.setting import (
    POWER_OF_TWO,
    SettingError,
    SettingsGroup,
    at_least,
    in_range,
    setting,
)

__all__ = [
    "CacheSettings",
    "KernelSettings",
    "ModelSettings",
    "ParallelSettings",
    "SchedulerSettings",
    "SimSettings",
    "SpeculativeSettings",
]

Dtype = Literal["auto", "float32", "bfloat16", "float16"]
Quantization = Literal["none", "int8", "int4"]
KVLayout = Literal["paged", "contiguous"]
KVCacheDtype = Literal["auto", "fp8", "fp8_e4m3"]
Batching = Literal["continuous", "static"]
SpeculativeMethod = Literal["off", "ngram", "draft"]
KernelChoice = Literal["auto", "torch", "native"]
# naive: the textbook softmax(QK^T)V with the scores materialized, the baseline fused kernels beat.
AttentionChoice = Literal["auto", "torch", "native", "naive"]


@dataclass(frozen=True)
class ModelSettings(SettingsGroup):
    """What is served, in which precision, where."""

    GROUP: ClassVar[str] = "model"

    model: str = setting(
        "tiny",
        "A preset (tiny, llama-3-8b, ...) or a local Hugging Face directory; with device sim "
        "any perfmodel.models name (llama-3-70b, ...), since no weights are loaded.",
    )
    served_model_name: str | None = setting(
        None, "The name clients send (default: the model's preset or folder name)."
    )
    # Emulated bf16 matmuls are slower than fp32, so "auto" takes bf16 on a CPU only where it
    # is native (AVX512-BF16 or AMX: 2-3x faster matmuls than fp32).
    dtype: Dtype = setting(
        "auto",
        "Weights and activations; auto: bfloat16 on CUDA, on a CPU the checkpoint's bfloat16 "
        "where the CPU has native bf16, else float32.",
    )
    device: str = setting("auto", "auto | cpu | cuda | cuda:N | sim (a simulated gpu, no weights).")
    seed: int = setting(0, "Seed of random weights and of unseeded sampling.", rule=at_least(0))
    max_model_len: int | None = setting(
        None,
        "Context length cap in tokens (default: the model's max_position_embeddings).",
        rule=at_least(2),
    )
    # Under the model, as vLLM has it: quantization decides which weights are loaded.
    quantization: Quantization = setting(
        "none",
        "Weight-only quantization of the decoder's linear layers: int8 (a scale per output "
        "channel) or int4 (a scale per group of inputs).",
    )
    quant_group_size: int = setting(32, "int4: input columns per scale.", rule=at_least(1))


@dataclass(frozen=True)
class CacheSettings(SettingsGroup):
    """The KV cache: its blocks, budget, layout, sharing and storage."""

    GROUP: ClassVar[str] = "cache"

    block_size: int = setting(16, "KV block size in tokens.", rule=POWER_OF_TWO)
    kv_cache_memory_bytes: int | None = setting(
        None,
        "KV cache budget in bytes (default: 512 MiB on CPU; on CUDA 90% of the GPU's memory less "
        "what is in use once the weights are loaded, perfmodel.capacity's one KV budget).",
        rule=at_least(1),
    )
    kv_layout: KVLayout = setting(
        "paged",
        "paged: blocks on demand; contiguous: each request reserves max_model_len tokens of "
        "consecutive blocks when admitted.",
    )
    enable_prefix_caching: bool | None = setting(
        None, "Reuse KV blocks of shared prefixes (default: on when paged, off when contiguous)."
    )
    kv_cache_dtype: KVCacheDtype = setting(
        "auto", "KV storage: auto (the model's dtype) or fp8 (e4m3 with per-layer scales)."
    )
    # Off is the lectures' first lesson, not a serving mode: without K/V reuse every step
    # recomputes the whole sequence, so a token costs a prefill of everything before it.
    kv_cache: bool = setting(
        True,
        "Reuse the K/V of earlier tokens; off: every decode step recomputes the whole sequence "
        "(prompt and output so far) as a prefill.",
    )

    def check_rules(self) -> None:
        if not self.kv_cache and self.enable_prefix_caching:
            raise SettingError(
                "enable_prefix_caching",
                "needs kv_cache on: with kv_cache off no K/V outlives its step",
            )
        if self.kv_layout == "contiguous" and self.enable_prefix_caching:
            raise SettingError(
                "enable_prefix_caching",
                "needs kv_layout='paged': a contiguous reservation cannot share blocks",
            )

    @property
    def prefix_caching(self) -> bool:
        """Whether prefix caching is on, with the default resolved."""
        if not self.kv_cache:
            return False
        if self.enable_prefix_caching is None:
            return self.kv_layout == "paged"
        return self.enable_prefix_caching


@dataclass(frozen=True)
class SchedulerSettings(SettingsGroup):
    """What runs in each step."""

    GROUP: ClassVar[str] = "scheduler"

    max_num_seqs: int = setting(256, "Most requests in the running batch.", rule=at_least(1))
    max_num_batched_tokens: int = setting(
        2048,
        "Token budget of one step (2048: vLLM's default for its CPU OpenAI server).",
        rule=at_least(1),
    )
    enable_chunked_prefill: bool = setting(
        True, "Split long prompts across steps within the token budget."
    )
    batching: Batching = setting(
        "continuous",
        "continuous: admit requests every step; static: admit a batch when the engine is "
        "empty, and no request joins until all of it finishes.",
    )
    step_delay_ms: float = setting(
        0.0,
        "Sleep this long in every step: a deliberately slower engine, to test that regression "
        "gates catch a real slowdown. Never set it for a measurement.",
        rule=at_least(0),
    )
    step_spin_ms: float = setting(
        0.0,
        "Burn this much CPU time (the engine thread's own) in every step: a deliberately slower "
        "engine whose extra work CPU-time figures see, where step_delay_ms's sleep is invisible "
        "to them. For testing gates; never set it for a measurement.",
        rule=at_least(0),
    )


@dataclass(frozen=True)
class ParallelSettings(SettingsGroup):
    """How the work is spread: over GPUs (tensor parallel) and over CPU threads."""

    GROUP: ClassVar[str] = "parallel"

    tp: int = setting(
        1, "Tensor-parallel GPUs sharing the model (the simulated device only).", rule=at_least(1)
    )
    num_threads: int | None = setting(
        None,
        "torch threads (default: the engine core process takes all cores but one).",
        rule=at_least(1),
    )
    # A step that is mostly prefill (engine.llm_engine.BURST_PREFILL_RATIO) is a burst of
    # arrivals: few streams are being served, so the HTTP front's core is free for matmuls.
    prefill_num_threads: int | None = setting(
        None,
        "torch threads for a step that is mostly prefill (default: all cores when num_threads "
        "is unset too, else num_threads throughout).",
        rule=at_least(1),
    )


@dataclass(frozen=True)
class SpeculativeSettings(SettingsGroup):
    """Speculative decoding: who drafts, and how many tokens a step verifies."""

    GROUP: ClassVar[str] = "speculative"

    # Spelled `speculative` on the command line and in scenarios, as before the grouping.
    method: SpeculativeMethod = setting(
        "off",
        "off | ngram (prompt lookup proposes what followed an earlier n-gram) | draft (a draft "
        "model proposes).",
        name="speculative",
    )
    num_speculative_tokens: int = setting(3, "Draft tokens per step (k).", rule=at_least(1))
    prompt_lookup_min: int = setting(2, "ngram: the shortest n-gram matched.", rule=at_least(1))
    prompt_lookup_max: int = setting(4, "ngram: the longest n-gram matched.", rule=at_least(1))
    draft_model: str | None = setting(
        None, "draft: a preset or HF directory with the same vocabulary (its own KV cache)."
    )
    draft_num_layers: int | None = setting(
        None,
        "draft: the target's first L layers as a self-speculative draft (sharing its cache).",
        rule=at_least(1),
    )

    def check_rules(self) -> None:
        if self.prompt_lookup_max < self.prompt_lookup_min:
            raise SettingError(
                "prompt_lookup_max",
                f"must be >= prompt_lookup_min ({self.prompt_lookup_min}), "
                f"got {self.prompt_lookup_max}",
            )
        if self.method == "draft" and (self.draft_model is None) == (self.draft_num_layers is None):
            raise SettingError(
                "draft_model",
                "or draft_num_layers: speculative='draft' needs exactly one, a preset or HF "
                "directory, or the target's first L layers as a self-speculative draft",
            )


@dataclass(frozen=True)
class KernelSettings(SettingsGroup):
    """Which kernels run: the C kernels of engine/native, or torch's operators."""

    GROUP: ClassVar[str] = "kernels"

    attention_backend: AttentionChoice = setting(
        "auto",
        "Attention: native (a C kernel reading K/V straight from the block table; CPU float32 "
        "and bfloat16), torch (gather, then batched matmuls; sdpa for prefills), naive (an "
        "explicit softmax(QK^T)V that materializes every score, the unfused baseline), auto "
        "(native where it builds and covers the dtypes, else torch).",
    )
    custom_ops: KernelChoice = setting(
        "auto",
        "vLLM's custom ops, the layers' kernels besides attention: native (C small-batch "
        "linear, fused add + RMSNorm, SiLU-and-mul; CPU float32 and bfloat16), torch, auto "
        "(native where it builds and covers the dtype).",
    )
    # The CUDA default since float32 replays gave the eager step's tokens on a GPU (bf16
    # differed by rounding only) and a step 4x shorter at batch 1 (issue 40).
    cuda_graphs: bool | None = setting(
        None,
        "Run pure decode steps as CUDA graph replays, captured per batch-size bucket (1, 2, 4, "
        "... up to max_num_seqs) and padded to it (default: on on a CUDA device with a KV "
        "cache of the model's dtype, off elsewhere; true needs a CUDA device).",
    )


@dataclass(frozen=True)
class SimSettings(SettingsGroup):
    """The simulated device (device sim, engine.sim.executor): no weights, roofline step times."""

    GROUP: ClassVar[str] = "sim"

    gpu: str | None = setting(
        None,
        "device sim: a GPU of perfmodel.hardware (a100-80gb, h100-sxm, h200, ...) or cpu, this "
        "machine as `bench calibrate` measured it.",
    )
    gpu_memory_utilization: float = setting(
        0.9,
        "device sim: the share of each GPU's memory the engine may use, weights and KV (the KV "
        "capacity as `bench capacity` gives it).",
        rule=in_range(0, 1, low_open=True),
    )
    sim_speedup: float = setting(
        1.0,
        "device sim: 1 runs in real time, s > 1 s times faster, 0 on a virtual clock (no "
        "sleeping, as `bench simulate`).",
        rule=at_least(0),
    )
    sim_acceptance_rate: float | None = setting(
        None,
        "device sim: the probability that each draft token is accepted (speculative decoding).",
        rule=in_range(0, 1),
    )
    sim_step_overhead_ms: float | None = setting(
        None,
        "device sim: host time per step (default: the calibration's for gpu cpu, else none).",
        rule=at_least(0),
    )
