"""The raw HTTP/1.1 client in blocking form: one connection read by blocking ``recvmsg``.

Why: Locust's users are gevent greenlets, where asyncio has no loop to run; and a library's HTTP
client (``requests``) reads its sockets itself, so no kernel receive stamp reaches the caller.
:class:`BlockingConnection` opens its own socket (gevent's, when the process is monkey-patched:
gevent's socket has ``recvmsg``, ancillary data included, and waits for readability in its hub
like any other read), asks the kernel for receive stamps (loadgen.client.transport.kernel_stamps)
and feeds every read to the raw client's own parser, :class:`~loadgen.client.transport.raw_http.
Connection`, with the kernel's stamp of the read: the same framing, the same bounds, the same
errors as the asyncio client. ``https://`` is decrypted in memory over the same socket
(loadgen.client.transport.tls_layer), so its stamps survive TLS.

Where the kernel will not stamp, the socket is read the same way and each read is stamped in
user space; :attr:`BlockingConnection.stamp_counts` says which, and why.
"""

from __future__ import annotations

import select
import socket
import ssl
from time import perf_counter_ns
from typing import Any

from loadgen.client.transport.kernel_clock import KERNEL, USER, KernelClock, StampCounts
from loadgen.client.transport.kernel_stamps import (
    ANC_SIZE,
    READ_SIZE,
    enable_receive_stamps,
    kernel_time,
)
from loadgen.client.transport.raw_http import (
    ConnectError,
    Connection,
    ConnectTimeout,
    OnBody,
    ReadTimeout,
    RemoteProtocolError,
    RequestTimeout,
    StaleConnection,
)
from loadgen.client.transport.tls_layer import TlsSession

__all__ = ["BlockingConnection"]


class _Outcome:
    """A response's outcome, set by the parser (the blocking counterpart of a Future)."""

    __slots__ = ("error", "finished")

    def __init__(self) -> None:
        self.finished, self.error = False, None

    def done(self) -> bool:
        return self.finished

    def set_result(self, result: None) -> None:
        self.finished = True

    def set_exception(self, exception: BaseException) -> None:
        self.finished, self.error = True, exception


class BlockingConnection:
    """One keep-alive HTTP/1.1 connection to ``host:port`` (TLS with ``tls``), opened when a
    request needs it; ``clock`` None keeps user-space stamps.

    Contract: :meth:`request` sends one whole request and reads its whole response, blocking
    the calling thread (or greenlet) only; not for concurrent use. It is the transport of
    :attr:`parser` (``write``, ``close``, ``is_closing``, ``get_extra_info``).
    """

    def __init__(
        self, host: str, port: int, connect_timeout_s: float, clock: KernelClock | None,
        tls: ssl.SSLContext | None = None,
    ) -> None:  # fmt: skip
        self.host, self.port, self.connect_timeout_s = host, port, connect_timeout_s
        self.clock, self.tls = clock, tls
        self.parser = Connection()
        self.stamp_counts: StampCounts = self.parser.stamp_counts
        self._sock: socket.socket | None = None
        self._session: TlsSession | None = None
        self._stamping = False

    # The parser's transport.
    def write(self, data: bytes) -> None:
        assert self._sock is not None
        if self._session is not None:
            self._session.encrypt(data)
            data = self._session.outgoing()
        self._sock.sendall(data)

    def close(self) -> None:
        sock, self._sock, self._session = self._sock, None, None
        if sock is not None:
            sock.close()

    def is_closing(self) -> bool:
        return self._sock is None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if self._sock is None:
            return default
        if name == "socket":
            return self._sock
        if name == "ssl_object" and self._session is not None:
            return self._session.ssl_object
        if name in ("peername", "sockname"):
            return getattr(self._sock, f"get{name}")()
        return default

    # Opening.
    def open(self) -> None:
        """(Re)open the connection; raises ConnectError or ConnectTimeout."""
        self.parser.close()
        deadline_ns = perf_counter_ns() + int(self.connect_timeout_s * 1e9)
        try:
            sock = socket.create_connection((self.host, self.port), self.connect_timeout_s)
        except TimeoutError:
            raise ConnectTimeout(self._no_connection()) from None
        except OSError as exc:
            raise ConnectError(f"{type(exc).__name__}: {exc}") from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            counts = self.stamp_counts
            why = (
                "user-space stamps asked for" if self.clock is None else enable_receive_stamps(sock)
            )
            counts.opened += 1
            self._stamping = why is None
            counts.source, counts.why = (KERNEL, None) if why is None else (USER, why)
            if self.tls is not None:
                self._session = self._handshake(sock, deadline_ns)
        except TimeoutError:
            sock.close()
            raise ConnectTimeout(self._no_connection()) from None
        except OSError as exc:  # ssl.SSLError included: a certificate refused
            sock.close()
            raise ConnectError(f"{type(exc).__name__}: {exc}") from None
        self._sock = sock
        self.parser.connection_made(self)  # type: ignore[arg-type]

    def _no_connection(self) -> str:
        return f"no connection to {self.host}:{self.port} within {self.connect_timeout_s} s"

    def _handshake(self, sock: socket.socket, deadline_ns: int) -> TlsSession:
        assert self.tls is not None
        session = TlsSession(self.tls, self.host)
        while not session.handshake():
            sock.settimeout(max(deadline_ns - perf_counter_ns(), 1) / 1e9)
            if out := session.outgoing():
                sock.sendall(out)
            data = sock.recv(READ_SIZE)
            if not data:
                raise ConnectionResetError("the server closed the connection in the TLS handshake")
            session.take(data)
        if out := session.outgoing():
            sock.sendall(out)
        return session

    def peer_closed(self) -> bool:
        """Whether the idle connection was closed by the server (or sent junk): one zero-timeout
        select; with TLS what arrived is read first (a TLS 1.3 session ticket is no close)."""
        sock = self._sock
        if sock is None or self.parser.closed:
            return True
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        if self._session is None:
            return True
        try:
            sock.settimeout(0)
            data = sock.recv(READ_SIZE)
            return not data or bool(self._session.feed(data)) or self._session.ended
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:  # ssl.SSLError included
            return True

    # Requests.
    def request(
        self, data: bytes, on_body: OnBody, timeout_s: float, deadline_ns: int | None = None,
        *, json_body: bool = False,
    ) -> tuple[int | None, bytes]:  # fmt: skip
        """Send ``data`` (a whole request) and read the whole response, as
        ``raw_http.Connection.request`` does (same ``on_body``, same outcomes, same errors),
        opening the connection first when it is closed, and sending once more on a fresh one if
        the server had closed a reused one before answering."""
        if self.parser.closed or self.peer_closed():
            self.open()
        try:
            return self._exchange(data, on_body, timeout_s, deadline_ns, json_body)
        except StaleConnection:
            self.open()
            return self._exchange(data, on_body, timeout_s, deadline_ns, json_body)

    def _exchange(
        self, data: bytes, on_body: OnBody, timeout_s: float, deadline_ns: int | None,
        json_body: bool,
    ) -> tuple[int | None, bytes]:  # fmt: skip
        parser, done = self.parser, _Outcome()
        start_ns = parser.begin(on_body, done, json_body)
        end_ns = deadline_ns if deadline_ns is not None else start_ns + 2**62
        try:
            self._deadline(timeout_s, end_ns, start_ns)
            try:
                self.write(data)
            except OSError as exc:
                parser.connection_lost(exc)
            while not done.finished:
                self._read_once(timeout_s, end_ns, start_ns)
        except BaseException:
            parser.close()  # mid-response: the connection is no longer usable
            raise
        if done.error is not None:
            parser.close()
            raise done.error
        return parser.end()

    def _deadline(self, timeout_s: float, end_ns: int, start_ns: int) -> None:
        """Bound the next socket call by the silence allowed and the request's deadline."""
        assert self._sock is not None
        left_ns = end_ns - perf_counter_ns()
        if left_ns <= 0:
            raise RequestTimeout(f"over {(perf_counter_ns() - start_ns) / 1e9:.1f} s")
        self._sock.settimeout(min(timeout_s, left_ns / 1e9))

    def _read_once(self, timeout_s: float, end_ns: int, start_ns: int) -> None:
        """One read, fed to the parser with its stamp (its end, or a failure, too)."""
        parser = self.parser
        if self._sock is None:
            parser.connection_lost(None)
            return
        self._deadline(timeout_s, end_ns, start_ns)
        try:
            if self._stamping:
                data, ancdata, _, _ = self._sock.recvmsg(READ_SIZE, ANC_SIZE)
            else:
                data, ancdata = self._sock.recv(READ_SIZE), []
        except TimeoutError:
            if perf_counter_ns() >= end_ns:
                raise RequestTimeout(f"over {(perf_counter_ns() - start_ns) / 1e9:.1f} s") from None
            raise ReadTimeout(f"silent for {timeout_s} s") from None
        except OSError as exc:
            self.close()
            parser.connection_lost(exc)
            return
        read_ns = perf_counter_ns()
        if not data:
            self.close()
            parser.connection_lost(None)
            return
        t_ns = read_ns
        if self._stamping:
            assert self.clock is not None
            t_ns = kernel_time(ancdata, read_ns, self.clock, self.stamp_counts)
        session = self._session
        if session is not None:
            try:
                data = session.feed(data)
            except ssl.SSLError as exc:
                self.close()
                parser.connection_lost(RemoteProtocolError(f"TLS: {exc}"))
                return
        if data:  # with TLS, none yet for a partial record or a handshake message
            parser.stamped_received(data, t_ns, read_ns)
        if session is not None and session.ended:
            self.close()
            parser.connection_lost(None)
