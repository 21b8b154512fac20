"""The tool calls of a streamed answer, assembled from their fragments, whatever the API.

The three streaming APIs cut a tool call differently:

    * OpenAI chat: ``delta.tool_calls``, a list of ``{index, id, type, function: {name,
      arguments}}`` where the first fragment of a call carries its ``id`` and ``name`` and the
      next ones (the same ``index``) carry pieces of ``arguments``;
    * the Responses API: ``response.output_item.added`` opens a ``function_call`` item (its
      ``id``, ``call_id`` and ``name``), ``response.function_call_arguments.delta`` adds to its
      arguments (by ``item_id``), ``...arguments.done`` gives the whole arguments;
    * Anthropic Messages: ``content_block_start`` opens a ``tool_use`` block (``id``, ``name``)
      at an ``index``, ``content_block_delta`` with an ``input_json_delta`` adds
      ``partial_json`` to it.

:class:`ToolCalls` keeps the calls by the key each API names them with (an index, an item id)
and gives them back in the order they opened, in one shape: OpenAI's
``{"id", "type": "function", "function": {"name", "arguments"}}`` (``arguments`` a JSON text),
which a workload can append to a conversation's history as the assistant's ``tool_calls``.

Each fragment is also generated text: :func:`loadgen.request_tools.call_text` is what the
readers record as the chunk's text (the name where a call opens, then the argument pieces), so
TTFT, ITL and the tokenizer's count of the output take tool calls in as they take content.
"""

from __future__ import annotations

import json
from collections.abc import Hashable
from typing import Any

from loadgen.request_tools import call_text
from perfmodel.files import JSONObject

__all__ = ["ToolCalls", "input_json"]


class _Call:
    __slots__ = ("arguments", "call_id", "done", "name")

    def __init__(self, call_id: str | None, name: str | None) -> None:
        self.call_id = call_id
        self.name = name
        self.arguments: list[str] = []
        self.done: str | None = None  # the whole arguments where the API repeats them at the end


class ToolCalls:
    """The calls of one answer, keyed as their API keys them (module docstring).

    Contract: :meth:`open` starts (or completes the identity of) the call at ``key``;
    :meth:`add` appends a fragment of its arguments, opening it if need be; :meth:`finish`
    records the whole arguments an API sends at a call's end (they win over the fragments).
    Nothing is parsed while the stream runs: :meth:`calls` joins the fragments at the end.
    """

    __slots__ = ("_calls",)

    def __init__(self) -> None:
        self._calls: dict[Hashable, _Call] = {}

    def __len__(self) -> int:
        return len(self._calls)

    def open(self, key: Hashable, call_id: str | None, name: str | None) -> None:
        """Start the call at ``key``, or fill in the id and name a first fragment lacked."""
        call = self._calls.get(key)
        if call is None:
            self._calls[key] = _Call(call_id, name)
            return
        call.call_id = call.call_id or call_id
        call.name = call.name or name

    def add(self, key: Hashable, fragment: str) -> None:
        """Append ``fragment`` to the arguments of the call at ``key``."""
        call = self._calls.get(key)
        if call is None:
            call = self._calls[key] = _Call(None, None)
        call.arguments.append(fragment)

    def finish(self, key: Hashable, arguments: str | None, name: str | None = None) -> None:
        """The whole arguments (and name) an API repeats once the call at ``key`` is complete."""
        self.open(key, None, name)
        if arguments is not None:
            self._calls[key].done = arguments

    def openai_delta(self, fragments: list[Any]) -> str:
        """Take a chat ``delta.tool_calls`` list in; the text it generated (call_text)."""
        text = []
        for position, fragment in enumerate(fragments):
            key = fragment.get("index", position)
            function = fragment.get("function") or {}
            name, arguments = function.get("name"), function.get("arguments")
            self.open(key, fragment.get("id"), name)
            if arguments:
                self.add(key, arguments)
            text.append(call_text(name, arguments))
        return "".join(text)

    def names(self) -> list[str]:
        """The called functions' names, in call order ("" for a call whose name never came)."""
        return [call.name or "" for call in self._calls.values()]

    def calls(self) -> list[JSONObject]:
        """The calls in OpenAI's shape, in the order they opened (module docstring); a call
        without an id is given ``call_<n>``, one without arguments ``{}``."""
        out = []
        for n, call in enumerate(self._calls.values()):
            arguments = call.done if call.done is not None else "".join(call.arguments)
            out.append(
                {
                    "id": call.call_id or f"call_{n}",
                    "type": "function",
                    "function": {"name": call.name or "", "arguments": arguments or "{}"},
                }
            )
        return out


def input_json(value: Any) -> str | None:
    """An Anthropic ``tool_use`` block's opening ``input`` as arguments text, None when it is
    empty (the usual case: the input streams as ``input_json_delta``)."""
    if isinstance(value, dict) and value:
        return json.dumps(value)
    return None
