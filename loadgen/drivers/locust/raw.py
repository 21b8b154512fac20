"""How a Locust worker's users send a request and read its stream: the raw client, blocking.

Each Locust user (or open-loop slot) holds one :class:`UserConnections`: a keep-alive
connection per replica (loadgen.client.transport.blocking_raw), read with ``recvmsg`` in the
user's greenlet, every read stamped by the kernel where Linux does it, ``https://`` included
(loadgen.client.transport.tls_layer). The request head is the asyncio client's
(loadgen.client.stream.raw_heads), the body goes through the same SSE parser and stream
accumulator, and the errors read the same. The worker's :class:`WorkerStamps` keeps every
connection's stamp record, one clock map for the process: what the worker reports at its end,
as run.json's ``load.receive_stamps`` lists them.

Imports no gevent: the worker process is monkey-patched before this runs, and the sockets opened
here are gevent's then.
"""

from __future__ import annotations

from time import perf_counter_ns
from typing import Any

import httpx

from loadgen.client.answers import (
    answer_problem,
    cut_short_message,
    read_timeout_message,
    request_timeout_message,
)
from loadgen.client.apis import API_CLIENTS
from loadgen.client.raw_transport import raw_heads, stream_body_reader
from loadgen.client.readers.openai_stream import StreamAccumulator
from loadgen.client.readers.sse import SSEParser
from loadgen.client.stream import request_headers
from loadgen.client.transport.blocking_raw import BlockingConnection
from loadgen.client.transport.kernel_clock import KernelClock, StampCounts, stamp_report
from loadgen.client.transport.kernel_stamps import keep_stamping_on
from loadgen.client.transport.raw_http import (
    BodyRefused,
    RawHttpError,
    ReadTimeout,
    RequestTimeout,
)
from loadgen.client.transport.tls_layer import client_context
from loadgen.drivers.driver import ClientConfig
from results.folder.records import endpoint_of

__all__ = ["UserConnections", "WorkerStamps"]


class WorkerStamps:
    """One worker's clock map (None: user-space stamps asked for) and, per replica, the stamp
    record of every connection its users opened."""

    def __init__(self, config: ClientConfig) -> None:
        self.urls = config.urls
        self.clock = KernelClock() if config.kernel_stamps else None
        if config.kernel_stamps:
            keep_stamping_on()  # from the worker's setup, long before its first connection
        self.counts: list[list[StampCounts]] = [[] for _ in self.urls]

    def reports(self, worker: int) -> list[dict[str, Any]]:
        """run.json's records of this worker, one per replica (as the asyncio driver's
        loadgen.drivers.driver.receive_stamps)."""
        return [
            {"worker": worker, "endpoint": endpoint_of(url), **stamp_report(counts, self.clock)}
            for url, counts in zip(self.urls, self.counts, strict=True)
        ]


class UserConnections:
    """One user's connection to each replica of ``config`` (opened on first use), and how a
    request is sent on one (:meth:`stream`)."""

    def __init__(self, config: ClientConfig, stamps: WorkerStamps) -> None:
        self.config = config
        self.sent = request_headers(None, config.headers.as_dict())
        self._api_headers = {api: c.headers(self.sent) for api, c in API_CLIENTS.items()}
        self.conns: list[BlockingConnection] = []  # one per replica, in order
        self._heads: list[dict[str, bytes]] = []
        self._stamps = stamps
        connect_s = min(config.timeout_s, 10.0)
        for index, base in enumerate(config.urls):
            url = httpx.URL(base.rstrip("/"))
            https = url.scheme == "https"
            port = url.port or (443 if https else 80)
            self._heads.append(raw_heads(url, port, self._api_headers))
            conn = BlockingConnection(
                url.host, port, connect_s, stamps.clock, client_context() if https else None
            )
            self.conns.append(conn)
            stamps.counts[index].append(conn.stamp_counts)

    def close(self) -> None:
        for conn in self.conns:
            conn.close()

    def stream(
        self, index: int, api: str, body: bytes, acc: StreamAccumulator, url: str
    ) -> tuple[int | None, str | None, str]:
        """POST ``body`` to replica ``index``'s ``api`` (``url``, for messages) and read its
        stream into ``acc``; returns ``(http status, error or None, stamp source)``. Never
        raises but BaseException (a greenlet killed: the caller records it as cancelled)."""
        conn = self.conns[index]
        config, parser, failures = self.config, SSEParser(), []

        on_body = stream_body_reader(parser, acc, failures, lambda: conn.parser.last_read_ns)
        request = self._heads[index][api] + b"%d\r\n\r\n" % len(body) + body
        deadline_ns = perf_counter_ns() + int(config.request_timeout_s * 1e9)
        http_status: int | None = None
        try:
            try:
                _, kept = conn.request(request, on_body, config.timeout_s, deadline_ns)
            finally:
                http_status = conn.parser.status  # also when the stream broke after its head
            error = answer_problem(
                http_status, conn.parser.content_type, conn.parser.location, kept, url, self.sent
            )
            if error is None and not parser.done and acc.finish_reason is None:
                error = cut_short_message(parser, len(acc.texts))
        except BodyRefused as exc:
            error = failures[0] if failures else f"{exc} (POST {url})"
        except ReadTimeout:
            error = read_timeout_message(url, config.timeout_s, http_status is not None)
        except RequestTimeout:
            error = request_timeout_message(url, config.request_timeout_s)
        except RawHttpError as exc:
            error = f"{type(exc).__name__}: {exc} (POST {url})"
        except Exception as exc:  # a failed request is recorded, never dropped
            error = f"client error: {type(exc).__name__}: {exc}"
        return http_status, error, conn.stamp_counts.source
