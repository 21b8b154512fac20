"""What a server answered instead of a stream, said in one line: the request's error message.

Every client path (the raw asyncio client, httpx for https, the Locust workers) reads the head of
an answer the same way: :func:`answer_problem` takes its status, content type and ``Location``
and the first :data:`~loadgen.client.limits.MAX_ERROR_BODY_BYTES` of its body, and says what the
server did when it is not an SSE stream to read:

    * HTTP >= 400: the body's error message; a 401 or 403 says whether a key was sent at all
      (no key: pass one; a key: it was refused), and never points at ``--tokenizer``;
    * a redirect (3xx): where to, and that it was not followed. No client here follows one: a
      benchmark measures the URL it was given, and the key and ``--header`` values must never
      go to another origin;
    * a 200 that is not ``text/event-stream`` (JSON from a server that ignored ``stream=true``,
      an HTML page from a proxy or a login portal): its type and what it said.

Key headers are recognised by name (:func:`key_headers`), so a message can say which ones went,
never their values.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urljoin, urlsplit

from loadgen.client.readers.openai_stream import error_message_from_body
from loadgen.client.readers.sse import SSEParser

__all__ = [
    "answer_problem",
    "auth_refusal",
    "cut_short_message",
    "is_stream",
    "key_headers",
    "read_timeout_message",
    "redirect_message",
    "request_timeout_message",
]

_KEYISH = re.compile(r"authorization|key|token|secret|auth", re.IGNORECASE)
_TITLE = re.compile(rb"<title[^>]*>(.*?)</title", re.IGNORECASE | re.DOTALL)
_TEXT_CHARS = 120


def key_headers(names: Iterable[str]) -> list[str]:
    """The header names among ``names`` that can carry a key (Authorization, x-api-key, ...)."""
    return [name for name in names if _KEYISH.search(name)]


def auth_refusal(status: int, message: str, sent: Iterable[str]) -> str:
    """What to do about a 401/403, given the names of the headers sent (``sent``) and the
    server's own ``message``: pass a key when none went, check it when one was refused."""
    keys = key_headers(sent)
    head = f"HTTP {status}: {message}"
    if not keys:
        return (
            f"{head}; no key was sent and the server wants one: pass it with --api-key KEY "
            "(or $OPENAI_API_KEY), or the header it expects with --header 'Name: value'"
        )
    return (
        f"{head}; the server refused the key sent in {', '.join(keys)}: check --api-key (or "
        "$OPENAI_API_KEY) or the --header value, and that the key may use this model"
    )


def is_stream(content_type: str) -> bool:
    """Whether a 2xx answer of ``content_type`` is read as an SSE stream (a server that names
    no type is given the benefit of the doubt)."""
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind in ("", "text/event-stream")


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), port


def redirect_message(status: int, location: str, url: str) -> str:
    """A 3xx to ``location`` (relative to the request's ``url``), not followed."""
    if not location:
        return f"HTTP {status}: a redirect without a Location; not followed"
    target = urlsplit(urljoin(url, location))
    # Only scheme, host, port and path: a query may hold a signed token.
    shown = f"{target.scheme}://{target.netloc.rpartition('@')[2]}{target.path}"
    same = _origin(target.geturl()) == _origin(url)
    where = "on the same server" if same else "to another origin"
    return (
        f"HTTP {status}: the server redirects {where}, to {shown}; not followed (and the key "
        "and --header values were not sent there): give the URL to measure with --url"
    )


def _page_text(body: bytes) -> str:
    """A page's title, else its first characters, whitespace collapsed."""
    title = _TITLE.search(body)
    raw = title.group(1) if title else body
    text = " ".join(raw.decode("utf-8", "replace").split())
    return text[:_TEXT_CHARS] or "(empty body)"


def _said(body: bytes, content_type: str) -> str:
    """What an error body says: an HTML page's title, else its error message."""
    if "html" in content_type.lower() or body.lstrip()[:1] == b"<":
        return _page_text(body)
    return error_message_from_body(body)


def answer_problem(
    status: int | None, content_type: str, location: str, body: bytes, url: str,
    sent: Iterable[str],
) -> str | None:  # fmt: skip
    """The error message of an answer that is no stream to read (module docstring), or None
    when it is one. ``body``: the first bytes kept of it; ``sent``: the request's header names."""
    if status is None:
        return None
    if status in (401, 403):
        return auth_refusal(status, _said(body, content_type), sent)
    if status >= 400:
        return f"HTTP {status}: {_said(body, content_type)}"
    if 300 <= status < 400:
        return redirect_message(status, location, url)
    if is_stream(content_type):
        return None
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind == "application/json":
        return (
            f"expected an SSE stream (text/event-stream), got application/json: "
            f"{error_message_from_body(body)}; does the server support stream=true?"
        )
    return (
        f"expected an SSE stream (text/event-stream), got {kind} from HTTP {status}: "
        f"{_page_text(body)!r}; a proxy, gateway or login page answered instead of the server?"
    )


def cut_short_message(parser: SSEParser, content_chunks: int) -> str:
    """A stream that ended before ``[DONE]`` and any finish_reason: what it held."""
    if parser.events == 0 and parser.stray is not None:
        return (
            "the body was not an SSE stream (no event in it): it began "
            f"{_page_text(parser.stray)!r}; a proxy or gateway answered instead of the server?"
        )
    partial = "; an incomplete event was buffered" if parser.has_partial_event else ""
    return (
        f"stream ended before [DONE] after {content_chunks} content chunks and no "
        f"finish_reason (the server closed it early{partial})"
    )


def read_timeout_message(url: str, timeout_s: float, after_head: bool) -> str:
    """A request that met ``--read-timeout`` (``timeout_s`` seconds of silence)."""
    when = "after its headers" if after_head else "before any answer"
    return (
        f"ReadTimeout: {url} was silent for {timeout_s:g} s {when}; raise --read-timeout if "
        "the server is only slow"
    )


def request_timeout_message(url: str, timeout_s: float) -> str:
    """A request that met ``--request-timeout`` (``timeout_s`` seconds in all)."""
    return (
        f"RequestTimeout: {url} had not finished its answer after {timeout_s:g} s (the whole "
        "request); raise --request-timeout if its answers are that long"
    )
