"""An ASGI middleware that refuses request bodies over a size with 413, before any parsing.

A body announced larger (Content-Length) is refused without reading it; a chunked one is read
until it passes the limit. A body within it is buffered and handed to the app unchanged;
after it, the app's receive() is the server's again, so the app still hears the client leave
(``http.disconnect``), which is how a request is aborted when its client goes.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.serving.errors import error_response


class BodyLimit:
    """Wraps ``app``: HTTP requests whose body exceeds ``max_bytes`` get 413 in OpenAI's error
    shape; the app never sees them."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(scope, receive, send, declared)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left before its body was in: nothing to answer
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_bytes:
                await self._refuse(scope, receive, send, None)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(b"".join(chunks), receive), send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, size: int | None) -> None:
        sent = f" ({size} bytes)" if size is not None else ""
        response = error_response(
            f"the request body{sent} is larger than this server's limit of {self.max_bytes} "
            "bytes; send a smaller request, or start the server with a larger --max-body-bytes",
            413,
            code="request_too_large",
        )
        # The body is not read: close the connection after the answer rather than drain it.
        response.headers["connection"] = "close"
        await response(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the HTTP parser refuses it; nothing to decide here
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive() that gives ``body`` once, then defers to the server's (disconnects)."""
    pending = True

    async def replay() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
