"""`bench serve` serves text only: a request that offers tools (the bodies the load generator
sends for each chat API) is refused with a 400 that says why and what to do, never answered as
if it offered none; an empty tools list offers none and is served."""

from __future__ import annotations

import httpx
import pytest

from engine.config import EngineConfig
from loadgen.client.apis import API_PATHS, generation_body
from loadgen.request_spec import RequestSpec
from loadgen.request_tools import as_tool_choice, as_tools

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
MODEL = "tiny"
SERVER_CONFIG = EngineConfig.from_flat(
    dict(model=MODEL, dtype="float32", device="cpu", max_model_len=128)
)
TOOLS = as_tools([{"name": "get_weather", "parameters": {"type": "object", "properties": {}}}])


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_a_request_offering_tools_is_a_400_saying_why(base_url: str, api: str) -> None:
    spec = RequestSpec("r", "kalo strings", 2, 2, api=api, tools=TOOLS,  # type: ignore[arg-type]
                       tool_choice=as_tool_choice("auto", TOOLS))  # fmt: skip
    reply = httpx.post(base_url + "/v1" + API_PATHS[api], json=generation_body(spec, MODEL),
                       timeout=60)  # fmt: skip
    assert reply.status_code == 400, reply.text
    message = reply.json()["error"]["message"]
    assert message.startswith("invalid request: tools: ")
    assert "calls no tools" in message and "--enable-auto-tool-choice" in message


def test_an_empty_tools_list_is_served(base_url: str) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "kalo"}], "max_tokens": 2,
            "tools": []}  # fmt: skip
    reply = httpx.post(base_url + "/v1/chat/completions", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["completion_tokens"] >= 1
