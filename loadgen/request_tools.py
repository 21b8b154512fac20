"""The tools a request offers the model, in the one form the load generator holds them.

A tool is held as OpenAI chat's function tool::

    {"type": "function", "function": {"name": "get_weather", "description": "...",
                                      "parameters": {JSON schema of the arguments}}}

and the choice as OpenAI's ``tool_choice``: ``"auto"``, ``"none"``, ``"required"`` or
``{"type": "function", "function": {"name": NAME}}``. loadgen.client.tool_bodies writes them
in each API's own form (the Responses API's flat function tools, Anthropic's ``input_schema``).
:func:`as_tool` also takes the bare ``{"name", "description", "parameters"}`` form many
function-calling datasets write, and :func:`as_tool_choice` a function's name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfmodel.files import JSONObject, JSONView

__all__ = [
    "TOOL_CHOICES",
    "ToolError",
    "ToolOffer",
    "as_tool",
    "as_tool_choice",
    "as_tools",
    "call_text",
    "tool_names",
]

# The choices that name no function.
TOOL_CHOICES = ("auto", "none", "required")
# An empty object schema: a function without arguments.
_NO_ARGUMENTS: JSONObject = {"type": "object", "properties": {}}


class ToolError(ValueError):
    """A tool or tool choice that cannot be sent; the message says which part and why."""


def call_text(name: str | None, arguments: str | None) -> str:
    """The text a tool call (or a streamed fragment of one) generated: its name and its
    arguments; "" for neither. What the readers count as output and a rebuilt history as
    prompt."""
    return (name or "") + (arguments or "")


def as_tool(raw: Any) -> JSONObject:
    """``raw`` (the OpenAI form, or the bare function) as the OpenAI form (module docstring).

    Raises:
        ToolError: not an object, no function name, or parameters that are not an object.
    """
    if not isinstance(raw, Mapping):
        raise ToolError(f"a tool must be an object, got {type(raw).__name__}")
    if raw.get("type", "function") != "function":
        raise ToolError(f"tool of type {str(raw.get('type'))[:30]!r}: only function tools are sent")
    function = raw.get("function", raw)
    if not isinstance(function, Mapping):
        raise ToolError("a tool's function must be an object")
    name = function.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ToolError("a tool without a function name")
    parameters = function.get("parameters", _NO_ARGUMENTS)
    if not isinstance(parameters, Mapping):
        raise ToolError(f"tool {name!r}: parameters must be a JSON schema object")
    out: JSONObject = {"name": name, "parameters": dict(parameters)}
    description = function.get("description")
    if description is not None:
        if not isinstance(description, str):
            raise ToolError(f"tool {name!r}: description must be a string")
        out["description"] = description
    return {"type": "function", "function": out}


def as_tools(raw: Any) -> tuple[JSONObject, ...]:
    """A list of tools (each :func:`as_tool`), names unique."""
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes):
        raise ToolError(f"tools must be a list of tools, got {type(raw).__name__}")
    tools = tuple(as_tool(t) for t in raw)
    names = tool_names(tools)
    if twice := sorted({n for n in names if names.count(n) > 1}):
        raise ToolError(f"tool {twice[0]!r} is given twice")
    return tools


def tool_names(tools: Sequence[JSONView]) -> list[str]:
    """The function names of ``tools`` (held form), in order."""
    return [str(t["function"]["name"]) for t in tools]


def as_tool_choice(raw: Any, tools: Sequence[JSONView]) -> str | JSONObject | None:
    """``raw`` as OpenAI's tool_choice (module docstring): one of :data:`TOOL_CHOICES`, a
    function's name or the OpenAI object naming one, which must be one of ``tools``; None
    stays None (the server's default, "auto" where tools are given).

    Raises:
        ToolError: a choice without tools, or a function that is not one of them.
    """
    if raw is None:
        return None
    if not tools:
        raise ToolError("a tool choice without tools")
    if raw in TOOL_CHOICES:
        return str(raw)
    name = raw
    if isinstance(raw, Mapping):
        name = (raw.get("function") or {}).get("name") if raw.get("type") == "function" else None
    if not isinstance(name, str) or name not in tool_names(tools):
        raise ToolError(
            f"tool choice {str(raw)[:60]!r}: expected one of {list(TOOL_CHOICES)} or the name "
            f"of a tool given ({', '.join(tool_names(tools))})"
        )
    return {"type": "function", "function": {"name": name}}


@dataclass(frozen=True)
class ToolOffer:
    """The tools every request of a run offers (a scenario's ``[tools]``), held form, and the
    choice as written: one of :data:`TOOL_CHOICES`, a function's name, or None (the server's
    default). A request that brings its own tools (a dataset row's) keeps them instead."""

    tools: tuple[JSONObject, ...]
    choice: str | None = None

    def __post_init__(self) -> None:
        if not self.tools:
            raise ToolError("no tool given")
        self.tool_choice()  # raises for a choice that names no tool given

    def tool_choice(self) -> str | JSONObject | None:
        """The choice as OpenAI's ``tool_choice`` (:func:`as_tool_choice`)."""
        return as_tool_choice(self.choice, self.tools)

    def to_dict(self) -> JSONObject:
        """run.json's ``scenario.tools``: the ``[tools]`` table as it reads back."""
        return {"choice": self.choice, "functions": [dict(t["function"]) for t in self.tools]}
