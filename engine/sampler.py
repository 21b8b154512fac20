"""Batched token sampling: greedy, temperature, top-k, top-p, per-request seeds.

Greedy rows take the argmax. Sampled rows are scaled by temperature, filtered by top-k and top-p,
then drawn with the exponential race (argmax of p / E, E ~ Exp(1)), which equals sampling from p
and lets each seeded request draw its noise from its own generator, so its tokens do not depend
on what else is in the batch.
"""

from __future__ import annotations

import torch

from engine.request import SamplingParams


class Sampler:
    def __init__(self, seed: int = 0) -> None:
        self._generator = torch.Generator()
        self._generator.manual_seed(seed)

    def sample(
        self,
        logits: torch.Tensor,
        params: list[SamplingParams],
        generators: list[torch.Generator | None],
    ) -> list[int]:
        """One token id per row of ``logits`` [N, vocab] (float32), using row i's params."""
        if all(p.greedy for p in params):
            return logits.argmax(dim=-1).tolist()
        out = logits.argmax(dim=-1)
        rows = [i for i, p in enumerate(params) if not p.greedy]
        sub = logits[rows]
        temps = torch.tensor([params[i].temperature for i in rows], dtype=sub.dtype)
        sub = sub / temps.unsqueeze(1)
        top_ks = [params[i].top_k for i in rows]
        top_ps = [params[i].top_p for i in rows]
        if any(k > 0 for k in top_ks):
            sub = _apply_top_k(sub, top_ks)
        if any(p < 1.0 for p in top_ps):
            sub = _apply_top_p(sub, top_ps)
        probs = torch.softmax(sub, dim=-1)
        noise = torch.empty_like(probs)
        for j, i in enumerate(rows):
            noise[j].exponential_(generator=generators[i] or self._generator)
        out[rows] = (probs / noise).argmax(dim=-1)
        return out.tolist()


def _apply_top_k(logits: torch.Tensor, top_ks: list[int]) -> torch.Tensor:
    vocab = logits.shape[-1]
    ks = torch.tensor([k if 0 < k < vocab else vocab for k in top_ks])
    sorted_logits = logits.sort(dim=-1, descending=True).values
    kth = sorted_logits.gather(1, (ks - 1).unsqueeze(1))
    return logits.masked_fill(logits < kth, float("-inf"))


def _apply_top_p(logits: torch.Tensor, top_ps: list[float]) -> torch.Tensor:
    ps = torch.tensor(top_ps, dtype=logits.dtype).unsqueeze(1)
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    # Keep the smallest prefix whose mass reaches p: a token is dropped when the mass before it
    # already does. The top token is always kept.
    mass_before = probs.cumsum(dim=-1) - probs
    drop_sorted = mass_before >= ps
    drop_sorted[:, 0] = False
    drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))
