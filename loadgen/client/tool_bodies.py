"""Tools, tool choices and tool turns in each chat API's own form.

The load generator holds them in OpenAI chat's form (loadgen.request_tools): tools as
``{"type": "function", "function": {name, description, parameters}}``, the history's calls as an
assistant message's ``tool_calls`` and their results as ``tool`` messages. Sent:

    chat       as held;
    responses  flat function tools ``{"type": "function", "name", "description", "parameters"}``,
               a named choice as ``{"type": "function", "name"}``; an assistant's calls become
               ``function_call`` input items, a tool's result a ``function_call_output`` item;
    messages   Anthropic's ``{"name", "description", "input_schema"}``; the choice as
               ``{"type": "auto" | "any" | "none" | "tool"}`` (required is "any"); an
               assistant's calls become ``tool_use`` blocks (the input parsed from the
               arguments' JSON), the tools' results ``tool_result`` blocks of one user turn.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from loadgen.request_spec import content_text
from perfmodel.files import JSONObject, JSONView

__all__ = [
    "ToolChoice",
    "Tools",
    "anthropic_tools",
    "anthropic_turns",
    "chat_tools",
    "responses_input",
    "responses_tools",
]

_ANTHROPIC_CHOICE = {"auto": "auto", "required": "any", "none": "none"}


def _function(tool: JSONView) -> JSONView:
    function = tool["function"]
    assert isinstance(function, Mapping), "tools are held in OpenAI's form (loadgen.request_tools)"
    return function


def _chosen(choice: str | JSONView) -> str | None:
    """The function a choice names, None for auto, none and required."""
    return None if isinstance(choice, str) else str(choice["function"]["name"])


# The request's tools in OpenAI's form and its tool choice (None: the server's default).
Tools = Sequence[JSONView]
ToolChoice = str | JSONView | None


def chat_tools(tools: Tools, choice: ToolChoice) -> JSONObject:
    """The body fields offering ``tools`` with ``choice`` on OpenAI's chat API: as held."""
    out: JSONObject = {"tools": [dict(t) for t in tools]}
    if choice is not None:
        out["tool_choice"] = choice
    return out


def responses_tools(tools: Tools, choice: ToolChoice) -> JSONObject:
    """The body fields offering ``tools`` with ``choice`` on the Responses API (module
    docstring)."""
    out: JSONObject = {"tools": [{"type": "function", **_function(t)} for t in tools]}
    if choice is not None:
        name = _chosen(choice)
        out["tool_choice"] = choice if name is None else {"type": "function", "name": name}
    return out


def anthropic_tools(tools: Tools, choice: ToolChoice) -> JSONObject:
    """The body fields offering ``tools`` with ``choice`` on Anthropic's Messages API (module
    docstring)."""
    out: JSONObject = {"tools": [_anthropic_tool(_function(t)) for t in tools]}
    if choice is not None:
        name = _chosen(choice)
        out["tool_choice"] = (
            {"type": _ANTHROPIC_CHOICE[str(choice)]}
            if name is None
            else {"type": "tool", "name": name}
        )
    return out


def _anthropic_tool(function: JSONView) -> JSONObject:
    tool = {"name": function["name"], "input_schema": function["parameters"]}
    if "description" in function:
        tool["description"] = function["description"]
    return tool


def _arguments(call: JSONView) -> tuple[str, str]:
    function = call.get("function") or {}
    return str(function.get("name", "")), str(function.get("arguments") or "{}")


def responses_input(turns: Sequence[JSONObject]) -> list[JSONObject]:
    """A chat conversation as Responses input items: tool calls and results as their items
    (module docstring), every other message as it is."""
    items: list[JSONObject] = []
    for turn in turns:
        calls = turn.get("tool_calls")
        if turn.get("role") == "tool":
            items.append(
                {"type": "function_call_output", "call_id": turn.get("tool_call_id", ""),
                 "output": content_text(turn.get("content"))}
            )  # fmt: skip
        elif calls:
            if content_text(turn.get("content")):
                items.append({"role": "assistant", "content": turn["content"]})
            for call in calls:
                name, arguments = _arguments(call)
                items.append(
                    {"type": "function_call", "call_id": call.get("id", ""), "name": name,
                     "arguments": arguments}
                )  # fmt: skip
        else:
            items.append(turn)
    return items


def _tool_use(call: JSONView) -> JSONObject:
    name, arguments = _arguments(call)
    try:
        value = json.loads(arguments)
    except ValueError:
        value = None
    # Anthropic's input is an object; arguments that are not one are sent as their text.
    tool_input = value if isinstance(value, dict) else {"arguments": arguments}
    return {"type": "tool_use", "id": call.get("id", ""), "name": name, "input": tool_input}


def anthropic_turns(turns: Sequence[JSONObject]) -> list[JSONObject]:
    """A chat conversation (system turns already taken out) as Anthropic messages: tool calls
    as ``tool_use`` blocks, consecutive tool results as one user turn of ``tool_result``
    blocks (module docstring); every other message as it is."""
    out: list[JSONObject] = []
    results: list[JSONObject] | None = None  # the blocks of the tool results' user turn
    for turn in turns:
        if turn.get("role") == "tool":
            if results is None:
                results = []
                out.append({"role": "user", "content": results})
            results.append(
                {"type": "tool_result", "tool_use_id": turn.get("tool_call_id", ""),
                 "content": content_text(turn.get("content"))}
            )  # fmt: skip
            continue
        results = None
        if turn.get("tool_calls"):
            text = content_text(turn.get("content"))
            blocks = [{"type": "text", "text": text}] if text else []
            blocks += [_tool_use(call) for call in turn["tool_calls"]]
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append(turn)
    return out
