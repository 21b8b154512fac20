"""The meaning of an OpenAI-compatible SSE stream: content chunks, usage, finish, errors.

:class:`StreamAccumulator` is fed the data of each event with the arrival time of the network
read that carried it, and turns the stream into a :class:`~results.folder.records.RequestRecord`
once
it has ended. It knows the differences between engines that matter for counting:

    * vLLM sends usage in a final chunk whose ``choices`` is empty; llama-server puts it beside
      ``choices`` in its last chunk (and in chat, in a final chunk with empty choices). Usage is
      *replaced*, never added, so a server that repeats it (or sends it cumulatively in every
      chunk) is counted once.
    * A chat stream may open with a role-only delta (vLLM: ``content: ""``, llama-server:
      ``content: null``); finish-only chunks carry no text. Neither is content: only non-empty
      text counts, so TTFT is the first real token.
    * Reasoning models stream ``delta.reasoning_content`` (vLLM's reasoning parsers, DeepSeek)
      or ``delta.reasoning`` (newer vLLM, OpenRouter) before ``content``. Those are generated
      tokens too: they are content chunks flagged ``reasoning``, TTFT is the first token of any
      kind, and the first ``content`` is the first answer token. An event that carries both
      becomes a reasoning chunk then an answer chunk at the same time. Text completions carry
      no reasoning field (vLLM parses reasoning in the chat endpoint only): their ``text`` is
      answer. :mod:`loadgen.client.readers.token_counts` counts the two parts.
    * A chat answer may call tools: ``delta.tool_calls`` fragments (loadgen.client.readers.
      tool_calls assembles them). Each fragment's name and arguments are generated text too:
      an answer chunk (after the event's content, if any), so TTFT, ITL and the output's
      count include the call; the calls themselves reach the record's ``tool_calls``.
"""

from __future__ import annotations

import json
from typing import Any

from loadgen.client.limits import (
    CHECK_EVERY,
    CHUNK_CHARS,
    MAX_ERROR_BODY_BYTES,
    output_cap,
    usage_problem,
)
from loadgen.client.readers.reader import StreamReader
from loadgen.client.readers.sse import SSEParser, StreamError
from loadgen.client.readers.token_counts import (
    StreamTokens,
    count_stream_tokens,
    recount_output_tokens,
    usage_int,
)
from loadgen.client.readers.tool_calls import ToolCalls
from loadgen.clock import RunClock
from loadgen.protocols import TokenizerLike
from loadgen.request_images import image_tokens
from loadgen.request_spec import RequestSpec
from perfmodel.files import JSONObject
from results.folder.records import ChunkRecord, RequestRecord, Status, TokenSource
from results.schema.api_kinds import APIS, Api

__all__ = ["StreamAccumulator", "StreamError", "error_message_from_body", "feed_read"]

_MAX_MESSAGE_CHARS = 300
_UNBOUNDED = 2**62


def error_message_from_body(body: bytes | str | Any) -> str:
    """The human-readable message of an error response body (bytes, text or parsed JSON).

    Understands OpenAI's ``{"error": {"message": ...}}``, older vLLM's ``{"object": "error",
    "message": ...}``, FastAPI's ``{"detail": ...}``, and falls back to the raw text (trimmed).
    """
    obj = body
    if isinstance(body, bytes | str):
        body = body[:MAX_ERROR_BODY_BYTES]
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        try:
            obj = json.loads(text)
        except ValueError:
            return text.strip()[:_MAX_MESSAGE_CHARS] or "(empty body)"
    if isinstance(obj, dict):
        err = obj.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:_MAX_MESSAGE_CHARS]
        if isinstance(err, str) and err:
            return err[:_MAX_MESSAGE_CHARS]
        for key in ("message", "detail"):
            if obj.get(key):
                return str(obj[key])[:_MAX_MESSAGE_CHARS]
    return json.dumps(obj)[:_MAX_MESSAGE_CHARS]


class StreamAccumulator:
    """Collects one response stream; cheap per event, all token work deferred to :meth:`finish`.

    Contract:
        * :meth:`add_event` takes one event's data and the ``perf_counter_ns`` of the read that
          completed it (the kernel's stamp where there is one), and the client's own
          ``perf_counter_ns`` of that read (default: the same); it raises :class:`StreamError`
          for an error event or malformed data.
        * Content chunks are kept as parallel lists of raw ns stamps and texts (no per-chunk
          objects or float math until the stream has ended).
        * ``done_ns`` is set by the caller when ``[DONE]`` arrives.
        * With ``max_tokens``, a stream of more content chunks than
          loadgen.client.limits.output_cap, or of more text than CHUNK_CHARS a chunk, raises
          :class:`StreamError` (a server that does not stop), so the texts held stay bounded.
    """

    __slots__ = (
        "_chars", "_chat", "_check_at", "_counted", "_max_chars", "_max_chunks", "done_ns",
        "finish_reason", "max_tokens", "read_ns", "reasoning", "texts", "times_ns", "tools",
        "usage",
    )  # fmt: skip

    def __init__(self, api: Api, max_tokens: int | None = None) -> None:
        # Completions and chat only: chat reads ``delta``, completions ``text``.
        self._chat = APIS[api].conversation
        self.max_tokens = max_tokens
        cap = output_cap(max_tokens)
        # Unbounded without max_tokens (an int: an int-to-float compare costs more).
        self._max_chunks = _UNBOUNDED if cap is None else cap
        self._max_chars = self._max_chunks * CHUNK_CHARS
        # The text's length is summed every CHECK_EVERY chunks, not per chunk: one compare
        # per event on the hot path.
        self._check_at = min(CHECK_EVERY, self._max_chunks)
        self._counted = 0  # chunks whose characters are in _chars
        self._chars = 0
        self.times_ns: list[int] = []
        self.read_ns: list[int] = []  # per chunk: when the client read it (user space)
        self.texts: list[str] = []
        self.reasoning: list[bool] = []  # per chunk: reasoning (True) or answer (False)
        self.usage: JSONObject | None = None
        self.finish_reason: str | None = None
        self.done_ns: int | None = None
        self.tools = ToolCalls()

    def add_event(self, data: str, t_ns: int, read_ns: int | None = None) -> None:
        """Account for one event (the hot path: one ``json.loads`` and a few dict lookups)."""
        if read_ns is None:
            read_ns = t_ns
        try:
            obj = json.loads(data)
            if obj.get("error") is not None or obj.get("object") == "error":
                raise StreamError(f"error event in stream: {error_message_from_body(obj)}")
            choices = obj.get("choices")
            if choices:
                choice = choices[0]
                if self._chat:
                    delta = choice.get("delta")
                    if delta:
                        thought = delta.get("reasoning_content") or delta.get("reasoning")
                        if thought:
                            self.texts.append(thought)
                            self.times_ns.append(t_ns)
                            self.read_ns.append(read_ns)
                            self.reasoning.append(True)
                        text = delta.get("content")
                        calls = delta.get("tool_calls")
                    else:
                        text = calls = None
                else:
                    text, calls = choice.get("text"), None
                if text:
                    self.texts.append(text)
                    self.times_ns.append(t_ns)
                    self.read_ns.append(read_ns)
                    self.reasoning.append(False)
                if calls:
                    self.add_chunk(self.tools.openai_delta(calls), t_ns, read_ns)
                if len(self.texts) >= self._check_at:
                    self._check_size()
                reason = choice.get("finish_reason")
                if reason:
                    self.finish_reason = reason
            usage = obj.get("usage")
            if usage:
                self.usage = usage
        except (ValueError, AttributeError, TypeError, KeyError, IndexError) as exc:
            raise StreamError(
                f"malformed stream event ({type(exc).__name__}: {exc}): "
                f"{data[:_MAX_MESSAGE_CHARS]!r}"
            ) from None

    def add_chunk(self, text: str | None, t_ns: int, read_ns: int, reasoning: bool = False) -> None:
        """One chunk of ``text`` (nothing for ""), answer or ``reasoning``, the stream's cap
        checked: the path of the Responses and Messages readers and of tool-call fragments;
        chat's content path above appends inline, one call fewer per chunk."""
        if not text:
            return
        self.texts.append(text)
        self.times_ns.append(t_ns)
        self.read_ns.append(read_ns)
        self.reasoning.append(reasoning)
        if len(self.texts) >= self._check_at:
            self._check_size()

    def _check_size(self) -> None:
        """Raise StreamError once the stream is past its cap (loadgen.client.limits)."""
        n = len(self.texts)
        self._chars += sum(len(t) for t in self.texts[self._counted : n])
        self._counted = n
        if n > self._max_chunks or self._chars > self._max_chars:
            raise StreamError(self._overrun())
        self._check_at = min(n + CHECK_EVERY, self._max_chunks + 1)

    def _overrun(self) -> str:
        return (
            f"the server streamed {len(self.texts):,} content chunks "
            f"({self._chars:,} characters) "
            f"for max_tokens {self.max_tokens}: far past the length asked for, so the client "
            "stopped reading"
        )

    def problem(self) -> str | None:
        """Why the finished stream cannot be believed (an absurd usage), or None."""
        return usage_problem(self.usage, self.max_tokens)

    def output_tokens(self, tokenizer: TokenizerLike | None) -> tuple[int, TokenSource]:
        """The output-token total and where it came from: usage, tokenizer, or chunk count."""
        counts = self.token_counts(tokenizer)
        return counts.output_tokens, counts.source

    def token_counts(self, tokenizer: TokenizerLike | None) -> StreamTokens:
        """The stream's output tokens, their reasoning part and each chunk's share."""
        return count_stream_tokens(self.texts, self.reasoning, self.usage, tokenizer)

    def to_record(
        self,
        *,
        spec: RequestSpec,
        user_id: int,
        scheduled_s: float,
        sent_ns: int,
        end_ns: int,
        clock: RunClock,
        tokenizer: TokenizerLike | None,
        status: Status,
        error: str | None,
        http_status: int | None,
    ) -> RequestRecord:
        """Build the request's record; ``end_ns`` is used when no ``[DONE]`` arrived."""
        counts = self.token_counts(tokenizer)
        rid = spec.request_id
        chunks = [
            ChunkRecord(rid, i, clock.to_s(t_ns), n, thought, read_s=clock.to_s(read_ns))
            for i, (t_ns, n, thought, read_ns) in enumerate(
                zip(self.times_ns, counts.per_chunk, self.reasoning, self.read_ns, strict=True)
            )
        ]
        first_answer = next((c.t_s for c in chunks if not c.reasoning), None)
        usage_prompt = usage_int(self.usage, "prompt_tokens")
        usage_output = usage_int(self.usage, "completion_tokens")
        # The tokenizer already counted the text when the server sent no usage.
        recount = (
            counts.output_tokens
            if counts.source == "tokenizer"
            else recount_output_tokens(self.texts, self.reasoning, tokenizer)
        )
        return RequestRecord(
            request_id=rid,
            user_id=user_id,
            scheduled_s=scheduled_s,
            sent_s=clock.to_s(sent_ns),
            first_token_s=chunks[0].t_s if chunks else None,
            done_s=clock.to_s(self.done_ns if self.done_ns is not None else end_ns),
            prompt_tokens=spec.prompt_tokens if usage_prompt is None else usage_prompt,
            output_tokens=counts.output_tokens,
            output_tokens_source=counts.source,
            status=status,
            error=error,
            http_status=http_status,
            first_answer_token_s=first_answer,
            reasoning_tokens=counts.reasoning_tokens,
            reasoning_tokens_source=counts.reasoning_source,
            client_prompt_tokens=spec.prompt_tokens,
            usage_prompt_tokens=usage_prompt,
            usage_output_tokens=usage_output,
            client_output_tokens=recount,
            num_tool_calls=len(self.tools),
            tool_calls=self.tools.calls(),
            cached_tokens=usage_int(self.usage, "prompt_tokens_details", "cached_tokens"),
            images=len(spec.images),
            image_tokens=image_tokens(len(spec.images), usage_prompt, spec.prompt_tokens),
            chunks=chunks,
        )


def feed_read(
    parser: SSEParser, acc: StreamReader, raw: bytes, t_ns: int, drained: int
) -> int | None:
    """One read of a stream's body (the httpx and Locust paths) into ``parser`` and ``acc``,
    stamped ``t_ns``. Returns the bytes read past ``[DONE]`` so far (``drained`` before this
    read), or None once they pass MAX_ERROR_BODY_BYTES: the connection is then read no further,
    so junk after the end cannot hold the request."""
    if parser.done:
        # Read on so the connection is kept for the next request, but not without end.
        drained += len(raw)
        return None if drained > MAX_ERROR_BODY_BYTES else drained
    for data in parser.feed(raw):
        if data:
            acc.add_event(data, t_ns)
    if parser.done:
        acc.done_ns = t_ns
    return drained
