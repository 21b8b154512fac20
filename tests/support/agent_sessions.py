"""Agent sessions for tests: session traces written into a test's folder, and a stand-in chat
server on 127.0.0.1 that answers chosen turns with a streamed tool call."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.support.http_server import Handler, HttpRequest, Response
from tests.support.sse_streams import sse_event

__all__ = ["TOOL", "tool_call_handler", "tool_call_id", "write_session_trace"]

# The tool the stand-in calls, as a request's `tools` declares it.
TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}


def write_session_trace(path: Path, lines: Sequence[Mapping[str, Any]]) -> Path:
    """A session trace (loadgen.workloads.sessions.trace): one JSON object a line."""
    path.write_text("".join(json.dumps(dict(line)) + "\n" for line in lines), encoding="utf-8")
    return path


def tool_call_id(body: Mapping[str, Any]) -> str:
    """The id of the tool call the stand-in streams in its answer to ``body``: from the
    request's own content, so that a test can tell which answer it belongs to."""
    return f"call_{len(body.get('messages') or ())}"


def _tool_call_events(call_id: str, usage: dict[str, int]) -> list[bytes]:
    """An OpenAI chat stream of one tool call whose arguments come in two deltas, as vLLM's
    tool parsers stream them; finish_reason "tool_calls", then usage and [DONE]."""
    head = {"index": 0, "id": call_id, "type": "function",
            "function": {"name": "read_file", "arguments": ""}}  # fmt: skip
    deltas = [
        {"role": "assistant", "content": None, "tool_calls": [head]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"path": '}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '"a.py"}'}}]},
    ]
    events = [sse_event({"choices": [{"index": 0, "delta": d, "finish_reason": None}]})
              for d in deltas]  # fmt: skip
    events.append(
        sse_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    )
    events.append(sse_event({"choices": [], "usage": usage}))
    events.append(sse_event("[DONE]"))
    return events


def tool_call_handler(calls: Callable[[dict[str, Any]], bool]) -> Handler:
    """A /v1/chat/completions stand-in: a request ``calls(body)`` picks is answered with a
    streamed tool call (id :func:`tool_call_id`), every other one with three content tokens.
    GET /v1/models lists model "m"; a request that is not streamed (the pre-flight's) gets one
    completion of its max_tokens."""

    async def handler(request: HttpRequest, response: Response) -> None:
        if request.method == "GET":
            models = {"object": "list", "data": [{"id": "m", "object": "model",
                                                  "max_model_len": 4096}]}  # fmt: skip
            await response.send_json(200, models)
            return
        body = request.json()
        asked = int(body.get("max_tokens") or 1)
        if body.get("stream") is False:
            choice = {"index": 0, "message": {"role": "assistant", "content": " t" * asked},
                      "finish_reason": "length"}  # fmt: skip
            usage = {"prompt_tokens": 2, "completion_tokens": asked}
            await response.send_json(200, {"choices": [choice], "usage": usage})
            return
        usage = {"prompt_tokens": 8, "completion_tokens": 3}
        await response.start_stream()
        if calls(body):
            events = _tool_call_events(tool_call_id(body), usage)
        else:
            content = [{"index": 0, "delta": {"content": f" t{i}"}} for i in range(3)]
            events = [sse_event({"choices": [c]}) for c in content]
            events += [sse_event({"choices": [], "usage": usage}), sse_event("[DONE]")]
        for event in events:
            await response.send(event)
        await response.end()

    return handler
