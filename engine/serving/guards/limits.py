"""The server's limits on what one client may hold: body size, connection timeouts, the cap on
open connections. Declared once here; `bench serve` makes an option of each (SERVER_LIMIT_FIELDS).

uvicorn on its own reads a request for as long as the client takes: a connection that sends
nothing, or half its headers, stays open for ever, and enough of them fill the file table.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

MiB = 1 << 20


@dataclass(frozen=True)
class ServerLimits:
    """What the HTTP front allows one client; each field's ``help`` is its option's help."""

    # Holds a 131,072-token prompt (the largest context of the presets here), as text
    # (~0.55 MB) or as token ids (~0.94 MB), and bounds what one body costs the event loop,
    # where JSON parsing and validation run (no thread helps: they hold the GIL): ~45 ms per
    # MiB at worst (an object of many keys), so /health stays under 100 ms behind any body.
    # vLLM sets no limit; a longer context needs a larger one.
    max_body_bytes: int = field(
        default=1 * MiB,
        metadata={"help": "Largest request body in bytes; a larger one gets 413."},
    )
    # uvicorn's and vLLM's default.
    timeout_keep_alive_s: float = field(
        default=5.0,
        metadata={"help": "Seconds an idle keep-alive connection is kept open."},
    )
    timeout_request_read_s: float = field(
        default=30.0,
        metadata={
            "help": "Seconds a client has to send a whole request, headers and body, from its "
            "connection's opening or its first byte after a response; then 408 and closed."
        },
    )
    max_connections: int = field(
        default=2048,
        metadata={
            "help": "Open connections at most; one more is answered 503 and closed. Lowered to "
            "the process's file limit (ulimit -n) less 256 where that is smaller."
        },
    )

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value <= 0:
                raise ValueError(f"{f.name} must be above 0, got {value}")


def server_limit_fields() -> tuple[tuple[str, type, Any, str], ...]:
    """(name, type, default, help) of each ServerLimits field, for `bench serve`'s options."""
    return tuple(
        (f.name, type(f.default), f.default, f.metadata["help"]) for f in fields(ServerLimits)
    )
