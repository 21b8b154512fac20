"""The contract every reader of an answer keeps, whatever its API (loadgen.client.apis picks
one per request): the client feeds it the answer as it arrives, then asks it for a verdict and
the request's record.

A streamed answer is fed event by event (:class:`StreamReader`: the SSE APIs' readers in
``openai_stream``, ``responses_stream`` and ``anthropic_stream``); a pooling answer read by read
(:class:`BodyReader`: ``pooling``). Both end the same way, through :class:`AnswerReader`.
"""

from __future__ import annotations

from typing import Protocol

from loadgen.clock import RunClock
from loadgen.protocols import TokenizerLike
from loadgen.request_spec import RequestSpec
from perfmodel.files import JSONObject
from results.folder.records import RequestRecord, Status

__all__ = ["AnswerReader", "BodyReader", "StreamReader"]


class AnswerReader(Protocol):
    """What the client reads of any reader once the answer stopped coming.

    ``done_ns``: when the answer was known complete (``[DONE]``, the body's end), None while
    it is not; the client sets it to None for an answer that failed. ``usage``: the server's
    token counts, None when it sent none or they cannot be trusted. ``texts``: the content
    chunks' texts (empty for a pooling answer), what a request cut short is judged by.
    """

    done_ns: int | None
    usage: JSONObject | None
    finish_reason: str | None
    texts: list[str]

    def problem(self) -> str | None:
        """Why an answer that arrived whole cannot be used (an absurd usage, a body that is not
        the API's answer), or None; called once, before :meth:`to_record`."""
        ...

    def to_record(
        self, *, spec: RequestSpec, user_id: int, scheduled_s: float, sent_ns: int, end_ns: int,
        clock: RunClock, tokenizer: TokenizerLike | None, status: Status, error: str | None,
        http_status: int | None,
    ) -> RequestRecord:  # fmt: skip
        """The request's record; ``end_ns`` is its end where ``done_ns`` is None."""
        ...


class StreamReader(AnswerReader, Protocol):
    """A reader of an SSE stream, fed one event's data at a time."""

    def add_event(self, data: str, t_ns: int, read_ns: int | None = None) -> None:
        """One event's data, stamped ``t_ns`` (the kernel's where there is one) and read by
        the client at ``read_ns`` (default ``t_ns``); StreamError for an error event or
        malformed data."""
        ...


class BodyReader(AnswerReader, Protocol):
    """A reader of one JSON body, fed each read of it."""

    def add_body(self, data: bytes, t_ns: int) -> None:
        """One read of the body and its arrival time (the last one is the answer's end)."""
        ...
