"""Kernel receive stamps: when each segment reached the socket, whatever the client was doing.

Why: a user-space stamp is taken when the event loop gets to a read; with hundreds of streams
whose chunks land in the same millisecond, one thread reads them one after the other and the
last is stamped late by the time the others took. Linux stamps every received segment in the
kernel (``SO_TIMESTAMPNS``, on ``CLOCK_REALTIME``) and hands the stamp to a ``recvmsg`` caller as
ancillary data. :class:`StampedTransport` owns a connected non-blocking socket, reads it with
``recvmsg`` from ``loop.add_reader`` and gives its protocol both times of each read: the
kernel's (mapped onto ``perf_counter_ns``) and its own ``perf_counter_ns`` just after the read.

What a stamp means: TCP gives one stamp per ``recvmsg``, the arrival of the *last* segment the
read consumed, and the kernel merges segments that queue behind each other into one buffer that
keeps the latest stamp. So a chunk's kernel time is exact when its connection was read before
the next segment arrived, and otherwise the arrival of the last segment read with it: never
later than the user-space stamp, never earlier than the truth.

The kernel's clock is mapped onto ``perf_counter_ns`` by
:class:`loadgen.client.transport.kernel_clock.KernelClock`; a mapped stamp later than the read
itself is clamped to the read and counted.

TLS keeps the stamps: the socket is still read here, and decrypted in memory
(loadgen.client.transport.tls_layer says what a decrypted byte's stamp means).

Where the kernel cannot stamp (another OS, setsockopt refused), :func:`open_connection` hands
the socket to asyncio's own transport (and asyncio's TLS) and says why: the caller keeps
user-space stamps.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import ssl
import struct
import sys
from time import perf_counter_ns
from typing import Any

from loadgen.client.transport.kernel_clock import KERNEL, USER, KernelClock, StampCounts
from loadgen.client.transport.stamped import StampedProtocol
from loadgen.client.transport.tls_layer import TlsSession, TlsStamped, handshake

__all__ = [
    "ANC_SIZE",
    "READ_SIZE",
    "StampedTransport",
    "enable_receive_stamps",
    "keep_stamping_on",
    "kernel_time",
    "open_connection",
]

# Linux's generic value (x86, arm, riscv, powerpc); socket does not export it.
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TIMESPEC = struct.Struct("@ll")  # struct timespec: tv_sec, tv_nsec (C longs)
ANC_SIZE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
READ_SIZE = 256 * 1024  # as asyncio's selector transport reads


def enable_receive_stamps(sock: socket.socket) -> str | None:
    """Ask the kernel to stamp ``sock``'s received segments; None when it will, else why not."""
    if not sys.platform.startswith("linux") or not ANC_SIZE:
        return f"no SO_TIMESTAMPNS on {sys.platform}"
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError as exc:
        return f"SO_TIMESTAMPNS refused: {exc}"
    return None


def kernel_time(ancdata: list[tuple[int, int, bytes]], read_ns: int, clock: KernelClock,
                counts: StampCounts) -> int:  # fmt: skip
    """One ``recvmsg``'s arrival time on ``perf_counter_ns``: the kernel's stamp in
    ``ancdata`` mapped by ``clock`` (clamped to ``read_ns``, the read's own time), or
    ``read_ns`` when the read carried none; counted in ``counts``."""
    counts.reads += 1
    t_ns = read_ns
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
            sec, nsec = _TIMESPEC.unpack_from(payload)
            t_ns = clock.to_perf_ns(sec * 1_000_000_000 + nsec, read_ns)
            counts.stamped += 1
            if t_ns > read_ns:
                t_ns = read_ns
                counts.clamped += 1
    return t_ns


@functools.cache
def keep_stamping_on() -> socket.socket | None:
    """Keep the kernel stamping received segments from now on, for this process's life.

    Why: Linux stamps received segments only while some socket of the machine asks for it,
    and switches stamping on through deferred work (``net_enable_timestamp``), so the first
    segments of the first stamped connection can come without a stamp (seen once in this
    project's tests: a fresh process's first two reads, head and first chunk, unstamped). A
    client calls this when it is set up, well before its first connection: one idle UDP socket
    that asks. None where the kernel does not stamp."""
    if not sys.platform.startswith("linux"):
        return None
    keeper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        keeper.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        keeper.close()
        return None
    return keeper


class StampedTransport:
    """A connected non-blocking socket read by ``recvmsg`` with the kernel's receive stamp.

    The slice of ``asyncio.Transport`` a keep-alive HTTP/1.1 client uses: :meth:`write` (sent
    at once, the rest when the socket is writable), :meth:`close`, :meth:`is_closing`,
    :meth:`get_extra_info` (``"socket"``, ``"peername"``, ``"sockname"``). Each read calls
    ``protocol.stamped_received(data, t_ns, read_ns)``: ``t_ns`` the kernel's stamp mapped onto
    ``perf_counter_ns`` (``read_ns`` when the read carried none), ``read_ns`` the
    ``perf_counter_ns`` just after the read. End of stream or a socket error closes the
    transport and calls ``protocol.connection_lost`` (soon, on the loop, as asyncio does).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        protocol: StampedProtocol,
        clock: KernelClock,
        counts: StampCounts,
    ) -> None:
        self._loop, self._sock, self._protocol, self._clock = loop, sock, protocol, clock
        self._counts = counts
        self._fd = sock.fileno()
        self._out = bytearray()
        self._closing = False
        protocol.connection_made(self)
        loop.add_reader(self._fd, self._read_ready)

    def _read_ready(self) -> None:
        try:
            data, ancdata, _, _ = self._sock.recvmsg(READ_SIZE, ANC_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(exc)
            return
        read_ns = perf_counter_ns()
        if not data:
            self._lose(None)
            return
        t_ns = kernel_time(ancdata, read_ns, self._clock, self._counts)
        self._protocol.stamped_received(data, t_ns, read_ns)

    def read_now(self) -> None:
        """Read what the socket holds now, as the loop would (an idle connection's check)."""
        if not self._closing:
            self._read_ready()

    def write(self, data: bytes) -> None:
        if self._closing or not data:
            return
        if not self._out:
            try:
                sent = self._sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self._lose(exc)
                return
            if sent == len(data):
                return
            data = data[sent:]
            self._loop.add_writer(self._fd, self._write_ready)
        self._out += data

    def _write_ready(self) -> None:
        try:
            sent = self._sock.send(self._out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(exc)
            return
        del self._out[:sent]
        if not self._out:
            self._loop.remove_writer(self._fd)

    def is_closing(self) -> bool:
        return self._closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if self._closing:
            return default
        if name == "socket":
            return self._sock
        if name in ("peername", "sockname"):
            return getattr(self._sock, f"get{name}")()
        return default

    def close(self) -> None:
        self._lose(None)

    def abort(self, exc: Exception) -> None:
        """Close now because of ``exc``, which the protocol's ``connection_lost`` gets."""
        self._lose(exc)

    def _lose(self, exc: Exception | None) -> None:
        if self._closing:
            return
        self._closing = True
        self._loop.remove_reader(self._fd)
        if self._out:
            self._loop.remove_writer(self._fd)
        self._sock.close()
        self._loop.call_soon(self._protocol.connection_lost, exc)


async def open_connection(
    protocol: Any,
    host: str,
    port: int,
    clock: KernelClock | None,
    counts: StampCounts,
    tls: ssl.SSLContext | None = None,
) -> StampedTransport | None:
    """Connect ``protocol`` to ``host:port`` (TCP, ``TCP_NODELAY``; TLS with ``tls``, its
    hostname checked), reading with kernel stamps.

    ``clock`` None asks for user-space stamps. Returns the :class:`StampedTransport`, or None
    when the connection went to asyncio's own transport instead; ``counts`` says which and why.
    Raises OSError when no address of ``host`` accepts the connection (``ssl.SSLError``, an
    OSError, when the TLS handshake fails).
    """
    loop = asyncio.get_running_loop()
    try:  # an address literal needs no resolver thread (asyncio's own shortcut)
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    error: OSError = OSError(f"no address for {host}:{port}")
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:
            sock.close()
            raise
        try:
            return await _stamped(loop, sock, protocol, host, clock, counts, tls)
        except BaseException:
            sock.close()
            raise
    raise error


async def _stamped(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol: Any, host: str,
    clock: KernelClock | None, counts: StampCounts, tls: ssl.SSLContext | None,
) -> StampedTransport | None:  # fmt: skip
    """The connected ``sock`` read with kernel stamps where it can be (TLS over it in memory,
    loadgen.client.transport.tls_layer), else handed to asyncio's transport."""
    why = "user-space stamps asked for" if clock is None else enable_receive_stamps(sock)
    counts.opened += 1
    if why is None and clock is not None:
        counts.source, counts.why = KERNEL, None
        if tls is None:
            return StampedTransport(loop, sock, protocol, clock, counts)
        session = TlsSession(tls, host)
        await handshake(loop, sock, session)
        return StampedTransport(loop, sock, TlsStamped(session, protocol), clock, counts)
    counts.source, counts.why = USER, why
    await loop.create_connection(
        lambda: protocol, sock=sock, ssl=tls, server_hostname=host if tls else None
    )
    return None
