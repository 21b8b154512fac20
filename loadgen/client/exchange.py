"""One request's exchange with a server, whatever carries it: the protocol both transports
keep (:class:`Transport`: the raw HTTP/1.1 path, loadgen.client.raw_transport, and httpx's,
loadgen.client.httpx_transport) and what an exchange came to (:class:`Exchange`).

A transport sends the body, feeds the answer to the request's reader as it arrives (a stream's
events to a StreamReader, a pooling answer's reads to a BodyReader: loadgen.client.readers.
reader) and never raises: a failure is the exchange's status and message
(loadgen.client.failures). The client then builds the record from the reader.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from loadgen.client.answers import cut_short_message
from loadgen.client.readers.reader import AnswerReader, BodyReader, StreamReader
from loadgen.client.readers.sse import SSEParser
from results.folder.records import StampSource, Status
from results.schema.api_kinds import ApiKind

__all__ = ["Exchange", "Transport", "stream_end_problem"]


@dataclass
class Exchange:
    """What one exchange came to: when the request went (``sent_ns``, after any wait for a
    connection), the answer's HTTP status (None before its head), the outcome, and where its
    chunks' times came from (``stamps``; None: the record's default, user space)."""

    sent_ns: int
    http_status: int | None = None
    status: Status = "ok"
    error: str | None = None
    stamps: StampSource | None = None


class Transport(Protocol):
    """How the client's requests reach a server (module docstring)."""

    async def exchange(
        self, kind: ApiKind, url: str, body: bytes, reader: StreamReader | BodyReader
    ) -> Exchange:
        """POST ``body`` to ``url`` (an API of ``kind``) and read the answer into ``reader``
        (a BodyReader where ``kind.pooling``, else a StreamReader); never raises."""
        ...

    async def warm_up(self) -> None:
        """Open connections before the load (where the transport keeps a pool of its own)."""
        ...

    async def aclose(self) -> None:
        """Close every connection."""
        ...


def stream_end_problem(parser: SSEParser, reader: AnswerReader) -> str | None:
    """What is wrong with a stream whose body ended (cut short before its end), or None."""
    if not parser.done and reader.finish_reason is None:
        return cut_short_message(parser, len(reader.texts))
    return None
