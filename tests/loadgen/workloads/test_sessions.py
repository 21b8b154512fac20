"""Agent sessions: a JSONL trace read into turns, sessions generated from distributions, their
requests' growing histories, and a history rebuilt from the server's tool calls."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import pytest

from loadgen.request_spec import message_text
from loadgen.request_tools import as_tools
from loadgen.workloads.sessions.generate import DelayDist, SessionShape, agent_sessions
from loadgen.workloads.sessions.history import follow_answer
from loadgen.workloads.spec import LengthDist, ParameterError, WorkloadError, WorkloadSpec
from results.folder.records import RequestRecord
from tests.support.agent_sessions import TOOL, write_session_trace
from tests.support.tokenizers import make_tokenizer

TOKENIZER = make_tokenizer()
SYSTEM = {"role": "system", "content": "You are an agent."}
CALL = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}


def _plan(tmp_path: Path, lines: list[dict], **workload: object) -> tuple[list, list | None]:
    trace = write_session_trace(tmp_path / "t.jsonl", lines)
    spec = WorkloadSpec(kind="sessions", path=str(trace), **workload)  # type: ignore[arg-type]
    return agent_sessions(
        spec, None, TOKENIZER, None, 0, input_len=None, output_len=None, ignore_eos=True,
        temperature=0.0,
    )  # fmt: skip


def test_a_trace_groups_turns_by_session_and_grows_each_history(tmp_path: Path) -> None:
    sessions, starts = _plan(tmp_path, [
        {"session_id": "a", "timestamp": 100, "output_length": 5, "tools": [TOOL],
         "messages": [SYSTEM, {"role": "user", "content": "hi"}]},
        {"session_id": 7, "timestamp": 40, "input_length": 12, "output_length": 3},
        {"session_id": "a", "delay": 250, "text_input": "go on", "output_length": 4},
        {"session_id": "a", "delay_s": 1.5, "input_length": 6, "output_length": 2},
    ], time_scale=2.0)  # fmt: skip
    # Sessions in the order they start, times from the first one, stretched by time_scale.
    assert [s[0].session.session_id for s in sessions] == ["7", "a"]
    assert starts == [0.0, pytest.approx(0.12)]
    b, a = sessions
    assert [t.session.turn for t in a] == [0, 1, 2] and [t.max_tokens for t in a] == [5, 4, 2]
    assert [t.session.delay_s for t in a] == [None, 0.25, 1.5]
    assert [t.request_id for t in a] == ["s00001-t000", "s00001-t001", "s00001-t002"]
    # Each turn resends the history: the previous messages, the planned answer, its own.
    for before, after in itertools.pairwise(a):
        assert after.messages[: len(before.messages)] == before.messages
        assert message_text(after.messages[len(before.messages)])[0] == "assistant"
        assert after.prompt_tokens > before.prompt_tokens
    # The tools go with every turn of the session once declared.
    assert all(t.tools == as_tools([TOOL]) for t in a) and b[0].tools == ()
    assert len(TOKENIZER.encode(message_text(b[0].messages[0])[1])) == 12


def test_a_whole_conversation_line_adds_only_what_follows_its_last_answer(tmp_path: Path) -> None:
    answer = {"role": "assistant", "content": None, "tool_calls": [CALL]}
    tool = {"role": "tool", "tool_call_id": "c1", "content": "a.py b.py"}
    (session,), _ = _plan(tmp_path, [
        {"session_id": "s", "messages": [SYSTEM, {"role": "user", "content": "list"}],
         "output_length": 4},
        {"session_id": "s", "messages": [SYSTEM, {"role": "user", "content": "list"}, answer, tool],
         "output_length": 4},
    ])  # fmt: skip
    first, second = session
    # The recorded assistant message is the first turn's answer; the tool result is new.
    assert second.messages == (*first.messages, answer, tool)
    assert second.session.new_messages == 1


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ({"input_length": 4}, "output_length"),
        ({"output_length": 4}, "messages"),
        ({"input_length": 4, "text_input": "x", "output_length": 4}, "messages"),
        ({"input_length": 4, "output_length": 4, "delay": 3, "delay_s": 1}, "delay"),
        ({"input_length": 4, "output_length": 4, "tool_results": [0]}, "tool_results"),
        ({"messages": [{"content": "no role"}], "output_length": 4}, "messages"),
    ],
)
def test_a_bad_line_is_refused_by_line_and_field(tmp_path: Path, line: dict, field: str) -> None:
    good = {"session_id": "s", "input_length": 4, "output_length": 4}
    with pytest.raises(WorkloadError, match=rf"t\.jsonl:2: field '{field}'.*fix the line"):
        _plan(tmp_path, [good, {"session_id": "s", **line}])


def test_replaying_times_needs_every_session_start(tmp_path: Path) -> None:
    with pytest.raises(ParameterError, match="time_scale"):
        _plan(tmp_path, [{"input_length": 4, "output_length": 4}], time_scale=1.0)


def test_generated_sessions_draw_turns_and_delays_from_their_distributions() -> None:
    shape = SessionShape(
        LengthDist("uniform", low=2, high=4), DelayDist("uniform", low=0.5, high=1.0)
    )
    spec = WorkloadSpec(kind="sessions", system_prompt_tokens=9, tool_result_tokens=7)
    sessions, starts = agent_sessions(
        spec, shape, TOKENIZER, 20, 3, input_len=LengthDist("fixed", value=6),
        output_len=LengthDist("fixed", value=4), ignore_eos=True, temperature=0.0,
    )  # fmt: skip
    assert starts is None and sum(len(s) for s in sessions) == 20
    assert all(2 <= len(s) <= 4 for s in sessions[:-1])
    delays = [t.session.delay_s for s in sessions for t in s[1:]]
    assert all(0.5 <= d <= 1.0 for d in delays) and len(set(delays)) > 1
    assert all(s[0].session.delay_s is None for s in sessions)
    first = sessions[0][0]
    assert [message_text(m)[0] for m in first.messages] == ["system", "user"]
    assert len(TOKENIZER.encode(message_text(first.messages[0])[1])) == 9
    assert all(len(TOKENIZER.encode(r)) == 7 for t in sessions[0] for r in t.session.tool_results)
    again, _ = agent_sessions(
        spec, shape, TOKENIZER, 20, 3, input_len=LengthDist("fixed", value=6),
        output_len=LengthDist("fixed", value=4), ignore_eos=True, temperature=0.0,
    )  # fmt: skip
    assert again == sessions  # seeded


def _record(spec, tool_calls: list[dict] | None, status: str = "ok") -> RequestRecord:  # type: ignore[no-untyped-def]
    """A record of ``spec``'s answer, with the tool calls a parsing client would have set."""
    record = RequestRecord(spec.request_id, 0, 0.0, 0.0, 0.1, 0.2, spec.prompt_tokens, 3,
                           "usage", status, None, 200)  # fmt: skip
    record.tool_calls = tool_calls or []
    return record


def test_an_answer_with_tool_calls_rebuilds_the_next_history(tmp_path: Path) -> None:
    (session,), _ = _plan(tmp_path, [
        {"session_id": "s", "text_input": "fix it", "output_length": 4},
        {"session_id": "s", "text_input": "and?", "output_length": 4, "tool_results": ["42"]},
        {"session_id": "s", "text_input": "done?", "output_length": 4},
    ])  # fmt: skip
    first, second, third = session
    assert follow_answer(second, (first, _record(first, None)), None) is second
    calls = [CALL, {**CALL, "id": "c2"}]
    # Counted by characters from the first turn on: a rebuilt count adds the new text's.
    first = replace(first, prompt_tokens=len(first.prompt))
    sent = follow_answer(second, (first, _record(first, calls)), lambda text: len(text))
    assistant, *tools, user = sent.messages[len(first.messages) :]
    assert assistant == {"role": "assistant", "content": None, "tool_calls": calls}
    assert tools == [{"role": "tool", "tool_call_id": "c1", "content": "42"},
                     {"role": "tool", "tool_call_id": "c2", "content": "42"}]  # fmt: skip
    assert user == {"role": "user", "content": "and?"}
    assert sent.prompt_tokens == len(sent.prompt) and sent.session == second.session
    # The turn after keeps the rebuilt history though its own answer made no call.
    later = follow_answer(third, (sent, _record(sent, None)), None)
    assert later.messages[: len(sent.messages)] == sent.messages
    assert later.messages[len(sent.messages) :] == third.messages[len(second.messages) :]


def test_only_whole_calls_of_a_completed_answer_go_back(tmp_path: Path) -> None:
    (session,), _ = _plan(tmp_path, [
        {"session_id": "s", "text_input": "fix it", "output_length": 4},
        {"session_id": "s", "text_input": "and?", "output_length": 4},
    ])  # fmt: skip
    first, second = session
    cut = {**CALL, "id": "c2", "function": {"name": "f", "arguments": '{"city": "Par'}}
    # A stream cut mid-call leaves the calls half assembled: the turn goes out as planned.
    for status in ("error", "cancelled"):
        assert follow_answer(second, (first, _record(first, [CALL], status)), None) is second
    sent = follow_answer(second, (first, _record(first, [CALL, cut])), len)
    assistant = sent.messages[len(first.messages)]
    assert assistant["tool_calls"] == [CALL]  # the call whose arguments are not JSON dropped
    name, arguments = CALL["function"]["name"], CALL["function"]["arguments"]
    assert name + arguments in sent.prompt  # the calls are prompt text of the next turn
