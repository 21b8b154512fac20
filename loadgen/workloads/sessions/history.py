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

Only whole calls go back: an answer that failed or was cut (status not ``ok``) carries calls
half assembled, and a call cut by max_tokens has arguments that are not JSON; neither is sent
again, since a server would refuse the next turn for it.

A rebuilt turn's prompt tokens are the sent turn's count plus the count of what was appended
(one tokenizer call over the new text, not over the whole history, which would block the
client's event loop for a long session); a tokenizer that merges tokens across the line break
between them counts at most one token apart from a count of the whole.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace

from loadgen.request_spec import Message, RequestSpec, message_dict, message_text
from loadgen.request_tools import call_text
from perfmodel.files import JSONObject, JSONView
from results.folder.records import RequestRecord

__all__ = ["follow_answer", "tool_calls_of", "transcript"]


def _counted_text(message: Message) -> str:
    """A message's text as its prompt counts it: an assistant message's tool calls included."""
    text = message_text(message)[1]
    if isinstance(message, Mapping) and message.get("tool_calls"):
        functions = (call.get("function") or {} for call in message["tool_calls"])
        text += "".join(call_text(f.get("name"), f.get("arguments")) for f in functions)
    return text


def transcript(messages: tuple[Message, ...]) -> str:
    """The text a turn's prompt is counted by: every message's text, one a line."""
    return "\n".join(_counted_text(m) for m in messages)


def _whole(call: JSONView) -> bool:
    """Whether a call's arguments are whole JSON (none at all counts as ``{}``)."""
    try:
        json.loads((call.get("function") or {}).get("arguments") or "{}")
    except (TypeError, ValueError):
        return False
    return True


def tool_calls_of(record: RequestRecord | None) -> list[JSONView]:
    """The whole tool calls ``record``'s answer made: none unless it completed (module
    docstring), and only those whose arguments parse."""
    if record is None or record.status != "ok":
        return []
    return [c for c in record.tool_calls if _whole(c)]


def _role(message: Message) -> str:
    return message_text(message)[0]


def _tool_messages(
    calls: list[JSONView], new: tuple[Message, ...], fallback: tuple[str, ...]
) -> list[JSONObject]:
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
    appended = transcript((*called, *rest))
    messages = (*(sent.messages or ()), *called, *rest)
    prompt = f"{sent.prompt}\n{appended}" if sent.messages else appended
    if count is None:
        tokens = planned.prompt_tokens
    else:  # the sent count and the new text's (module docstring)
        tokens = (sent.prompt_tokens + count("\n" + appended)) if sent.messages else count(prompt)
    return replace(planned, messages=messages, prompt=prompt, prompt_tokens=tokens)
