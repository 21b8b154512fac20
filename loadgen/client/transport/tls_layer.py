"""TLS over a socket the client reads itself, so that an https stream keeps its kernel stamps.

Why: asyncio's (and any library's) TLS reads the socket inside its own transport, with
``recv``: the kernel's receive stamps never reach the client. Here the socket is read with
``recvmsg`` (loadgen.client.transport.kernel_stamps, or the blocking reader of
loadgen.client.transport.blocking_raw) and the ciphertext is decrypted in memory by an
``ssl.SSLObject`` over two ``ssl.MemoryBIO``: :class:`TlsSession`, sans I/O.

What a decrypted byte's stamp means: OpenSSL hands out a TLS record's bytes only once the whole
record has arrived, so the plaintext a read yields was completed by the segment(s) that read
consumed: it gets that read's stamp, the arrival of the last segment the read took, as for plain
http. A record that spans two reads is stamped by the second, the one that completed it.

Trust: :func:`client_context` verifies servers against the system's store (OpenSSL's defaults,
which honour ``SSL_CERT_FILE`` and ``SSL_CERT_DIR``) and certifi's bundle; the httpx path
(loadgen.client.transport.connection_slots) uses the same context, so both trust the same
servers; the hostname is checked. HTTP/1.1 only (ALPN ``http/1.1``).
"""

from __future__ import annotations

import asyncio
import functools
import socket
import ssl
from typing import Any

import certifi

from loadgen.client.transport.stamped import StampedLink, StampedProtocol

__all__ = ["TlsSession", "TlsStamped", "client_context", "handshake"]

_CHUNK = 256 * 1024


@functools.cache
def client_context() -> ssl.SSLContext:
    """The process's one TLS client context (building one reads the CA bundles, ~20 ms)."""
    context = ssl.create_default_context()
    context.load_verify_locations(cafile=certifi.where())
    context.set_alpn_protocols(["http/1.1"])
    return context


class TlsSession:
    """One TLS client connection's state, fed ciphertext and asked for what to send.

    Contract: :meth:`handshake` returns True once the handshake is done (else :meth:`take` the
    peer's bytes and call it again); :meth:`feed` takes received ciphertext and returns the
    plaintext it completed (b"" when none), setting :attr:`ended` once the peer closed the TLS
    session (the plaintext before its close is returned all the same) and raising
    ``ssl.SSLError`` for a broken record; :meth:`encrypt` takes plaintext;
    :meth:`outgoing` returns the ciphertext due to the peer (handshake, records, key updates).
    """

    def __init__(self, context: ssl.SSLContext, server_hostname: str) -> None:
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.ssl_object = context.wrap_bio(self._in, self._out, server_hostname=server_hostname)
        self.ended = False  # the peer closed the TLS session (close_notify)

    def handshake(self) -> bool:
        try:
            self.ssl_object.do_handshake()
        except ssl.SSLWantReadError:
            return False
        return True

    def take(self, data: bytes) -> None:
        """Ciphertext received during the handshake."""
        self._in.write(data)

    def feed(self, data: bytes) -> bytes:
        self._in.write(data)
        parts: list[bytes] = []
        while True:
            try:
                part = self.ssl_object.read(_CHUNK)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                part = b""
            if not part:
                self.ended = True
                break
            parts.append(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def encrypt(self, data: bytes) -> None:
        self.ssl_object.write(data)

    def outgoing(self) -> bytes:
        return self._out.read()


async def handshake(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, session: TlsSession
) -> None:
    """Run ``session``'s handshake over the connected non-blocking ``sock`` (the caller bounds
    it in time). Raises ``ssl.SSLError`` (a certificate refused) or ``ConnectionResetError``."""
    while not session.handshake():
        if out := session.outgoing():
            await loop.sock_sendall(sock, out)
        data = await loop.sock_recv(sock, _CHUNK)
        if not data:
            raise ConnectionResetError("the server closed the connection during the TLS handshake")
        session.take(data)
    if out := session.outgoing():
        await loop.sock_sendall(sock, out)


class TlsStamped:
    """TLS between a stamped link (kernel_stamps' StampedTransport), which it is the protocol
    of, and the client's protocol, which it is the link of: ciphertext in with its stamps,
    plaintext out with the same stamps (module docstring); plaintext written is encrypted and
    sent."""

    def __init__(self, session: TlsSession, protocol: StampedProtocol) -> None:
        """``session``: its handshake done; ``protocol``: gets this object as its transport."""
        self._session, self._protocol = session, protocol
        self._raw: StampedLink | None = None

    # The stamped link's protocol.
    def connection_made(self, transport: Any) -> None:
        self._raw = transport
        self._protocol.connection_made(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._protocol.connection_lost(exc)

    def stamped_received(self, data: bytes, t_ns: int, read_ns: int) -> None:
        assert self._raw is not None
        try:
            plain = self._session.feed(data)
        except ssl.SSLError as exc:
            self._raw.write(self._session.outgoing())
            self._raw.abort(exc)  # a broken record ends the connection
            return
        if out := self._session.outgoing():  # e.g. a key update's answer
            self._raw.write(out)
        if plain:
            self._protocol.stamped_received(plain, t_ns, read_ns)
        if self._session.ended:
            self._raw.close()

    # The client protocol's transport.
    def write(self, data: bytes) -> None:
        assert self._raw is not None
        if self._raw.is_closing() or not data:
            return
        self._session.encrypt(data)
        self._raw.write(self._session.outgoing())

    def is_closing(self) -> bool:
        return self._raw is None or self._raw.is_closing()

    def close(self) -> None:
        if self._raw is not None:
            self._raw.close()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "ssl_object":
            return self._session.ssl_object
        return default if self._raw is None else self._raw.get_extra_info(name, default)

    def peer_closed(self) -> bool:
        """Whether the idle connection was closed by the server: what the socket holds is read
        now (a TLS 1.3 session ticket is no close), then its state tells."""
        if self._raw is None or self._raw.is_closing():
            return True
        self._raw.read_now()
        return self._raw.is_closing()
