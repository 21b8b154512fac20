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

The clock map (:class:`KernelClock`): the offset between ``CLOCK_REALTIME`` and
``perf_counter_ns`` is the middle of the tightest of a few brackets (``perf_counter_ns``,
``clock_gettime_ns(CLOCK_REALTIME)``, ``perf_counter_ns``), measured at the start and again
every ``remeasure_s`` seconds of reads (NTP slews the two clocks apart; a stepped wall clock
would be caught by the next measurement). A mapped stamp later than the read itself is clamped
to the read and counted.

Where the kernel cannot stamp (another OS, setsockopt refused), :func:`open_connection` hands
the socket to asyncio's own transport and says why: the caller keeps user-space stamps.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
import time
from time import perf_counter_ns
from typing import Any, Protocol

__all__ = [
    "KERNEL",
    "USER",
    "KernelClock",
    "StampCounts",
    "StampedProtocol",
    "StampedTransport",
    "enable_receive_stamps",
    "open_connection",
    "run_stamps",
    "stamp_report",
]

KERNEL, USER = "kernel", "user"  # a connection's stamp source, as run.json names it
# Linux's generic value (x86, arm, riscv, powerpc); socket does not export it.
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TIMESPEC = struct.Struct("@ll")  # struct timespec: tv_sec, tv_nsec (C longs)
_ANC_SIZE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
_READ_SIZE = 256 * 1024  # as asyncio's selector transport reads


class StampedProtocol(Protocol):
    """What :class:`StampedTransport` feeds: asyncio's protocol calls, plus the stamped read."""

    def connection_made(self, transport: Any) -> None: ...
    def connection_lost(self, exc: Exception | None) -> None: ...
    def stamped_received(self, data: bytes, t_ns: int, read_ns: int) -> None: ...


def enable_receive_stamps(sock: socket.socket) -> str | None:
    """Ask the kernel to stamp ``sock``'s received segments; None when it will, else why not."""
    if not sys.platform.startswith("linux") or not _ANC_SIZE:
        return f"no SO_TIMESTAMPNS on {sys.platform}"
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError as exc:
        return f"SO_TIMESTAMPNS refused: {exc}"
    return None


class KernelClock:
    """Maps ``CLOCK_REALTIME`` ns onto ``perf_counter_ns`` (module docstring).

    Contract: :meth:`to_perf_ns` returns ``realtime_ns + offset_ns``, re-measuring the offset
    first when ``remeasure_s`` seconds have passed since the last measurement; ``bracket_ns`` is
    the width of the tightest bracket of the last measurement (the offset's uncertainty),
    ``drift_ns`` the spread of every offset measured so far.
    """

    def __init__(self, remeasure_s: float = 1.0, tries: int = 7) -> None:
        self.remeasure_ns = int(remeasure_s * 1e9)
        self.tries = tries
        self.measurements = 0
        self.bracket_ns = 0
        self.bracket_max_ns = 0
        self._offsets: tuple[int, int] | None = None  # the least and greatest offset measured
        self.offset_ns = 0
        self._next_ns = 0
        self.measure()

    def measure(self) -> None:
        """Measure the offset now: the tightest of ``tries`` brackets."""
        best_width, best_offset = -1, 0
        for _ in range(self.tries):
            before = perf_counter_ns()
            wall = time.clock_gettime_ns(time.CLOCK_REALTIME)
            after = perf_counter_ns()
            width = after - before
            if best_width < 0 or width < best_width:
                best_width, best_offset = width, (before + after) // 2 - wall
        self.offset_ns, self.bracket_ns = best_offset, best_width
        self.bracket_max_ns = max(self.bracket_max_ns, best_width)
        low, high = self._offsets or (best_offset, best_offset)
        self._offsets = (min(low, best_offset), max(high, best_offset))
        self.measurements += 1
        self._next_ns = after + self.remeasure_ns

    def to_perf_ns(self, realtime_ns: int, now_ns: int) -> int:
        """``realtime_ns`` on the ``perf_counter_ns`` clock (``now_ns``: perf_counter_ns now)."""
        if now_ns >= self._next_ns:
            self.measure()
        return realtime_ns + self.offset_ns

    @property
    def drift_ns(self) -> int:
        low, high = self._offsets or (0, 0)
        return high - low

    def describe(self) -> dict[str, Any]:
        """For run.json: how the kernel's clock was mapped, and how well."""
        return {
            "kernel_clock": "CLOCK_REALTIME",
            "offset_measurements": self.measurements,
            "offset_bracket_max_us": self.bracket_max_ns / 1e3,
            "offset_drift_us": self.drift_ns / 1e3,
            "remeasure_s": self.remeasure_ns / 1e9,
        }


class StampCounts:
    """One connection's stamp record over its openings: the source of its last opening, why
    when that is user-space, how many times it was opened, its reads and the stamped ones."""

    __slots__ = ("clamped", "opened", "reads", "source", "stamped", "why")

    def __init__(self) -> None:
        self.source, self.why = USER, "never opened"
        self.opened = self.reads = self.stamped = self.clamped = 0

    def to_json(self, index: int) -> dict[str, Any]:
        row: dict[str, Any] = {"connection": index, "stamps": self.source}
        if self.source == USER:
            row["why"] = self.why
        row.update(reads=self.reads, kernel_stamped_reads=self.stamped)
        return row


def stamp_report(connections: list[StampCounts], clock: KernelClock | None) -> dict[str, Any]:
    """run.json's record of one pool: per opened connection its stamps; the clock map's
    quality; how many mapped stamps were later than their read (clamped, a clock-map error)."""
    opened = [c.to_json(i) for i, c in enumerate(connections) if c.opened]
    report: dict[str, Any] = {
        "connections": opened,
        "kernel_connections": sum(1 for c in connections if c.opened and c.source == KERNEL),
        "clamped_reads": sum(c.clamped for c in connections),
    }
    if clock is not None:
        report.update(clock.describe())
    return report


def run_stamps(clients: list[dict[str, Any]], why_none: str) -> dict[str, Any]:
    """run.json's ``load.receive_stamps``: every client's :func:`stamp_report` (``clients``)
    and the run's source: "kernel" when every opened connection had kernel stamps, "user" when
    none did (``why_none`` when no client reports, e.g. a driver without the raw client),
    else "mixed"."""
    opened = sum(len(c.get("connections", ())) for c in clients)
    kernel = sum(int(c.get("kernel_connections", 0)) for c in clients)
    source = "mixed" if 0 < kernel < opened else (KERNEL if opened and kernel == opened else USER)
    out: dict[str, Any] = {"source": source, "connections": opened, "kernel_connections": kernel}
    if not clients:
        out["why"] = why_none
    out["clients"] = clients
    return out


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
            data, ancdata, _, _ = self._sock.recvmsg(_READ_SIZE, _ANC_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(exc)
            return
        read_ns = perf_counter_ns()
        if not data:
            self._lose(None)
            return
        counts = self._counts
        counts.reads += 1
        t_ns = read_ns
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
                sec, nsec = _TIMESPEC.unpack_from(payload)
                t_ns = self._clock.to_perf_ns(sec * 1_000_000_000 + nsec, read_ns)
                counts.stamped += 1
                if t_ns > read_ns:
                    t_ns = read_ns
                    counts.clamped += 1
        self._protocol.stamped_received(data, t_ns, read_ns)

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
) -> StampedTransport | None:
    """Connect ``protocol`` to ``host:port`` (TCP, ``TCP_NODELAY``), reading with kernel stamps.

    ``clock`` None asks for user-space stamps. Returns the :class:`StampedTransport`, or None
    when the connection went to asyncio's own transport instead; ``counts`` says which and why.
    Raises OSError when no address of ``host`` accepts the connection.
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
        why = "user-space stamps asked for" if clock is None else enable_receive_stamps(sock)
        counts.opened += 1
        if why is None and clock is not None:
            counts.source, counts.why = KERNEL, None
            return StampedTransport(loop, sock, protocol, clock, counts)
        counts.source, counts.why = USER, why
        await loop.create_connection(lambda: protocol, sock=sock)
        return None
    raise error
