"""How far a quantized checkpoint's logits are from its float model's, and how fast it decodes.

Both are measured on the reference engine: `prompt_logits` prefills one prompt through a
fresh paged KV cache and returns the logits at every position (teacher forcing, so both models
see the same tokens); `logit_error` compares two such matrices; `decode_speeds` times
greedy requests' decode steps (batch 1, the per-user speed) on whole `LLMEngine`s, the
models in turn.
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
    """float32 logits [len(token_ids), vocab] on the CPU: one prefill of the prompt, every
    position, on the model's device."""
    n, c = len(token_ids), model.config
    num_blocks = -(-n // _BLOCK_SIZE)
    weight = model.embed_tokens.weight
    device = weight.device
    meta = AttentionMetadata.build([n], [n], [list(range(num_blocks))], _BLOCK_SIZE, 0, device)
    shape = (2, num_blocks, _BLOCK_SIZE, c.num_key_value_heads, c.head_dim)
    caches = [torch.zeros(shape, dtype=weight.dtype, device=device)
              for _ in range(c.num_hidden_layers)]  # fmt: skip
    ids = torch.tensor(token_ids, dtype=torch.int64, device=device)
    with torch.inference_mode():
        hidden = model(ids, meta.token_positions(), caches, meta)
        return model.compute_logits(hidden).float().cpu()


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


def decode_speeds(
    directories: list[Path],
    prompt: list[int],
    max_tokens: int,
    settings: dict[str, Any],
    repeats: int = 3,
) -> list[DecodeSpeed]:
    """Time greedy requests of `max_tokens` (ignore_eos) on one reference engine per
    directory, with `settings` (flat engine settings; `model` is the directory).

    Every engine is built (and warmed up by one request) first; then `repeats` rounds each
    time one request per engine in turn, so that a change in the machine's load over the
    measurement touches every model alike. A request's rate is its tokens after the first
    over its time after the first (time.perf_counter_ns); each model gets the median of its
    rounds. All engines are held at once: their weights must fit in memory together."""
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    engines = []
    for directory in directories:
        engine = LLMEngine(EngineConfig.from_flat({**settings, "model": str(directory)}))
        engine.generate([prompt], params)  # warm-up: kernel probes, first-call allocations
        engines.append(engine)
    rates: list[list[float]] = [[] for _ in engines]
    for round_ in range(repeats):
        for i, engine in enumerate(engines):
            rates[i].append(_timed_request(engine, f"timed-{round_}", prompt, params))
    speeds = []
    for engine, mine in zip(engines, rates, strict=True):
        report = engine.quant_report
        speeds.append(
            DecodeSpeed(
                tokens_per_s=statistics.median(mine),
                weight_bytes=engine.weight_bytes,
                kernels=dict(report.kernels) if report is not None else {},
            )
        )
    return speeds


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
