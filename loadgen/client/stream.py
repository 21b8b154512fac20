"""The streaming HTTP client: sends one OpenAI-compatible request and records its timing.

Timing model: one ``time.perf_counter_ns()`` per network read, taken before any parsing, and
attributed to every content event that read completed. The per-read path is the SSE parser, one
``json.loads`` per event and two list appends; token counting and apportioning happen after the
stream ends. Connections are HTTP/1.1 keep-alive, one slot per concurrent user
(:mod:`loadgen.client.transport.connection_slots` says why not httpx's shared pool), so a warm run
never pays connection setup inside TTFT; streams are read to their very end (past ``[DONE]``) so
that each connection stays open for the next request instead of being dropped.

Servers are read through :mod:`loadgen.client.transport.raw_http` (one asyncio Protocol per
connection: a few microseconds of CPU per chunk instead of httpx's tens), ``https://`` too (TLS
decrypted in memory over the same stamped socket, :mod:`loadgen.client.transport.tls_layer`);
proxies (``trust_env``) and ``raw=False`` go through httpx. Both paths record the same way. On
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
from collections.abc import Callable, Mapping
from time import perf_counter_ns
from typing import Any, cast

import httpx

from loadgen.client.abandon import AbandoningAccumulator, send_abandoning
from loadgen.client.answers import (
    answer_problem,
    auth_refusal,
    cut_short_message,
    is_stream,
)
from loadgen.client.apis import API_CLIENTS, api_client, request_body
from loadgen.client.failures import failure
from loadgen.client.limits import (
    DEFAULT_READ_TIMEOUT_S,
    DEFAULT_REQUEST_TIMEOUT_S,
    MAX_ERROR_BODY_BYTES,
)
from loadgen.client.readers.openai_stream import (
    StreamError,
    error_message_from_body,
    feed_read,
)
from loadgen.client.readers.reader import AnswerReader, BodyReader, StreamReader
from loadgen.client.readers.sse import SSEParser
from loadgen.client.transport.connection_slots import ConnectionSlots
from loadgen.client.transport.raw_http import (
    BodyRefused,
    PoolTimeout,
    RawPool,
)
from loadgen.client.transport.tls_layer import client_context
from loadgen.clock import RunClock
from loadgen.protocols import TokenizerLike
from loadgen.request_spec import RequestSpec
from results.folder.records import RequestRecord, Status, endpoint_of
from results.folder.redact import REDACTED

__all__ = ["ServerUnreachableError", "StreamingClient", "raw_heads", "request_headers"]


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


def raw_heads(
    url: httpx.URL, port: int, api_headers: Mapping[str, Mapping[str, str]]
) -> dict[str, bytes]:
    """Each API's request head for the raw path, up to its ``Content-Length:`` value (bytes)."""
    host_header = f"{url.host}:{port}"
    prefix = url.raw_path.decode().rstrip("/")
    return {
        api: (
            f"POST {prefix}{'' if prefix.endswith('/v1') else '/v1'}{tail} HTTP/1.1\r\n"
            f"Host: {host_header}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in api_headers[api].items())
            + "Content-Length: "
        ).encode()
        for api, client in API_CLIENTS.items()
        for tail in (client.kind.path,)
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
        extra_body: dict[str, Any] | None = None,
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
        self._trust_env = trust_env
        self._slots_pool: ConnectionSlots | None = None
        self._raw: RawPool | None = None
        url = httpx.URL(root)
        if raw and not trust_env:
            https = url.scheme == "https"
            port = url.port or (443 if https else 80)
            self._raw = RawPool(
                url.host, port, max_connections, self.connect_timeout_s, kernel_stamps,
                tls=client_context() if https else None,
            )  # fmt: skip
            self._raw_heads = raw_heads(url, port, self._api_headers)

    @property
    def _slots(self) -> ConnectionSlots:
        """httpx's connections, built on first use (the raw path may never need them)."""
        if self._slots_pool is None:
            self._slots_pool = ConnectionSlots(
                self.max_connections if self._raw is None else 1,
                headers=self._headers,
                timeout=httpx.Timeout(self.timeout_s, connect=self.connect_timeout_s),
                trust_env=self._trust_env,
            )
        return self._slots_pool

    async def warm_up(self) -> None:
        """Open the pool's connections before the load, so that no request of the first wave
        pays TCP set-up in its TTFT (plain-http path; a no-op for httpx, which opens lazily).
        Connections that fail to open are left closed: their requests will say why."""
        if self._raw is not None:
            await self._raw.warm_up()

    def receive_stamps(self) -> dict[str, Any]:
        """run.json's record of where this client's chunk times came from, per connection
        (loadgen.client.transport.kernel_stamps.stamp_report); the httpx path says it has none."""
        if self._raw is None:
            return {"endpoint": self.endpoint, "connections": [], "kernel_connections": 0,
                    "why": "httpx reads the sockets itself: user-space stamps"}  # fmt: skip
        return {"endpoint": self.endpoint, **self._raw.stamp_report()}

    async def __aenter__(self) -> StreamingClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every pooled connection."""
        if self._raw is not None:
            self._raw.close()
        if self._slots_pool is not None:
            await self._slots_pool.aclose()

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
        acc: StreamReader | BodyReader,
    ) -> RequestRecord:  # fmt: skip
        """:meth:`send`, reading into ``acc``."""
        url = self._urls[spec.api]
        body = self.request_body(spec)
        http_status: int | None = None
        status: Status = "ok"
        error: str | None = None
        sent_ns = perf_counter_ns()
        if self._raw is not None:
            return await self._send_raw(spec, user_id, scheduled_s, clock, url, body, acc)
        try:
            http = await self._acquire_slot()
            try:
                # Stamped after the slot wait: sent_s - scheduled_s then shows client-side queueing.
                sent_ns = perf_counter_ns()
                headers = self._api_headers[spec.api]
                async with asyncio.timeout(self.request_timeout_s):
                    async with http.stream("POST", url, content=body, headers=headers) as response:
                        http_status = response.status_code
                        error = await self._read(response, acc, url, spec.kind.pooling)
            finally:
                self._slots.release(http)
        except (asyncio.CancelledError, Exception) as exc:  # recorded, never dropped
            status, error = failure(exc, url, http_status, self)
        return self._record(
            spec, user_id, scheduled_s, clock, acc, sent_ns, http_status, status, error
        )

    async def _send_raw(
        self, spec: RequestSpec, user_id: int, scheduled_s: float, clock: RunClock, url: str,
        body: bytes, acc: StreamReader | BodyReader,
    ) -> RequestRecord:  # fmt: skip
        """:meth:`send` over loadgen.client.transport.raw_http (same outcomes, same record)."""
        assert self._raw is not None
        if spec.kind.pooling:
            reader = cast(BodyReader, acc)
            return await self._send_pooling_raw(
                spec, user_id, scheduled_s, clock, url, body, reader
            )
        acc = cast(StreamReader, acc)
        parser = SSEParser()
        failures: list[str] = []
        http_status: int | None = None
        status: Status = "ok"
        error: str | None = None

        on_body = stream_body_reader(parser, acc, failures, lambda: conn.last_read_ns)
        request = self._raw_heads[spec.api] + b"%d\r\n\r\n" % len(body) + body
        sent_ns = perf_counter_ns()
        conn: Any = None
        try:
            conn = await self._acquire_raw()
            try:
                sent_ns = perf_counter_ns()
                deadline_ns = sent_ns + int(self.request_timeout_s * 1e9)
                _, kept = await self._raw.request(
                    conn, request, on_body, self.timeout_s, deadline_ns
                )
            finally:
                http_status = conn.status  # also when the stream broke after its head
                self._raw.release(conn)
            error = answer_problem(
                http_status, conn.content_type, conn.location, kept, url, self._headers
            )
            if error is None:
                error = self._ending_problem(parser, acc)
        except (asyncio.CancelledError, Exception) as exc:  # recorded, never dropped
            status, error = failure(exc, url, http_status, self, refused=failures)
        record = self._record(
            spec, user_id, scheduled_s, clock, acc, sent_ns, http_status, status, error
        )
        if conn is not None:  # a retried request's chunks all came on its last opening
            record.stamps = conn.stamp_counts.source
        return record

    def _scrub(self, text: str) -> str:
        """``text`` without the key or any ``--header`` value (a server may echo them)."""
        for secret in sorted(set(self._secrets), key=len, reverse=True):
            if secret:
                text = text.replace(secret, REDACTED)
        return text

    @staticmethod
    def _ending_problem(parser: SSEParser, acc: AnswerReader) -> str | None:
        """What is wrong with a stream that ended (cut short before its end), or None."""
        if not parser.done and acc.finish_reason is None:
            return cut_short_message(parser, len(acc.texts))
        return None

    async def _send_pooling_raw(
        self, spec: RequestSpec, user_id: int, scheduled_s: float, clock: RunClock, url: str,
        body: bytes, acc: BodyReader,
    ) -> RequestRecord:  # fmt: skip
        """:meth:`send` of a pooling request (readers.pooling) over raw_http: one JSON
        body, whose reads end at ``acc.done_ns``."""
        assert self._raw is not None
        http_status: int | None = None
        status: Status = "ok"
        error: str | None = None
        request = self._raw_heads[spec.api] + b"%d\r\n\r\n" % len(body) + body
        sent_ns = perf_counter_ns()
        try:
            conn = await self._acquire_raw()
            try:
                sent_ns = perf_counter_ns()
                deadline_ns = sent_ns + int(self.request_timeout_s * 1e9)
                _, kept = await self._raw.request(
                    conn, request, acc.add_body, self.timeout_s, deadline_ns, json_body=True
                )
            finally:
                http_status = conn.status
                self._raw.release(conn)
            if http_status is not None and (http_status >= 300 or kept):
                error = answer_problem(
                    http_status, conn.content_type, conn.location, kept, url, self._headers
                )
        except (asyncio.CancelledError, Exception) as exc:  # recorded, never dropped
            status, error = failure(exc, url, http_status, self)
        if error is not None:
            acc.done_ns = None  # a failed answer ends when the failure was seen
        return self._record(
            spec, user_id, scheduled_s, clock, acc, sent_ns, http_status, status, error
        )

    async def _acquire_raw(self) -> Any:
        assert self._raw is not None
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._raw.acquire()
        except TimeoutError:
            raise PoolTimeout(
                f"no free connection within {self.timeout_s} s; raise max_connections (now "
                f"{self.max_connections}) to at least the number of concurrent requests"
            ) from None

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

    async def _acquire_slot(self) -> httpx.AsyncClient:
        """A free connection slot, waiting at most ``timeout_s`` (then ``httpx.PoolTimeout``)."""
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._slots.acquire()
        except TimeoutError:
            raise httpx.PoolTimeout("all connection slots stayed busy") from None

    async def _read(
        self, response: httpx.Response, acc: StreamReader | BodyReader, url: str, pooling: bool
    ) -> str | None:
        """Consume the response into ``acc``; return an error message, or None when complete."""
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
                self._headers,
            )  # fmt: skip
            if problem is not None:
                return problem
        if pooling:
            body_reader = cast(BodyReader, acc)
            async for raw in response.aiter_bytes():
                body_reader.add_body(raw, perf_counter_ns())
            return None  # the body is judged with the record (AnswerReader.problem)
        parser = SSEParser()
        drained: int | None = 0
        stream_reader = cast(StreamReader, acc)
        async for raw in response.aiter_bytes():
            drained = feed_read(parser, stream_reader, raw, perf_counter_ns(), drained)
            if drained is None:
                break
        return self._ending_problem(parser, acc)

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
                http = await self._slots.acquire()
                try:
                    response = await http.get(
                        url, headers={"Accept": "application/json"}, timeout=timeout_s
                    )
                finally:
                    self._slots.release(http)
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
