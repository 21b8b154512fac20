"""The lines of the GPU check that compare an 8B engine with the bf16 reference
(engine_checks.Reference): fp8 KV cache, int8 and int4 weights (logits, step time), and
speculation with a draft model that is the target itself.

Storages are judged by bench.experiments.switch_quality's rule for lossy switches: the engine,
teacher-forced on the reference's greedy tokens, must match its emulation (the bf16 engine fed
exactly what the storage keeps) far closer than it matches the bf16 engine. A raw bound on the
logit error against bf16 cannot judge them at 8B shapes: random weights amplify every rounding
through 32 layers (measured on an H200: bf16 rounding alone moves the logits by 0.026, fp8's
3-bit mantissa by 0.28 and int4 by about 1.0, all from right paths). The error against bf16
and the greedy agreement are reported as the storage's cost.

Quantized weights: the engine times its packed kernels against the bf16 matmul at start and
refuses them where slower (engine/model/quantization/timing.py), so a quantized engine slower
than bf16 *with that refusal said* is the expected result, a PASS naming the refusal; slower
without a refusal is a MISS (the engine's own timing missed it).

Speculation: the draft model is a separate engine model (its own KV cache, the draft code
path) holding the target's own weights, in float32, so every draft token must be accepted and
the tokens must be the float32 target's.
"""

from __future__ import annotations

from typing import Any

from bench.experiments.forced_runs import GreedyLogits, LogitComparison, compare_logits
from bench.experiments.switch_quality import emulated_run, judge
from benchmarks.gpu_checks import engine_checks
from benchmarks.gpu_checks.engine_checks import FLOAT32, Reference
from benchmarks.gpu_checks.engine_runs import build, median_forward_s, prompts, run_greedy
from benchmarks.gpu_checks.rows import Row, passed, skipped
from engine.config import EngineConfig
from engine.model.weights import load_model_spec

# A quantized engine is worth running only where it is not slower than bf16 (median step).
MAX_SLOWDOWN = 1.05
# The least acceptance of a draft that is the target (module docstring).
MIN_SELF_ACCEPTANCE = 0.9
SPEC_TOKENS = 3


def quantized_row(
    name: str, against_off: LogitComparison, against_emulation: LogitComparison,
    verdict: tuple[bool, str], ratios: dict[str, float], refused: str | None,
) -> Row:  # fmt: skip
    """The judgement of a lossy storage (module docstring): its teacher-forced logits
    ``against_off`` (the bf16 engine) and ``against_emulation``, ``verdict`` (right, reason)
    from switch_quality.judge, ``ratios`` step time over bf16's per phase ("prefill",
    "decode"), ``refused`` what the engine's kernel timing refused (or None)."""
    right, reason = verdict
    slower = max(ratios.values()) > MAX_SLOWDOWN
    figure = (
        f"{against_emulation.rel_error:.2g} from its emulation, {against_off.rel_error:.3f} "
        f"from bf16 (top-1 {against_off.top1_agreement:.0%}); step time "
        f"x{ratios['prefill']:.2f} prefill, x{ratios['decode']:.2f} decode"
    )
    values = {
        "rel_logit_error": against_off.rel_error,
        "top1_agreement": against_off.top1_agreement,
        "emulation_rel_logit_error": against_emulation.rel_error,
        "right": right,
        "refused": refused,
        "prefill_time_ratio": ratios["prefill"],
        "decode_time_ratio": ratios["decode"],
    }
    if not right:
        return Row(name, "MISS", figure, f"wrong logits: {reason}", values)
    if slower and refused:
        return Row(name, "PASS", figure, f"slower than bf16 and refused by the engine, as "
                   f"designed: {refused}", values)  # fmt: skip
    if slower:
        return Row(name, "MISS", figure, f"slower than bf16 (> x{MAX_SLOWDOWN}) and not "
                   "refused by the engine's kernel timing", values)  # fmt: skip
    return Row(name, "PASS", figure, reason, values)


def _against_bf16(name: str, storage: str, ref: Reference, overrides: dict[str, Any]) -> Row:
    # The emulation is a second bf16 engine, built once the storage's engine is let go.
    why = ref.unfit(f"the {storage} 8B engine", **overrides)
    if why:
        return skipped(name, why)
    base = ref.runs
    measured = ref.measure(forced=base.logits.tokens, **overrides)
    against_off = compare_logits(measured.logits, base.logits)
    against_emulation = compare_logits(
        measured.logits, _emulated(ref, overrides, base.logits.tokens)
    )
    dtype = str(ref.settings()["dtype"])
    verdict = judge("lossy", dtype, False, against_off, against_emulation)
    ratios = {}
    for phase, run, want in (
        ("prefill", measured.quality, base.quality),
        ("decode", measured.batch_32, base.batch_32),
    ):
        a, b = median_forward_s(run.steps, phase), median_forward_s(want.steps, phase)
        ratios[phase] = a / b if a and b else float("inf")
    return quantized_row(name, against_off, against_emulation, verdict, ratios, measured.refused)


def _emulated(ref: Reference, overrides: dict[str, Any], forced: list[list[int]]) -> GreedyLogits:
    """The emulation's logits (switch_quality.emulated_run): the reference's engine fed what
    the storage of ``overrides`` keeps, teacher-forced on ``forced``."""
    config = EngineConfig.from_flat(ref.settings(**overrides))
    vocab = load_model_spec(config.model.model, shape_only=True)[0].vocab_size
    batch = prompts(engine_checks.QUALITY_SEQS, engine_checks.PROMPT_TOKENS, vocab)
    return emulated_run(ref.settings(), config, batch, engine_checks.QUALITY_TOKENS, forced)


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
    """A separate draft model of the target's preset given the target's weights, both in
    float32 (module docstring), against the float32 target's greedy tokens."""
    overrides = {"speculative": "draft", "draft_model": ref.settings()["model"],
                 "num_speculative_tokens": SPEC_TOKENS, **FLOAT32}  # fmt: skip
    why = ref.unfit("the float32 8B target with an 8B draft", weight_copies=2, **overrides)
    if why:
        return skipped(name, why)
    want = ref.float32_tokens.tokens
    engine = build(ref.settings(**overrides))
    runner: Any = engine.executor
    runner.draft_model.load_state_dict(runner.model.state_dict())
    vocab = engine.model_config.vocab_size
    # The reference's quality batch (engine_checks' sizes, read there: tests shrink them).
    batch = prompts(engine_checks.QUALITY_SEQS, engine_checks.PROMPT_TOKENS, vocab)
    run = run_greedy(engine, batch, engine_checks.QUALITY_TOKENS)
    stats = engine.spec_stats
    same = run.tokens == want
    return speculation_row(name, same, stats.acceptance_rate, stats.num_draft_tokens)
