"""A request's life inside the engine: its tokens, its progress and why it finished.

vLLM v1's model: a request is a growing list of token ids (prompt, then outputs) and
``num_computed_tokens``, how many of them already have K/V in the cache. Prefill and decode are
the same operation (compute the tokens not yet computed), which is what makes chunked prefill
and recompute-preemption simple.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import torch


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "stop"
    FINISHED_LENGTH = "length"
    FINISHED_ABORTED = "abort"

    @property
    def is_finished(self) -> bool:
        return self in _FINISHED

    @property
    def finish_reason(self) -> str | None:
        """OpenAI's finish_reason for a finished request ("stop", "length", "abort")."""
        return self.value if self.is_finished else None


_FINISHED = {
    RequestStatus.FINISHED_STOPPED,
    RequestStatus.FINISHED_LENGTH,
    RequestStatus.FINISHED_ABORTED,
}


# Temperatures below this sample greedily, as in vLLM (its _SAMPLING_EPS).
GREEDY_TEMPERATURE = 1e-5


@dataclass(frozen=True)
class SamplingParams:
    """How to pick each output token and when to stop.

    A temperature below GREEDY_TEMPERATURE (0 included) means greedy: dividing the logits by
    less overflows float32 (1e-39 gives inf, then NaN probabilities). top_k <= 0 and top_p >= 1
    disable those filters. A seed makes the request's samples reproducible whatever else is in
    the batch. Stop strings are matched on the detokenized text by the server's output
    processor; stop_token_ids by the engine core.
    """

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_TEMPERATURE


@dataclass(eq=False)
class Request:
    """One generation request as the scheduler sees it.

    ``all_token_ids`` is prompt + outputs; ``num_computed_tokens`` of them have K/V in the cache.
    Times are seconds on the engine's monotonic clock (time.perf_counter).
    """

    request_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    eos_token_ids: tuple[int, ...] = ()
    arrival_time_s: float = 0.0
    status: RequestStatus = RequestStatus.WAITING
    num_computed_tokens: int = 0
    num_preemptions: int = 0
    first_scheduled_s: float | None = None
    # Prompt tokens the prefix cache held when it was first scheduled (vLLM's
    # num_cached_tokens, usage.prompt_tokens_details.cached_tokens).
    num_cached_tokens: int = 0
    all_token_ids: list[int] = field(init=False)
    generator: torch.Generator | None = field(init=False, default=None)
    # Prefix cache: keys of the request's full blocks (computed lazily), and how many of its
    # blocks are already offered to the cache.
    block_keys: list = field(init=False, default_factory=list)
    num_cached_blocks: int = field(init=False, default=0)
    # Draft tokens proposed for the next step (speculative decoding); verified, then cleared.
    spec_token_ids: list[int] = field(init=False, default_factory=list)
    # The distributions a model draft drew them from [k, vocab] (sampled requests only).
    spec_draft_probs: torch.Tensor | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if not self.prompt_token_ids:
            raise ValueError(f"request {self.request_id}: the prompt has no tokens")
        self.all_token_ids = list(self.prompt_token_ids)
        if self.sampling_params.seed is not None:
            self.generator = torch.Generator()
            self.generator.manual_seed(self.sampling_params.seed)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.all_token_ids) - len(self.prompt_token_ids)

    @property
    def output_token_ids(self) -> list[int]:
        return self.all_token_ids[len(self.prompt_token_ids) :]

    def append_output_token(self, token_id: int) -> None:
        self.all_token_ids.append(token_id)

    def check_stop(self, max_model_len: int) -> RequestStatus | None:
        """The finished status implied by the last output token, or None to keep generating.

        Token-level stops only (EOS, stop_token_ids, max_tokens, context length); stop strings
        need the text and are the output processor's job.
        """
        params = self.sampling_params
        last = self.all_token_ids[-1]
        if not params.ignore_eos and last in self.eos_token_ids:
            return RequestStatus.FINISHED_STOPPED
        if last in params.stop_token_ids:
            return RequestStatus.FINISHED_STOPPED
        if self.num_output_tokens >= params.max_tokens or self.num_tokens >= max_model_len:
            return RequestStatus.FINISHED_LENGTH
        return None
