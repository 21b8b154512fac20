"""What the load generator sends: one request, as workloads make it and the client sends it.

What comes back is recorded as results.folder.records.RequestRecord, the run folder's row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

__all__ = ["API_KINDS", "Abandon", "Api", "RequestSpec"]

Api = Literal["completions", "chat"]
API_KINDS: tuple[str, ...] = get_args(Api)


@dataclass(frozen=True)
class Abandon:
    """When the client stops reading and closes the stream (a user who stopped reading): after
    ``after_tokens`` content tokens arrived, or ``after_s`` seconds after the request was due
    (its scheduled time), whichever comes first (at least one is set)."""

    after_tokens: int | None = None
    after_s: float | None = None

    def __post_init__(self) -> None:
        if self.after_tokens is None and self.after_s is None:
            raise ValueError("Abandon: set after_tokens, after_s or both")
        if self.after_tokens is not None and self.after_tokens < 1:
            raise ValueError(f"Abandon.after_tokens: expected >= 1, got {self.after_tokens!r}")
        if self.after_s is not None and not self.after_s > 0:
            raise ValueError(f"Abandon.after_s: expected seconds > 0, got {self.after_s!r}")


@dataclass(frozen=True)
class RequestSpec:
    """One request to send.

    Attributes:
        request_id: unique within a run.
        prompt: the prompt text; for ``api="chat"`` it is sent as one user message.
        prompt_tokens: tokens of ``prompt`` under the workload's tokenizer (the server may count
            more for chat, since it adds its chat template).
        max_tokens: the most output tokens to generate, >= 1.
        api: ``"completions"`` (/v1/completions) or ``"chat"`` (/v1/chat/completions).
        ignore_eos: ask the server to generate exactly ``max_tokens`` (a vLLM/llama.cpp extension;
            sent only when true, so strict OpenAI servers are not sent an unknown field).
        temperature: sampling temperature, >= 0.
        seed: per-request sampling seed, or None to let the server choose.
        messages: for ``api="chat"``, the whole conversation to send as (role, content) pairs
            (multi-turn chats, system prompts); ``prompt`` is then its transcript, and
            ``prompt_tokens`` counts that transcript. None sends ``prompt`` as one user message.
        abandon: the client closes the stream early, as a user who stopped reading
            (:class:`Abandon`); None reads it to the end.
        model: the ``model`` field to send (one of a scenario's ``[[models]]``, a LoRA adapter's
            name, or a workload's own per-row model); None sends the run's model (``--model``,
            else the server's first).
    """

    request_id: str
    prompt: str
    prompt_tokens: int
    max_tokens: int
    api: Api = "completions"
    ignore_eos: bool = False
    temperature: float = 0.0
    seed: int | None = None
    messages: tuple[tuple[str, str], ...] | None = None
    abandon: Abandon | None = None
    model: str | None = None

    def __post_init__(self) -> None:
        if not self.request_id:
            raise ValueError("RequestSpec.request_id: must be a non-empty string")
        if self.api not in API_KINDS:
            raise ValueError(
                f"RequestSpec.api: expected one of {list(API_KINDS)}, got {self.api!r}"
            )
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(
                f"RequestSpec.max_tokens: expected an int >= 1, got {self.max_tokens!r}"
            )
        if not isinstance(self.prompt_tokens, int) or self.prompt_tokens < 0:
            raise ValueError(
                f"RequestSpec.prompt_tokens: expected an int >= 0, got {self.prompt_tokens!r}"
            )
        if self.model is not None and not (isinstance(self.model, str) and self.model.strip()):
            raise ValueError(
                f"RequestSpec.model: expected a non-empty model name or None, got {self.model!r}"
            )
        if self.temperature < 0:
            raise ValueError(
                f"RequestSpec.temperature: expected a float >= 0, got {self.temperature!r}"
            )
