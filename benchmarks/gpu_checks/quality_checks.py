"""The lines of the GPU check that compare an 8B engine with the bf16 reference
(engine_checks.Reference): fp8 KV cache, int8 and int4 weights (logit error, step time), and
speculation with a draft model that is the target itself.

Quantized weights: the engine times its packed kernels against the bf16 matmul at start and
refuses them where slower (engine/model/quantization/timing.py), so a quantized engine slower
than bf16 *with that refusal said* is the expected result, a PASS naming the refusal; slower
without a refusal is a MISS (the engine's own timing missed it), and so is a logit error past
the storage's tolerance, whatever the speed.

Speculation: the draft model is a separate engine model (its own KV cache, the draft code
path) holding the target's own weights, so every draft token should be accepted: only bf16
rounding of a 1-position draft step against a k+1-position verify may reject one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks.gpu_checks import engine_checks
from benchmarks.gpu_checks.engine_checks import Measured, Reference
from benchmarks.gpu_checks.engine_runs import build, median_forward_s, prompts, run_greedy
from benchmarks.gpu_checks.figures import logit_error, token_agreement
from benchmarks.gpu_checks.rows import Row, passed, skipped

# Relative logit error (figures.logit_error) a lossy storage may add on random weights.
LOGIT_TOLERANCE = {"fp8 KV cache": 0.1, "int8 weights": 0.05, "int4 weights": 0.2}
# A quantized engine is worth running only where it is not slower than bf16 (median step).
MAX_SLOWDOWN = 1.05
# The least acceptance of a draft that is the target (module docstring).
MIN_SELF_ACCEPTANCE = 0.9
SPEC_TOKENS = 3


def quantized_row(
    name: str, storage: str, worst: float, agree: float, ratios: dict[str, float],
    refused: str | None,
) -> Row:  # fmt: skip
    """The judgement of a lossy storage against bf16 (module docstring): ``worst`` relative
    logit error, ``agree`` greedy token agreement, ``ratios`` step time over bf16's per phase
    ("prefill", "decode"), ``refused`` what the engine's kernel timing refused (or None)."""
    tolerance = LOGIT_TOLERANCE[storage]
    slower = max(ratios.values()) > MAX_SLOWDOWN
    figure = (
        f"rel. logit error {worst:.3f} (<= {tolerance}), step time x{ratios['prefill']:.2f} "
        f"prefill, x{ratios['decode']:.2f} decode"
    )
    values = {
        "max_rel_logit_error": worst,
        "token_agreement": agree,
        "refused": refused,
        "prefill_time_ratio": ratios["prefill"],
        "decode_time_ratio": ratios["decode"],
    }
    if worst > tolerance:
        return Row(name, "MISS", figure, f"wrong logits; greedy tokens agree {agree:.0%}", values)
    if slower and refused:
        return Row(name, "PASS", figure, f"slower than bf16 and refused by the engine, as "
                   f"designed: {refused}", values)  # fmt: skip
    if slower:
        return Row(name, "MISS", figure, f"slower than bf16 (> x{MAX_SLOWDOWN}) and not "
                   "refused by the engine's kernel timing", values)  # fmt: skip
    return Row(name, "PASS", figure, f"greedy tokens agree {agree:.0%}", values)


def _against_bf16(name: str, storage: str, ref: Reference, overrides: dict[str, Any]) -> Row:
    why = ref.unfit(f"the {storage} 8B engine", **overrides)
    if why:
        return skipped(name, why)
    measured: Measured = ref.measure(**overrides)
    base = ref.runs
    # Compare logits while every sequence's inputs were still the same: up to and including
    # the first call whose greedy choices differ.
    errors = []
    for got, want in zip(measured.quality.logits, base.quality.logits, strict=False):
        errors.append(logit_error(got, want))
        if not np.array_equal(got.argmax(-1), want.argmax(-1)):
            break
    agree = token_agreement(measured.quality.tokens, base.quality.tokens)
    ratios = {}
    for phase, run, want in (
        ("prefill", measured.quality, base.quality),
        ("decode", measured.batch_32, base.batch_32),
    ):
        a, b = median_forward_s(run.steps, phase), median_forward_s(want.steps, phase)
        ratios[phase] = a / b if a and b else float("inf")
    return quantized_row(name, storage, max(errors), agree, ratios, measured.refused)


def check_fp8_kv(ref: Reference, name: str) -> Row:
    return _against_bf16(name, "fp8 KV cache", ref, {"kv_cache_dtype": "fp8"})


def check_int8(ref: Reference, name: str) -> Row:
    return _against_bf16(name, "int8 weights", ref, {"quantization": "int8"})


def check_int4(ref: Reference, name: str) -> Row:
    return _against_bf16(name, "int4 weights", ref, {"quantization": "int4"})


def speculation_row(name: str, same: bool, rate: float | None, drafts: int) -> Row:
    """PASS when greedy speculation gave the target's tokens and a draft that is the target
    had at least MIN_SELF_ACCEPTANCE of its ``drafts`` tokens accepted."""
    ok = same and rate is not None and rate >= MIN_SELF_ACCEPTANCE
    said = f"{rate:.1%} of {drafts} draft tokens" if rate is not None else "no drafts verified"
    return passed(
        name, ok, f"acceptance {said} (>= {MIN_SELF_ACCEPTANCE:.0%}, draft = target)",
        f"greedy tokens {'identical to' if same else 'differ from'} the target's",
        tokens_identical=same, acceptance_rate=rate, draft_tokens=drafts,
    )  # fmt: skip


def check_speculation(ref: Reference, name: str) -> Row:
    """A separate draft model of the target's preset given the target's weights (module
    docstring)."""
    overrides = {"speculative": "draft", "draft_model": ref.settings()["model"],
                 "num_speculative_tokens": SPEC_TOKENS}  # fmt: skip
    why = ref.unfit("the 8B target with an 8B draft", weight_copies=2, **overrides)
    if why:
        return skipped(name, why)
    engine = build(ref.settings(**overrides))
    runner: Any = engine.executor
    runner.draft_model.load_state_dict(runner.model.state_dict())
    vocab = engine.model_config.vocab_size
    # The reference's quality batch (engine_checks' sizes, read there: tests shrink them).
    batch = prompts(engine_checks.QUALITY_SEQS, engine_checks.PROMPT_TOKENS, vocab)
    run = run_greedy(engine, batch, engine_checks.QUALITY_TOKENS)
    stats = engine.spec_stats
    same = run.tokens == ref.runs.quality.tokens
    return speculation_row(name, same, stats.acceptance_rate, stats.num_draft_tokens)
