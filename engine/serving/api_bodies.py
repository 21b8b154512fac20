"""The request bodies of the other APIs the reference engine serves: OpenAI's Responses API
(POST /v1/responses), Anthropic's Messages (POST /v1/messages), OpenAI's embeddings (POST
/v1/embeddings) and rerank (POST /v1/rerank).

As in engine.serving.protocol, unknown fields are ignored and lists are bounded before their
items are validated. Each body turns into what the engine takes: chat messages (for the chat
template) and sampling settings, or the inputs to embed.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine.core.request import SamplingParams
from engine.serving.protocol import (
    MAX_MESSAGES,
    MAX_STOP_STRINGS,
    RefusesTools,
    _bounded_list,
    _SamplingFields,
    refuse_media,
)

__all__ = ["EmbeddingsRequest", "MessagesRequest", "RerankRequest", "ResponsesRequest"]

# The most inputs one embeddings request may embed (OpenAI allows 2048).
MAX_EMBEDDING_INPUTS = 2048


class _Part(BaseModel):
    """A content part: Responses' ``input_text`` / ``output_text``, Anthropic's ``text``."""

    model_config = ConfigDict(extra="ignore")

    type: str
    text: str = ""


def _text(content: str | list[_Part] | None) -> str:
    if isinstance(content, list):
        return "".join(p.text for p in content if p.type in ("text", "input_text", "output_text"))
    return content or ""


class _Turn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[_Part] | None = None


class ResponsesRequest(_SamplingFields, RefusesTools):
    """POST /v1/responses: ``input`` (text, or turns), ``instructions`` (a system turn) and
    ``max_output_tokens``; it streams with ``stream: true``."""

    input: str | list[_Turn]
    instructions: str | None = None
    max_output_tokens: int | None = Field(None, ge=1)

    @field_validator("input", mode="before")
    @classmethod
    def _input_bounded(cls, value: Any) -> Any:
        return refuse_media(_bounded_list(value, "input", MAX_MESSAGES))

    def chat_messages(self) -> list[dict[str, str]]:
        """The conversation for the chat template: instructions first, then the input."""
        turns = [{"role": "system", "content": self.instructions}] if self.instructions else []
        if isinstance(self.input, str):
            return [*turns, {"role": "user", "content": self.input}]
        return turns + [{"role": t.role, "content": _text(t.content)} for t in self.input]


class MessagesRequest(_SamplingFields, RefusesTools):
    """POST /v1/messages (Anthropic): ``messages`` of user and assistant turns, ``system``
    apart, ``max_tokens`` required, ``stop_sequences`` for ``stop``."""

    messages: list[_Turn] = Field(..., min_length=1)
    system: str | list[_Part] | None = None
    max_tokens: int = Field(..., ge=1)
    stop_sequences: list[str] | None = None

    @field_validator("messages", mode="before")
    @classmethod
    def _messages_bounded(cls, value: Any) -> Any:
        return refuse_media(_bounded_list(value, "messages", MAX_MESSAGES))

    @field_validator("stop_sequences", mode="before")
    @classmethod
    def _stops_bounded(cls, value: Any) -> Any:
        return _bounded_list(value, "stop_sequences", MAX_STOP_STRINGS)

    def sampling_params(self, max_tokens: int) -> SamplingParams:
        """As the chat fields', ``stop_sequences`` joining ``stop``."""
        if self.stop_sequences:
            extra = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
            return self.model_copy(
                update={"stop": extra + self.stop_sequences, "stop_sequences": None}
            ).sampling_params(max_tokens)
        return super().sampling_params(max_tokens)

    def chat_messages(self) -> list[dict[str, str]]:
        """The conversation for the chat template: the system prompt first, then the turns."""
        system = _text(self.system)
        turns = [{"role": "system", "content": system}] if system else []
        return turns + [{"role": t.role, "content": _text(t.content)} for t in self.messages]


class EmbeddingsRequest(BaseModel):
    """POST /v1/embeddings: ``input`` is one text, texts, token ids, or lists of token ids."""

    model_config = ConfigDict(extra="ignore")

    model: str
    input: str | list[str] | list[int] | list[list[int]]
    encoding_format: Literal["float"] = "float"
    user: str | None = None

    @field_validator("input", mode="before")
    @classmethod
    def _input_bounded(cls, value: Any) -> Any:
        value = _bounded_list(value, "input", MAX_EMBEDDING_INPUTS)
        if isinstance(value, list) and not value:
            raise ValueError("input is empty; send at least one text")
        return value

    def inputs(self) -> list[str | list[int]]:
        """One item per embedding to return: a text, or token ids."""
        value = self.input
        if isinstance(value, str):
            return [value]
        if value and isinstance(value[0], int):
            return [list(value)]  # type: ignore[arg-type]
        return list(value)  # type: ignore[arg-type]


class RerankRequest(BaseModel):
    """POST /v1/rerank (vLLM's, Jina's and Cohere's shape): ``query``, ``documents`` and
    ``top_n`` (0: all)."""

    model_config = ConfigDict(extra="ignore")

    model: str
    query: str
    documents: list[str] = Field(..., min_length=1)
    top_n: int = Field(0, ge=0)

    @field_validator("documents", mode="before")
    @classmethod
    def _documents_bounded(cls, value: Any) -> Any:
        return _bounded_list(value, "documents", MAX_EMBEDDING_INPUTS - 1)
