"""`bench serve` serves text only and calls no tools: a chat request whose tool_choice a model
may answer in text ("auto", "none") is served with the tools' definitions in its prompt, never
as if it offered none; a choice that demands a call, and tools on the Responses and Messages
APIs, are refused with a 400 that says why and what to do; an empty tools list offers none."""

from __future__ import annotations

import httpx
import pytest

from engine.config import EngineConfig
from loadgen.client.apis import generation_body
from loadgen.request_spec import RequestSpec
from loadgen.request_tools import as_tool_choice, as_tools
from results.schema.api_kinds import APIS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
MODEL = "tiny"
SERVER_CONFIG = EngineConfig.from_flat(
    dict(model=MODEL, dtype="float32", device="cpu", max_model_len=512)
)
TOOLS = as_tools([{"name": "get_weather", "parameters": {"type": "object", "properties": {}}}])


def _post(base_url: str, spec: RequestSpec) -> httpx.Response:
    """``spec``'s body as the load generator sends it, answered whole (not streamed)."""
    body = {**generation_body(spec, MODEL), "stream": False}
    body.pop("stream_options", None)
    return httpx.post(base_url + "/v1" + APIS[spec.api].path, json=body, timeout=60)


def _offer(base_url: str, api: str, choice: str) -> httpx.Response:
    spec = RequestSpec("r", "kalo strings", 2, 2, api=api, tools=TOOLS,  # type: ignore[arg-type]
                       tool_choice=as_tool_choice(choice, TOOLS))  # fmt: skip
    return _post(base_url, spec)


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_a_request_offering_tools_is_a_400_saying_why(base_url: str, api: str) -> None:
    reply = _offer(base_url, api, "auto")
    assert reply.status_code == 400, reply.text
    message = reply.json()["error"]["message"]
    assert message.startswith("invalid request: tools: ")
    assert "calls no tools" in message and "--enable-auto-tool-choice" in message


@pytest.mark.parametrize("choice", ["required", "get_weather"])
def test_a_chat_choice_that_demands_a_call_is_a_400_saying_why(base_url: str, choice: str) -> None:
    reply = _offer(base_url, "chat", choice)
    assert reply.status_code == 400, reply.text
    message = reply.json()["error"]["message"]
    assert "demands a tool call" in message and "calls no tools" in message
    assert '"auto" or "none"' in message


@pytest.mark.parametrize("choice", ["auto", "none"])
def test_chat_tools_a_model_may_decline_are_served_in_the_prompt(
    base_url: str, choice: str
) -> None:
    plain = RequestSpec("r", "kalo strings", 2, 2, api="chat")
    without = _post(base_url, plain)
    offered = _offer(base_url, "chat", choice)
    assert without.status_code == offered.status_code == 200, offered.text
    answer = offered.json()
    assert answer["choices"][0]["message"].get("tool_calls") in (None, [])
    # The definitions are prompt text: the same turn costs more prompt tokens with them.
    assert answer["usage"]["prompt_tokens"] > without.json()["usage"]["prompt_tokens"] + 10


def test_an_empty_tools_list_is_served(base_url: str) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "kalo"}], "max_tokens": 2,
            "tools": []}  # fmt: skip
    reply = httpx.post(base_url + "/v1/chat/completions", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["completion_tokens"] >= 1
