"""What the load generator sends and what it records.

These dataclasses are the contract between the load generator and the run folder: one
:class:`RequestRecord` per request becomes one row of requests.parquet, and each of its
:class:`ChunkRecord` becomes one row of tokens.parquet. They declare those tables: the columns
are their fields in order (:data:`REQUEST_COLUMNS`, :data:`TOKEN_COLUMNS`), and each column's
parquet type follows the field's annotation (results.tables). All times are seconds since the
run's start on the run clock (see :mod:`loadgen.clock`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal, get_args

__all__ = [
    "API_KINDS",
    "REQUEST_COLUMNS",
    "TOKEN_COLUMNS",
    "Api",
    "ChunkRecord",
    "RequestRecord",
    "RequestSpec",
    "Status",
    "TokenSource",
]

Api = Literal["completions", "chat"]
Status = Literal["ok", "error", "cancelled"]
# "chunks" is the last resort when the server sent no usage and no tokenizer was given: one token
# per content chunk, exact for engines that stream one token per event.
TokenSource = Literal["usage", "tokenizer", "chunks"]

API_KINDS: tuple[str, ...] = get_args(Api)


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
        if self.temperature < 0:
            raise ValueError(
                f"RequestSpec.temperature: expected a float >= 0, got {self.temperature!r}"
            )


@dataclass(slots=True)
class ChunkRecord:
    """One content chunk of a streamed response (one row of tokens.parquet).

    Attributes:
        request_id: the request it belongs to.
        index: 0-based position among the request's content chunks.
        t_s: run seconds when the network read that completed this chunk arrived.
        n_tokens: output tokens this chunk carries; the chunks of a request sum to its
            ``output_tokens``. It is >= 1 except when the server sent more content chunks than
            it reports tokens (then some chunks carry 0; see :mod:`loadgen.client.apportion`).
    """

    request_id: str
    index: int
    t_s: float
    n_tokens: int


@dataclass(slots=True)
class RequestRecord:
    """The outcome of one request (one row of requests.parquet, plus its chunks).

    Attributes:
        request_id, user_id: who sent what.
        scheduled_s: when the request was due to be sent (closed loop: when its user was ready).
        sent_s: just before the HTTP request was issued; ``sent_s - scheduled_s`` is client lag.
        first_token_s: arrival of the first content chunk (role-only and empty chunks are not
            content), or None when none arrived.
        done_s: when the response ended ([DONE], end of body, error or cancellation), or None
            if the request never got that far.
        prompt_tokens: from the server's usage when sent, else from the spec.
        output_tokens: from usage, else counted with the tokenizer, else one per content chunk;
            ``output_tokens_source`` says which.
        status: "ok", "error" (see ``error``/``http_status``) or "cancelled" (cut by the run's
            duration; kept so that nothing in flight disappears from the tables).
        error: a human-readable message for "error" and "cancelled", else None.
        http_status: the HTTP status code when a response started, else None.
        chunks: the content chunks in arrival order.
    """

    request_id: str
    user_id: int
    scheduled_s: float
    sent_s: float
    first_token_s: float | None
    done_s: float | None
    prompt_tokens: int
    output_tokens: int
    output_tokens_source: TokenSource
    status: Status
    error: str | None
    http_status: int | None
    # tokens.parquet's rows, not a column of requests.parquet.
    chunks: list[ChunkRecord] = field(default_factory=list, metadata={"column": False})

    def to_row(self) -> dict[str, Any]:
        """The requests.parquet row: exactly :data:`REQUEST_COLUMNS`, chunks left out."""
        return {name: getattr(self, name) for name in REQUEST_COLUMNS}


def _columns(record: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(record) if f.metadata.get("column", True))


# The tables' columns in file order, derived from the dataclasses above.
REQUEST_COLUMNS: tuple[str, ...] = _columns(RequestRecord)
TOKEN_COLUMNS: tuple[str, ...] = _columns(ChunkRecord)
