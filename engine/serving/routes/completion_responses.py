"""The answer to a completion or chat request the routes accepted: the engine's outputs as
server-sent events (``stream_response``; with ``include_usage`` a final chunk with empty choices
and the usage, as vLLM sends) or one JSON body at the end (``whole_response``).

``respond`` waits for the request's first output before answering, so that a request the engine
rejects gets a 400, not a 200 stream that breaks; and it aborts the request (its generator is
closed, which frees its KV blocks) when the client leaves.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from engine.core.request import SamplingParams
from engine.serving.async_engine import EngineDeadError
from engine.serving.errors import BadRequest
from engine.serving.guards.disconnect import ClientDisconnected, until_disconnected
from engine.serving.output_processor import RequestTextState, TextDelta
from engine.serving.protocol import error_body
from engine.serving.routes.api_events import API_ANSWERS
from engine.serving.routes.serving_state import ServingState

__all__ = ["respond"]


def _sse(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'), ensure_ascii=False)}\n\n"


async def respond(
    request: Request,
    state: ServingState,
    kind: str,
    request_id: str,
    prompt_ids: list[int],
    params: SamplingParams,
    stream: bool,
    include_usage: bool,
) -> Response:
    """Run the request on the engine and answer it: ``kind`` "chat" or "completion", or an
    API of engine.serving.routes.api_events ("responses", "messages", chat's reasoning prefix
    applying to them too); a client that leaves before the answer is sent gets a 499 that no
    one reads."""
    try:
        # Until its first output a request may wait in the queue: watch its client there
        # too, and throughout a response that is sent whole at the end.
        reasoning_tokens = state.prefix.tokens_for(kind != "completion")
        outputs = _run(state, request_id, prompt_ids, params, reasoning_tokens)
        first, gen = await until_disconnected(request.receive, _first_then_rest(outputs))
        if kind in API_ANSWERS:
            events, whole = API_ANSWERS[kind]
            if stream:
                body = events(state, request_id, first, gen)
                return StreamingResponse(body, media_type="text/event-stream")
            answer = await until_disconnected(request.receive, whole(state, request_id, first, gen))
            return JSONResponse(answer)
        if stream:
            return stream_response(state, kind, request_id, first, gen, include_usage)
        return await until_disconnected(
            request.receive, whole_response(state, kind, request_id, first, gen)
        )
    except ClientDisconnected:
        # No one reads this; the request was aborted when its generator was cancelled.
        return Response(status_code=499)


async def _run(
    state: ServingState,
    request_id: str,
    prompt_ids: list[int],
    params: SamplingParams,
    reasoning_tokens: int,
) -> AsyncIterator[TextDelta]:
    text = RequestTextState(
        state.tokenizer, params.stop, time.perf_counter(), state.metrics, reasoning_tokens
    )
    outputs = state.llm.generate(request_id, prompt_ids, params)
    try:
        async for out in outputs:
            delta = text.process(out)
            yield delta
            if delta.finished:
                return
    finally:
        # Closing the engine's generator early (a stop string, a client that left) aborts
        # the request there, which frees its KV blocks.
        await outputs.aclose()


async def _first_then_rest(
    gen: AsyncIterator[TextDelta],
) -> tuple[TextDelta | None, AsyncIterator[TextDelta]]:
    try:
        first = await gen.__anext__()
    except StopAsyncIteration:
        return None, gen
    except ValueError as e:  # the engine refused it (Rejected): its message says why
        raise BadRequest(str(e)) from e
    return first, gen


def stream_response(
    state: ServingState,
    kind: str,
    request_id: str,
    first: TextDelta | None,
    gen: AsyncIterator[TextDelta],
    include_usage: bool,
) -> Response:
    """The request's outputs as server-sent events, ``data: [DONE]`` last; an engine that dies
    mid-stream ends it with an error event (503's body)."""
    is_chat = kind == "chat"
    head = {
        "id": request_id,
        "object": "chat.completion.chunk" if is_chat else "text_completion",
        "created": int(time.time()),
        "model": state.model_name,
    }
    return StreamingResponse(
        _events(state, head, is_chat, first, gen, include_usage), media_type="text/event-stream"
    )


async def _events(
    state: ServingState,
    head: dict[str, Any],
    is_chat: bool,
    first: TextDelta | None,
    gen: AsyncIterator[TextDelta],
    include_usage: bool,
) -> AsyncIterator[str]:
    def chunk(choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> str:
        body: dict[str, Any] = {**head, "choices": choices}
        if usage is not None:
            body["usage"] = usage
        return _sse(body)

    def choice(d: TextDelta) -> dict[str, Any]:
        if is_chat:
            delta = state.prefix.delta(d.text, d.reasoning_chars)
            return {"index": 0, "delta": delta, "finish_reason": d.finish_reason}
        return {"index": 0, "text": d.text, "finish_reason": d.finish_reason}

    last = first
    try:
        if is_chat:
            role = {"index": 0, "delta": {"role": "assistant", "content": ""}}
            yield chunk([{**role, "finish_reason": None}])
        if first is not None and (first.text or first.finished):
            yield chunk([choice(first)])
        async for d in gen:
            last = d
            if d.text or d.finished:
                yield chunk([choice(d)])
    except EngineDeadError as e:
        yield _sse(error_body(str(e), 503, code="engine_dead", err_type="internal_error"))
    finally:
        await gen.aclose()
    if include_usage and last is not None:
        yield chunk([], state.usage(last, is_chat))
    yield "data: [DONE]\n\n"


async def whole_response(
    state: ServingState,
    kind: str,
    request_id: str,
    first: TextDelta | None,
    gen: AsyncIterator[TextDelta],
) -> Response:
    """The request's whole answer in one JSON body, once its last output is in."""
    created = int(time.time())
    is_chat = kind == "chat"
    texts, last = [first.text if first else ""], first
    reasoning_chars = first.reasoning_chars if first else 0
    async for d in gen:
        texts.append(d.text)
        reasoning_chars += d.reasoning_chars
        last = d
    assert last is not None
    text = "".join(texts)
    if is_chat:
        result = {"index": 0, "message": state.prefix.message(text, reasoning_chars)}
    else:
        result = {"index": 0, "text": text}
    result["finish_reason"] = last.finish_reason
    return JSONResponse(
        {
            "id": request_id,
            "object": "chat.completion" if is_chat else "text_completion",
            "created": created,
            "model": state.model_name,
            "choices": [result],
            "usage": state.usage(last, is_chat),
        }
    )
