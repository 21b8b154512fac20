"""The meaning of a streamed Anthropic Messages answer (POST /v1/messages, ``stream: true``).

The events, each naming its kind in ``type``:

    * ``message_start``: ``message.usage.input_tokens`` (the prompt) and an opening
      ``output_tokens`` (1 or 0, not a count of text yet);
    * ``content_block_delta``: ``delta.text`` (a ``text_delta``) is answer text, a content
      chunk; ``delta.thinking`` (a ``thinking_delta``) is reasoning, a chunk flagged
      ``reasoning``; an ``input_json_delta``'s ``partial_json`` is a fragment of a tool
      call's input, an answer chunk; ``signature_delta`` carries no text;
    * ``content_block_start`` of a ``tool_use`` block: a tool call opens at the block's
      ``index`` (its ``id``, ``name``: an answer chunk too), assembled by
      loadgen.client.readers.tool_calls, so TTFT, ITL and the output's count include it;
    * ``message_delta``: ``delta.stop_reason`` and ``usage.output_tokens``, the output count so
      far (cumulative: replaced, never added);
    * ``message_stop``: the end of the message, stamped as ``done_ns`` (there is no
      ``[DONE]``);
    * ``error``: the request failed (``error.message``, e.g. ``overloaded_error``).

``ping``, ``content_block_stop`` and the start of other blocks carry no new text. The usage is
kept in the chat usage's names (prompt_tokens, completion_tokens), so the token counting of
loadgen.client.readers.token_counts applies unchanged.
"""

from __future__ import annotations

import json
from typing import Any

from loadgen.client.readers.openai_stream import (
    StreamAccumulator,
    StreamError,
    error_message_from_body,
)
from loadgen.client.readers.tool_calls import input_json
from loadgen.request_tools import call_text
from perfmodel.files import JSONObject

__all__ = ["ANTHROPIC_VERSION", "MessagesAccumulator"]

# The API version header every request to /v1/messages carries (Anthropic requires one).
ANTHROPIC_VERSION = "2023-06-01"
_MAX_MESSAGE_CHARS = 300


def messages_usage(usage: Any, before: JSONObject | None, final: bool) -> JSONObject:
    """A Messages ``usage`` object (message_start's, or message_delta's cumulative one when
    ``final``) in the chat usage's names, over ``before``. message_start's output count is the
    answer's first token or so, not its length, so only message_delta's is taken. Anthropic's
    ``input_tokens`` leaves out the tokens read from and written to the prompt cache (vLLM's
    /v1/messages subtracts them too), so the prompt is their sum and the cached tokens are
    those read."""
    out = dict(before or {})
    if not isinstance(usage, dict):
        return out
    if final and usage.get("output_tokens") is not None:
        out["completion_tokens"] = usage["output_tokens"]
    if usage.get("input_tokens") is not None:
        read = usage.get("cache_read_input_tokens") or 0
        written = usage.get("cache_creation_input_tokens") or 0
        out["prompt_tokens"] = usage["input_tokens"] + read + written
        if "cache_read_input_tokens" in usage:
            out["prompt_tokens_details"] = {"cached_tokens": read}
    return out


class MessagesAccumulator(StreamAccumulator):
    """A StreamAccumulator for Anthropic Messages events (module docstring); the same contract,
    the same record."""

    __slots__ = ()

    def add_event(self, data: str, t_ns: int, read_ns: int | None = None) -> None:
        """Account for one event: one ``json.loads`` and a look at its ``type``; ``read_ns``
        the client's own read time where ``t_ns`` is a kernel stamp (default: ``t_ns``)."""
        try:
            obj = json.loads(data)
            kind = obj.get("type")
            if kind == "content_block_delta":
                delta = obj["delta"]
                if delta.get("type") == "input_json_delta":
                    self._tool_input(obj.get("index"), delta.get("partial_json"), t_ns, read_ns)
                    return
                thought = delta.get("thinking")
                self.add_chunk(
                    thought or delta.get("text"),
                    t_ns,
                    t_ns if read_ns is None else read_ns,
                    bool(thought),
                )
            elif kind == "content_block_start":
                block = obj.get("content_block") or {}
                if block.get("type") == "tool_use":
                    key, name = obj.get("index"), block.get("name")
                    self.tools.open(key, block.get("id"), name)
                    self._tool_input(key, input_json(block.get("input")), t_ns, read_ns, name)
            elif kind == "message_start":
                self.usage = messages_usage(obj["message"].get("usage"), None, final=False)
            elif kind == "message_delta":
                self.usage = messages_usage(obj.get("usage"), self.usage, final=True)
                self.finish_reason = (obj.get("delta") or {}).get("stop_reason") or "end"
            elif kind == "message_stop":
                self.finish_reason = self.finish_reason or "end"
                self.done_ns = t_ns
            elif kind == "error":
                raise StreamError(f"error event in stream: {error_message_from_body(obj)}")
        except (ValueError, AttributeError, TypeError, KeyError) as exc:
            raise StreamError(
                f"malformed Messages event ({type(exc).__name__}: {exc}): "
                f"{data[:_MAX_MESSAGE_CHARS]!r}"
            ) from None

    def _tool_input(
        self, key: Any, fragment: str | None, t_ns: int, read_ns: int | None, name: str = ""
    ) -> None:
        """A fragment of the input of the ``tool_use`` block at ``key`` (and, where the block
        opens, its name): kept for the call, and an answer chunk of the text generated."""
        if fragment:
            self.tools.add(key, fragment)
        self.add_chunk(call_text(name, fragment), t_ns, t_ns if read_ns is None else read_ns)
