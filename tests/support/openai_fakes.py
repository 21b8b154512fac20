"""OpenAI-compatible test servers whose every answer a test chooses, served from a thread.

:func:`serving` runs a tests.support.http_server.LocalServer in its own event loop on a
background thread, so that synchronous code (``run_benchmark``, a `bench` subprocess) can drive
it. :func:`openai_handler` answers ``GET /v1/models`` with the entries given (vLLM's, llama.cpp's
shapes), other GET paths from a table of documents (llama.cpp's /props, TGI's /info), and
completions with a short stream, or with the error a test asks for on chosen requests.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.http_server import Handler, HttpRequest, LocalServer, Response
from tests.support.sse_streams import sse_event

# Seconds the thread's server may take to start listening.
_START_TIMEOUT_S = 10.0


@contextmanager
def serving(handler: Handler, tls: ssl.SSLContext | None = None) -> Iterator[LocalServer]:
    """Serve ``handler`` on 127.0.0.1 from a background thread (https with ``tls``, a
    server-side context); yields the running server."""
    loop = asyncio.new_event_loop()
    server = LocalServer(handler, tls=tls)
    stop = asyncio.Event()
    started = threading.Event()

    async def main() -> None:
        async with server:
            started.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    if not started.wait(_START_TIMEOUT_S):
        raise RuntimeError("the test server did not start")
    try:
        yield server
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)
        loop.close()


def openai_handler(
    models: list[dict[str, Any]] | None,
    documents: Mapping[str, Any] | None = None,
    fail: Callable[[int], tuple[int, str] | None] | None = None,
    n_chunks: int = 3,
) -> Handler:
    """A handler for an OpenAI-compatible server.

    ``models``: the /v1/models entries (None: /v1/models answers 404). ``documents``: other GET
    paths and their JSON. ``fail(i)`` for the i-th completion request (from 0): (HTTP status,
    message) to answer with an OpenAI error body, or None to stream ``n_chunks`` one-token
    chunks and the usage. A request that is not streamed (the pre-flight's check of the request
    fields and ignore_eos) is answered with one completion of all its ``max_tokens``, and not
    counted.
    """
    count = 0

    async def handler(request: HttpRequest, response: Response) -> None:
        nonlocal count
        path = request.path.split("?", 1)[0]
        if request.method == "GET":
            if path == "/v1/models" and models is not None:
                await response.send_json(200, {"object": "list", "data": models})
            elif documents and path in documents:
                await response.send_json(200, documents[path])
            else:
                await response.send_json(404, {"detail": "Not Found"})
            return
        if request.body and request.json().get("stream") is False:
            asked = request.json().get("max_tokens", 1)
            choice = {"text": " t" * asked, "index": 0, "finish_reason": "length"}
            usage = {"completion_tokens": asked, "prompt_tokens": 2}
            await response.send_json(200, {"choices": [choice], "usage": usage})
            return
        index, count = count, count + 1
        failure = fail(index) if fail is not None else None
        if failure is not None:
            status, message = failure
            body = {"error": {"message": message, "type": "BadRequestError", "code": status}}
            await response.send_json(status, body)
            return
        await response.start_stream()
        for i in range(n_chunks):
            await response.send(sse_event({"choices": [{"text": f" t{i}", "index": 0}]}))
        usage = {"completion_tokens": n_chunks, "prompt_tokens": 2}
        await response.send(sse_event({"choices": [], "usage": usage}) + sse_event("[DONE]"))
        await response.end()

    return handler


# A small closed-loop scenario for runs against these servers (20 requests of 4 tokens), and
# the model list they serve.
SCENARIO = """
name = "ci"
users = 2
num_requests = 20
ignore_eos = true

[input_len]
kind = "uniform"
low = 8
high = 16

[output_len]
kind = "fixed"
value = 4
"""
MODELS = [{"id": "m", "object": "model", "max_model_len": 4096}]


def write_scenario(tmp_path: Path) -> Path:
    """SCENARIO written as ``tmp_path/ci.toml``; its path."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "ci.toml"
    path.write_text(SCENARIO)
    return path
