"""The scenario's ``[tools]`` table: the tools every request offers the model, and the choice.

::

    [tools]
    choice = "auto"              # auto | none | required | the name of one of the functions
    [[tools.functions]]
    name = "get_weather"
    description = "The current weather in a city"
    [tools.functions.parameters]  # the arguments' JSON schema (default: no arguments)
    type = "object"
    required = ["city"]
    properties = { city = { type = "string" } }

Only the chat APIs (``api`` chat, responses, messages) take tools; each request carries them in
its API's own form (loadgen.client.tool_bodies). A dataset row's own ``tools`` column wins over
the table. The tools are request fields of their own, not ``[request]``'s: ``tools`` and
``tool_choice`` there are refused, naming this table.
"""

from __future__ import annotations

from bench.scenario.toml_table import Table
from loadgen.request_tools import ToolError, ToolOffer, as_tool
from results.schema.api_kinds import CHAT_APIS

__all__ = ["read_tools"]


def read_tools(table: Table, api: str) -> ToolOffer | None:
    """The ``[tools]`` table (module docstring), or None when absent."""
    sub = table.table("tools")
    if sub is None:
        return None
    choice = sub.get("choice", str, None)
    entries = sub.tables("functions")
    sub.finish()
    if not entries:
        raise sub.error("functions", "missing; give at least one [[tools.functions]]")
    tools = []
    for entry in entries:
        function = {"name": entry.get("name", str)}
        if (description := entry.get("description", str, None)) is not None:
            function["description"] = description
        if (parameters := entry.table("parameters")) is not None:
            function["parameters"] = parameters.take_all()
        entry.finish()
        try:
            tools.append(as_tool(function))
        except ToolError as exc:
            raise entry.error("name", str(exc)) from None
    if api not in CHAT_APIS:
        raise table.error("tools", f"only api {sorted(CHAT_APIS)} takes tools, not {api!r}")
    try:
        return ToolOffer(tuple(tools), choice)
    except ToolError as exc:
        raise sub.error("choice" if choice is not None else "functions", str(exc)) from None
