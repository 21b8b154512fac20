"""A lean HTTP/1.1 client for plain-http SSE streams: one asyncio Protocol per connection.

Why: a load generator's clock is only as good as its event loop is idle. httpx reads a stream
through httpcore, anyio and h11 (pure Python, two reads per chunk); at 100 streams of 100
tokens/s that measured about 0.19 ms of client CPU per token, enough to delay every timestamp
taken on the loop. Here each network read lands in :meth:`Connection.data_received`, is stamped
with one ``perf_counter_ns`` before anything else, de-chunked, and fed to the SSE parser and the
stream accumulator in the same call: no tasks, no generators, no copies beyond the bytes.

Scope: ``http://`` only (https, proxies and redirects go through httpx, see loadgen.client.stream);
HTTP/1.1 keep-alive; bodies by ``Transfer-Encoding: chunked``, ``Content-Length`` or close. A
request's outcome is ``(http_status, error message or None)``; the caller builds the record.
"""

from __future__ import annotations

import asyncio
import select
from collections.abc import Callable
from time import perf_counter_ns

__all__ = [
    "ConnectError",
    "ConnectTimeout",
    "Connection",
    "PoolTimeout",
    "RawHttpError",
    "RawPool",
    "ReadTimeout",
    "RemoteProtocolError",
]

OnBody = Callable[[bytes, int], None]
_MAX_HEAD = 64 * 1024
_MAX_ERROR_BODY = 16 * 1024


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
        self._reset(None, None)

    def _reset(self, on_body: OnBody | None, done: asyncio.Future[None] | None) -> None:
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
        self.content_type = b""
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
        self.last_read_ns = t_ns
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
            value = value.strip().lower()
            if name == b"transfer-encoding" and b"chunked" in value:
                self._chunked = True
            elif name == b"content-length":
                self._remaining = int(value)
            elif name == b"content-type":
                self.content_type = value
            elif name == b"connection" and value == b"close":
                self._keep_alive = False
        if self._chunked:
            self._remaining = None
        elif self._remaining == 0:
            self._finish()

    def _deliver(self, payload: bytes, t_ns: int) -> None:
        # An error status, or a JSON answer where a stream was asked for: keep it for the message.
        if (self.status or 0) >= 400 or (
            not self._json_body and self.content_type.startswith(b"application/json")
        ):
            if len(self.error_body) < _MAX_ERROR_BODY:
                self.error_body += payload
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
        self, data: bytes, on_body: OnBody, timeout_s: float, *, json_body: bool = False
    ) -> tuple[int | None, bytes]:
        """Write ``data`` (a whole request) and wait for the whole response.

        ``on_body(bytes, t_ns)`` gets the de-chunked body of a < 400 response per read; the
        body of an error response is returned instead (and that of a JSON answer, unless
        ``json_body``: a request whose answer is JSON, not a stream). Raises RawHttpError on
        transport failures and when no byte arrives for ``timeout_s`` seconds (the connection
        is then closed: it cannot be reused mid-response).
        """
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._reset(on_body, done)
        self._json_body = json_body
        self._got_bytes = False
        self.last_read_ns = perf_counter_ns()
        timeout_ns = int(timeout_s * 1e9)

        def watchdog() -> None:
            idle = perf_counter_ns() - self.last_read_ns
            if done.done():
                return
            if idle >= timeout_ns:
                done.set_exception(ReadTimeout(f"silent for {timeout_s} s"))
            else:
                handle[0] = loop.call_later((timeout_ns - idle) / 1e9, watchdog)

        handle = [loop.call_later(timeout_s, watchdog)]
        self.transport.write(data)
        try:
            await done
        except BaseException:
            self.close()  # mid-response: the connection is no longer usable
            raise
        finally:
            handle[0].cancel()
            self._on_body = None
        self.requests += 1
        if not self._keep_alive:
            self.close()
        return self.status, self.error_body

    @property
    def answered_json(self) -> bool:
        """The last response was JSON (no stream): a server that ignored stream=true."""
        return self.content_type.startswith(b"application/json")

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
        sock = self.transport.get_extra_info("socket")
        if sock is None:
            return False
        readable, _, _ = select.select([sock.fileno()], [], [], 0)
        return bool(readable)


class RawPool:
    """``size`` keep-alive connections to ``host:port``, opened on first use, LIFO."""

    def __init__(self, host: str, port: int, size: int, connect_timeout_s: float) -> None:
        self.host, self.port = host, port
        self.connect_timeout_s = connect_timeout_s
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
        self, conn: Connection, data: bytes, on_body: OnBody, timeout_s: float, *,
        json_body: bool = False,
    ) -> tuple[int | None, bytes]:  # fmt: skip
        """``conn.request``, sent once more on a fresh connection if the server had closed the
        reused one before answering (see :class:`StaleConnection`)."""
        try:
            return await conn.request(data, on_body, timeout_s, json_body=json_body)
        except StaleConnection:
            await self._open(conn)
            return await conn.request(data, on_body, timeout_s, json_body=json_body)

    async def _open(self, conn: Connection) -> None:
        """(Re)open ``conn``; raises ConnectError or ConnectTimeout."""
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                await asyncio.get_running_loop().create_connection(
                    lambda: conn, self.host, self.port
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

    def release(self, conn: Connection) -> None:
        self._free.append(conn)
        self._available.release()

    def close(self) -> None:
        for conn in self._conns:
            conn.close()
