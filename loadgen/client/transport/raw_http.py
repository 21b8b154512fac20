"""A lean HTTP/1.1 client for SSE streams (http and https): one asyncio Protocol per connection.

Why: a load generator's clock is only as good as its event loop is idle. httpx reads a stream
through httpcore, anyio and h11 (pure Python, two reads per chunk); at 100 streams of 100
tokens/s that measured about 0.19 ms of client CPU per token, enough to delay every timestamp
taken on the loop. Here each network read lands in :meth:`Connection.data_received`, is stamped
with one ``perf_counter_ns`` before anything else, de-chunked, and fed to the SSE parser and the
stream accumulator in the same call: no tasks, no generators, no copies beyond the bytes.
Where the kernel stamps received segments (Linux), the socket is read by
:class:`loadgen.client.transport.kernel_stamps.StampedTransport` instead of asyncio's transport, and
a read's time is the kernel's stamp (:meth:`Connection.stamped_received`); ``last_read_ns`` stays
the user-space time of the read.

Scope: ``http://``, and ``https://`` with :class:`RawPool`'s ``tls`` context (TLS decrypted in
memory over the stamped socket, loadgen.client.transport.tls_layer; proxies go through httpx,
see loadgen.client.stream); HTTP/1.1 keep-alive; bodies by ``Transfer-Encoding: chunked``,
``Content-Length`` or close. Redirects are never followed (loadgen.client.answers says where
they pointed). A request's outcome is ``(http_status, the kept body)``; the caller builds
the record.

Bounded whatever the server does: a head over 64 KiB fails; an answer that is no stream (an
error status, a redirect, a type other than ``text/event-stream``) is kept up to
loadgen.client.limits.MAX_ERROR_BODY_BYTES, and the connection is dropped once that is full
rather than read to an end that may never come; a request ends at its whole-request deadline
as well as after a silence (:class:`ReadTimeout`, :class:`RequestTimeout`).
"""

from __future__ import annotations

import asyncio
import select
import ssl
from collections.abc import Callable
from time import perf_counter_ns
from typing import Protocol

from loadgen.client.answers import is_stream
from loadgen.client.limits import MAX_ERROR_BODY_BYTES
from loadgen.client.transport.kernel_clock import KernelClock, StampCounts, stamp_report
from loadgen.client.transport.kernel_stamps import keep_stamping_on, open_connection
from perfmodel.files import JSONObject

__all__ = [
    "BodyRefused",
    "ConnectError",
    "ConnectTimeout",
    "Connection",
    "OnBody",
    "Outcome",
    "PoolTimeout",
    "RawHttpError",
    "RawPool",
    "ReadTimeout",
    "RemoteProtocolError",
    "RequestTimeout",
    "StaleConnection",
]

OnBody = Callable[[bytes, int], None]


class Outcome(Protocol):
    """Where a response's outcome is set: an ``asyncio.Future``, or a blocking reader's own."""

    def done(self) -> bool: ...
    def set_result(self, result: None) -> None: ...
    def set_exception(self, exception: BaseException) -> None: ...


_MAX_HEAD = 64 * 1024


class RawHttpError(Exception):
    """A transport-level failure; the subclasses carry httpx's names for the same failures, so
    error messages (and error counts by message) read the same on both client paths."""


class ConnectError(RawHttpError):
    """The connection could not be opened."""


class ConnectTimeout(RawHttpError):
    """The connection did not open in time."""


class PoolTimeout(RawHttpError):
    """No connection of the pool came free in time."""


class ReadTimeout(RawHttpError):
    """The server was silent for too long."""


class BodyRefused(RawHttpError):
    """``on_body`` refused what the server sent (a malformed or endless stream): the request
    ends now, and its connection is dropped."""


class RequestTimeout(RawHttpError):
    """The whole request took longer than its limit (the server kept sending, or trickled)."""


class RemoteProtocolError(RawHttpError):
    """The server broke HTTP: a malformed response, or a close before the response ended."""


class StaleConnection(RemoteProtocolError):
    """A reused keep-alive connection was closed by the server before any byte of the answer:
    the request never reached it (servers close idle connections whenever they like)."""


class Connection(asyncio.Protocol):
    """One keep-alive connection; at most one request in flight on it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = True
        self.requests = 0  # answered on this connection so far
        self._got_bytes = False
        self.stamp_counts = StampCounts()  # where its read times came from
        self._reset(None, None)

    def _reset(self, on_body: OnBody | None, done: Outcome | None) -> None:
        self._on_body = on_body
        self._done = done
        self._head = b""
        self._in_body = False
        self.status: int | None = None
        self._chunked = False
        self._remaining: int | None = None  # Content-Length bytes still due
        self._chunk_left = 0  # bytes of the current chunk's data still due
        self._pending = b""  # chunked framing bytes not yet complete
        self._trailer = False  # after the last (zero-length) chunk: its trailer section
        self._keep_alive = True
        self._json_body = False  # a JSON answer is the answer (pooling APIs), not an error
        self.error_body = b""
        self.content_type = ""
        self.location = ""
        self._keep_body = False  # the body is kept for a message, not streamed to on_body
        self.last_read_ns = 0

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.closed = False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._done is not None and not self._done.done():
            if self._in_body and self._remaining is None and not self._chunked:
                self._finish()  # a body delimited by the close: complete
            elif self.requests > 0 and not self._got_bytes:
                self._done.set_exception(StaleConnection("the server had closed the connection"))
            else:
                why = f" ({type(exc).__name__}: {exc})" if exc else ""
                where = "in its body" if self._in_body else "before the response head ended"
                self._done.set_exception(
                    RemoteProtocolError(
                        f"the server closed the connection {where}{why}; request "
                        f"{self.requests + 1} on this connection"
                    )
                )

    def data_received(self, data: bytes) -> None:
        t_ns = perf_counter_ns()  # the arrival time of every event this read completes
        self.stamped_received(data, t_ns, t_ns)

    def stamped_received(self, data: bytes, t_ns: int, read_ns: int) -> None:
        """One read: ``t_ns`` when its bytes arrived (the kernel's stamp, or ``read_ns``),
        ``read_ns`` the user-space ``perf_counter_ns`` of the read."""
        self.last_read_ns = read_ns
        self._got_bytes = True
        if self._done is None or self._done.done():
            return  # bytes after the response (or while idle): nothing to attribute them to
        try:
            if not self._in_body:
                self._head += data
                end = self._head.find(b"\r\n\r\n")
                if end < 0:
                    if len(self._head) > _MAX_HEAD:
                        raise RemoteProtocolError("malformed response: headers over 64 KiB")
                    return
                data = self._head[end + 4 :]
                self._parse_head(self._head[:end])
                self._in_body = True
            if data:
                self._body(data, t_ns)
        except RawHttpError as exc:
            self._keep_alive = False
            self._done.set_exception(exc)
        except Exception as exc:  # a reader's own failure ends this request, never hangs it
            self._keep_alive = False
            self._done.set_exception(exc)

    # parsing
    def _parse_head(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise RemoteProtocolError(f"malformed response status line: {lines[0][:80]!r}")
        self.status = int(parts[1])
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"location":
                self.location = value.strip().decode("latin-1")
                continue
            value = value.strip().lower()
            if name == b"transfer-encoding" and b"chunked" in value:
                self._chunked = True
            elif name == b"content-length":
                self._remaining = int(value)
            elif name == b"content-type":
                self.content_type = value.decode("latin-1")
            elif name == b"connection" and value == b"close":
                self._keep_alive = False
        # An error, a redirect or no stream: kept for the message (loadgen.client.answers).
        json_answer = self._json_body and self.content_type.lower().startswith("application/json")
        self._keep_body = self.status >= 300 or not (is_stream(self.content_type) or json_answer)
        if self._chunked:
            self._remaining = None
        elif self._remaining == 0:
            self._finish()

    def _deliver(self, payload: bytes, t_ns: int) -> None:
        if self._keep_body:
            room = MAX_ERROR_BODY_BYTES - len(self.error_body)
            self.error_body += payload[:room]
            if len(payload) >= room:
                # Enough for the message; the rest may never end: drop the connection.
                self._keep_alive = False
                self._finish()
        elif self._on_body is not None:
            self._on_body(payload, t_ns)

    def _body(self, data: bytes, t_ns: int) -> None:
        if not self._chunked:
            if self._remaining is not None:
                data = data[: self._remaining]
                self._remaining -= len(data)
            self._deliver(data, t_ns)
            if self._remaining == 0:
                self._finish()
            return
        buf = self._pending + data if self._pending else data
        self._pending = b""
        if self._trailer:
            self._end_trailer(buf)
            return
        pos, size = 0, len(buf)
        out: list[bytes] = []
        while pos < size:
            if self._chunk_left > 0:
                take = min(self._chunk_left, size - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self._chunk_left -= take
                if self._chunk_left == 0:
                    self._chunk_left = -2  # the CRLF after the chunk's data
                continue
            if self._chunk_left < 0:  # skip the CRLF (it may straddle two reads)
                take = min(-self._chunk_left, size - pos)
                pos += take
                self._chunk_left += take
                continue
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                self._pending = buf[pos:]
                break
            try:
                length = int(buf[pos:eol].split(b";", 1)[0], 16)
            except ValueError:
                raise RemoteProtocolError(f"malformed chunk size {buf[pos:eol][:20]!r}") from None
            pos = eol + 2
            if length == 0:
                if out:
                    self._deliver(b"".join(out), t_ns)
                self._trailer = True
                self._end_trailer(buf[pos:])
                return
            self._chunk_left = length
        if out:
            self._deliver(out[0] if len(out) == 1 else b"".join(out), t_ns)

    def _end_trailer(self, buf: bytes) -> None:
        """The response ends after the trailer section: a blank line (usually alone)."""
        if buf.startswith(b"\r\n") or b"\r\n\r\n" in buf:
            self._finish()
        else:
            self._pending = buf  # the blank line has not arrived yet

    def _finish(self) -> None:
        if self._done is not None and not self._done.done():
            self._done.set_result(None)

    # requests
    async def request(
        self,
        data: bytes,
        on_body: OnBody,
        timeout_s: float,
        deadline_ns: int | None = None,
        *,
        json_body: bool = False,
    ) -> tuple[int | None, bytes]:
        """Write ``data`` (a whole request) and wait for the whole response.

        ``on_body(bytes, t_ns)`` gets the de-chunked body of a stream per read (and that of a
        JSON answer when ``json_body``: a request whose answer is JSON, not a stream); the body
        of any other answer (module docstring) is returned instead. Raises RawHttpError on
        transport failures, :class:`ReadTimeout` when no byte arrives for ``timeout_s``
        seconds, :class:`RequestTimeout` at ``deadline_ns`` (``perf_counter_ns`` time; None:
        none); the connection is then closed: it cannot be reused mid-response.
        """
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        start_ns = self.begin(on_body, done, json_body)
        timeout_ns = int(timeout_s * 1e9)
        end_ns = deadline_ns if deadline_ns is not None else start_ns + 2**62

        def watchdog() -> None:
            now = perf_counter_ns()
            idle = now - self.last_read_ns
            if done.done():
                return
            if now >= end_ns:
                done.set_exception(RequestTimeout(f"over {(now - start_ns) / 1e9:.1f} s"))
            elif idle >= timeout_ns:
                done.set_exception(ReadTimeout(f"silent for {timeout_s} s"))
            else:
                wait_ns = min(timeout_ns - idle, end_ns - now)
                handle[0] = loop.call_later(wait_ns / 1e9, watchdog)

        handle = [loop.call_later(min(timeout_ns, end_ns - start_ns) / 1e9, watchdog)]
        self.transport.write(data)
        try:
            await done
        except BaseException:
            self.close()  # mid-response: the connection is no longer usable
            raise
        finally:
            handle[0].cancel()
            self._on_body = None
        return self.end()

    def begin(self, on_body: OnBody, done: Outcome, json_body: bool = False) -> int:
        """Get ready for a request's response (its outcome set on ``done``); returns its start,
        ``perf_counter_ns``. :meth:`request` uses it, and so does a blocking reader
        (loadgen.client.transport.blocking_raw), which feeds :meth:`stamped_received` itself."""
        self._reset(on_body, done)
        self._json_body = json_body
        self._got_bytes = False
        self.last_read_ns = start_ns = perf_counter_ns()
        return start_ns

    def end(self) -> tuple[int | None, bytes]:
        """After a response that ended well: ``(status, kept body)``; the connection is closed
        unless it stays alive."""
        self._on_body = None
        self.requests += 1
        if not self._keep_alive:
            self.close()
        return self.status, self.error_body

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True
        self.requests = 0

    def peer_closed(self) -> bool:
        """Whether the idle connection has pending bytes or EOF: the server closed it (or sent
        junk), and the loop has not noticed yet. One zero-timeout select; a few microseconds."""
        if self.closed or self.transport is None:
            return True
        own_check = getattr(self.transport, "peer_closed", None)
        if own_check is not None:  # TLS: what the socket holds may be a session ticket
            return bool(own_check())
        sock = self.transport.get_extra_info("socket")
        if sock is None:
            return False
        readable, _, _ = select.select([sock.fileno()], [], [], 0)
        return bool(readable)


class RawPool:
    """``size`` keep-alive connections to ``host:port``, opened on first use, LIFO."""

    def __init__(
        self, host: str, port: int, size: int, connect_timeout_s: float, kernel_stamps: bool = True,
        tls: ssl.SSLContext | None = None,
    ) -> None:  # fmt: skip
        self.host, self.port, self.tls = host, port, tls
        self.connect_timeout_s = connect_timeout_s
        # One clock map for the pool's connections (loadgen.client.transport.kernel_stamps).
        self.clock = KernelClock() if kernel_stamps else None
        if kernel_stamps:
            keep_stamping_on()
        self._conns = [Connection() for _ in range(size)]
        self._free = list(reversed(self._conns))
        self._available = asyncio.Semaphore(size)

    async def acquire(self) -> Connection:
        """A free connection, opened (or re-opened) if needed; raises ConnectError or
        ConnectTimeout (the slot is given back first)."""
        await self._available.acquire()
        conn = self._free.pop()
        try:
            if not conn.closed and conn.peer_closed():
                conn.close()
            if conn.closed:
                await self._open(conn)
        except BaseException:
            self.release(conn)
            raise
        return conn

    async def request(
        self, conn: Connection, data: bytes, on_body: OnBody, timeout_s: float,
        deadline_ns: int | None = None, *, json_body: bool = False,
    ) -> tuple[int | None, bytes]:  # fmt: skip
        """``conn.request``, sent once more on a fresh connection if the server had closed the
        reused one before answering (see :class:`StaleConnection`)."""
        try:
            return await conn.request(data, on_body, timeout_s, deadline_ns, json_body=json_body)
        except StaleConnection:
            await self._open(conn)
            return await conn.request(data, on_body, timeout_s, deadline_ns, json_body=json_body)

    async def _open(self, conn: Connection) -> None:
        """(Re)open ``conn``; raises ConnectError or ConnectTimeout."""
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                await open_connection(
                    conn, self.host, self.port, self.clock, conn.stamp_counts, self.tls
                )
        except TimeoutError:
            raise ConnectTimeout(
                f"no connection to {self.host}:{self.port} within {self.connect_timeout_s} s"
            ) from None
        except OSError as exc:
            raise ConnectError(f"{type(exc).__name__}: {exc}") from None

    async def warm_up(self) -> int:
        """Open every closed connection now, all at once; returns how many failed to open."""
        closed = [conn for conn in self._conns if conn.closed]
        outcomes = await asyncio.gather(*(self._open(c) for c in closed), return_exceptions=True)
        return sum(1 for outcome in outcomes if isinstance(outcome, BaseException))

    def stamp_report(self) -> JSONObject:
        """For run.json: each opened connection's stamp source
        (loadgen.client.transport.kernel_stamps)."""
        return stamp_report([c.stamp_counts for c in self._conns], self.clock)

    def release(self, conn: Connection) -> None:
        self._free.append(conn)
        self._available.release()

    def close(self) -> None:
        for conn in self._conns:
            conn.close()
