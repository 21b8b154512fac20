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
        # Draws for requests without a seed of their own.
        self.generator = torch.Generator()
        self.generator.manual_seed(seed)

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
        probs = processed_probs(logits[rows], [params[i] for i in rows])
        noise = torch.empty_like(probs)
        for j, i in enumerate(rows):
            noise[j].exponential_(generator=generators[i] or self.generator)
        out[rows] = (probs / noise).argmax(dim=-1)
        return out.tolist()


def processed_probs(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """The distributions sampled from: softmax of logits [N, V] / temperature, after top-k and
    top-p, row i with params[i] (all rows must be sampled ones, temperature > 0)."""
    temps = torch.tensor([p.temperature for p in params], dtype=logits.dtype)
    logits = logits / temps.unsqueeze(1)
    top_ks = [p.top_k for p in params]
    top_ps = [p.top_p for p in params]
    if any(k > 0 for k in top_ks):
        logits = _apply_top_k(logits, top_ks)
    if any(p < 1.0 for p in top_ps):
        logits = _apply_top_p(logits, top_ps)
    return torch.softmax(logits, dim=-1)


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
