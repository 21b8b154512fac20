"""The client's httpx path: proxies (``trust_env``) and ``raw=False``, one connection slot per
concurrent user (loadgen.client.transport.connection_slots says why not httpx's shared pool).
httpx reads its sockets itself, so its chunks are stamped in user space. A
loadgen.client.exchange.Transport, with the same outcomes and messages as the raw path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from time import perf_counter_ns
from typing import cast

import httpx

from loadgen.client.answers import answer_problem, is_stream
from loadgen.client.exchange import Exchange, stream_end_problem
from loadgen.client.failures import ClientLimits, failure
from loadgen.client.limits import MAX_ERROR_BODY_BYTES
from loadgen.client.readers.openai_stream import feed_read
from loadgen.client.readers.reader import BodyReader, StreamReader
from loadgen.client.readers.sse import SSEParser
from loadgen.client.transport.connection_slots import ConnectionSlots
from results.schema.api_kinds import ApiKind

__all__ = ["HttpxTransport"]


class HttpxTransport:
    """Requests through ``connections`` httpx slots (module docstring); ``limits`` bound each
    request and name themselves in its failures, ``sent`` are the headers every request
    carries, ``api_headers`` each API's own. The slots are opened on first use: beside the raw
    path, this transport only checks that the server is there."""

    def __init__(
        self, limits: ClientLimits, connections: int, sent: Mapping[str, str],
        api_headers: Mapping[str, Mapping[str, str]], trust_env: bool,
    ) -> None:  # fmt: skip
        self.limits = limits
        self._connections = connections
        self._sent = sent
        self._api_headers = api_headers
        self._trust_env = trust_env
        self._slots: ConnectionSlots | None = None

    @property
    def slots(self) -> ConnectionSlots:
        """httpx's connections, built on first use."""
        if self._slots is None:
            self._slots = ConnectionSlots(
                self._connections,
                headers=dict(self._sent),
                timeout=httpx.Timeout(self.limits.timeout_s, connect=self.limits.connect_timeout_s),
                trust_env=self._trust_env,
            )
        return self._slots

    async def warm_up(self) -> None:
        """Nothing: httpx opens its connections as requests need them."""

    async def aclose(self) -> None:
        if self._slots is not None:
            await self._slots.aclose()

    async def exchange(
        self, kind: ApiKind, url: str, body: bytes, reader: StreamReader | BodyReader
    ) -> Exchange:
        out = Exchange(perf_counter_ns())
        try:
            http = await self._acquire()
            try:
                # Stamped after the slot wait: sent_s - scheduled_s then shows client-side queueing.
                out.sent_ns = perf_counter_ns()
                headers = self._api_headers[kind.name]
                async with asyncio.timeout(self.limits.request_timeout_s):
                    async with http.stream("POST", url, content=body, headers=headers) as response:
                        out.http_status = response.status_code
                        out.error = await self._read(response, reader, url, kind.pooling)
            finally:
                self.slots.release(http)
        except (asyncio.CancelledError, Exception) as exc:  # recorded, never dropped
            out.status, out.error = failure(exc, url, out.http_status, self.limits)
        return out

    async def _acquire(self) -> httpx.AsyncClient:
        """A free connection slot, waiting at most ``timeout_s`` (then ``httpx.PoolTimeout``)."""
        try:
            async with asyncio.timeout(self.limits.timeout_s):
                return await self.slots.acquire()
        except TimeoutError:
            raise httpx.PoolTimeout("all connection slots stayed busy") from None

    async def _read(
        self, response: httpx.Response, reader: StreamReader | BodyReader, url: str, pooling: bool
    ) -> str | None:
        """Consume the response into ``reader``; an error message, or None when complete."""
        kept = b""
        headers = response.headers
        content_type = headers.get("content-type", "")
        json_answer = pooling and content_type.lower().startswith("application/json")
        if response.status_code >= 300 or not (is_stream(content_type) or json_answer):
            async for raw in response.aiter_raw():
                kept += raw[: MAX_ERROR_BODY_BYTES - len(kept)]
                if len(kept) >= MAX_ERROR_BODY_BYTES:
                    break  # enough for the message; the rest may never end
            problem = answer_problem(
                response.status_code, content_type, headers.get("location", ""), kept, url,
                self._sent,
            )  # fmt: skip
            if problem is not None:
                return problem
        if pooling:
            body_reader = cast(BodyReader, reader)
            async for raw in response.aiter_bytes():
                body_reader.add_body(raw, perf_counter_ns())
            return None  # the body is judged with the record (AnswerReader.problem)
        parser = SSEParser()
        drained: int | None = 0
        stream_reader = cast(StreamReader, reader)
        async for raw in response.aiter_bytes():
            drained = feed_read(parser, stream_reader, raw, perf_counter_ns(), drained)
            if drained is None:
                break
        return stream_end_problem(parser, stream_reader)
