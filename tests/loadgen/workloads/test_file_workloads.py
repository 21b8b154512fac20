"""ShareGPT files, multi-turn sessions and trace replay: what each workload sends."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from loadgen.workloads.multiturn import sessions_turns, sharegpt_sessions, synthetic_sessions
from loadgen.workloads.sharegpt import load_sharegpt, sharegpt_requests
from loadgen.workloads.spec import LengthDist, WorkloadError
from loadgen.workloads.trace import load_trace
from loadgen.workloads.trace_prompts import trace_requests
from tests.support.sharegpt import write_sharegpt
from tests.support.tokenizers import make_tokenizer

pytestmark = pytest.mark.timeout(60)

TOK = make_tokenizer()


def test_sharegpt_requests_take_prompts_and_answer_lengths(tmp_path: Path) -> None:
    path = write_sharegpt(tmp_path / "sg.json")
    specs = sharegpt_requests(path, TOK, 20, seed=3, api="chat")
    assert len(specs) == 20 and len({s.request_id for s in specs}) == 20
    conversations = load_sharegpt(path)
    firsts = {c[0].text: c[1].text for c in conversations if len(c) > 1}
    for spec in specs:
        assert spec.prompt in firsts and spec.api == "chat"
        assert spec.prompt_tokens == len(TOK.encode(spec.prompt))
        assert spec.max_tokens == len(TOK.encode(firsts[spec.prompt]))
    assert [s.prompt for s in specs] == [s.prompt for s in sharegpt_requests(path, TOK, 20, 3)]
    assert [s.prompt for s in specs] != [s.prompt for s in sharegpt_requests(path, TOK, 20, 4)]
    fixed = sharegpt_requests(path, TOK, 5, 3, output_len=LengthDist("fixed", value=7))
    assert {s.max_tokens for s in fixed} == {7}
    capped = sharegpt_requests(path, TOK, 5, 3, max_output_tokens=4)
    assert {s.max_tokens for s in capped} == {4}


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("{}", "expected a JSON list"),
        ('[{"id": 1}]', "entry 0: expected an object with a 'conversations' list"),
        ('[{"conversations": [{"from": "robot", "value": "x"}]}]', "entry 0, turn 0"),
        ("not json", "not a readable JSON"),
    ],
)
def test_bad_sharegpt_files_are_named(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(WorkloadError, match=match):
        load_sharegpt(path)
    with pytest.raises(WorkloadError, match="not found"):
        load_sharegpt(tmp_path / "missing.json")


def test_no_usable_conversation_is_an_error(tmp_path: Path) -> None:
    path = write_sharegpt(tmp_path / "sg.json")
    with pytest.raises(WorkloadError, match="no conversation"):
        sharegpt_requests(path, TOK, 3, 0, max_input_tokens=1)


def test_synthetic_sessions_grow_their_history() -> None:
    sessions = synthetic_sessions(
        TOK, 10, 4, LengthDist("fixed", value=8), LengthDist("fixed", value=5), seed=1,
        api="chat", system_prompt_tokens=6,
    )  # fmt: skip
    assert [len(s) for s in sessions] == [4, 4, 2] and sessions_turns(sessions) == 10
    first = sessions[0]
    assert [s.request_id for s in first] == [f"s00000-t{k:03d}" for k in range(4)]
    for k, spec in enumerate(first):
        assert spec.messages is not None and len(spec.messages) == 2 + 2 * k
        assert spec.messages[0][0] == "system" and spec.messages[-1][0] == "user"
        assert spec.max_tokens == 5
    for before, after in itertools.pairwise(first):
        assert after.messages[: len(before.messages)] == before.messages  # history kept
        assert after.prompt_tokens > before.prompt_tokens
    assert sessions[1][0].messages[0] != first[0].messages[0]  # each session its own system
    completions = synthetic_sessions(
        TOK, 2, 2, LengthDist("fixed", value=8), LengthDist("fixed", value=5), 1,
        api="completions",
    )  # fmt: skip
    assert completions[0][1].messages is None
    assert (
        completions[0][1].prompt.startswith("User: ")
        and "\nAssistant: " in completions[0][1].prompt
    )


def test_sharegpt_sessions_follow_the_conversations(tmp_path: Path) -> None:
    path = write_sharegpt(tmp_path / "sg.json", n=3, turns=3)
    sessions = sharegpt_sessions(path, TOK, 7, seed=0, api="chat", max_turns=2)
    assert sessions_turns(sessions) == 7 and all(len(s) <= 2 for s in sessions)
    spec = sessions[0][1]
    assert [role for role, _ in spec.messages] == ["user", "assistant", "user"]
    answers = {len(TOK.encode(t.text)) for c in load_sharegpt(path) for t in c if t.role != "user"}
    assert all(s.max_tokens in answers for session in sessions for s in session)
    bounded = sharegpt_sessions(path, TOK, 4, seed=0, max_context_tokens=90)
    assert all(s.prompt_tokens + s.max_tokens <= 90 for session in bounded for s in session)


def test_trace_replays_times_and_lengths(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    lines = [
        "# a comment",
        json.dumps({"timestamp": 1000, "input_length": 12, "output_length": 5, "hash_ids": [1]}),
        "",
        json.dumps({"timestamp": 1250, "input_length": 30, "output_length": 9}),
        json.dumps({"timestamp": 2000, "input_length": 7, "output_length": 3}),
    ]
    path.write_text("\n".join(lines))
    entries = load_trace(path, time_scale=0.5)
    assert [e.t_s for e in entries] == pytest.approx([0.0, 0.125, 0.5])
    specs, schedule = trace_requests(entries, TOK, seed=0, max_requests=2)
    assert [s.prompt_tokens for s in specs] == [12, 30] and [s.max_tokens for s in specs] == [5, 9]
    assert all(len(TOK.encode(s.prompt)) == s.prompt_tokens for s in specs)
    assert schedule.tolist() == pytest.approx([0.0, 0.125])
    seconds = tmp_path / "s.jsonl"
    seconds.write_text('{"t_s": 3.0, "input_length": 4, "output_length": 2}\n')
    assert load_trace(seconds)[0].t_s == 0.0


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ('{"input_length": 4, "output_length": 2}', "expected 'timestamp'"),
        ('{"timestamp": 0, "input_length": 0, "output_length": 2}', "'input_length' must be"),
        ('{"timestamp": 0, "input_length": 4}', "'output_length' must be"),
        ("[1, 2]", "expected a JSON object"),
        ("{oops", "not JSON"),
    ],
)
def test_bad_trace_lines_are_named(tmp_path: Path, line: str, match: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(WorkloadError, match=rf"t.jsonl:1: .*{match}"):
        load_trace(path)


def test_trace_out_of_order_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"timestamp": 10, "input_length": 4, "output_length": 2}\n'
        '{"timestamp": 5, "input_length": 4, "output_length": 2}\n'
    )
    with pytest.raises(WorkloadError, match=r"t.jsonl:2: .*sort the trace"):
        load_trace(path)
