"""Greedy runs of a reference engine with every sampled step's logits kept, optionally
teacher-forced: the raw material of bench.experiments.switch_quality.

A teacher-forced run feeds each sequence a given continuation (another engine's greedy tokens)
instead of its own choices, so that at every step both engines see the same context and their
logits can be compared row for row. A free greedy run compared after its first different token
compares two different contexts: that is how a correct fp8 cache once read as "garbage"
(logit error 0.98) on a random model whose flat logits flip a near tie early.

The run drives the engine's own scheduler and executor (the switch under test runs exactly as
it serves); only the executor's answer is replaced by the forced token, and the model's
``compute_logits`` is wrapped to copy each step's rows to the host.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from engine.core.request import SamplingParams
from engine.llm_engine import LLMEngine

_IDS = itertools.count()


@dataclass(frozen=True)
class GreedyLogits:
    """One greedy batch: each sequence's tokens (forced or chosen) and, per sequence, the fp32
    logits [len(tokens), vocab] that chose (or were compared with) each of them."""

    tokens: list[list[int]]
    logits: list[np.ndarray]

    def chooses(self, tokens: Sequence[Sequence[int]]) -> bool:
        """Whether every step's greedy choice (its logits' argmax) is the given token."""
        return len(tokens) == len(self.logits) and all(
            len(rows) == len(want) and rows.argmax(-1).tolist() == list(want)
            for rows, want in zip(self.logits, tokens, strict=True)
        )


def greedy_logits(
    engine: LLMEngine,
    prompts: Sequence[Sequence[int]],
    max_tokens: int,
    forced: Sequence[Sequence[int]] | None = None,
    fresh_prefix_cache: bool = True,
) -> GreedyLogits:
    """Run ``prompts`` at once, greedy and ignoring EOS, for ``max_tokens`` tokens each (or as
    many as ``forced`` gives each), keeping every sampled step's logits (none for an engine
    that speculates: its verify steps score drafts, not one next token per sequence).

    ``forced``: one continuation per prompt; each step then appends the forced token whatever
    the engine chose. Raises ValueError for an engine that speculates (a step that verifies
    drafts yields several tokens from one forward, so no continuation can be forced through
    it; compare such an engine's free tokens instead) or for a ``forced`` of the wrong shape.
    """
    if forced is not None and (
        len(forced) != len(prompts) or any(len(f) != max_tokens for f in forced)
    ):
        raise ValueError(f"forced needs {len(prompts)} continuations of {max_tokens} tokens")
    if forced is not None and engine.proposer is not None:
        raise ValueError("a speculating engine cannot be teacher-forced; compare its tokens")
    ids = [f"forced-{next(_IDS)}-{i}" for i in range(len(prompts))]
    tokens: dict[str, list[int]] = {rid: [] for rid in ids}
    rows: dict[str, list[np.ndarray]] = {rid: [] for rid in ids}
    forced_of = dict(zip(ids, forced, strict=True)) if forced is not None else {}
    if fresh_prefix_cache:
        engine.reset_prefix_cache()
    undo = _wrap(engine, rows, forced_of) if engine.proposer is None else lambda: None
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    try:
        for rid, prompt in zip(ids, prompts, strict=True):
            engine.add_request(rid, list(prompt), params)
        while engine.has_unfinished_requests():
            for out in engine.step():
                tokens[out.request_id].extend(out.new_token_ids)
    finally:
        undo()
    empty = np.zeros((0, 0), np.float32)
    return GreedyLogits(
        [tokens[rid] for rid in ids], [np.stack(rows[rid]) if rows[rid] else empty for rid in ids]
    )


def _wrap(
    engine: LLMEngine, rows: dict[str, list[np.ndarray]], forced_of: dict[str, Sequence[int]]
) -> Callable[[], None]:
    """Wrap the executor's execute_model and the model's compute_logits; returns the undo.

    The executor returns one entry per sampling request in the order of its logit rows (a
    dict keeps insertion order), which is how each row finds its request."""
    runner = engine.executor
    model = runner.model  # type: ignore[attr-defined]
    inner_execute, inner_logits = runner.execute_model, model.compute_logits
    step_rows: list[np.ndarray] = []

    def compute_logits(hidden: torch.Tensor) -> torch.Tensor:
        logits = inner_logits(hidden)
        step_rows.extend(logits.float().cpu().numpy())
        return logits

    def execute_model(sched, block_tables):  # type: ignore[no-untyped-def]
        step_rows.clear()
        out = inner_execute(sched, block_tables)
        if len(out) != len(step_rows):
            raise RuntimeError(f"{len(out)} sampled requests but {len(step_rows)} logit rows")
        for rid, row in zip(out, step_rows, strict=True):
            rows[rid].append(row)
            if rid in forced_of:
                out[rid] = [forced_of[rid][len(rows[rid]) - 1]]
        return out

    runner.execute_model = execute_model
    model.compute_logits = compute_logits

    def undo() -> None:
        runner.execute_model = inner_execute
        model.compute_logits = inner_logits

    return undo


@dataclass(frozen=True)
class LogitComparison:
    """Candidate logits against reference logits, row for row over every compared step.

    rel_error: ||candidate - reference||_2 / ||reference||_2 over all rows at once;
    top1_agreement: share of rows whose argmax is the reference's; rows: how many."""

    rel_error: float
    top1_agreement: float
    rows: int


def compare_logits(candidate: GreedyLogits, reference: GreedyLogits) -> LogitComparison:
    """Compare two runs of the same prompts, row for row (a teacher-forced candidate against
    the run whose tokens it was fed). Raises ValueError when the shapes differ."""
    cand = np.concatenate(candidate.logits).astype(np.float64)
    ref = np.concatenate(reference.logits).astype(np.float64)
    if cand.shape != ref.shape or not len(ref):
        raise ValueError(f"logits of shape {cand.shape} against {ref.shape}")
    error = float(np.linalg.norm(cand - ref) / np.linalg.norm(ref))
    agree = float(np.mean(cand.argmax(-1) == ref.argmax(-1)))
    return LogitComparison(error, agree, int(ref.shape[0]))
