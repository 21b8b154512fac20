"""The client's raw HTTP/1.1 path (loadgen.client.transport.raw_http): one connection per
concurrent user, http or https, each chunk stamped by the kernel where Linux gives a receive
stamp (loadgen.client.transport.kernel_stamps). A loadgen.client.exchange.Transport.

Each API's request head is built once (:func:`raw_heads`); a request is that head, its body's
length and its body. A streamed answer is fed read by read to the SSE parser and its events to
the request's StreamReader (:func:`stream_body_reader`, which Locust's workers use too); a
pooling answer's reads go to its BodyReader.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from time import perf_counter_ns
from typing import Any, cast

import httpx

from loadgen.client.answers import answer_problem
from loadgen.client.apis import API_CLIENTS
from loadgen.client.exchange import Exchange, stream_end_problem
from loadgen.client.failures import ClientLimits, failure
from loadgen.client.limits import MAX_ERROR_BODY_BYTES
from loadgen.client.readers.reader import BodyReader, StreamReader
from loadgen.client.readers.sse import SSEParser, StreamError
from loadgen.client.transport.raw_http import BodyRefused, PoolTimeout, RawPool
from loadgen.client.transport.tls_layer import client_context
from results.schema.api_kinds import ApiKind

__all__ = ["RawTransport", "raw_heads", "stream_body_reader"]


def raw_heads(
    url: httpx.URL, port: int, api_headers: Mapping[str, Mapping[str, str]]
) -> dict[str, bytes]:
    """Each API's request head for the raw path, up to its ``Content-Length:`` value (bytes)."""
    host_header = f"{url.host}:{port}"
    prefix = url.raw_path.decode().rstrip("/")
    return {
        api: (
            f"POST {prefix}{'' if prefix.endswith('/v1') else '/v1'}{client.kind.path} HTTP/1.1\r\n"
            f"Host: {host_header}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in api_headers[api].items())
            + "Content-Length: "
        ).encode()
        for api, client in API_CLIENTS.items()
    }


def stream_body_reader(
    parser: SSEParser,
    acc: StreamReader,
    failures: list[str],
    read_ns: Callable[[], int | None],
) -> Callable[[bytes, int], None]:
    """The ``on_body`` of a raw connection's streamed answer (asyncio's and Locust's): each
    read, stamped ``t_ns``, fed to ``parser`` and its events to ``acc`` with the client's own
    read time (``read_ns()``); a malformed stream's message goes to ``failures`` and ends the
    request (BodyRefused), and so do bytes past ``[DONE]`` beyond MAX_ERROR_BODY_BYTES, so
    that junk after the end cannot hold the request."""
    drained = 0

    def on_body(raw: bytes, t_ns: int) -> None:
        nonlocal drained
        if parser.done:
            drained += len(raw)
            if drained > MAX_ERROR_BODY_BYTES:
                raise BodyRefused("the server kept sending after [DONE]")
            return
        read = read_ns()
        try:
            for data in parser.feed(raw):
                if data:
                    acc.add_event(data, t_ns, read)
        except StreamError as exc:
            failures.append(str(exc))
            raise BodyRefused(str(exc)) from None
        if parser.done:
            acc.done_ns = t_ns

    return on_body


class RawTransport:
    """Requests over a RawPool to ``url``'s host (module docstring); ``limits`` bound each
    request and name themselves in its failures, ``sent`` are the headers every request
    carries (what a refusal's message may name), ``api_headers`` each API's own."""

    def __init__(
        self, url: httpx.URL, limits: ClientLimits, sent: Mapping[str, str],
        api_headers: Mapping[str, Mapping[str, str]], kernel_stamps: bool,
    ) -> None:  # fmt: skip
        https = url.scheme == "https"
        port = url.port or (443 if https else 80)
        self.limits = limits
        self._sent = sent
        self.pool = RawPool(
            url.host, port, limits.max_connections, limits.connect_timeout_s, kernel_stamps,
            tls=client_context() if https else None,
        )  # fmt: skip
        self._heads = raw_heads(url, port, api_headers)

    async def warm_up(self) -> None:
        await self.pool.warm_up()

    async def aclose(self) -> None:
        self.pool.close()

    async def exchange(
        self, kind: ApiKind, url: str, body: bytes, reader: StreamReader | BodyReader
    ) -> Exchange:
        request = self._heads[kind.name] + b"%d\r\n\r\n" % len(body) + body
        if kind.pooling:
            return await self._answer(url, request, cast(BodyReader, reader))
        return await self._stream(url, request, cast(StreamReader, reader))

    async def _stream(self, url: str, request: bytes, acc: StreamReader) -> Exchange:
        """A streamed answer read into ``acc``."""
        limits = self.limits
        parser = SSEParser()
        failures: list[str] = []
        out = Exchange(perf_counter_ns())
        on_body = stream_body_reader(parser, acc, failures, lambda: conn.last_read_ns)
        conn: Any = None
        try:
            conn = await self._acquire()
            try:
                out.sent_ns = perf_counter_ns()
                deadline_ns = out.sent_ns + int(limits.request_timeout_s * 1e9)
                _, kept = await self.pool.request(
                    conn, request, on_body, limits.timeout_s, deadline_ns
                )
            finally:
                out.http_status = conn.status  # also when the stream broke after its head
                self.pool.release(conn)
            out.error = answer_problem(
                out.http_status, conn.content_type, conn.location, kept, url, self._sent
            )
            if out.error is None:
                out.error = stream_end_problem(parser, acc)
        except (asyncio.CancelledError, Exception) as exc:  # recorded, never dropped
            out.status, out.error = failure(exc, url, out.http_status, limits, refused=failures)
        if conn is not None:  # a retried request's chunks all came on its last opening
            out.stamps = conn.stamp_counts.source
        return out

    async def _answer(self, url: str, request: bytes, acc: BodyReader) -> Exchange:
        """A pooling answer, one JSON body, whose reads end at ``acc.done_ns``."""
        limits = self.limits
        out = Exchange(perf_counter_ns())
        try:
            conn = await self._acquire()
            try:
                out.sent_ns = perf_counter_ns()
                deadline_ns = out.sent_ns + int(limits.request_timeout_s * 1e9)
                _, kept = await self.pool.request(
                    conn, request, acc.add_body, limits.timeout_s, deadline_ns, json_body=True
                )
            finally:
                out.http_status = conn.status
                self.pool.release(conn)
            if out.http_status is not None and (out.http_status >= 300 or kept):
                out.error = answer_problem(
                    out.http_status, conn.content_type, conn.location, kept, url, self._sent
                )
        except (asyncio.CancelledError, Exception) as exc:  # recorded, never dropped
            out.status, out.error = failure(exc, url, out.http_status, limits)
        if out.error is not None:
            acc.done_ns = None  # a failed answer ends when the failure was seen
        return out

    async def _acquire(self) -> Any:
        limits = self.limits
        try:
            async with asyncio.timeout(limits.timeout_s):
                return await self.pool.acquire()
        except TimeoutError:
            raise PoolTimeout(
                f"no free connection within {limits.timeout_s} s; raise max_connections (now "
                f"{limits.max_connections}) to at least the number of concurrent requests"
            ) from None
