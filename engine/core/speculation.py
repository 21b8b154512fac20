"""What the engine core knows of speculative decoding: the proposer it calls after each step,
and the acceptance counters the verifier keeps.

The proposers themselves live with what drafts: the model's (n-gram lookup and draft models,
engine.model.spec_decode) and the simulated device's (engine.sim.executor). A proposer writes
``request.spec_token_ids`` (and, for sampled requests with a model draft,
``request.spec_draft_probs``); the executor verifies them in the request's next step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from engine.core.request import Request


@dataclass
class SpecStats:
    """Cumulative counters as vLLM's vllm:spec_decode_* metrics (drafts and tokens, not
    rates). ``accepted_per_position[j]``: drafts whose token j was accepted."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)

    def record(self, num_draft_tokens: int, num_accepted: int) -> None:
        self.num_drafts += 1
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted
        while len(self.accepted_per_position) < num_draft_tokens:
            self.accepted_per_position.append(0)
        for j in range(num_accepted):
            self.accepted_per_position[j] += 1

    @property
    def acceptance_rate(self) -> float | None:
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else None


class Proposer(Protocol):
    """Drafts tokens for requests in decode, for their next step to verify."""

    @property
    def writes_lookahead(self) -> bool:
        """Whether drafting writes K/V up to k positions past a request's tokens (a draft
        model does, n-gram lookup does not): the scheduler then reserves those slots."""
        ...

    def propose(self, requests: list[Request], block_tables: dict[str, list[int]]) -> None:
        """Set each request's spec_token_ids (and spec_draft_probs) for its next step.

        ``block_tables`` maps request id to the ids of its KV blocks, in token order.
        """
        ...
