"""uvicorn's HTTP protocol with a deadline on reading each request and a cap on connections.

uvicorn times out only an idle kept-alive connection (``timeout_keep_alive``, after a
response). A connection that sends nothing, or part of its headers or body, is kept for ever,
and enough of them fill the process's file table (a slowloris). Here every request must arrive
whole within ``ServerLimits.timeout_request_read_s`` of its connection's opening or of its
first byte after a response, else it is answered 408 and the connection closed; and a
connection beyond ``ServerLimits.max_connections`` is answered 503 and closed at once, so the
server keeps file descriptors for the clients it serves. The deadline stops once a request is
read: generating the answer takes as long as it takes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
from dataclasses import replace
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from engine.serving.guards.limits import ServerLimits
from engine.serving.protocol import error_body

log = logging.getLogger(__name__)

# File descriptors left for everything but client connections: the model's files, the engine
# core's pipe, the tokenizer's threads, logs.
RESERVED_FDS = 256


def _raw_response(status: int, reason: str, message: str, code: str) -> bytes:
    body = json.dumps(error_body(message, status, code=code, err_type="http_error")).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol with ServerLimits' read deadline and connection cap (from the config,
    a ServerConfig)."""

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        limits: ServerLimits = getattr(config, "server_limits", ServerLimits())
        self._read_timeout_s = limits.timeout_request_read_s
        self._max_connections = limits.max_connections
        self._read_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self._max_connections:
            message = (
                f"this server has {self._max_connections} connections open, its limit; retry "
                "later (the limit is bench serve's --max-connections)"
            )
            refusal = _raw_response(503, "Service Unavailable", message, "too_many_connections")
            transport.write(refusal)
            transport.close()
            return
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        # The first byte of a new request on a kept-alive connection starts its deadline.
        if self._read_deadline is None and (self.cycle is None or self.cycle.response_complete):
            self._arm()
        super().data_received(data)

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def _arm(self) -> None:
        self._disarm()
        self._read_deadline = self.loop.call_later(self._read_timeout_s, self._read_timed_out)

    def _disarm(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _read_timed_out(self) -> None:
        self._read_deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is None or not self.cycle.response_started:
            message = (
                f"the request was not received whole within {self._read_timeout_s:g} s; send "
                "it at once (the limit is bench serve's --timeout-request-read-s)"
            )
            self.transport.write(_raw_response(408, "Request Timeout", message, "timeout"))
        self.transport.close()


class ServerConfig(uvicorn.Config):
    """uvicorn's Config carrying the ServerLimits its protocol reads."""

    def __init__(self, app: Any, server_limits: ServerLimits, **kwargs: Any) -> None:
        super().__init__(
            app,
            http=GuardedHttpToolsProtocol,
            timeout_keep_alive=server_limits.timeout_keep_alive_s,  # type: ignore[arg-type]
            **kwargs,
        )
        self.server_limits = server_limits


def within_file_limit(limits: ServerLimits) -> ServerLimits:
    """``limits`` with max_connections lowered to this process's file limit (ulimit -n) less
    RESERVED_FDS, where that is smaller; logged."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or limits.max_connections <= soft - RESERVED_FDS:
        return limits
    lowered = max(1, soft - RESERVED_FDS)
    log.warning(
        "max_connections lowered from %d to %d: the process may open %d files (ulimit -n)",
        limits.max_connections, lowered, soft,
    )  # fmt: skip
    return replace(limits, max_connections=lowered)
