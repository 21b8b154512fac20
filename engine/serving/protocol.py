"""OpenAI-compatible request bodies and error bodies for /v1/completions and /v1/chat/completions,
and vLLM's /tokenize and /detokenize bodies.

Field names and defaults follow OpenAI's API; ``top_k``, ``ignore_eos`` and ``stop_token_ids`` are
the extensions vLLM accepts, so that clients written for vLLM work unchanged. Unknown fields are
ignored, as by vLLM, so that clients sending newer OpenAI fields still work.

Lists are bounded (the MAX_ constants below) and their length and item types are checked before
their items are validated, so that no body within the size limit costs the event loop more
than a few milliseconds of validation, nor produces a million errors.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from engine.core.request import SamplingParams

# The most stop strings a request may give, and the longest one in characters: each is
# searched for in the text after every token, and the text that could still become one is held
# back from the stream (OpenAI allows 4).
MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 256
# The most stop_token_ids, messages, and content parts (over all messages) of one request.
MAX_STOP_TOKEN_IDS = 256
MAX_MESSAGES = 4096
MAX_CONTENT_PARTS = 4096
# seed is a signed 64-bit integer, as in vLLM.
SEED_MIN, SEED_MAX = -(1 << 63), (1 << 63) - 1


NO_TOOLS = (
    "the reference engine serves text only and calls no tools; send the request without "
    "tools (a scenario without [tools]), or run against an engine that parses tool calls "
    "(e.g. vLLM with --enable-auto-tool-choice)"
)
# Chat's tool choices a model may answer in text; "required" and a named function demand a
# call, which an engine that calls no tools cannot honour.
TEXT_TOOL_CHOICES = (None, "auto", "none")
MAX_TOOLS = 128


NO_MEDIA = (
    "the reference engine serves text only and sees no images or other media; send the "
    "request without them (a scenario without [images], a dataset without an images column), "
    "or run against a vision-language model's server (e.g. vLLM serving one)"
)
# The content parts that carry text, in every API the engine serves (chat's text, Responses'
# input_text and output_text, Anthropic's text); every other part is media, refused.
TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})


def refuse_media(turns: Any) -> Any:
    """``turns`` (messages or input items, as sent) as they are, unless a turn's content holds
    a part that is not text (an image_url, input_image or image part, audio, a file): then
    ValueError, saying why (:data:`NO_MEDIA`). A request is refused rather than answered as if
    its images were not there."""
    for turn in turns if isinstance(turns, list) else ():
        content = turn.get("content") if isinstance(turn, dict) else None
        for part in content if isinstance(content, list) else ():
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in TEXT_PART_TYPES:
                raise ValueError(f"a content part of type {str(kind)[:30]!r}: {NO_MEDIA}")
    return turns


def _bounded_list(value: Any, field: str, most: int) -> Any:
    if isinstance(value, list) and len(value) > most:
        raise ValueError(f"{field} may hold at most {most} items, got {len(value)}")
    return value


class StreamOptions(BaseModel):
    include_usage: bool = False


class _SamplingFields(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=-1)
    seed: int | None = Field(None, ge=SEED_MIN, le=SEED_MAX)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, le=1, description="only one choice per request is supported")
    user: str | None = None

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_bounded(cls, value: Any) -> Any:
        strings = [value] if isinstance(value, str) else value
        _bounded_list(strings, "stop", MAX_STOP_STRINGS)
        if isinstance(strings, list):
            for i, s in enumerate(strings):
                if isinstance(s, str) and len(s) > MAX_STOP_CHARS:
                    raise ValueError(
                        f"stop strings may be at most {MAX_STOP_CHARS} characters; "
                        f"item {i} has {len(s)}"
                    )
        return value

    @field_validator("stop_token_ids", mode="before")
    @classmethod
    def _stop_ids_bounded(cls, value: Any) -> Any:
        return _bounded_list(value, "stop_token_ids", MAX_STOP_TOKEN_IDS)

    def sampling_params(self, max_tokens: int) -> SamplingParams:
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=max(self.top_k, 0),
            seed=self.seed,
            stop=stop,
            stop_token_ids=tuple(self.stop_token_ids or ()),
            ignore_eos=self.ignore_eos,
        )

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class RefusesTools(BaseModel):
    """A body whose API this engine serves without tools: a request that offers tools is
    refused, not answered as if it offered none (its prompt would lack the tools'
    definitions). An empty list offers none."""

    tools: list[Any] | None = None

    @field_validator("tools", mode="before")
    @classmethod
    def _no_tools(cls, value: Any) -> Any:
        if value:
            raise ValueError(NO_TOOLS)
        return value


class CompletionRequest(_SamplingFields, RefusesTools):
    prompt: str | list[int] = Field(..., description="one prompt: text or token ids")
    max_tokens: int = Field(16, ge=1)

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt_shape(cls, value: Any) -> Any:
        # One pass over the list, one error: pydantic would build one error per bad item.
        if isinstance(value, list):
            for i, t in enumerate(value):
                if type(t) is not int:
                    raise ValueError(
                        "prompt must be text or a list of token ids (integers); "
                        f"item {i} is {type(t).__name__}"
                    )
        elif not isinstance(value, str):
            raise ValueError(
                f"prompt must be text or a list of token ids, not {type(value).__name__}"
            )
        return value


class TextContentPart(BaseModel):
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[TextContentPart] | None = None
    # An assistant turn's calls, sent back by an agent with their results: prompt text too.
    tool_calls: list[dict[str, Any]] | None = None

    def text(self) -> str:
        """The message as the prompt reads it: its content, then each tool call's name and
        arguments."""
        text = (
            "".join(p.text for p in self.content)
            if isinstance(self.content, list)
            else self.content or ""
        )
        for call in self.tool_calls or ():
            function = call.get("function")
            if isinstance(function, dict):
                text += str(function.get("name") or "") + str(function.get("arguments") or "")
        return text


class ChatCompletionRequest(_SamplingFields):
    messages: list[ChatMessage] = Field(..., min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    # Tools a model may decline (TEXT_TOOL_CHOICES) are rendered into the prompt, as a chat
    # template renders them (vLLM keeps them for "none" too), and the answer is text.
    # tool_choice first: the tools' check reads it.
    tool_choice: str | dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None

    @field_validator("tools", mode="before")
    @classmethod
    def _tools_answerable_in_text(cls, value: Any, info: ValidationInfo) -> Any:
        choice = info.data.get("tool_choice")
        if value and choice not in TEXT_TOOL_CHOICES:
            raise ValueError(
                f"tool_choice {choice!r} demands a tool call: {NO_TOOLS}; or offer the tools "
                'with tool_choice "auto" or "none", answered in text'
            )
        return _bounded_list(value, "tools", MAX_TOOLS)

    def chat_messages(self) -> list[dict[str, str]]:
        """The messages the chat template renders: the tools' definitions, one JSON a line
        under "# Tools", ending the system message (one is added first where none is)."""
        messages = [{"role": m.role, "content": m.text()} for m in self.messages]
        if self.tools:
            tools = "# Tools\n" + "\n".join(json.dumps(t, sort_keys=True) for t in self.tools)
            if messages[0]["role"] == "system":
                messages[0]["content"] = f"{messages[0]['content']}\n\n{tools}"
            else:
                messages.insert(0, {"role": "system", "content": tools})
        return messages

    @field_validator("messages", mode="before")
    @classmethod
    def _messages_bounded(cls, value: Any) -> Any:
        _bounded_list(value, "messages", MAX_MESSAGES)
        refuse_media(value)
        if isinstance(value, list):
            parts = sum(
                len(m["content"])
                for m in value
                if isinstance(m, dict) and isinstance(m.get("content"), list)
            )
            if parts > MAX_CONTENT_PARTS:
                raise ValueError(
                    f"messages may hold at most {MAX_CONTENT_PARTS} content parts, got {parts}"
                )
        return value


class TokenizeCompletionRequest(BaseModel):
    """POST /tokenize with a text prompt, as vLLM's (special tokens added by default)."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool = False


class TokenizeChatRequest(BaseModel):
    """POST /tokenize with chat messages, as vLLM's: the chat template renders them (it adds
    the special tokens, so add_special_tokens defaults to False)."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    messages: list[ChatMessage] = Field(..., min_length=1)
    add_generation_prompt: bool = True
    add_special_tokens: bool = False
    return_token_strs: bool = False


class DetokenizeRequest(BaseModel):
    """POST /detokenize, as vLLM's: token ids to text."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    tokens: list[int]


def error_body(
    message: str,
    status: int,
    param: str | None = None,
    code: str | None = None,
    err_type: str = "invalid_request_error",
) -> dict[str, Any]:
    """OpenAI's error shape: {"error": {"message", "type", "param", "code"}}."""
    return {"error": {"message": message, "type": err_type, "param": param, "code": code or status}}
