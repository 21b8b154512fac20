"""The streaming HTTP client: sends one OpenAI-compatible request and records its timing.

Timing model: one ``time.perf_counter_ns()`` per network read, taken before any parsing, and
attributed to every content event that read completed. The per-read path is the SSE parser, one
``json.loads`` per event and two list appends; token counting and apportioning happen after the
stream ends. Connections are HTTP/1.1 keep-alive, one slot per concurrent user
(:mod:`loadgen.client.transport.connection_slots` says why not httpx's shared pool), so a warm run
never pays connection setup inside TTFT; streams are read to their very end (past ``[DONE]``) so
that each connection stays open for the next request instead of being dropped.

Requests go through one of two transports behind one protocol (loadgen.client.exchange):
the raw path (loadgen.client.raw_transport over :mod:`loadgen.client.transport.raw_http`, one
asyncio Protocol per connection: a few microseconds of CPU per chunk instead of httpx's tens),
``https://`` too (TLS decrypted in memory over the same stamped socket,
:mod:`loadgen.client.transport.tls_layer`); proxies (``trust_env``) and ``raw=False`` go
through httpx (loadgen.client.httpx_transport). Both feed the request's reader, its API's
(loadgen.client.apis), and fail with the same messages (loadgen.client.failures); the record
is built here, the same way for both. On
the raw path each chunk's time is the kernel's receive stamp where Linux gives one
(:mod:`loadgen.client.transport.kernel_stamps`; the record's ``stamps`` says "kernel"), with the
client's own read time beside it (``ChunkRecord.read_s``); httpx reads its sockets itself, so its
records are always stamped in user space.

Failures are data: every outcome of :meth:`StreamingClient.send` is a
:class:`~results.folder.records.RequestRecord` (status ok, error or cancelled); it never raises.
A server cannot hang or fool it (loadgen.client.limits): a request ends at its whole-request
timeout or after a silence, and an oversized, endless, malformed or non-SSE answer, a redirect or
an absurd usage ends it as an error that says what the server did (loadgen.client.answers).
Error messages never hold the key or a ``--header`` value, even when a server echoes them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from time import perf_counter_ns
from typing import Any

import httpx

from loadgen.client.abandon import AbandoningAccumulator, send_abandoning
from loadgen.client.answers import (
    auth_refusal,
)
from loadgen.client.apis import API_CLIENTS, api_client, request_body
from loadgen.client.exchange import Transport
from loadgen.client.httpx_transport import HttpxTransport
from loadgen.client.limits import (
    DEFAULT_READ_TIMEOUT_S,
    DEFAULT_REQUEST_TIMEOUT_S,
)
from loadgen.client.raw_transport import RawTransport
from loadgen.client.readers.openai_stream import (
    error_message_from_body,
)
from loadgen.client.readers.reader import AnswerReader, BodyReader, StreamReader
from loadgen.clock import RunClock
from loadgen.protocols import TokenizerLike
from loadgen.request_spec import RequestSpec
from perfmodel.files import JSONObject
from results.folder.records import RequestRecord, Status, endpoint_of
from results.folder.redact import REDACTED

__all__ = ["ServerUnreachableError", "StreamingClient", "request_headers"]


class ServerUnreachableError(ConnectionError):
    """The server did not answer a reachability check; the message names the URL and the fix."""


def request_headers(api_key: str | None, headers: Mapping[str, str] | None) -> dict[str, str]:
    """Every request's headers: a stream asked for, uncompressed, the key as a bearer token,
    then the user's ``--header`` values over any of the same name (case-insensitive)."""
    sent = {
        "Accept": "text/event-stream",
        # Compressed SSE would be buffered by the encoder and decoded per read: ask for none.
        "Accept-Encoding": "identity",
        "Content-Type": "application/json",
    }
    if api_key:
        sent["Authorization"] = f"Bearer {api_key}"
    for name, value in (headers or {}).items():
        for known in [k for k in sent if k.lower() == name.lower()]:
            del sent[known]
        sent[name] = value
    return sent


class StreamingClient:
    """An async client for /v1/completions and /v1/chat/completions with SSE streaming, and
    the other APIs of loadgen.client.apis (Responses, Anthropic Messages, embeddings, rerank).

    Args:
        base_url: the server root, e.g. ``http://127.0.0.1:8000``; a trailing ``/v1`` is accepted
            and not doubled.
        model: the ``model`` field sent with every request.
        max_connections: pool size (keep-alive connections too); set it to the number of
            concurrent users so that no request waits for a connection.
        timeout_s: the longest silence tolerated while sending or reading (per read:
            ``--read-timeout``); also the pool wait.
        request_timeout_s: the longest a whole request may take, from sending it to the end
            of its answer (``--request-timeout``), seconds.
        tokenizer: counts output tokens when the server sends no usage, and weighs multi-token
            chunks; optional.
        api_key: sent as ``Authorization: Bearer <api_key>`` when given.
        headers: more headers for every request (``--header``; an ``Authorization`` here wins
            over ``api_key``), e.g. ``RequestHeaders.as_dict()`` of loadgen.client.auth.
        connect_timeout_s: the longest wait to open a TCP connection (default
            ``min(timeout_s, 10)``).
        trust_env: honour HTTP(S)_PROXY and similar variables; off by default because a proxy on
            the path distorts every latency measured.
        extra_body: extra JSON fields merged into every request body (engine-specific options).
        raw: read streams (http and https) with loadgen.client.transport.raw_http (default);
            False forces httpx.
        kernel_stamps: on the raw path, time chunks by the kernel's receive stamps where the
            platform gives them (default); False keeps user-space stamps.

    Use as ``async with StreamingClient(...) as client:`` or call :meth:`aclose` at the end.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        max_connections: int = 100,
        timeout_s: float = DEFAULT_READ_TIMEOUT_S,
        tokenizer: TokenizerLike | None = None,
        api_key: str | None = None,
        *,
        connect_timeout_s: float | None = None,
        trust_env: bool = False,
        extra_body: JSONObject | None = None,
        raw: bool = True,
        headers: Mapping[str, str] | None = None,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        kernel_stamps: bool = True,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(
                f"StreamingClient base_url: expected 'http://host:port' or 'https://...', "
                f"got {base_url!r}"
            )
        if not isinstance(max_connections, int) or max_connections < 1:
            raise ValueError(
                f"StreamingClient max_connections: expected an int >= 1 (the number of users), "
                f"got {max_connections!r}"
            )
        if not timeout_s > 0:
            raise ValueError(f"StreamingClient timeout_s: expected seconds > 0, got {timeout_s!r}")
        if not request_timeout_s > 0:
            raise ValueError(
                "StreamingClient request_timeout_s: expected seconds > 0, "
                f"got {request_timeout_s!r}"
            )
        if connect_timeout_s is None:
            connect_timeout_s = min(timeout_s, 10.0)
        elif not connect_timeout_s > 0:
            raise ValueError(
                "StreamingClient connect_timeout_s: expected seconds > 0, "
                f"got {connect_timeout_s!r}"
            )
        root = base_url.rstrip("/")
        # What each record names as its replica (results.figures.fleet).
        self.endpoint = endpoint_of(base_url)
        self.api_root = root if root.endswith("/v1") else root + "/v1"
        self.model = model
        self.max_connections = max_connections
        self.timeout_s = float(timeout_s)
        self.request_timeout_s = float(request_timeout_s)
        self.connect_timeout_s = float(connect_timeout_s)
        self.tokenizer = tokenizer
        self._extra_body = dict(extra_body or {})
        self._urls = {api: self.api_root + c.kind.path for api, c in API_CLIENTS.items()}
        self._headers = sent = request_headers(api_key, headers)
        # What error messages must never show, even when a server echoes it back.
        self._secrets = [*(headers or {}).values(), *([api_key] if api_key else [])]
        # Each API's own headers (loadgen.client.apis): JSON answers, Anthropic's key header.
        self._api_headers = {api: c.headers(sent) for api, c in API_CLIENTS.items()}
        self._raw: RawTransport | None = None
        if raw and not trust_env:
            self._raw = RawTransport(httpx.URL(root), self, sent, self._api_headers, kernel_stamps)
        # Beside the raw path, httpx only checks that the server is there: one slot.
        self._httpx = HttpxTransport(
            self, max_connections if self._raw is None else 1, sent, self._api_headers, trust_env
        )
        self._transport: Transport = self._raw or self._httpx

    async def warm_up(self) -> None:
        """Open the pool's connections before the load, so that no request of the first wave
        pays TCP set-up in its TTFT (plain-http path; a no-op for httpx, which opens lazily).
        Connections that fail to open are left closed: their requests will say why."""
        await self._transport.warm_up()

    def receive_stamps(self) -> JSONObject:
        """run.json's record of where this client's chunk times came from, per connection
        (loadgen.client.transport.kernel_stamps.stamp_report); the httpx path says it has none."""
        if self._raw is None:
            return {"endpoint": self.endpoint, "connections": [], "kernel_connections": 0,
                    "why": "httpx reads the sockets itself: user-space stamps"}  # fmt: skip
        return {"endpoint": self.endpoint, **self._raw.pool.stamp_report()}

    async def __aenter__(self) -> StreamingClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every pooled connection."""
        if self._raw is not None:
            await self._raw.aclose()
        await self._httpx.aclose()

    def request_body(self, spec: RequestSpec) -> bytes:
        """The JSON body for ``spec`` (public so that adapters and tests can inspect it)."""
        return request_body(spec, self.model, self._extra_body)

    async def send(
        self, spec: RequestSpec, user_id: int, scheduled_s: float, clock: RunClock
    ) -> RequestRecord:
        """Send ``spec``, read the stream to its end, and return its record. Never raises.

        Outcomes: "ok" after ``[DONE]`` (or a clean end of body after a finish_reason); "error"
        for HTTP status >= 400 (message from the body's ``error.message``), connection errors,
        timeouts, error events, malformed events and streams cut before their end; "cancelled"
        when the task is cancelled (the CancelledError is swallowed so the record is returned;
        the caller can tell by ``asyncio.current_task().cancelling()``), or when the spec's
        ``abandon`` rule closes the stream early (then ``abandoned``; loadgen.client.abandon).
        """
        if spec.abandon is not None:
            acc = AbandoningAccumulator(spec.api, spec.abandon.after_tokens, spec.max_tokens)
            return await send_abandoning(
                spec.abandon, acc, lambda: self._send(spec, user_id, scheduled_s, clock, acc),
                scheduled_s, clock,
            )  # fmt: skip
        client = api_client(spec)
        if client.body_reader is not None:
            return await self._send(spec, user_id, scheduled_s, clock, client.body_reader(spec))
        assert client.stream_reader is not None
        return await self._send(spec, user_id, scheduled_s, clock, client.stream_reader(spec))

    async def _send(
        self, spec: RequestSpec, user_id: int, scheduled_s: float, clock: RunClock,
        reader: StreamReader | BodyReader,
    ) -> RequestRecord:  # fmt: skip
        """:meth:`send` through the client's transport, reading into ``reader``."""
        body = self.request_body(spec)
        out = await self._transport.exchange(spec.kind, self._urls[spec.api], body, reader)
        record = self._record(
            spec, user_id, scheduled_s, clock, reader, out.sent_ns, out.http_status, out.status,
            out.error,
        )  # fmt: skip
        if out.stamps is not None:
            record.stamps = out.stamps
        return record

    def _scrub(self, text: str) -> str:
        """``text`` without the key or any ``--header`` value (a server may echo them)."""
        for secret in sorted(set(self._secrets), key=len, reverse=True):
            if secret:
                text = text.replace(secret, REDACTED)
        return text

    def _record(
        self, spec: RequestSpec, user_id: int, scheduled_s: float, clock: RunClock,
        acc: AnswerReader, sent_ns: int, http_status: int | None,
        status: Status, error: str | None,
    ) -> RequestRecord:  # fmt: skip
        end_ns = perf_counter_ns()
        if error is not None:
            if acc.done_ns is not None:
                # The answer was complete at [DONE]; a failure or cut while draining the rest of
                # the body does not spoil it.
                status, error = "ok", None
            elif status == "ok":
                status = "error"
        elif status == "ok" and (problem := acc.problem()) is not None:
            # An absurd usage is not used for any count: the stream's own are, and it fails.
            acc.usage = None
            status, error = "error", problem
        if error is not None:
            error = self._scrub(error)
        fields: dict[str, Any] = {
            "spec": spec,
            "user_id": user_id,
            "scheduled_s": scheduled_s,
            "sent_ns": sent_ns,
            "end_ns": end_ns,
            "clock": clock,
            "http_status": http_status,
        }
        try:
            record = acc.to_record(tokenizer=self.tokenizer, status=status, error=error, **fields)
        except Exception as exc:  # a broken tokenizer must not lose the request
            failure = f"counting output tokens failed: {type(exc).__name__}: {exc}"
            record = acc.to_record(
                tokenizer=None,
                status="error" if status == "ok" else status,
                error=f"{error}; {failure}" if error else failure,
                **fields,
            )
        record.endpoint = self.endpoint
        record.model = spec.model or self.model
        return record

    async def check_reachable(self, timeout_s: float = 5.0) -> list[str]:
        """Ask ``GET <api_root>/models``; return the served model ids (may be empty).

        Raises:
            ServerUnreachableError: no connection, no answer within ``timeout_s`` seconds (the
                whole check, connect included), or HTTP 401/403. The message names the URL and
                the fix. Other statuses (e.g. 404 from a server without /v1/models) count as
                reachable, since something answered HTTP there.
        """
        url = self.api_root + "/models"
        try:
            async with asyncio.timeout(timeout_s):
                http = await self._httpx.slots.acquire()
                try:
                    response = await http.get(
                        url, headers={"Accept": "application/json"}, timeout=timeout_s
                    )
                finally:
                    self._httpx.slots.release(http)
        except (TimeoutError, httpx.TimeoutException):
            raise ServerUnreachableError(
                f"{url} did not answer within {timeout_s} s; is the server up and listening "
                f"there? Check base_url or start the server first"
            ) from None
        except httpx.HTTPError as exc:
            raise ServerUnreachableError(
                f"cannot reach {url} ({type(exc).__name__}: {exc}); start the server or fix "
                f"base_url"
            ) from None
        if response.status_code in (401, 403):
            message = error_message_from_body(response.content)
            refusal = auth_refusal(response.status_code, message, self._headers)
            raise ServerUnreachableError(self._scrub(f"{url} answered {refusal}"))
        if response.status_code >= 400:
            return []
        try:
            data = response.json().get("data") or []
            return [str(item["id"]) for item in data if isinstance(item, dict) and "id" in item]
        except (ValueError, AttributeError, TypeError):
            return []
