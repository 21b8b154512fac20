"""The answers of /v1/responses and /v1/messages: the engine's outputs as each API's own events
(streamed), or as its one JSON body.

Responses API (OpenAI): ``response.created``, ``response.in_progress``, the output item and its
text part added, one ``response.output_text.delta`` per output (``response.reasoning_text.delta``
for the tokens a ``--reasoning-tokens`` prefix labels), the ``done`` events, then
``response.completed`` (or ``response.incomplete`` when ``max_output_tokens`` cut it) with
``usage``: ``input_tokens``, ``output_tokens``, ``output_tokens_details.reasoning_tokens``.

Messages (Anthropic): ``message_start`` (``usage.input_tokens``), a ``content_block_start`` of
type text, one ``content_block_delta`` per output (``text_delta``, or ``thinking_delta`` for
the reasoning prefix), ``content_block_stop``, ``message_delta`` (``stop_reason``
``end_turn``, ``max_tokens`` or ``stop_sequence``; ``usage.output_tokens``), ``message_stop``.

Neither API ends with ``[DONE]``. An engine that dies mid-stream ends it with the API's error
event.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from engine.serving.async_engine import EngineDeadError
from engine.serving.output_processor import TextDelta
from engine.serving.routes.serving_state import ServingState

__all__ = [
    "API_ANSWERS",
    "messages_events",
    "messages_whole",
    "responses_events",
    "responses_whole",
]

Outputs = AsyncIterator[TextDelta]


def _event(name: str, obj: dict[str, Any]) -> str:
    data = json.dumps({"type": name, **obj}, separators=(",", ":"), ensure_ascii=False)
    return f"event: {name}\ndata: {data}\n\n"


def _split(state: ServingState, d: TextDelta) -> tuple[str, str]:
    """(reasoning text, answer text) of one output, by the server's reasoning prefix."""
    part = state.prefix.delta(d.text, d.reasoning_chars)
    return part.get(state.prefix.field, ""), part.get("content", "")


def _responses_usage(state: ServingState, last: TextDelta | None) -> dict[str, Any]:
    if last is None:
        return {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    details = state.prefix.usage_details(last.num_output_tokens, True)
    reasoning = details.get("completion_tokens_details", {}).get("reasoning_tokens", 0)
    return {
        "input_tokens": last.num_prompt_tokens,
        "output_tokens": last.num_output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": last.num_prompt_tokens + last.num_output_tokens,
    }


def _response(state: ServingState, rid: str, status: str, text: str = "") -> dict[str, Any]:
    output = []
    if status != "in_progress":
        part = {"type": "output_text", "text": text, "annotations": []}
        output = [{"id": f"msg_{rid}", "type": "message", "status": "completed",
                   "role": "assistant", "content": [part]}]  # fmt: skip
    return {"id": rid, "object": "response", "created_at": int(time.time()), "status": status,
            "model": state.model_name, "output": output}  # fmt: skip


async def _deltas(first: TextDelta | None, gen: Outputs) -> AsyncIterator[TextDelta]:
    if first is not None:
        yield first
    async for d in gen:
        yield d


async def responses_events(
    state: ServingState, rid: str, first: TextDelta | None, gen: Outputs
) -> AsyncIterator[str]:
    """The Responses API's event stream of one request (module docstring)."""
    where = {"item_id": f"msg_{rid}", "output_index": 0, "content_index": 0}
    yield _event("response.created", {"response": _response(state, rid, "in_progress")})
    yield _event("response.in_progress", {"response": _response(state, rid, "in_progress")})
    texts, last = [], first
    try:
        async for d in _deltas(first, gen):
            last = d
            thought, answer = _split(state, d)
            if thought:
                yield _event("response.reasoning_text.delta", {**where, "delta": thought})
            if answer:
                texts.append(answer)
                yield _event("response.output_text.delta", {**where, "delta": answer})
    except EngineDeadError as e:
        yield _event("error", {"code": "engine_dead", "message": str(e), "param": None})
        return
    finally:
        await gen.aclose()
    text = "".join(texts)
    yield _event("response.output_text.done", {**where, "text": text})
    cut = last is not None and last.finish_reason == "length"
    body = _response(state, rid, "incomplete" if cut else "completed", text)
    body["usage"] = _responses_usage(state, last)
    yield _event("response.incomplete" if cut else "response.completed", {"response": body})


async def responses_whole(
    state: ServingState, rid: str, first: TextDelta | None, gen: Outputs
) -> dict[str, Any]:
    """The Responses API's JSON body of one request, once its last output is in."""
    texts, last = [], first
    async for d in _deltas(first, gen):
        last = d
        texts.append(_split(state, d)[1])
    cut = last is not None and last.finish_reason == "length"
    body = _response(state, rid, "incomplete" if cut else "completed", "".join(texts))
    body["usage"] = _responses_usage(state, last)
    return body


def _stop_reason(last: TextDelta | None) -> str:
    reason = last.finish_reason if last is not None else None
    return {"length": "max_tokens", "stop": "end_turn"}.get(reason or "", "end_turn")


def _message(state: ServingState, rid: str, prompt_tokens: int) -> dict[str, Any]:
    return {"id": rid, "type": "message", "role": "assistant", "content": [],
            "model": state.model_name, "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": prompt_tokens, "output_tokens": 0}}  # fmt: skip


async def messages_events(
    state: ServingState, rid: str, first: TextDelta | None, gen: Outputs
) -> AsyncIterator[str]:
    """Anthropic Messages' event stream of one request (module docstring)."""
    prompt = first.num_prompt_tokens if first is not None else 0
    yield _event("message_start", {"message": _message(state, rid, prompt)})
    yield _event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    last = first
    try:
        async for d in _deltas(first, gen):
            last = d
            thought, answer = _split(state, d)
            if thought:
                delta = {"type": "thinking_delta", "thinking": thought}
                yield _event("content_block_delta", {"index": 0, "delta": delta})
            if answer:
                delta = {"type": "text_delta", "text": answer}
                yield _event("content_block_delta", {"index": 0, "delta": delta})
    except EngineDeadError as e:
        yield _event("error", {"error": {"type": "api_error", "message": str(e)}})
        return
    finally:
        await gen.aclose()
    yield _event("content_block_stop", {"index": 0})
    usage = {"output_tokens": last.num_output_tokens if last is not None else 0}
    delta = {"stop_reason": _stop_reason(last), "stop_sequence": None}
    yield _event("message_delta", {"delta": delta, "usage": usage})
    yield _event("message_stop", {})


async def messages_whole(
    state: ServingState, rid: str, first: TextDelta | None, gen: Outputs
) -> dict[str, Any]:
    """Anthropic Messages' JSON body of one request, once its last output is in."""
    texts, last = [], first
    async for d in _deltas(first, gen):
        last = d
        texts.append(_split(state, d)[1])
    body = _message(state, rid, last.num_prompt_tokens if last is not None else 0)
    body["content"] = [{"type": "text", "text": "".join(texts)}]
    body["stop_reason"] = _stop_reason(last)
    body["usage"]["output_tokens"] = last.num_output_tokens if last is not None else 0
    return body


# kind -> (its event stream, its whole JSON body), for completion_responses.respond.
API_ANSWERS = {
    "responses": (responses_events, responses_whole),
    "messages": (messages_events, messages_whole),
}
