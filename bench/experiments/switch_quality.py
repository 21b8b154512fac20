"""Is an engine switch's output right, and what does it cost? The quality of one setting
against the same engine without it, on the same prompts and weights.

Every switch that can change numbers is declared once in ``NUMERIC_SWITCHES``, as one of:
  * exact: it changes how the work is scheduled or computed, never what is computed (prefix
    caching, chunked prefill, speculation, CUDA graphs, static batching, the attention and
    kernel backends, the KV layout and block size). In float32 its greedy tokens must be the
    engine's without it, and its teacher-forced logits equal to rounding; in 16-bit another
    batch shape rounds differently, and a flat logit's near tie may flip, so there it must stay
    within ``ROUNDING_16BIT`` of the logits.
  * lossy: it stores something in fewer bits (the fp8 KV cache, int8 and int4 weights). Its
    cost is its teacher-forced logit error and top-1 agreement against the engine without it.
    Whether it is *right* is judged against its emulation, the same engine in its own dtype fed
    exactly what the storage keeps (K/V rounded through fp8, weights rounded to their int8 or
    int4 codes, engine.model): a right path matches its emulation up to the kernels' rounding,
    at most ``EMULATION_SHARE`` of its distance to the unswitched engine; a wrong path (a
    scale, a packing or a cache read gone astray) is at least as far from its emulation as
    from the float engine. The criterion holds at any depth and width, where a bound on the
    raw logit error cannot: a random model's errors grow with its depth (measured on
    Llama-3-8B shapes: the same int4 storage gives 0.37 at 2 layers and about 1.0 at 32).
"""

from __future__ import annotations

import gc
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Literal

import torch

from bench.experiments.forced_runs import GreedyLogits, LogitComparison, compare_logits
from bench.experiments.forced_runs import greedy_logits as run_greedy
from bench.scenario.engine_sets import SettingValue
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.model.kv_dtype import resolve_kv_cache_dtype
from engine.model.llama import LlamaForCausalLM
from engine.model.quantization.quantize import fake_quantize_model
from engine.model.weights import load_model_spec
from perfmodel.files import JSONObject, JSONView

# A right lossy path is at most this share of its distance to the unswitched engine away from
# its emulation. Measured on Llama-3-8B shapes cut to 2 layers (float32, CPU): fp8 KV 0.0 of
# 0.07 (bit-exact), int8 0.2 of 0.04 and int4 0.03 of 0.37 (the packed kernels cast activations
# to bfloat16); a path that misreads its storage is 1x or more.
EMULATION_SHARE = 0.5
# Below this relative logit error a candidate equals its reference outright (float32 rounding
# of another order of operations, amplified through the layers).
FLOAT32_EXACT = 1e-4
# An exact switch in a 16-bit model: bf16 rounding of another batch shape, measured 0.026 of
# the logits on Llama-3-8B (32 layers, an H200, CUDA graphs on against off).
ROUNDING_16BIT = 0.05

# The comparison's prompts where a command picks them (`bench techniques`, `bench ablate`):
# seeded random ids, as many and as long as a quick workload's.
QUALITY_PROMPTS, QUALITY_PROMPT_TOKENS, QUALITY_TOKENS = 4, 48, 12

Kind = Literal["exact", "lossy"]
Emulation = Callable[[LlamaForCausalLM, EngineConfig], None]


def _emulate_fp8_cache(model: LlamaForCausalLM, config: EngineConfig) -> None:
    model.emulate_kv_storage(resolve_kv_cache_dtype(config.cache.kv_cache_dtype, torch.float32))


def _emulate_weights(model: LlamaForCausalLM, config: EngineConfig) -> None:
    fake_quantize_model(model, config.model.quantization, config.model.quant_group_size)


@dataclass(frozen=True)
class NumericSwitch:
    """How a setting changes the numbers: ``kind``, and for a lossy one the ``emulation``
    applied to an unswitched engine's model (with the switched engine's config) and the
    settings that emulation needs (``emulation_settings``)."""

    setting: str
    kind: Kind
    emulation: Emulation | None = None
    emulation_settings: Mapping[str, SettingValue] | None = None


# The settings that change how work is scheduled or computed, never what is computed.
_EXACT = (
    "enable_prefix_caching", "enable_chunked_prefill", "max_num_batched_tokens", "speculative",
    "num_speculative_tokens", "cuda_graphs", "batching", "attention_backend", "custom_ops",
    "kv_layout", "block_size", "kv_cache", "max_num_seqs", "draft_model", "draft_num_layers",
    "prompt_lookup_min", "prompt_lookup_max", "num_threads", "prefill_num_threads",
    "kv_cache_memory_bytes", "max_model_len", "step_delay_ms", "step_spin_ms",
)  # fmt: skip
NUMERIC_SWITCHES: dict[str, NumericSwitch] = {
    s.setting: s
    for s in (
        # The C decode stack writes its cache itself: the emulation takes the torch path,
        # which the fp8 cache takes too (the C kernels read no fp8).
        NumericSwitch(
            "kv_cache_dtype", "lossy", _emulate_fp8_cache, {"attention_backend": "torch"}
        ),
        NumericSwitch("quantization", "lossy", _emulate_weights),
        NumericSwitch("quant_group_size", "lossy", _emulate_weights),
        *(NumericSwitch(name, "exact") for name in _EXACT),
    )
}


@dataclass(frozen=True)
class SwitchQuality:
    """The quality of the settings ``on`` against the engine without them (module docstring):
    ``kind`` is lossy where any of them is.

    against_off: teacher-forced logits against the unswitched engine's greedy run (None for a
    speculating engine, which cannot be forced); against_emulation: the same against the
    emulated storage (lossy switches); greedy_identical: whether the free greedy tokens equal
    the unswitched engine's; right: the verdict, with ``reason`` in one line."""

    on: dict[str, SettingValue]
    kind: Kind
    dtype: str
    greedy_identical: bool
    against_off: LogitComparison | None
    against_emulation: LogitComparison | None
    right: bool
    reason: str

    def to_dict(self) -> JSONObject:
        return asdict(self)


def numeric_switch(setting: str) -> NumericSwitch | None:
    """The declaration of ``setting``, or None for a setting that changes no number."""
    return NUMERIC_SWITCHES.get(setting)


def measure_switch_quality(
    settings: Mapping[str, SettingValue],
    on: Mapping[str, SettingValue],
    prompts: Sequence[Sequence[int]],
    max_tokens: int,
    off: GreedyLogits | None = None,
) -> SwitchQuality:
    """Build the engine of flat ``settings`` (EngineConfig.from_flat's names) without and with
    the settings ``on`` (one switch, or several judged together: lossy where any is, every
    lossy one emulated), one engine at a time, and judge them on ``prompts`` (``max_tokens``
    greedy tokens each). ``off``: the unswitched engine's greedy_logits run of the same
    prompts, where the caller has it (several switches share one). Raises ValueError when a
    setting of ``on`` is not declared in NUMERIC_SWITCHES."""
    switches = [numeric_switch(name) for name in on]
    unknown = [name for name, sw in zip(on, switches, strict=True) if sw is None]
    if unknown or not on:
        raise ValueError(f"{', '.join(unknown) or 'no setting'}: NUMERIC_SWITCHES declares the "
                         "settings whose numbers can be judged")  # fmt: skip
    lossy = [sw for sw in switches if sw is not None and sw.kind == "lossy"]
    kind: Kind = "lossy" if lossy else "exact"
    if off is None:
        off = settings_run(settings, prompts, max_tokens)
    engine = _engine({**settings, **on})
    dtype = str(engine.dtype).removeprefix("torch.")
    forced = None
    if engine.proposer is None:
        forced = run_greedy(engine, prompts, max_tokens, forced=off.tokens)
        # Where every forced step's own choice is the forced token, a free run takes the same
        # steps and so the same tokens (by induction over the steps): no run to make.
        identical = forced.chooses(off.tokens)
    else:
        identical = run_greedy(engine, prompts, max_tokens).tokens == off.tokens
    config = engine.config
    del engine
    against_off = compare_logits(forced, off) if forced is not None else None
    against_emulation = None
    if lossy and forced is not None:
        reference = emulated_run(settings, config, prompts, max_tokens, off.tokens)
        against_emulation = compare_logits(forced, reference)
    right, reason = judge(kind, dtype, identical, against_off, against_emulation)
    return SwitchQuality(dict(on), kind, dtype, identical, against_off, against_emulation,
                         right, reason)  # fmt: skip


def emulated_run(
    settings: Mapping[str, SettingValue], config: EngineConfig, prompts: Sequence[Sequence[int]],
    max_tokens: int, forced: list[list[int]],
) -> GreedyLogits:  # fmt: skip
    """The engine of flat ``settings`` (without the switches) fed what every lossy storage of
    the switched engine's ``config`` keeps, each emulation applied once, teacher-forced on
    ``forced``."""
    base, switched = EngineConfig.from_flat(dict(settings)).to_flat(), config.to_flat()
    lossy = [sw for sw in NUMERIC_SWITCHES.values()
             if sw.kind == "lossy" and switched[sw.setting] != base[sw.setting]]  # fmt: skip
    extra: dict[str, SettingValue] = {}
    for sw in lossy:
        extra.update(sw.emulation_settings or {})
    engine = _engine({**settings, **extra})
    for emulation in dict.fromkeys(sw.emulation for sw in lossy if sw.emulation is not None):
        emulation(engine.executor.model, config)  # type: ignore[attr-defined]
    try:
        return run_greedy(engine, prompts, max_tokens, forced=forced)
    finally:
        del engine


def judge(
    kind: Kind,
    dtype: str,
    greedy_identical: bool,
    against_off: LogitComparison | None,
    against_emulation: LogitComparison | None,
) -> tuple[bool, str]:
    """(right, reason) by the module docstring's rules."""
    if kind == "exact":
        if dtype == "float32":
            if not greedy_identical:
                return False, "float32 greedy tokens differ from the engine without it"
            if against_off is not None and against_off.rel_error > FLOAT32_EXACT:
                return False, (f"float32 logits differ by {against_off.rel_error:.1e} "
                               f"(> {FLOAT32_EXACT:.0e})")  # fmt: skip
            return True, "float32 tokens identical"
        if against_off is None:
            return greedy_identical, (
                "greedy tokens identical" if greedy_identical else
                f"{dtype} greedy tokens differ (no forced logits to tell rounding apart)"
            )  # fmt: skip
        ok = against_off.rel_error <= ROUNDING_16BIT
        return ok, (f"{dtype} logits within {against_off.rel_error:.3f} "
                    f"({'<=' if ok else '>'} {ROUNDING_16BIT} of rounding)")  # fmt: skip
    if against_off is None or against_emulation is None:
        return False, "not compared: the lossy switch needs a teacher-forced run"
    emulation, cost = against_emulation.rel_error, against_off.rel_error
    if emulation <= FLOAT32_EXACT or emulation <= EMULATION_SHARE * cost:
        return True, (f"{emulation:.2g} from its emulated storage, {cost:.3f} from the engine "
                      "without it")  # fmt: skip
    return False, (
        f"{emulation:.3f} from its emulated storage against {cost:.3f} from the "
        f"engine without it (> {EMULATION_SHARE:.0%}): the path misreads its storage"
    )


def _engine(settings: Mapping[str, SettingValue]) -> LLMEngine:
    gc.collect()  # an engine holds reference cycles: free the last one's weights first
    return LLMEngine(EngineConfig.from_flat(dict(settings)))


def quality_prompts(vocab_size: int, seed: int = 0) -> list[list[int]]:
    """QUALITY_PROMPTS prompts of QUALITY_PROMPT_TOKENS seeded random ids (>= 3: none of the
    usual special tokens)."""
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab_size) for _ in range(QUALITY_PROMPT_TOKENS)]
            for _ in range(QUALITY_PROMPTS)]  # fmt: skip


def judged_settings(
    settings: Mapping[str, SettingValue], on: Mapping[str, SettingValue]
) -> tuple[dict[str, SettingValue], dict[str, SettingValue]] | None:
    """The (unswitched, switched) settings a command judges a comparison with: float32, so
    that an exact switch is held to identical tokens; None where a setting of ``on`` is not a
    numeric switch (another model, dtype or seed: nothing to compare) or the engine runs on
    the simulated device (no numbers at all)."""
    if not on or any(numeric_switch(name) is None for name in on):
        return None
    base = {**settings, "dtype": "float32"}
    if str(base.get("device", "")) == "sim":
        return None
    return base, dict(on)


def judged_quality(
    settings: Mapping[str, SettingValue], on: Mapping[str, SettingValue]
) -> SwitchQuality | None:
    """A command's judgement of ``on`` against the engine of ``settings``: judged_settings'
    float32 engines on quality_prompts of the model's vocabulary, QUALITY_TOKENS each; None
    where judged_settings finds nothing to compare."""
    judged = judged_settings(settings, on)
    if judged is None:
        return None
    base, switched = judged
    model = EngineConfig.from_flat(dict(base)).model.model
    prompts = quality_prompts(load_model_spec(model, shape_only=True)[0].vocab_size)
    return measure_switch_quality(base, switched, prompts, QUALITY_TOKENS)


def settings_run(
    settings: Mapping[str, SettingValue], prompts: Sequence[Sequence[int]], max_tokens: int
) -> GreedyLogits:
    """The greedy_logits run of a fresh engine of flat ``settings``, the engine let go after."""
    engine = _engine(settings)
    try:
        return run_greedy(engine, prompts, max_tokens)
    finally:
        del engine


def quality_text(quality: JSONView | None, missing: str = "another model") -> str:
    """A SwitchQuality's dict as one cell: the verdict first, then what it rests on;
    ``missing`` says why a comparison has no quality."""
    if quality is None:
        return f"- ({missing}: not compared)"
    head = "right" if quality["right"] else "WRONG OUTPUT"
    off = quality.get("against_off")
    figures = []
    if off is not None:
        figures.append(f"logit error {off['rel_error']:.2g}, top-1 {off['top1_agreement']:.0%}")
    figures.append(f"greedy tokens {'identical' if quality['greedy_identical'] else 'differ'}")
    return f"{head} ({quality['kind']}): {'; '.join(figures)}; {quality['reason']}"
