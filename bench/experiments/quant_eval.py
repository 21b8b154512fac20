"""How far a quantized checkpoint's logits are from its float model's, and how fast it decodes.

Both are measured on the reference engine: `prompt_logits` prefills one prompt through a
fresh paged KV cache and returns the logits at every position (teacher forcing, so both models
see the same tokens); `logit_error` compares two such matrices; `decode_speed` times one
greedy request's decode steps (batch 1, the per-user speed) on a whole `LLMEngine`.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from engine.config import EngineConfig
from engine.core.request import SamplingParams
from engine.llm_engine import LLMEngine
from engine.model.attention import AttentionMetadata
from engine.model.checkpoints.load import load_quantized_model
from engine.model.llama import LlamaForCausalLM
from engine.model.weights import load_hf_directory

_BLOCK_SIZE = 16
_CPU = torch.device("cpu")


@dataclass(frozen=True)
class LogitError:
    """Candidate against reference logits over every position of every prompt.

    mean_kl: mean over positions of KL(p_ref || p_cand) in nats (softmax of the logits);
    max_abs_diff: the largest |logit_ref - logit_cand| anywhere; top1_agreement: the fraction
    of positions whose argmax agrees (what greedy decoding would pick)."""

    mean_kl: float
    max_abs_diff: float
    top1_agreement: float
    positions: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def float32_model(directory: Path) -> LlamaForCausalLM:
    """The model of a (quantized or float) checkpoint directory on the CPU in float32, so
    that the logits compared differ by the quantization alone, not by bf16 rounding."""
    config, weights_dir = load_hf_directory(directory)
    model, _ = load_quantized_model(config, weights_dir, torch.float32, _CPU, 0, "none", 32)
    return model


def prompt_logits(model: LlamaForCausalLM, token_ids: list[int]) -> torch.Tensor:
    """float32 logits [len(token_ids), vocab]: one prefill of the prompt, every position."""
    n, c = len(token_ids), model.config
    num_blocks = -(-n // _BLOCK_SIZE)
    meta = AttentionMetadata.build([n], [n], [list(range(num_blocks))], _BLOCK_SIZE, 0)
    dtype = model.embed_tokens.weight.dtype
    shape = (2, num_blocks, _BLOCK_SIZE, c.num_key_value_heads, c.head_dim)
    caches = [torch.zeros(shape, dtype=dtype) for _ in range(c.num_hidden_layers)]
    ids = torch.tensor(token_ids, dtype=torch.int64)
    with torch.inference_mode():
        hidden = model(ids, meta.token_positions(), caches, meta)
        return model.compute_logits(hidden).float()


def logit_error(reference: list[torch.Tensor], candidate: list[torch.Tensor]) -> LogitError:
    """Compare per-prompt logit matrices pairwise (same prompts, same order)."""
    ref, cand = torch.cat(reference), torch.cat(candidate)
    log_p, log_q = ref.log_softmax(-1), cand.log_softmax(-1)
    kl = (log_p.exp() * (log_p - log_q)).sum(-1)
    return LogitError(
        mean_kl=float(kl.mean()),
        max_abs_diff=float((ref - cand).abs().max()),
        top1_agreement=float((ref.argmax(-1) == cand.argmax(-1)).float().mean()),
        positions=int(ref.shape[0]),
    )


@dataclass(frozen=True)
class DecodeSpeed:
    """One model's batch-1 decode on the reference engine: tokens_per_s (decode tokens over
    decode seconds), weight_bytes (what its weights hold in memory) and kernels (the matmul
    of its quantized layers -> how many layers run it; empty for a float model)."""

    tokens_per_s: float
    weight_bytes: int
    kernels: dict[str, int]


def decode_speed(
    directory: Path,
    prompt: list[int],
    max_tokens: int,
    settings: dict[str, Any],
    repeats: int = 3,
) -> DecodeSpeed:
    """Time greedy requests of `max_tokens` (ignore_eos) on the reference engine with
    `settings` (flat engine settings; `model` is `directory`), one at a time: each request's
    tokens after the first over its time after the first (time.perf_counter_ns); the median
    of `repeats` requests, after one warm-up request."""
    engine = LLMEngine(EngineConfig.from_flat({**settings, "model": str(directory)}))
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    engine.generate([prompt], params)  # warm-up: kernel probes, first-call allocations
    rates = [_timed_request(engine, f"timed-{i}", prompt, params) for i in range(repeats)]
    report = engine.quant_report
    return DecodeSpeed(
        tokens_per_s=statistics.median(rates),
        weight_bytes=engine.weight_bytes,
        kernels=dict(report.kernels) if report is not None else {},
    )


def _timed_request(
    engine: LLMEngine, request_id: str, prompt: list[int], params: SamplingParams
) -> float:
    engine.add_request(request_id, prompt, params)
    produced = first_count = first_ns = 0
    while engine.has_unfinished_requests():
        for out in engine.step():
            produced += len(out.new_token_ids)
        if produced and not first_ns:
            first_ns, first_count = time.perf_counter_ns(), produced
    return (produced - first_count) / ((time.perf_counter_ns() - first_ns) / 1e9)
