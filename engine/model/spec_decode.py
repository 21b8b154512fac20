"""Speculative decoding: draft proposers whose tokens the target verifies in its next step.

Proposers:
- ``ngram`` (prompt lookup): the longest suffix of the request's tokens (between min and max n
  tokens) that occurred earlier proposes the k tokens that followed its latest occurrence. No
  model, so it costs nothing when it has nothing to say.
- ``draft``: a smaller model proposes k tokens autoregressively. Either a separate model (a
  preset or a local HF directory with the target's vocabulary; it keeps its own KV cache, indexed
  by the target's block tables, filled by running it over every step's input), or the target's
  own first L layers with its norm and LM head (self-speculative: its K/V for those layers are
  exactly the target's, so it shares the target's cache).

A proposer writes ``request.spec_token_ids`` (and, for sampled requests with a model draft,
``request.spec_draft_probs``, the distributions the drafts were drawn from, needed by the
rejection sampler). Draft K/V are written up to k positions past the request's tokens: the
scheduler allocates that lookahead. The proposer interface the engine calls and the acceptance
counters are engine.core.speculation's.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from engine.core.request import Request
from engine.core.speculation import Proposer
from engine.model.attention import AttentionMetadata
from engine.model.llama import LlamaForCausalLM
from engine.model.sampler import processed_probs


class ModelProposer(Proposer, Protocol):
    """A proposer the torch executor drives: it also sees every target forward."""

    def observe(
        self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> None:
        """See every target forward's input (a separate draft keeps its cache with it)."""
        ...


def ngram_lookup(tokens: np.ndarray, min_n: int, max_n: int, k: int) -> list[int]:
    """Up to k tokens that followed the latest earlier occurrence of the longest suffix n-gram.

    ``tokens`` int32 [L]. Matching runs on the bytes of the array (bytes.rfind), checked for
    alignment to whole tokens: a C-speed search instead of a Python loop per position.
    """
    length = len(tokens)
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        pattern = tokens[length - n :].tobytes()
        # Search before the last token, so the suffix cannot match itself.
        haystack = tokens[: length - 1].tobytes()
        end = len(haystack)
        while (at := haystack.rfind(pattern, 0, end)) >= 0:
            if at % 4 == 0:
                start = at // 4 + n
                return tokens[start : start + k].tolist()
            end = at + len(pattern) - 1
    return []


class NgramProposer:
    # Drafts come from the request's own tokens: no K/V is written ahead of them.
    writes_lookahead = False

    def __init__(self, k: int, min_n: int, max_n: int) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(
                f"need 1 <= prompt_lookup_min <= prompt_lookup_max, got {min_n}, {max_n}"
            )
        self.k, self.min_n, self.max_n = k, min_n, max_n

    def observe(self, *_: object) -> None:
        """No model, no cache to keep up."""

    def propose(self, requests: list[Request], block_tables: dict[str, list[int]]) -> None:
        for req in requests:
            tokens = np.asarray(req.all_token_ids, dtype=np.int32)
            req.spec_token_ids = ngram_lookup(tokens, self.min_n, self.max_n, self.k)
            req.spec_draft_probs = None


class DraftModelProposer:
    """Proposes with a draft model; ``num_layers`` set means the target's first layers."""

    # The draft runs k positions past the request's tokens and writes their K/V.
    writes_lookahead = True

    def __init__(
        self,
        target: LlamaForCausalLM,
        k: int,
        block_size: int,
        target_kv_caches: list[torch.Tensor],
        draft: LlamaForCausalLM | None = None,
        num_layers: int | None = None,
    ) -> None:
        if (draft is None) == (num_layers is None):
            raise ValueError("give either a draft model or the number of target layers to use")
        self.k = k
        self.block_size = block_size
        if draft is None:
            assert num_layers is not None
            if not 1 <= num_layers < len(target.layers):
                raise ValueError(
                    f"draft_num_layers must be in 1..{len(target.layers) - 1}, got {num_layers}"
                )
            self.model, self.num_layers = target, num_layers
            self.kv_caches = target_kv_caches[:num_layers]
            self.shares_target_cache = True
        else:
            if draft.config.vocab_size != target.config.vocab_size:
                raise ValueError(
                    f"the draft model's vocabulary ({draft.config.vocab_size}) differs from the "
                    f"target's ({target.config.vocab_size}): they must share a tokenizer"
                )
            c = draft.config
            w = next(draft.parameters())
            shape = (2, *target_kv_caches[0].shape[1:3], c.num_key_value_heads, c.head_dim)
            self.model, self.num_layers = draft, len(draft.layers)
            self.kv_caches = [
                torch.zeros(shape, dtype=w.dtype, device=w.device) for _ in draft.layers
            ]
            self.shares_target_cache = False

    def _forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor:
        m = self.model
        x = m.embed_tokens(input_ids)
        cos, sin = m.rotary(positions, x.dtype)
        residual = None
        for layer, cache in zip(m.layers[: self.num_layers], self.kv_caches, strict=True):
            x, residual = layer(x, residual, cos, sin, cache, meta)
        return m.norm.add_norm(x, residual)[0]

    def observe(
        self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> None:
        """Keep a separate draft's cache in step with the target: run it over the step's input."""
        if not self.shares_target_cache:
            self._forward(input_ids, positions, meta)

    @torch.inference_mode()
    def propose(self, requests: list[Request], block_tables: dict[str, list[int]]) -> None:
        if not requests:
            return
        device = self.kv_caches[0].device
        tables = [block_tables[r.request_id] for r in requests]
        last = [r.num_tokens - 1 for r in requests]
        tokens = torch.tensor([r.all_token_ids[-1] for r in requests], device=device)
        sampled_rows = [i for i, r in enumerate(requests) if not r.sampling_params.greedy]
        drafts: list[list[int]] = [[] for _ in requests]
        probs: list[list[torch.Tensor]] = [[] for _ in requests]
        for j in range(self.k):
            positions = [p + j for p in last]
            meta = AttentionMetadata.build(
                [1] * len(requests), [p + 1 for p in positions], tables, self.block_size,
                len(requests), device,
            )  # fmt: skip
            hidden = self._forward(tokens, torch.tensor(positions, device=device), meta)
            logits = self.model.compute_logits(hidden)
            next_tokens = logits.argmax(dim=-1)
            if sampled_rows:
                q = processed_probs(
                    logits[sampled_rows].cpu(), [requests[i].sampling_params for i in sampled_rows]
                )
                for row, i in enumerate(sampled_rows):
                    pick = torch.multinomial(q[row], 1, generator=requests[i].generator)
                    next_tokens[i] = int(pick)
                    probs[i].append(q[row])
            for i, t in enumerate(next_tokens.tolist()):
                drafts[i].append(t)
            tokens = next_tokens
        for i, req in enumerate(requests):
            req.spec_token_ids = drafts[i]
            req.spec_draft_probs = torch.stack(probs[i]) if probs[i] else None
