"""A reasoning prefix: the first N generated tokens of each chat answer streamed as reasoning.

Reasoning models served by vLLM with a ``--reasoning-parser`` stream their thinking in
``delta.reasoning_content`` (vLLM's parsers, DeepSeek's API) or ``delta.reasoning`` (newer vLLM,
OpenRouter) before the answer's ``content``, and report the count in
``usage.completion_tokens_details.reasoning_tokens``. `bench serve --reasoning-tokens N` makes
the reference engine answer the same way, so the load generator's reasoning figures can be
measured against a real server: the tokens are the engine's own generated tokens, only
labelled. The label is per token (engine.serving.output_processor splits the text where the
N-th token ends); like vLLM's parsers it applies to chat completions only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

__all__ = ["REASONING_FIELDS", "ReasoningField", "ReasoningPrefix"]

ReasoningField = Literal["reasoning_content", "reasoning"]
REASONING_FIELDS: tuple[str, ...] = get_args(ReasoningField)


@dataclass(frozen=True, slots=True)
class ReasoningPrefix:
    """How many leading generated tokens of a chat answer are labelled reasoning, and in which
    delta field they are streamed. ``tokens = 0`` (the default) labels none: plain answers.

    Raises ValueError naming the option for a negative count or an unknown field.
    """

    tokens: int = 0
    field: str = "reasoning_content"

    def __post_init__(self) -> None:
        if isinstance(self.tokens, bool) or not isinstance(self.tokens, int) or self.tokens < 0:
            raise ValueError(f"--reasoning-tokens: expected an int >= 0, got {self.tokens!r}")
        if self.field not in REASONING_FIELDS:
            raise ValueError(
                f"--reasoning-field: expected one of {', '.join(REASONING_FIELDS)}, "
                f"got {self.field!r}"
            )

    def tokens_for(self, chat: bool) -> int:
        """The reasoning prefix of one request: ``tokens`` for chat, 0 for text completions."""
        return self.tokens if chat else 0

    def delta(self, text: str, reasoning_chars: int) -> dict[str, str]:
        """A stream delta of ``text`` whose first ``reasoning_chars`` characters are reasoning:
        the reasoning field, ``content``, or both (in that order) when the text spans the end of
        the reasoning, as vLLM's parsers send it."""
        if reasoning_chars <= 0:
            return {"content": text}
        if reasoning_chars >= len(text):
            return {self.field: text}
        return {self.field: text[:reasoning_chars], "content": text[reasoning_chars:]}

    def message(self, text: str, reasoning_chars: int) -> dict[str, Any]:
        """A whole (non-streamed) assistant message: ``content`` and, when the answer began with
        reasoning, the reasoning field beside it."""
        if reasoning_chars <= 0:
            return {"role": "assistant", "content": text}
        # As vLLM: a message that never left its reasoning has a null content.
        content = text[reasoning_chars:] or None
        return {"role": "assistant", "content": content, self.field: text[:reasoning_chars]}

    def usage_details(self, num_output_tokens: int, chat: bool) -> dict[str, Any]:
        """The usage fields to add for a request of ``num_output_tokens``: vLLM's
        ``completion_tokens_details.reasoning_tokens`` while a prefix is set, else none."""
        if not self.tokens_for(chat):
            return {}
        reasoning = min(self.tokens, num_output_tokens)
        return {"completion_tokens_details": {"reasoning_tokens": reasoning}}
