"""What the load generator records (what it sends is loadgen.request_spec.RequestSpec).

These dataclasses are the contract between the load generator and the run folder: one
:class:`RequestRecord` per request becomes one row of requests.parquet, and each of its
:class:`ChunkRecord` becomes one row of tokens.parquet. They declare those tables: the columns
are their fields in order (:data:`REQUEST_COLUMNS`, :data:`TOKEN_COLUMNS`), and each column's
parquet type follows the field's annotation (results.folder.tables). All times are seconds since the
run's start on the run clock (see :mod:`loadgen.clock`).

A column added after the first run folders were written declares how a table that lacks it is
read (:class:`Backfill`, in the field's metadata; :data:`REQUEST_BACKFILLS`,
:data:`TOKEN_BACKFILLS`), so old folders keep opening: a folder without the reasoning columns
reads as a run whose every token was answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Literal

__all__ = [
    "REQUEST_BACKFILLS",
    "REQUEST_COLUMNS",
    "TOKEN_BACKFILLS",
    "TOKEN_COLUMNS",
    "Backfill",
    "ChunkRecord",
    "RequestRecord",
    "StampSource",
    "Status",
    "TokenSource",
    "endpoint_of",
]

Status = Literal["ok", "error", "cancelled"]
# "chunks" is the last resort when the server sent no usage and no tokenizer was given: one token
# per content chunk, exact for engines that stream one token per event. "engine": the engine's
# own count, with no server between (a simulated run, bench.sim).
TokenSource = Literal["usage", "tokenizer", "chunks", "engine"]
StampSource = Literal["kernel", "user"]


@dataclass(frozen=True, slots=True)
class Backfill:
    """How a table written before its column existed is read: the column is filled with
    ``value``, or, when ``copy_of`` names another column, with that column's values."""

    value: Any = None
    copy_of: str | None = None


def _added(backfill: Backfill) -> dict[str, Any]:
    return {"backfill": backfill}


# A count a folder written before token reconciliation lacks: read as unknown.
_COUNT = _added(Backfill())


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
        reasoning: True for a chunk of reasoning (``delta.reasoning_content`` or
            ``delta.reasoning``), False for one of the answer (``content``, or a completion's
            ``text``, or a tool call's name and argument fragments). An event carrying both
            becomes two chunks with the same ``t_s``.
        read_s: run seconds when the client's own code got the read (user-space
            ``perf_counter_ns`` just after it). Where the request's ``stamps`` are "kernel",
            ``t_s`` is the kernel's receive stamp and ``read_s - t_s`` is how late the client
            read it; with "user" stamps the two are equal (and so in older folders).
    """

    request_id: str
    index: int
    t_s: float
    n_tokens: int
    reasoning: bool = field(default=False, metadata=_added(Backfill(False)))
    read_s: float = field(default=math.nan, kw_only=True, metadata=_added(Backfill(copy_of="t_s")))

    def __post_init__(self) -> None:
        if self.read_s != self.read_s:  # not given: the chunk was stamped when it was read
            self.read_s = self.t_s


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
        status: "ok", "error" (see ``error``/``http_status``) or "cancelled" (cut in flight:
            by the run's duration, a signal or the engine's death, or abandoned by the
            workload, see ``abandoned``; kept so that nothing in flight disappears).
        error: a human-readable message for "error" and "cancelled", else None.
        http_status: the HTTP status code when a response started, else None.
        first_answer_token_s: arrival of the first answer chunk (not reasoning), or None when
            none arrived (a request cut while still reasoning); equal to ``first_token_s`` for
            a stream without reasoning. TTFT stays the first token of any kind.
        reasoning_tokens: how many of ``output_tokens`` were reasoning (0 without reasoning);
            the answer's tokens are ``output_tokens - reasoning_tokens``.
        reasoning_tokens_source: "usage" when the server reported them
            (``usage.completion_tokens_details.reasoning_tokens``), else how the stream's
            reasoning chunks were counted ("tokenizer" or "chunks"); None without reasoning.
        client_prompt_tokens: the prompt's tokens under the workload's tokenizer (what was
            planned: RequestSpec.prompt_tokens); None in folders written before it was kept.
        usage_prompt_tokens, usage_output_tokens: the server's own counts
            (``usage.prompt_tokens``, ``usage.completion_tokens``), None when it sent no usage.
        client_output_tokens: the received text re-encoded with the run's tokenizer (reasoning
            and answer encoded apart, then added), None without a tokenizer. These three beside
            ``client_prompt_tokens`` are what results.validity.token_reconciliation compares.
        abandoned: True for a "cancelled" request that the workload abandoned (the client
            closed the stream after the scenario's ``[abandon]`` tokens or seconds: a user who
            stopped reading), False for one the run cut (``duration_s``, Ctrl-C, a dead engine)
            and for every other status. ``done_s`` is when it was closed, ``output_tokens``
            the tokens received by then.
        stamps: where its chunks' ``t_s`` came from: "kernel" (the kernel's receive stamp of
            the segment that completed each chunk, loadgen.client.transport.kernel_stamps) or "user"
            (the client's own clock when it read them: the httpx path, Locust workers, a platform or
            connection without kernel stamps, and older folders).
        endpoint: the base URL of the replica the request was sent to (one of `bench run`'s
            ``--url``, trailing ``/`` cut; the one engine's URL for a run against one). A
            folder written before fleets reads it as run.json's ``engine.url``
            (results.folder.endpoints.fill_endpoints).
        model: the ``model`` field the request sent (one of the scenario's ``[[models]]``, a
            workload's per-row model, else the run's one model). None for a request cut before
            it was sent, and in a folder written before models were recorded: both read as
            run.json's ``engine.model`` (results.folder.endpoints.fill_models).
        inputs: for a pooling request (embeddings, rerank), the inputs it carried: texts
            embedded, or documents ranked; None for generation. A pooling request streams
            nothing: no chunk, ``first_token_s`` None, ``output_tokens`` 0, and its figures are
            the latency and the inputs and input tokens per second
            (results.figures.workloads.pooling).
            A folder written before it reads as generation.
        num_tool_calls: how many tool calls the answer made (OpenAI chat ``delta.tool_calls``,
            Responses ``function_call`` items, Anthropic ``tool_use`` blocks; 0 for none, and
            in a folder written before tool calls were read).
        tool_calls: the calls themselves, in OpenAI's shape (``{"id", "type": "function",
            "function": {"name", "arguments"}}``, arguments a JSON text), in call order; empty
            for none. Held in memory for the workload (a session appends them to its history),
            not a column: requests.parquet keeps ``num_tool_calls``.
        chunks: the content chunks (reasoning, answer and tool-call fragments) in arrival order.
        session_id, turn: the session the request belongs to and its 0-based turn in it
            (loadgen.request_spec.SessionTurn: agent sessions, multi-turn chats); None for a
            request of no session, and in folders written before sessions were recorded.
        cached_tokens: of ``prompt_tokens``, those the server's prefix cache served, as its
            usage reports them (``usage.prompt_tokens_details.cached_tokens``: vLLM with
            ``--enable-prompt-tokens-details``, the reference engine); None when not reported.
        images: how many images the request sent (loadgen.request_images; 0 for none, and in
            a folder written before images were sent).
        image_tokens: of ``usage_prompt_tokens``, those beyond the text's own
            (``client_prompt_tokens``): the images' cost as the server counted it, the chat
            template's few tokens in it (loadgen.request_images.image_tokens). None without
            images or without the server's usage.
        chunks: the content chunks (reasoning and answer) in arrival order.
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
    # Added with reasoning models: keyword-only, so records built by position keep their meaning.
    first_answer_token_s: float | None = field(
        default=None, kw_only=True, metadata=_added(Backfill(copy_of="first_token_s"))
    )
    reasoning_tokens: int = field(default=0, kw_only=True, metadata=_added(Backfill(0)))
    reasoning_tokens_source: TokenSource | None = field(
        default=None, kw_only=True, metadata=_added(Backfill(None))
    )
    # Added with token reconciliation: each count by who made it.
    client_prompt_tokens: int | None = field(default=None, kw_only=True, metadata=_COUNT)
    usage_prompt_tokens: int | None = field(default=None, kw_only=True, metadata=_COUNT)
    usage_output_tokens: int | None = field(default=None, kw_only=True, metadata=_COUNT)
    client_output_tokens: int | None = field(default=None, kw_only=True, metadata=_COUNT)
    # Added with request cancellation: a table written before it had no abandoned request.
    abandoned: bool = field(default=False, kw_only=True, metadata=_added(Backfill(False)))
    # Added with fleets (several --url); None here, filled from run.json when a folder is read.
    endpoint: str | None = field(default=None, kw_only=True, metadata=_added(Backfill(None)))
    # Added with kernel receive stamps: every older request was stamped in user space.
    stamps: StampSource = field(default="user", kw_only=True, metadata=_added(Backfill("user")))
    # Added with several models a run (a scenario's [[models]]); None: the run's one model.
    model: str | None = field(default=None, kw_only=True, metadata=_added(Backfill(None)))
    # Added with the pooling APIs (embeddings, rerank); None for generation.
    inputs: int | None = field(default=None, kw_only=True, metadata=_added(Backfill(None)))
    # Added with tool calls (loadgen.client.readers.tool_calls); the calls stay in memory.
    num_tool_calls: int = field(default=0, kw_only=True, metadata=_added(Backfill(0)))
    tool_calls: list[dict[str, Any]] = field(
        default_factory=list, kw_only=True, metadata={"column": False}
    )
    # Added with agent sessions: where the request stands in its session, and the prompt
    # tokens the server's prefix cache served (usage.prompt_tokens_details.cached_tokens).
    session_id: str | None = field(default=None, kw_only=True, metadata=_added(Backfill(None)))
    turn: int | None = field(default=None, kw_only=True, metadata=_added(Backfill(None)))
    cached_tokens: int | None = field(default=None, kw_only=True, metadata=_COUNT)
    # Added with images (a scenario's [images], a dataset's images column).
    images: int = field(default=0, kw_only=True, metadata=_added(Backfill(0)))
    image_tokens: int | None = field(default=None, kw_only=True, metadata=_COUNT)
    # tokens.parquet's rows, not a column of requests.parquet.
    chunks: list[ChunkRecord] = field(default_factory=list, metadata={"column": False})

    def __post_init__(self) -> None:
        # A record built without the reasoning fields is one without reasoning: its first
        # answer token is its first token.
        if (
            self.first_answer_token_s is None
            and self.reasoning_tokens == 0
            and not any(c.reasoning for c in self.chunks)
        ):
            self.first_answer_token_s = self.first_token_s

    @classmethod
    def unanswered(
        cls, request_id: str, user_id: int, scheduled_s: float, sent_s: float,
        done_s: float | None, prompt_tokens: int, status: Status, error: str,
    ) -> RequestRecord:  # fmt: skip
        """The record of a request that got no response (cut in flight, or lost with its
        client): no token, no HTTP status, ``error`` saying why."""
        return cls(
            request_id=request_id, user_id=user_id, scheduled_s=scheduled_s, sent_s=sent_s,
            first_token_s=None, done_s=done_s, prompt_tokens=prompt_tokens, output_tokens=0,
            output_tokens_source="chunks", status=status, error=error, http_status=None,
            client_prompt_tokens=prompt_tokens,
        )  # fmt: skip

    def to_row(self) -> dict[str, Any]:
        """The requests.parquet row: exactly :data:`REQUEST_COLUMNS`, chunks left out."""
        return {name: getattr(self, name) for name in REQUEST_COLUMNS}


def endpoint_of(base_url: str) -> str:
    """How a replica is named in ``RequestRecord.endpoint``: its base URL without a trailing
    ``/`` (here, beside the field, so that the client names it without loading the readers)."""
    return base_url.rstrip("/")


def _columns(record: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(record) if f.metadata.get("column", True))


def _backfills(record: type) -> dict[str, Backfill]:
    return {f.name: f.metadata["backfill"] for f in fields(record) if "backfill" in f.metadata}


# The tables' columns in file order, derived from the dataclasses above.
REQUEST_COLUMNS: tuple[str, ...] = _columns(RequestRecord)
TOKEN_COLUMNS: tuple[str, ...] = _columns(ChunkRecord)
# The columns a table written before them may lack, and how such a table is read.
REQUEST_BACKFILLS: dict[str, Backfill] = _backfills(RequestRecord)
TOKEN_BACKFILLS: dict[str, Backfill] = _backfills(ChunkRecord)
