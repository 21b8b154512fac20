"""Waiting for a result only while its client is still there.

A streamed response notices a client that leaves when its next write fails, and closing the
stream aborts the request. A non-streamed one writes nothing until the end, so without a
watch the engine would generate every token of a request whose client left long ago.
``until_disconnected`` runs the work beside a task that waits for the ASGI ``http.disconnect``
message (the server sends it as soon as the connection closes) and cancels the work when it
comes first; cancelling the engine's output generator aborts the request there, which frees
its KV blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from typing import TypeVar

from starlette.types import Receive

T = TypeVar("T")


class ClientDisconnected(Exception):
    """The client closed its connection before its response was ready."""


async def _disconnected(receive: Receive) -> None:
    # After the body, the server's receive() blocks until the connection closes. (An empty
    # http.request can come first; only a disconnect ends the wait.)
    while (await receive())["type"] != "http.disconnect":
        pass


async def until_disconnected(receive: Receive, work: Awaitable[T]) -> T:
    """``work``'s result; if the client leaves first, cancel ``work`` (its finally blocks run)
    and raise ClientDisconnected. ``receive`` is the request's ASGI receive, its body read."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await watch
    if task.cancelled():
        raise ClientDisconnected()
    return task.result()
