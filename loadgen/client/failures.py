"""What a request that failed says: every exception a request can end with, whichever transport
carried it (the raw HTTP/1.1 path or httpx), turned into its record's status and message here,
in one place.

    cancelled (the run ended)      status "cancelled"
    --request-timeout met          RequestTimeout: URL had not finished its answer after N s ...
    --read-timeout met             ReadTimeout: URL was silent for N s (before or after its head)
    no free connection             PoolTimeout: ... raise max_connections ...
    a stream the reader refused    the reader's message (malformed event, error event, overrun)
    the connection broken          its exception's name, what it said, and the URL
    anything else                  client error: NAME: what it said (recorded, never dropped)
"""

from __future__ import annotations

import asyncio
from typing import Protocol

import httpx

from loadgen.client.answers import read_timeout_message, request_timeout_message
from loadgen.client.readers.sse import StreamError
from loadgen.client.transport.raw_http import (
    BodyRefused,
    PoolTimeout,
    RawHttpError,
    ReadTimeout,
    RequestTimeout,
)
from results.folder.records import Status

__all__ = ["CANCELLED", "ClientLimits", "failure"]

CANCELLED = "cancelled: the run ended while the request was in flight"


class ClientLimits(Protocol):
    """The client's limits a failure's message names (loadgen.client.stream.StreamingClient)."""

    @property
    def timeout_s(self) -> float: ...
    @property
    def request_timeout_s(self) -> float: ...
    @property
    def connect_timeout_s(self) -> float: ...
    @property
    def max_connections(self) -> int: ...


def _pool_timeout(name: str, limits: ClientLimits) -> str:
    return (
        f"{name}: no free connection within {limits.timeout_s} s; raise max_connections (now "
        f"{limits.max_connections}) to at least the number of concurrent requests"
    )


def _root(exc: BaseException) -> str:
    """The first cause in ``exc``'s chain that says something (httpx wraps an OS error in
    exceptions with empty messages)."""
    seen: BaseException | None = exc
    while seen is not None:
        if str(seen):
            return f"{type(seen).__name__}: {seen}"
        seen = seen.__cause__ or seen.__context__
    return type(exc).__name__


def _httpx_message(exc: Exception, url: str, http_status: int | None, limits: ClientLimits) -> str:
    name = type(exc).__name__
    if isinstance(exc, httpx.ConnectTimeout):
        return f"{name}: no connection to {url} within {limits.connect_timeout_s} s"
    if isinstance(exc, httpx.PoolTimeout):
        return _pool_timeout(name, limits)
    if isinstance(exc, httpx.TimeoutException):
        return read_timeout_message(url, limits.timeout_s, http_status is not None)
    if isinstance(exc, httpx.ReadError | httpx.RemoteProtocolError):
        where = "in its body" if http_status is not None else "before the response head ended"
        return f"{name}: the server broke the connection {where} ({_root(exc)}) (POST {url})"
    return f"{name}: {exc or 'no detail'} (POST {url})"


def failure(
    exc: BaseException, url: str, http_status: int | None, limits: ClientLimits,
    refused: list[str] | None = None,
) -> tuple[Status, str]:  # fmt: skip
    """The status and message of a request to ``url`` that ended with ``exc`` (module
    docstring); ``http_status`` where its head had come, ``refused`` the messages of a stream
    its reader refused (the raw path ends such a stream with BodyRefused)."""
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled", CANCELLED
    if isinstance(exc, TimeoutError | RequestTimeout):
        return "error", request_timeout_message(url, limits.request_timeout_s)
    if isinstance(exc, ReadTimeout):
        return "error", read_timeout_message(url, limits.timeout_s, http_status is not None)
    if isinstance(exc, StreamError):
        return "error", str(exc)
    if isinstance(exc, BodyRefused) and refused is not None:
        return "error", refused[0] if refused else f"{exc} (POST {url})"
    if isinstance(exc, PoolTimeout):
        return "error", f"PoolTimeout: {exc}"
    if isinstance(exc, RawHttpError):
        return "error", f"{type(exc).__name__}: {exc} (POST {url})"
    if isinstance(exc, httpx.HTTPError):
        return "error", _httpx_message(exc, url, http_status, limits)
    return "error", f"client error: {type(exc).__name__}: {exc}"
