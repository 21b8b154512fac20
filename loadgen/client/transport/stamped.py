"""The two sides of a connection read with receive stamps, as protocols: what the reader of
the socket feeds (:class:`StampedProtocol`) and what the protocol fed may call back
(:class:`StampedLink`).

loadgen.client.transport.kernel_stamps' ``StampedTransport`` is the link over a socket; the TLS
layer (loadgen.client.transport.tls_layer's ``TlsStamped``) is both: the protocol of that
transport and the link of the client's protocol, so TLS sits between them without either
module importing the other.
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["StampedLink", "StampedProtocol"]


class StampedProtocol(Protocol):
    """What a stamped link feeds: asyncio's protocol calls, plus the stamped read (``t_ns``
    the kernel's stamp on ``perf_counter_ns``, ``read_ns`` the client's own read time)."""

    def connection_made(self, transport: Any) -> None: ...
    def connection_lost(self, exc: Exception | None) -> None: ...
    def stamped_received(self, data: bytes, t_ns: int, read_ns: int) -> None: ...


class StampedLink(Protocol):
    """The slice of ``asyncio.Transport`` a stamped protocol calls, and :meth:`read_now`: read
    what the socket holds at once (to see whether an idle connection was closed)."""

    def write(self, data: bytes) -> None: ...
    def close(self) -> None: ...
    def abort(self, exc: Exception) -> None: ...
    def is_closing(self) -> bool: ...
    def get_extra_info(self, name: str, default: Any = None) -> Any: ...
    def read_now(self) -> None: ...
