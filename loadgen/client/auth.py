"""The headers every request to the endpoint carries: ``--api-key`` and ``--header``.

:class:`RequestHeaders` is one small value that travels from the command line to every place
that talks to the endpoint: the streaming client (asyncio and ``--workers`` processes, which get
it through the spawn pipe), the Locust master (through its environment, :data:`HEADERS_ENV`)
and its workers (from the master, by message), the reachability check, the probes' /metrics
scrape (through the probe process's stdin) and the ``/debug`` fetches. It never shows its
values: ``repr`` and ``str`` name the headers only, so a log line, a traceback or a dataclass
``repr`` that holds it cannot leak a key. Nothing that writes a file takes it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["HEADERS_ENV", "HeaderError", "RequestHeaders", "parse_header"]

# The environment variable through which child processes (Locust workers) receive the headers;
# an environment is not written to disk, unlike a job file.
HEADERS_ENV = "LLM_PERF_LAB_REQUEST_HEADERS"

# RFC 9110 field-name: a token (visible ASCII but separators).
_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
# Headers the client sets itself (framing and the stream's encoding): another value would break
# the request rather than authenticate it.
_RESERVED = frozenset({"content-length", "transfer-encoding", "host", "connection"})


class HeaderError(ValueError):
    """A ``--header`` that is not ``Name: value``, or an unusable ``--api-key``; the message names
    the option and the fix, and never the value."""


def parse_header(text: str) -> tuple[str, str]:
    """``'Name: value'`` -> ``(name, value)``, whitespace around the value stripped.

    Raises:
        HeaderError: no colon, an empty or invalid name, a reserved name, or a line break in the
            value. The message quotes the name only (a value may be a secret).
    """
    name, sep, value = text.partition(":")
    name = name.strip()
    if not sep or not name:
        raise HeaderError("--header: expected 'Name: value' (e.g. --header 'X-Org: team-a')")
    if not _NAME.match(name):
        raise HeaderError(
            f"--header {name[:40]!r}: a header name is letters, digits and !#$%&'*+-.^_`|~ only"
        )
    if name.lower() in _RESERVED:
        raise HeaderError(f"--header {name!r}: bench sets this header itself; drop it")
    value = value.strip()
    if any(c in value for c in "\r\n\0"):
        raise HeaderError(f"--header {name!r}: the value holds a line break or NUL")
    return name, value


@dataclass(frozen=True, repr=False)
class RequestHeaders:
    """Extra request headers, in order; a later one replaces an earlier one of the same name
    (case-insensitively), so ``--header 'Authorization: ...'`` wins over ``--api-key``."""

    items: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_options(cls, api_key: str | None, headers: Iterable[str] = ()) -> RequestHeaders:
        """The headers of ``--api-key KEY`` (``Authorization: Bearer KEY``) and each
        ``--header 'Name: value'``.

        Raises:
            HeaderError: a malformed header, or a key holding whitespace or a line break.
        """
        items: list[tuple[str, str]] = []
        if api_key:
            key = api_key.strip()
            if not key or any(c.isspace() or c == "\0" for c in key):
                raise HeaderError(
                    "--api-key (or $OPENAI_API_KEY): the key holds whitespace or a line break; "
                    "give the key alone, without 'Bearer '"
                )
            items.append(("Authorization", f"Bearer {key}"))
        items.extend(parse_header(h) for h in headers)
        return cls(_last_wins(items))

    @classmethod
    def from_mapping(cls, headers: Mapping[str, str]) -> RequestHeaders:
        return cls(_last_wins(list(headers.items())))

    def as_dict(self) -> dict[str, str]:
        """Name -> value, for an HTTP client."""
        return dict(self.items)

    def names(self) -> list[str]:
        return [name for name, _ in self.items]

    def secret_values(self) -> list[str]:
        """Every value, and a bearer token alone: what must never appear in written text."""
        values = []
        for _, value in self.items:
            values.append(value)
            scheme, _, token = value.partition(" ")
            if token and scheme.lower() == "bearer":
                values.append(token)
        return [v for v in values if v]

    def to_env(self) -> dict[str, str]:
        """The environment entry that hands these headers to a child process (empty if none)."""
        return {HEADERS_ENV: json.dumps(self.items)} if self.items else {}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RequestHeaders:
        """The headers a parent put in :data:`HEADERS_ENV` (none when it is unset).

        Raises:
            HeaderError: the variable is set but is not what :meth:`to_env` writes.
        """
        raw = (os.environ if environ is None else environ).get(HEADERS_ENV)
        if not raw:
            return cls()
        try:
            pairs = [(str(n), str(v)) for n, v in json.loads(raw)]
        except (ValueError, TypeError) as exc:
            raise HeaderError(
                f"${HEADERS_ENV}: expected a JSON list of [name, value] pairs "
                f"({type(exc).__name__})"
            ) from None
        return cls(_last_wins(pairs))

    def __bool__(self) -> bool:
        return bool(self.items)

    def __repr__(self) -> str:
        return f"RequestHeaders(names={self.names()!r})"

    __str__ = __repr__


def _last_wins(items: list[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    kept: dict[str, tuple[str, str]] = {}
    for name, value in items:
        kept.pop(name.lower(), None)  # re-inserted last: the order is that of the last giving
        kept[name.lower()] = (name, value)
    return tuple(kept.values())
