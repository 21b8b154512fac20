"""A turn's history rebuilt from the previous answer, when that answer made tool calls.

A session's turns are planned ahead (loadgen.workloads.sessions.plan): turn ``k`` sends the
whole conversation so far, in which each earlier answer is the planned one (the trace's
recorded assistant message, or synthetic text of the answer's length). When the server's answer
to turn ``k - 1`` made tool calls (its record's ``tool_calls``: OpenAI-shape dicts ``{"id",
"type": "function", "function": {"name", "arguments"}}``), an agent would send those calls
back with their results, so the history of turn ``k`` becomes: the messages actually sent for
turn ``k - 1``, the assistant message with its ``tool_calls``, one ``tool`` message per call
(``tool_call_id`` the call's id, the content the trace's tool result for it, else the turn's
synthetic result text), then the turn's other new messages. Once rebuilt, every later turn of
the session follows the rebuilt history.

The record is read with ``getattr(record, "tool_calls", None) or []``, so that a client which
does not parse tool calls leaves every history as planned.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from loadgen.request_spec import Message, RequestSpec, message_dict, message_text
from results.folder.records import RequestRecord

__all__ = ["follow_answer", "tool_calls_of", "transcript"]


def transcript(messages: tuple[Message, ...]) -> str:
    """The text a turn's prompt is counted by: every message's text, one a line."""
    return "\n".join(message_text(m)[1] for m in messages)


def tool_calls_of(record: RequestRecord | None) -> list[Mapping[str, Any]]:
    """The tool calls ``record``'s answer made (empty when none, or not parsed)."""
    calls = getattr(record, "tool_calls", None) or []
    return [c for c in calls if isinstance(c, Mapping)]


def _role(message: Message) -> str:
    return message_text(message)[0]


def _tool_messages(
    calls: list[Mapping[str, Any]], new: tuple[Message, ...], fallback: tuple[str, ...]
) -> list[dict[str, Any]]:
    """One ``tool`` message per call: the contents of the turn's own tool messages in order,
    else its synthetic results, cycled."""
    contents = [message_text(m)[1] for m in new if _role(m) == "tool"] or list(fallback) or [""]
    return [
        {"role": "tool", "tool_call_id": str(call.get("id", f"call_{j}")),
         "content": contents[j % len(contents)]}
        for j, call in enumerate(calls)
    ]  # fmt: skip


def follow_answer(
    planned: RequestSpec,
    previous: tuple[RequestSpec, RequestRecord] | None,
    count: Callable[[str], int] | None,
) -> RequestSpec:
    """The request to send for ``planned``, given the previous turn as sent and its record
    (None for a session's first turn). Unchanged when the previous answer made no tool call
    and the previous turn went out as planned; else its history is rebuilt (module docstring)
    and its prompt tokens counted again with ``count`` (None keeps the planned count)."""
    turn = planned.session
    if previous is None or turn is None or planned.messages is None:
        return planned
    sent, record = previous
    calls = tool_calls_of(record)
    planned_before = planned.messages[: -turn.new_messages - 1]
    if not calls and sent.messages == planned_before:
        return planned
    new = planned.messages[-turn.new_messages :]
    answer = planned.messages[-turn.new_messages - 1]
    if calls:
        # The answer's tokens went into the calls: the message holds them, and no text.
        called: list[Message] = [
            {"role": "assistant", "content": None, "tool_calls": [dict(c) for c in calls]},
            *_tool_messages(calls, new, turn.tool_results),
        ]
        rest = tuple(message_dict(m) for m in new if _role(m) != "tool")
    else:
        called, rest = [answer], new
    messages = (*(sent.messages or ()), *called, *rest)
    prompt = transcript(messages)
    tokens = count(prompt) if count is not None else planned.prompt_tokens
    return replace(planned, messages=messages, prompt=prompt, prompt_tokens=tokens)
