"""The meaning of a streamed OpenAI Responses API answer (POST /v1/responses, ``stream: true``).

Each SSE event names its kind in ``type`` (also in the ``event:`` line, which the parser drops):

    * ``response.output_text.delta``: ``delta`` is answer text, a content chunk;
    * ``response.reasoning_text.delta`` and ``response.reasoning_summary_text.delta``: reasoning
      text, a content chunk flagged ``reasoning`` (TTFT is the first token of any kind, as in
      chat);
    * ``response.completed`` (and ``response.incomplete``, which ``max_output_tokens`` ends
      with): the answer is whole; its ``response.usage`` (``input_tokens``, ``output_tokens``,
      ``output_tokens_details.reasoning_tokens``) is read into the chat usage's names, so the
      token counting of loadgen.client.readers.token_counts applies unchanged;
    * ``response.output_item.added`` with an item of type ``function_call``: a tool call opens
      (its ``call_id``, ``name``); ``response.function_call_arguments.delta`` adds a fragment
      of its arguments (by ``item_id``), ``...arguments.done`` repeats them whole. The name
      and each fragment are answer chunks (loadgen.client.readers.tool_calls), so TTFT, ITL
      and the output's count include the call;
    * ``error`` and ``response.failed``: the request failed, with the message they carry.

Every other event (``response.created``, ``response.in_progress``, ``...added``, ``...done``)
carries no new text and is passed over. The stream has no ``[DONE]``: the terminal event is
its end, stamped as ``done_ns``.
"""

from __future__ import annotations

import json
from typing import Any

from loadgen.client.readers.openai_stream import (
    StreamAccumulator,
    StreamError,
    error_message_from_body,
)
from loadgen.request_tools import call_text
from perfmodel.files import JSONObject

__all__ = ["ResponsesAccumulator", "responses_usage"]

_MAX_MESSAGE_CHARS = 300
_TEXT = "response.output_text.delta"
_REASONING = frozenset({"response.reasoning_text.delta", "response.reasoning_summary_text.delta"})
_FINAL = frozenset({"response.completed", "response.incomplete"})
_CALL_ADDED = "response.output_item.added"
_ARGUMENTS = "response.function_call_arguments.delta"
_ARGUMENTS_DONE = "response.function_call_arguments.done"


def responses_usage(usage: Any) -> JSONObject | None:
    """A Responses ``usage`` object in the chat usage's names (prompt_tokens,
    completion_tokens, completion_tokens_details.reasoning_tokens,
    prompt_tokens_details.cached_tokens); None when there is none."""
    if not isinstance(usage, dict):
        return None
    out: JSONObject = {
        "prompt_tokens": usage.get("input_tokens"),
        "completion_tokens": usage.get("output_tokens"),
    }
    details = usage.get("output_tokens_details")
    if isinstance(details, dict) and "reasoning_tokens" in details:
        out["completion_tokens_details"] = {"reasoning_tokens": details["reasoning_tokens"]}
    cached = usage.get("input_tokens_details")
    if isinstance(cached, dict) and "cached_tokens" in cached:
        out["prompt_tokens_details"] = {"cached_tokens": cached["cached_tokens"]}
    return out


class ResponsesAccumulator(StreamAccumulator):
    """A StreamAccumulator for Responses API events (module docstring); the same contract, the
    same record."""

    __slots__ = ()

    def add_event(self, data: str, t_ns: int, read_ns: int | None = None) -> None:
        """Account for one event: one ``json.loads`` and a look at its ``type``; ``read_ns``
        the client's own read time where ``t_ns`` is a kernel stamp (default: ``t_ns``)."""
        try:
            obj = json.loads(data)
            kind = obj.get("type")
            if kind == _TEXT or kind in _REASONING:
                self.add_chunk(
                    obj.get("delta"), t_ns, t_ns if read_ns is None else read_ns, kind != _TEXT
                )
            elif kind in _FINAL:
                response = obj.get("response") or {}
                self.usage = responses_usage(response.get("usage")) or self.usage
                self.finish_reason = str(response.get("status") or kind.rsplit(".", 1)[-1])
                self.done_ns = t_ns
            elif kind in (_ARGUMENTS, _ARGUMENTS_DONE, _CALL_ADDED):
                self._tool_event(kind, obj, t_ns, t_ns if read_ns is None else read_ns)
            elif kind == "error" or kind == "response.failed":
                failed = obj.get("response", obj) if kind == "response.failed" else obj
                raise StreamError(f"{kind} event in stream: {error_message_from_body(failed)}")
        except (ValueError, AttributeError, TypeError) as exc:
            raise StreamError(
                f"malformed Responses event ({type(exc).__name__}: {exc}): "
                f"{data[:_MAX_MESSAGE_CHARS]!r}"
            ) from None

    def _tool_event(self, kind: str, obj: JSONObject, t_ns: int, read_ns: int) -> None:
        """A function call's opening, argument fragment or end (module docstring)."""
        if kind == _CALL_ADDED:
            item = obj.get("item") or {}
            if item.get("type") != "function_call":
                return  # a message or reasoning item: its text comes in its own deltas
            key = item.get("id") or obj.get("output_index")
            name = item.get("name")
            self.tools.open(key, item.get("call_id") or item.get("id"), name)
            if item.get("arguments"):
                self.tools.add(key, item["arguments"])
            self.add_chunk(call_text(name, item.get("arguments")), t_ns, read_ns)
            return
        key = obj.get("item_id") or obj.get("output_index")
        if kind == _ARGUMENTS:
            fragment = obj.get("delta")
            if fragment:
                self.tools.add(key, fragment)
                self.add_chunk(fragment, t_ns, read_ns)
        else:
            self.tools.finish(key, obj.get("arguments"), obj.get("name"))
