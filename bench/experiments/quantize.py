"""`bench quantize`: quantized checkpoints made with llm-compressor, and how much each loses.

`make_checkpoint` runs one llm-compressor recipe on a local Hugging Face model folder:
  * rtn:  QuantizationModifier, round-to-nearest of each group's min/max (no data needed);
  * gptq: GPTQModifier, which quantizes column by column and updates the remaining columns to
    cancel the error on the calibration activations (their Hessian);
  * awq:  AWQModifier, which scales the input channels that carry large activations up before
    rounding (and the previous op's output down) so those weights keep more precision;
each writing weight-only integer weights (W4A16 / W8A16, `pack-quantized` compressed-tensors)
that engine/model/checkpoints and vLLM load. Calibration data are prompts of a scenario's
workload, built with the model's tokenizer as `bench run` builds them.

llm-compressor is the optional extra `[quantize]`; without it `make_checkpoint` raises
QuantizeError naming the extra. On a machine without an accelerator, llm-compressor 0.14's
AWQ pins its cached activations in page-locked memory, which torch refuses there; pinning only
speeds up copies to an accelerator, so it is skipped (`_no_pinning_without_accelerator`).
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.run.load_plan import build_plan
from bench.scenario.scenario import Scenario
from engine.tokenizer.for_model import tokenizer_for_model
from perfmodel.model_config import ModelConfig

METHODS = ("rtn", "gptq", "awq")  # importable without torch: the CLI's choices
EXTRA_HINT = "install the quantize extra: pip install 'llm-perf-lab[quantize]'"
# Files a model folder carries beside its weights that the quantized one needs too.
SIDE_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
              "generation_config.json", "chat_template.jinja")  # fmt: skip


class QuantizeError(ValueError):
    """A request `bench quantize` cannot carry out (one line: the field and the fix)."""


@dataclass(frozen=True)
class QuantScheme:
    """Weight-only integer quantization: bits (4 | 8), group_size (input columns per scale;
    None = one scale per output channel) and symmetric (no zero points)."""

    bits: int = 4
    group_size: int | None = 128
    symmetric: bool = True

    def name(self) -> str:
        groups = "channel" if self.group_size is None else f"g{self.group_size}"
        return f"W{self.bits}A16-{groups}-{'sym' if self.symmetric else 'asym'}"


def calibration_prompts(
    model_dir: Path, scenario: Scenario, count: int, skip: int = 0
) -> list[list[int]]:
    """Token ids of `count` prompts of `scenario`'s workload after its first `skip` (so
    evaluation prompts can differ from calibration ones), built with the model's tokenizer."""
    config = ModelConfig.from_hf_config(model_dir)
    tokenizer = tokenizer_for_model(str(model_dir), config.vocab_size, is_preset=False)
    wanted = skip + count
    if scenario.num_requests is None or scenario.num_requests < wanted:
        scenario = dataclasses.replace(scenario, num_requests=wanted)
    plan = build_plan(scenario, tokenizer)
    specs = [spec for session in plan.sessions for spec in session][skip:wanted]
    if len(specs) < count:
        raise QuantizeError(
            f"scenario {scenario.name!r} yields {len(specs) + skip} prompts, fewer than "
            f"{wanted}; lower --num-samples"
        )
    return [tokenizer.encode(spec.prompt) for spec in specs]


def make_checkpoint(
    model_dir: Path,
    out_dir: Path,
    method: str,
    scheme: QuantScheme,
    prompts: list[list[int]],
) -> Path:
    """Quantize `model_dir` with `method` and `scheme`, calibrated on `prompts` (token ids),
    into `out_dir` (config.json with its quantization_config, safetensors, tokenizer files).
    Raises QuantizeError for an unknown method or a missing llm-compressor."""
    if method not in METHODS:
        raise QuantizeError(f"--method {method!r} is not one of {', '.join(METHODS)}")
    try:
        from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
        from llmcompressor import oneshot
        from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier
        from llmcompressor.modifiers.transform.awq import AWQModifier
        from transformers import AutoModelForCausalLM
    except ImportError as exc:
        raise QuantizeError(
            f"bench quantize needs llm-compressor ({exc.name}); {EXTRA_HINT}"
        ) from exc
    from datasets import Dataset

    weights = QuantizationArgs(
        num_bits=scheme.bits,
        type="int",
        symmetric=scheme.symmetric,
        strategy="channel" if scheme.group_size is None else "group",
        group_size=scheme.group_size,
    )
    groups = {"group_0": QuantizationScheme(targets=["Linear"], weights=weights)}
    # lm_head stays in float, as the engine's own quantization keeps it
    # (engine/model/quantization/quantize.py).
    recipe: list[Any]
    if method == "gptq":
        recipe = [GPTQModifier(config_groups=groups, ignore=["lm_head"])]
    else:  # AWQ smooths the activation scales first, then rounds to nearest like RTN
        recipe = [QuantizationModifier(config_groups=groups, ignore=["lm_head"])]
        if method == "awq":
            recipe.insert(0, AWQModifier())
    data = Dataset.from_dict(
        {"input_ids": prompts, "attention_mask": [[1] * len(p) for p in prompts]}
    )
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype="auto")
    out_dir.mkdir(parents=True, exist_ok=True)
    with _no_pinning_without_accelerator(), _quiet_llmcompressor():
        oneshot(
            model=model,
            dataset=data,
            recipe=recipe,
            num_calibration_samples=len(prompts),
            max_seq_length=max(len(p) for p in prompts),
            output_dir=str(out_dir),
        )
    for name in SIDE_FILES:
        if (model_dir / name).is_file() and not (out_dir / name).exists():
            shutil.copy2(model_dir / name, out_dir / name)
    return out_dir


@contextmanager
def _no_pinning_without_accelerator() -> Iterator[None]:
    """Skip llm-compressor's pinning of cached activations where no accelerator exists (see
    the module docstring); restores it after."""
    import torch
    from llmcompressor.pipelines.cache import IntermediatesCache

    if torch.accelerator.is_available():
        yield
        return
    original = IntermediatesCache.pin_memory

    def skip(self: Any, *args: Any, **kwargs: Any) -> None:
        return None

    IntermediatesCache.pin_memory = skip  # type: ignore[method-assign]
    try:
        yield
    finally:
        IntermediatesCache.pin_memory = original  # type: ignore[method-assign]


@contextmanager
def _quiet_llmcompressor() -> Iterator[None]:
    """llm-compressor logs each lifecycle step at INFO through loguru; keep the terminal to
    bench's own lines (warnings and errors still show)."""
    from loguru import logger

    logger.disable("llmcompressor")
    try:
        yield
    finally:
        logger.enable("llmcompressor")
