"""The engine's lines of the GPU check: logits against the CPU, decode MBU and step timing of
Llama-3-8B shapes, fp8 KV and int8/int4 weights against bf16, speculation with a draft model,
CUDA graphs on against off.

The 8B checks share one bf16 reference (:class:`Reference`), measured once: a warm-up, then
batches of 1 and 32 for speed and MBU, and a batch of 8 whose logits are kept for the
quality comparisons. Weights are random (the preset's shapes, no download); the same seed gives
every 8B engine the same target weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import torch

from benchmarks.gpu_checks.engine_runs import (
    LLAMA_8B,
    GreedyRun,
    build,
    median_forward_s,
    prompts,
    run_greedy,
)
from benchmarks.gpu_checks.figures import (
    TIMING_TOLERANCE,
    decode_mbu,
    logit_error,
    timing_agreement,
    token_agreement,
)
from benchmarks.gpu_checks.rows import Row, passed, skipped
from engine.config import EngineConfig, SettingError

# Targets. MBU of a batch-1 decode step: weights read once per token, so a GPU path that is
# not host-bound reaches most of the part's bandwidth.
MBU_TARGET_BATCH_1 = 0.75
# Logits of the tiny preset in float32 on CUDA against the CPU (TF32 off): rounding only.
TINY_LOGIT_TOLERANCE = 1e-4
# Relative logit error (figures.logit_error) a lossy storage may add on random weights.
LOGIT_TOLERANCE = {"fp8 KV cache": 0.1, "int8 weights": 0.05, "int4 weights": 0.2}
# A quantized engine is worth running only where it is not slower than bf16 (median step).
MAX_SLOWDOWN = 1.05

# The engine the 8B lines measure, and the separate draft model of the speculation line.
TARGET: dict[str, Any] = LLAMA_8B
DRAFT_MODEL = "llama-3-8b"

PROMPT_TOKENS = 128
DECODE_TOKENS = 48
QUALITY_SEQS, QUALITY_TOKENS, QUALITY_LOGIT_CALLS = 8, 8, 4


def cuda_graphs_available() -> str | None:
    """None when EngineConfig has the kernels setting ``cuda_graphs``, else why not."""
    try:
        EngineConfig.from_flat({**TARGET, "cuda_graphs": True})
    except SettingError as exc:
        return f"setting not available ({exc})"
    return None


def _settings(**overrides: Any) -> dict[str, Any]:
    # With the setting present, the reference says off explicitly, whatever the default is.
    base = {**TARGET, **({"cuda_graphs": False} if cuda_graphs_available() is None else {})}
    return {**base, **overrides}


@dataclass
class Measured:
    """An 8B engine's runs: speed at batches 1 and 32, and the quality batch."""

    batch_1: GreedyRun
    batch_32: GreedyRun
    quality: GreedyRun


def measure(settings: dict[str, Any]) -> Measured:
    """Build an engine of ``settings``, warm it up, then run the quality batch and batches of 1
    and 32."""
    engine = build(settings)
    vocab = engine.model_config.vocab_size
    run_greedy(engine, prompts(2, 32, vocab, seed=99), 4)  # kernels chosen, caches warm
    quality = run_greedy(
        engine, prompts(QUALITY_SEQS, PROMPT_TOKENS, vocab), QUALITY_TOKENS,
        capture_logits=QUALITY_LOGIT_CALLS,
    )  # fmt: skip
    batch_1 = run_greedy(engine, prompts(1, PROMPT_TOKENS, vocab, seed=1), DECODE_TOKENS)
    batch_32 = run_greedy(engine, prompts(32, PROMPT_TOKENS, vocab, seed=2), DECODE_TOKENS)
    return Measured(batch_1, batch_32, quality)


class Reference:
    """The bf16 8B reference, measured on first use and shared by the checks."""

    @cached_property
    def runs(self) -> Measured:
        return measure(_settings())


def check_logits(_: Reference, name: str) -> Row:
    settings = {"model": "tiny", "dtype": "float32", "seed": 0, "max_model_len": 256}
    batch = prompts(4, 32, 4096)
    allow_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32
    try:
        cpu = build({**settings, "device": "cpu"})
        cuda = build({**settings, "device": "cuda"})
        # Random weights are drawn per device; the CUDA engine gets the CPU engine's.
        cuda.executor.model.load_state_dict(cpu.executor.model.state_dict())  # type: ignore[attr-defined]
        ref = run_greedy(cpu, batch, 8, capture_logits=8)
        got = run_greedy(cuda, batch, 8, capture_logits=8)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    errors = [logit_error(a, b) for a, b in zip(got.logits, ref.logits, strict=False)]
    worst = max(errors) if errors else float("inf")
    same = got.tokens == ref.tokens
    return passed(
        name, worst <= TINY_LOGIT_TOLERANCE and same,
        f"rel. logit error {worst:.1e} (<= {TINY_LOGIT_TOLERANCE:.0e}), tokens "
        f"{'identical' if same else 'differ'}",
        f"{len(errors)} logit calls compared", max_rel_logit_error=worst, tokens_identical=same,
    )  # fmt: skip


def _decode_row(name: str, run: GreedyRun, num_seqs: int, target: float | None) -> Row:
    got = decode_mbu(run.steps, run.analytic, num_seqs)
    mbu = got["mbu"]
    if mbu is None:
        why = run.analytic.get("roofs_reason") or f"no pure decode steps of {num_seqs}"
        return Row(name, "MISS", detail=f"no MBU: {why}", values=got)
    ms = got["forward_s"] * 1e3
    tok_s = num_seqs / got["forward_s"]
    if target is None:  # reported beside the batch-1 target, not judged
        return Row(
            name, "PASS", f"MBU {mbu:.2f}", f"decode step {ms:.2f} ms, {tok_s:,.0f} tok/s",
            {**got, "tok_s": tok_s},
        )  # fmt: skip
    return passed(
        name, mbu >= target, f"MBU {mbu:.2f} (>= {target:.2f})",
        f"decode step {ms:.2f} ms, {tok_s:,.0f} tok/s, roof "
        f"{run.analytic['roofs']['bytes_per_s'] / 1e12:.2f} TB/s",
        **got, tok_s=tok_s,
    )  # fmt: skip


def check_decode_batch_1(ref: Reference, name: str) -> Row:
    return _decode_row(name, ref.runs.batch_1, 1, MBU_TARGET_BATCH_1)


def check_decode_batch_32(ref: Reference, name: str) -> Row:
    return _decode_row(name, ref.runs.batch_32, 32, None)


def check_timing_truth(ref: Reference, name: str) -> Row:
    runs = [ref.runs.batch_1, ref.runs.batch_32]
    host = [s for run in runs for s in run.steps["forward_s"].tolist()]
    truth = [s for run in runs for s in run.event_s]
    got = timing_agreement(host, truth)
    return passed(
        name, got["ok"],
        f"sum forward_s / sum events - 1 = {got['total_rel_error']:+.2%} "
        f"(within {TIMING_TOLERANCE:.0%})",
        f"{got['steps']} steps, worst step {got['worst_step_rel_error']:.1%}", **got,
    )  # fmt: skip


def _against_bf16(name: str, storage: str, ref: Reference, overrides: dict[str, Any]) -> Row:
    measured = measure(_settings(**overrides))
    base = ref.runs
    # Compare logits while every sequence's inputs were still the same: up to and including
    # the first call whose greedy choices differ.
    errors = []
    for got, want in zip(measured.quality.logits, base.quality.logits, strict=False):
        errors.append(logit_error(got, want))
        if not np.array_equal(got.argmax(-1), want.argmax(-1)):
            break
    worst = max(errors)
    agree = token_agreement(measured.quality.tokens, base.quality.tokens)
    ratios = {}
    for phase, run, want in (
        ("prefill", measured.quality, base.quality),
        ("decode", measured.batch_32, base.batch_32),
    ):
        a, b = median_forward_s(run.steps, phase), median_forward_s(want.steps, phase)
        ratios[phase] = a / b if a and b else float("inf")
    tolerance = LOGIT_TOLERANCE[storage]
    ok = worst <= tolerance and max(ratios.values()) <= MAX_SLOWDOWN
    return passed(
        name, ok,
        f"rel. logit error {worst:.3f} (<= {tolerance}), step time x{ratios['prefill']:.2f} "
        f"prefill, x{ratios['decode']:.2f} decode (<= {MAX_SLOWDOWN})",
        f"greedy tokens agree {agree:.0%}", max_rel_logit_error=worst, token_agreement=agree,
        prefill_time_ratio=ratios["prefill"], decode_time_ratio=ratios["decode"],
    )  # fmt: skip


def check_fp8_kv(ref: Reference, name: str) -> Row:
    return _against_bf16(name, "fp8 KV cache", ref, {"kv_cache_dtype": "fp8"})


def check_int8(ref: Reference, name: str) -> Row:
    return _against_bf16(name, "int8 weights", ref, {"quantization": "int8"})


def check_int4(ref: Reference, name: str) -> Row:
    return _against_bf16(name, "int4 weights", ref, {"quantization": "int4"})


def check_speculation(ref: Reference, name: str) -> Row:
    """A separate draft model (another 8B of other random weights) beside the target, with the
    KV budget left to the engine (90% of free memory): both must fit, and greedy speculation
    must give the target's own tokens."""
    settings = _settings(speculative="draft", draft_model=DRAFT_MODEL, num_speculative_tokens=3)
    settings.pop("kv_cache_memory_bytes", None)
    engine = build(settings)
    vocab = engine.model_config.vocab_size
    run = run_greedy(engine, prompts(QUALITY_SEQS, PROMPT_TOKENS, vocab), QUALITY_TOKENS)
    stats = engine.spec_stats
    same = run.tokens == ref.runs.quality.tokens
    rate = stats.acceptance_rate
    return passed(
        name, same, f"greedy tokens {'identical to' if same else 'differ from'} the target's",
        f"acceptance rate {rate:.0%} over {stats.num_draft_tokens} draft tokens"
        if rate is not None else "no drafts verified",
        tokens_identical=same, acceptance_rate=rate, draft_tokens=stats.num_draft_tokens,
    )  # fmt: skip


def check_cuda_graphs(ref: Reference, name: str) -> Row:
    why = cuda_graphs_available()
    if why is not None:
        return skipped(name, why)
    measured = measure(_settings(cuda_graphs=True))
    same = all(
        a.tokens == b.tokens
        for a, b in ((measured.batch_1, ref.runs.batch_1), (measured.batch_32, ref.runs.batch_32))
    )
    ratios = {}
    for label, run, want in (("1", measured.batch_1, ref.runs.batch_1),
                             ("32", measured.batch_32, ref.runs.batch_32)):  # fmt: skip
        a, b = median_forward_s(run.steps, "decode"), median_forward_s(want.steps, "decode")
        ratios[label] = a / b if a and b else float("inf")
    faster = max(ratios.values()) < 1.0
    return passed(
        name, same and faster,
        f"tokens {'identical' if same else 'differ'}, decode step x{ratios['1']:.2f} at batch "
        f"1, x{ratios['32']:.2f} at 32 (< 1)",
        tokens_identical=same, decode_time_ratio_batch_1=ratios["1"],
        decode_time_ratio_batch_32=ratios["32"],
    )  # fmt: skip
