"""Sessions' turns through the drivers, against a stand-in server on 127.0.0.1: an answer's
tool calls go back as `tool` messages, each turn waits its delay, and a session waiting holds
no other back (open and closed loop)."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

from loadgen.client.stream import StreamingClient
from loadgen.clock import RunClock
from loadgen.drivers.closed_loop import run_closed_loop
from loadgen.drivers.open_loop import run_open_loop
from loadgen.request_spec import RequestSpec
from loadgen.workloads.sessions.generate import agent_sessions
from loadgen.workloads.sessions.history import tool_calls_of
from loadgen.workloads.spec import WorkloadSpec
from results.folder.records import RequestRecord
from tests.support.agent_sessions import TOOL, tool_call_handler, tool_call_id, write_session_trace
from tests.support.http_server import LocalServer, run
from tests.support.tokenizers import make_tokenizer

TOKENIZER = make_tokenizer()
ASK = "read the file, please"


def _asks_for_a_tool(body: dict[str, Any]) -> bool:
    return body["messages"][-1].get("content") == ASK


class ToolParsing:
    """The real client; where its record has no tool calls, the ones the stand-in streamed are
    set on it, as the client's tool-call parser does once it reads them (the stand-in's calls
    are known from the request: tests.support.agent_sessions)."""

    def __init__(self, client: StreamingClient) -> None:
        self.client, self.tokenizer = client, client.tokenizer

    async def send(self, spec: RequestSpec, user_id: int, scheduled_s: float, clock: RunClock):  # type: ignore[no-untyped-def]
        record = await self.client.send(spec, user_id, scheduled_s, clock)
        body = json.loads(self.client.request_body(spec))
        if tool_calls_of(record) or not _asks_for_a_tool(body):
            return record

        class Called(RequestRecord):  # a subclass has a __dict__: room for the field
            pass

        called = Called(**{f.name: getattr(record, f.name) for f in fields(RequestRecord)})
        function = {"name": "read_file", "arguments": '{"path": "a.py"}'}
        call = {"id": tool_call_id(body), "type": "function", "function": function}
        called.tool_calls = [call]  # type: ignore[attr-defined]
        return called


def _sessions(tmp_path: Path, lines: list[dict]) -> list[list[RequestSpec]]:
    trace = write_session_trace(tmp_path / "trace.jsonl", lines)
    sessions, _ = agent_sessions(
        WorkloadSpec(kind="sessions", path=str(trace)), None, TOKENIZER, None, 0,
        input_len=None, output_len=None, ignore_eos=True, temperature=0.0,
    )  # fmt: skip
    return sessions


def test_tool_calls_go_back_as_tool_messages_and_stay_in_the_history(tmp_path: Path) -> None:
    sessions = _sessions(tmp_path, [
        {"session_id": sid, **line} for sid in ("a", "b") for line in (
            {"text_input": ASK, "output_length": 3, "tools": [TOOL]},
            {"text_input": "thanks", "output_length": 3, "tool_results": ["print('hi')"]},
            {"text_input": "bye", "output_length": 3},
        )
    ])  # fmt: skip

    async def main() -> tuple[list[RequestRecord], list[dict]]:
        async with LocalServer(tool_call_handler(_asks_for_a_tool)) as server:
            async with StreamingClient(server.base_url, "m", tokenizer=TOKENIZER) as client:
                records = await run_closed_loop(ToolParsing(client), None, 2, RunClock(),
                                                sessions=sessions)  # fmt: skip
            return records, [r.json() for r in server.requests if r.method == "POST"]

    records, bodies = run(main())
    assert [(r.session_id, r.turn, r.status) for r in records] == [
        (s, t, "ok") for s in ("a", "b") for t in range(3)
    ]
    # The first turn sent one message, so the stand-in's call is "call_1" (its id rule).
    call_id = tool_call_id({"messages": [ASK]})
    seconds = [b for b in bodies if b["messages"][-1]["content"] == "thanks"]
    assert len(seconds) == 2
    for second in seconds:
        asked, assistant, tool, user = second["messages"]
        assert asked == {"role": "user", "content": ASK}
        assert assistant["role"] == "assistant" and assistant["content"] is None
        assert [c["id"] for c in assistant["tool_calls"]] == [call_id]
        assert tool == {"role": "tool", "tool_call_id": call_id, "content": "print('hi')"}
        assert user == {"role": "user", "content": "thanks"}
        assert second["tools"] == [TOOL]
    # The third turn keeps the rebuilt history, then the planned answer and its message.
    thirds = [b for b in bodies if b["messages"][-1]["content"] == "bye"]
    assert len(thirds) == 2
    for third in thirds:
        assert third["messages"][1]["tool_calls"][0]["id"] == call_id
        assert [m["role"] for m in third["messages"]] == [
            "user", "assistant", "tool", "user", "assistant", "user"]  # fmt: skip


DELAY_S = 2.0


def test_a_session_waits_its_delay_without_holding_another_back(tmp_path: Path) -> None:
    sessions = _sessions(tmp_path, [
        {"session_id": "slow", "input_length": 4, "output_length": 3},
        {"session_id": "slow", "delay_s": DELAY_S, "input_length": 4, "output_length": 3},
        *({"session_id": "quick", "input_length": 4, "output_length": 3} for _ in range(4)),
    ])  # fmt: skip

    async def main(open_loop: bool) -> list[RequestRecord]:
        async with LocalServer(tool_call_handler(lambda body: False)) as server:
            client = StreamingClient(server.base_url, "m", tokenizer=TOKENIZER)
            async with client:
                if open_loop:
                    return await run_open_loop(client, sessions, [0.0, 0.0], RunClock())
                return await run_closed_loop(client, None, 2, RunClock(), sessions=sessions)

    for open_loop in (True, False):
        records = run(main(open_loop))
        slow = [r for r in records if r.session_id == "slow"]
        quick = [r for r in records if r.session_id == "quick"]
        assert [r.turn for r in slow] == [0, 1] and [r.turn for r in quick] == [0, 1, 2, 3]
        assert all(r.status == "ok" for r in records)
        waited = slow[1].sent_s - slow[0].done_s
        # The delay is honoured (a timer may fire a little early), bounded on a loaded box.
        assert DELAY_S - 0.01 <= waited < DELAY_S + 5.0, waited
        # The other session went on meanwhile: its turns were all sent during the wait.
        assert all(slow[0].done_s <= r.sent_s < slow[1].sent_s for r in quick[1:])
        if open_loop:  # each later turn is due at the previous end plus its delay
            assert slow[1].scheduled_s == slow[0].done_s + DELAY_S
