"""What the load generator sends: one request, as workloads make it and the client sends it.

What comes back is recorded as results.folder.records.RequestRecord, the run folder's row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from perfmodel.files import JSONObject, JSONView
from results.schema.api_kinds import APIS, CHAT_APIS, POOLING_APIS, Api, ApiKind, api_kind

__all__ = [
    "RESERVED_FIELDS",
    "Abandon",
    "Message",
    "RequestSpec",
    "SessionTurn",
    "content_text",
    "message_dict",
    "message_text",
]

# One chat message: a (role, text) pair, or the OpenAI message object itself where it carries
# more than a role and a text (multi-part content, a tool call, a tool's answer, a name).
Message = tuple[str, str] | JSONView

# Body fields the load generator sets itself, which request fields may not replace: what is
# measured depends on them (a stream with usage, the planned prompt and output length, one
# choice), and ignore_eos is the scenario's own key, which the pre-flight checks.
RESERVED_FIELDS: dict[str, str] = {
    "model": "--model or the scenario's [[models]]",
    "stream": "nothing: every request is streamed",
    "stream_options": "nothing: usage is always asked for",
    "prompt": "the workload",
    "messages": "the workload",
    "max_tokens": "output_len, or a dataset's max_tokens column",
    "max_completion_tokens": "output_len, or a dataset's max_tokens column",
    "n": "nothing: one choice a request is measured",
    "ignore_eos": "the scenario's top-level ignore_eos",
    "tools": "the scenario's [tools] table, or a dataset's tools column",
    "tool_choice": "the scenario's [tools] choice, or a dataset's tool_choice column",
    "images": "the scenario's [images] table, or a dataset's images column",
}


def message_dict(message: Message) -> JSONObject:
    """``message`` as the JSON object a chat request sends."""
    if isinstance(message, tuple):
        return {"role": message[0], "content": message[1]}
    return dict(message)


def content_text(content: Any) -> str:
    """A message's ``content`` as text: multi-part content's text parts joined, as a chat
    template reads it; "" for none."""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return content if isinstance(content, str) else ""


def message_text(message: Message) -> tuple[str, str]:
    """(role, text) of ``message`` (:func:`content_text`)."""
    if isinstance(message, tuple):
        return message
    return str(message.get("role", "")), content_text(message.get("content"))


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
class SessionTurn:
    """Where a request stands in a session (loadgen.workloads.sessions, multi-turn chats).

    ``session_id`` and ``turn`` (0-based) are recorded in requests.parquet. ``delay_s``: the
    seconds the session waits after the previous turn's answer before this turn is due (a
    tool's run time, a user's thinking); None takes the scenario's ``think_time_s``.
    ``new_messages``: how many of the request's messages at the end are this turn's own (the
    message before them is the previous turn's planned answer), so that the history can be
    rebuilt when the server's answer made tool calls. ``tool_results``: the texts answering
    those calls, one per call (cycled when the answer made more).
    """

    session_id: str
    turn: int
    delay_s: float | None = None
    new_messages: int = 1
    tool_results: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.turn < 0:
            raise ValueError(f"SessionTurn.turn: expected >= 0, got {self.turn!r}")
        if self.delay_s is not None and not self.delay_s >= 0:
            raise ValueError(f"SessionTurn.delay_s: expected seconds >= 0, got {self.delay_s!r}")


@dataclass(frozen=True)
class RequestSpec:
    """One request to send.

    Attributes:
        request_id: unique within a run.
        prompt: the prompt text; for a chat API (:data:`CHAT_APIS`) it is sent as one user
            message; for ``"embeddings"`` it is the first input, for ``"rerank"`` the query.
        prompt_tokens: tokens of ``prompt`` under the workload's tokenizer (the server may count
            more for chat, since it adds its chat template).
        max_tokens: the most output tokens to generate, >= 1.
        api: ``"completions"`` (/v1/completions), ``"chat"`` (/v1/chat/completions),
            ``"responses"`` (/v1/responses), ``"messages"`` (Anthropic's /v1/messages),
            ``"embeddings"`` (/v1/embeddings) or ``"rerank"`` (/v1/rerank).
        ignore_eos: ask the server to generate exactly ``max_tokens`` (a vLLM/llama.cpp extension;
            sent only when true, so strict OpenAI servers are not sent an unknown field).
        temperature: sampling temperature, >= 0.
        seed: per-request sampling seed, or None to let the server choose.
        messages: for ``api="chat"``, the whole conversation to send (:data:`Message`: (role,
            content) pairs, or OpenAI message objects; multi-turn chats, system prompts, tool
            turns); ``prompt`` is then its transcript, and ``prompt_tokens`` counts that
            transcript. None sends ``prompt`` as one user message.
        fields: more body fields of this request (a scenario's ``[request]`` table and
            ``--extra-body``, then a dataset row's own fields over them); they win over the
            body's defaults (``temperature``, ``seed``) but never name :data:`RESERVED_FIELDS`.
        abandon: the client closes the stream early, as a user who stopped reading
            (:class:`Abandon`); None reads it to the end.
        model: the ``model`` field to send (one of a scenario's ``[[models]]``, a LoRA adapter's
            name, or a workload's own per-row model); None sends the run's model (``--model``,
            else the server's first).
        inputs: for a pooling API (:data:`POOLING_APIS`), the texts after ``prompt``: more
            inputs to embed, or the documents to rank against the query ``prompt``;
            ``prompt_tokens`` counts them all. Empty for generation.
        tools: the tools the model may call, each in OpenAI chat's form
            (loadgen.request_tools.as_tool; written in each API's own form when sent); chat
            APIs only (:data:`CHAT_APIS`). Empty offers none. ``prompt_tokens`` does not count
            them (the server's ``usage.prompt_tokens`` does, with its chat template).
        tool_choice: OpenAI's ``tool_choice`` (loadgen.request_tools.as_tool_choice), None
            for the server's default; only with ``tools``.
        session: where it stands in a session (:class:`SessionTurn`); None for a request that
            belongs to none.
        images: the images sent in the last user turn, each as an image URL (a base64
            ``data:`` URL or an ``http(s)://`` URL the server fetches; loadgen.request_images);
            chat APIs only (:data:`CHAT_APIS`). ``prompt_tokens`` counts the text alone.
    """

    request_id: str
    prompt: str
    prompt_tokens: int
    max_tokens: int
    api: Api = "completions"
    ignore_eos: bool = False
    temperature: float = 0.0
    seed: int | None = None
    messages: tuple[Message, ...] | None = None
    abandon: Abandon | None = None
    fields: JSONView | None = None
    model: str | None = None
    inputs: tuple[str, ...] = ()
    tools: tuple[JSONView, ...] = ()
    tool_choice: str | JSONView | None = None
    session: SessionTurn | None = None
    images: tuple[str, ...] = ()

    @property
    def kind(self) -> ApiKind:
        """The entry of the request's API (results.schema.api_kinds)."""
        return APIS[self.api]

    @property
    def num_inputs(self) -> int | None:
        """The inputs a pooling request carries (embedding inputs, or rerank documents), None
        for generation: what requests.parquet's ``inputs`` column records."""
        return self.kind.inputs(len(self.inputs))

    def __post_init__(self) -> None:
        if not self.request_id:
            raise ValueError("RequestSpec.request_id: must be a non-empty string")
        try:
            kind = api_kind(self.api)
        except ValueError as exc:
            raise ValueError(f"RequestSpec.{exc}") from None
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(
                f"RequestSpec.max_tokens: expected an int >= 1, got {self.max_tokens!r}"
            )
        if not isinstance(self.prompt_tokens, int) or self.prompt_tokens < 0:
            raise ValueError(
                f"RequestSpec.prompt_tokens: expected an int >= 0, got {self.prompt_tokens!r}"
            )
        if self.fields and (reserved := sorted(set(self.fields) & set(RESERVED_FIELDS))):
            raise ValueError(
                f"RequestSpec.fields: {reserved[0]!r} is set by {RESERVED_FIELDS[reserved[0]]}"
            )
        if self.model is not None and not (isinstance(self.model, str) and self.model.strip()):
            raise ValueError(
                f"RequestSpec.model: expected a non-empty model name or None, got {self.model!r}"
            )
        if self.abandon is not None and not kind.openai_chunks:
            raise ValueError(
                f"RequestSpec.abandon: covers completions and chat only, not {self.api!r}"
            )
        if self.inputs and not kind.pooling:
            raise ValueError(
                f"RequestSpec.inputs: only {sorted(POOLING_APIS)} take inputs, not {self.api!r}"
            )
        if self.tools and not kind.conversation:
            raise ValueError(
                f"RequestSpec.tools: only {sorted(CHAT_APIS)} take tools, not {self.api!r}"
            )
        if self.images and not kind.conversation:
            raise ValueError(
                f"RequestSpec.images: only {sorted(CHAT_APIS)} take images, not {self.api!r}"
            )
        if self.tool_choice is not None and not self.tools:
            raise ValueError("RequestSpec.tool_choice: given without tools")
        if self.temperature < 0:
            raise ValueError(
                f"RequestSpec.temperature: expected a float >= 0, got {self.temperature!r}"
            )
