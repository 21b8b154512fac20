"""Verification of draft tokens: exact match for greedy, rejection sampling otherwise.

Rejection sampling (Leviathan et al., 2023; Chen et al., 2023): draft token d_j, proposed with
probability q_j(d_j), is accepted with probability min(1, p_j(d_j) / q_j(d_j)), where p_j is the
target's distribution at that position. At the first rejection the token is resampled from
norm(max(0, p_j - q_j)) and the rest of the draft is dropped; when every draft token is accepted,
one bonus token is drawn from the target's next distribution. Every emitted token is then
distributed exactly as the target alone would have sampled it.
"""

from __future__ import annotations

import torch


def greedy_verify(target_argmax: list[int], draft_tokens: list[int]) -> list[int]:
    """Tokens to emit for a greedy request: the drafts up to the first mismatch, then the target's.

    ``target_argmax`` [k + 1] is the target's choice after each input position (the last
    verified token, then each draft token).
    """
    out: list[int] = []
    for j, d in enumerate(draft_tokens):
        if target_argmax[j] != d:
            break
        out.append(d)
    out.append(target_argmax[len(out)])
    return out


def rejection_sample(
    target_probs: torch.Tensor,
    draft_tokens: list[int],
    draft_probs: torch.Tensor | None,
    generator: torch.Generator | None = None,
) -> list[int]:
    """Tokens to emit for a sampled request.

    target_probs [k + 1, V]: the target's (temperature/top-k/top-p processed) distributions
    after each input position. draft_probs [k, V], the distributions the drafts were drawn from,
    or None for a deterministic proposer (n-gram lookup: q is one-hot on the draft token).
    """
    k = len(draft_tokens)
    if target_probs.shape[0] != k + 1:
        raise ValueError(f"target_probs has {target_probs.shape[0]} rows for {k} draft tokens")
    uniforms = torch.rand(k, generator=generator, dtype=torch.float64).tolist() if k else []
    out: list[int] = []
    for j, d in enumerate(draft_tokens):
        p = target_probs[j]
        p_d = float(p[d])
        q_d = 1.0 if draft_probs is None else float(draft_probs[j, d])
        if q_d > 0 and uniforms[j] < min(1.0, p_d / q_d):
            out.append(d)
            continue
        if draft_probs is None:
            residual = p.clone()
            residual[d] = 0.0
        else:
            residual = (p - draft_probs[j]).clamp_min_(0.0)
        total = float(residual.sum())
        # total is 0 only if p == q, where rejection has probability 0; guard rounding anyway.
        dist = residual / total if total > 0 else p
        out.append(int(torch.multinomial(dist, 1, generator=generator)))
        return out
    out.append(int(torch.multinomial(target_probs[k], 1, generator=generator)))
    return out
