"""A server on 127.0.0.1 that misbehaves on purpose, one route per misbehaviour.

``http://127.0.0.1:PORT/<route>`` is an OpenAI-compatible base URL: ``GET
/<route>/v1/models`` lists one model (so a pre-flight check passes) and every POST under it
misbehaves as :data:`ROUTES` says. ``/mixed`` takes the routes of :data:`MIXED` in turn, request
after request, for one run that meets all of them. Every misbehaviour is bounded on the server's
side too (an endless stream stops when the client hangs up, or after :data:`SERVER_LIMIT_S`),
so a client that is wrong fails its test instead of hanging it.

:func:`misbehaving` runs it from a background thread (tests.support.openai_fakes.serving), with
a second, well-behaved server as the target of the ``redirect`` route: the test asserts that
target was never asked anything (nor sent the key).
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tests.support.http_server import HttpRequest, LocalServer, Response
from tests.support.openai_fakes import openai_handler, serving
from tests.support.sse_streams import sse_event

# The longest any misbehaviour goes on, seconds (far past every client limit the tests set).
SERVER_LIMIT_S = 30.0
MODELS = [{"id": "m", "object": "model", "max_model_len": 4096}]
_PAGE = (
    b"<!DOCTYPE html>\n<html><head><title>Sign in to the corporate proxy</title></head>\n"
    b"<body><p>Please log in.</p></body></html>\n"
)


def _text(i: int) -> bytes:
    return sse_event({"choices": [{"index": 0, "text": f" t{i}", "finish_reason": None}]})


def _usage(usage: dict[str, Any]) -> bytes:
    finish = sse_event({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
    return finish + sse_event({"choices": [], "usage": usage}) + sse_event("[DONE]")


async def _endless(request: HttpRequest, response: Response) -> None:
    """Content chunks, one per millisecond, never a finish_reason nor [DONE]."""
    await response.start_stream()
    for i in range(int(SERVER_LIMIT_S * 1000)):
        await response.send(_text(i))
        await asyncio.sleep(0.001)


async def _trickle(request: HttpRequest, response: Response) -> None:
    """A keep-alive comment every 50 ms, forever: never silent, never done."""
    await response.start_stream()
    for _ in range(int(SERVER_LIMIT_S / 0.05)):
        await response.send(b": ping\n\n")
        await asyncio.sleep(0.05)


async def _silent(request: HttpRequest, response: Response) -> None:
    """The stream's headers, then nothing."""
    await response.start_stream()
    await asyncio.sleep(SERVER_LIMIT_S)


async def _oversized(request: HttpRequest, response: Response) -> None:
    """One ``data:`` line that never ends, 64 KiB at a time."""
    await response.start_stream()
    await response.send(b'data: {"choices": [{"text": "')
    for _ in range(int(SERVER_LIMIT_S * 100)):
        await response.send(b"x" * 65536)
        await asyncio.sleep(0.01)


async def _bad_utf8(request: HttpRequest, response: Response) -> None:
    await response.start_stream()
    await response.send(_text(0) + b'data: {"choices": [{"text": "\xff\xfe"}]}\n\n')
    await response.send(_usage({"completion_tokens": 2}))
    await response.end()


async def _bad_json(request: HttpRequest, response: Response) -> None:
    await response.start_stream()
    await response.send(_text(0) + b'data: {"choices": [{"text": oops}\n\n')
    await response.send(_usage({"completion_tokens": 2}))
    await response.end()


async def _html(request: HttpRequest, response: Response) -> None:
    """A 200 HTML page, as a proxy's or a login portal's."""
    response.write_raw(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(_PAGE), _PAGE)
    )


async def _html_untyped(request: HttpRequest, response: Response) -> None:
    """The same page, streamed with no Content-Type at all."""
    await response.start_stream(content_type="")
    await response.send(_PAGE)
    await response.end()


async def _endless_error(request: HttpRequest, response: Response) -> None:
    """A 502 whose HTML body never ends."""
    await response.start_stream(status=502, content_type="text/html")
    for _ in range(int(SERVER_LIMIT_S * 100)):
        await response.send(_PAGE * 50)
        await asyncio.sleep(0.01)


async def _reset(request: HttpRequest, response: Response) -> None:
    """Two chunks, then a TCP reset (SO_LINGER 0: RST, not FIN)."""
    await response.start_stream()
    await response.send(_text(0) + _text(1))
    sock = response.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    response.abort()


def _usage_route(usage: dict[str, Any]) -> Callable[[HttpRequest, Response], Any]:
    async def handler(request: HttpRequest, response: Response) -> None:
        await response.start_stream()
        await response.send(_text(0) + _text(1) + _usage(usage))
        await response.end()

    return handler


async def _unauthorized(request: HttpRequest, response: Response) -> None:
    await response.send_json(401, {"error": {"message": "Invalid API key", "code": 401}})


@dataclass
class Misbehaving:
    """The running pair: ``url(route)`` is the base URL of a route; ``target`` is the redirect
    route's target server, whose ``requests`` must stay empty."""

    server: LocalServer
    target: LocalServer

    def url(self, route: str) -> str:
        return f"{self.server.base_url}/{route}"


ROUTES: dict[str, Callable[[HttpRequest, Response], Any]] = {
    "endless": _endless,
    "trickle": _trickle,
    "silent": _silent,
    "oversized": _oversized,
    "bad-utf8": _bad_utf8,
    "bad-json": _bad_json,
    "html": _html,
    "html-untyped": _html_untyped,
    "endless-error": _endless_error,
    "reset": _reset,
    "absurd-usage": _usage_route({"prompt_tokens": 3, "completion_tokens": 10**15}),
    "negative-usage": _usage_route({"prompt_tokens": -5, "completion_tokens": 2}),
    "unauthorized": _unauthorized,
}
# What a request to each route must fail with (a regular expression of its error message).
EXPECTED_ERRORS = {
    "endless": r"streamed \d+ content chunks .* for max_tokens",
    "trickle": r"RequestTimeout: .* had not finished its answer",
    "silent": r"ReadTimeout: .* was silent for .* after its headers",
    "oversized": r"a line over 1,048,576 bytes",
    "bad-utf8": r"invalid UTF-8 in an event",
    "bad-json": r"malformed stream event \(JSONDecodeError",
    "html": r"got text/html from HTTP 200: 'Sign in to the corporate proxy'",
    "html-untyped": r"not an SSE stream .* began '<!DOCTYPE html>'",
    "endless-error": r"HTTP 502: .*Sign in to the corporate proxy",
    "reset": r"(closed|broke) the connection in its body \(ConnectionResetError",
    "absurd-usage": r"completion_tokens=1e\+15: an impossible count",
    "negative-usage": r"prompt_tokens=-5: an impossible count",
    "unauthorized": r"HTTP 401: Invalid API key; the server refused the key sent in Authorization",
    "redirect": r"HTTP 307: the server redirects to another origin, to http://127\.0\.0\.1:\d+/",
}
# The routes /mixed takes in turn: all of them.
MIXED = [*ROUTES, "redirect"]


def _handler(target: LocalServer) -> Callable[[HttpRequest, Response], Any]:
    turn = 0
    models = openai_handler(MODELS)

    async def handler(request: HttpRequest, response: Response) -> None:
        nonlocal turn
        route, _, rest = request.path.lstrip("/").partition("/")
        if request.method == "GET":
            request.path = "/" + rest
            await models(request, response)
            return
        if route == "mixed":
            route, turn = MIXED[turn % len(MIXED)], turn + 1
        if route == "redirect":
            location = f"{target.base_url}/v1/{rest.removeprefix('v1/')}?sig=secret-token"
            response.write_raw(
                f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {location}\r\n"
                "Content-Length: 0\r\n\r\n".encode()
            )
            return
        await ROUTES[route](request, response)

    return handler


@contextmanager
def misbehaving() -> Iterator[Misbehaving]:
    """The misbehaving server and its redirect target, served from background threads."""
    with serving(openai_handler(MODELS)) as target, serving(_handler(target)) as server:
        yield Misbehaving(server, target)
