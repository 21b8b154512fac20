"""The scenario's [request] and [dataset] tables, --extra-body, and the plans they become: every
request carries the fields, a row's own over them; ShareGPT and multi-turn files follow the
dataset's rules (refusals counted, reuse said, the system prompt sent)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.cli.flags.run import override_request
from bench.run.load_plan import build_plan, load_section
from bench.scenario.scenario import ScenarioError, load_scenario, scenario_from_dict
from loadgen.workloads.multiturn import sharegpt_sessions
from loadgen.workloads.rows import RowReport
from loadgen.workloads.sharegpt import sharegpt_requests
from loadgen.workloads.spec import LengthDist
from tests.support.sharegpt import sentence, write_sharegpt
from tests.support.tokenizers import make_tokenizer

TOK = make_tokenizer()
LENGTHS = {"input_len": {"kind": "fixed", "value": 8}, "output_len": {"kind": "fixed", "value": 4}}


def scenario(**extra: Any):
    data = {"name": "t", "num_requests": 4, "users": 2, **extra}
    return scenario_from_dict({k: v for k, v in data.items() if v is not None}, source="t.toml")


def test_request_fields_reach_every_request_and_round_trip() -> None:
    fields = {"top_k": 20, "chat_template_kwargs": {"enable_thinking": False}}
    s = scenario(**LENGTHS, request=fields)
    assert s.request == fields and scenario_from_dict(s.to_dict()) == s
    plan = build_plan(s, TOK)
    assert all(r.fields == fields for r in plan.requests)
    more = override_request(s, '{"top_k": 5, "response_format": {"type": "json_object"}}')
    assert more.request == {**fields, "top_k": 5, "response_format": {"type": "json_object"}}
    assert "with --extra-body" in more.source
    assert override_request(s, None) is s
    assert "request" not in scenario(**LENGTHS).to_dict()  # older run.json reads the same


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"request": {"max_tokens": 3}}, r"key 'request.max_tokens': .*use output_len"),
        ({"request": {"stream": False}}, r"key 'request.stream': the load generator sets it"),
        ({"request": {"ignore_eos": True}}, r"use the scenario's top-level ignore_eos"),
        ({"dataset": {"order": "random"}}, r"key 'dataset.order': expected one of"),
        ({"dataset": {"columns": {"promt": "q"}}}, r"unknown key 'dataset.columns.promt'"),
        ({"dataset": {"format": "auto"}}, r"only workload kind 'dataset' takes it"),
    ],
)
def test_bad_tables_are_one_line_errors_naming_the_key(extra: dict[str, Any], match: str) -> None:
    with pytest.raises(ScenarioError, match=match) as caught:
        scenario(**LENGTHS, **extra)
    assert str(caught.value).startswith("t.toml: ") and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("{top_k: 1}", r"--extra-body: not JSON"),
        ("[1]", r"--extra-body: expected a JSON object, got list"),
        ('{"model": "x"}', r"--extra-body: key 'model': the load generator sets it; use --model"),
    ],
)
def test_bad_extra_body_is_refused(text: str, match: str) -> None:
    with pytest.raises(ScenarioError, match=match):
        override_request(scenario(**LENGTHS), text)


def test_a_dataset_scenario_plans_its_rows_and_records_them(tmp_path: Path) -> None:
    path = tmp_path / "chats.jsonl"
    rows = [
        {"conversation": [{"role": "user", "content": sentence(6, i)}], "n": 5, "p": 0.5 + i}
        for i in range(3)
    ]
    rows.append({"conversation": [{"role": "robot", "content": "x"}], "n": 5})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    toml = tmp_path / "mine.toml"
    toml.write_text(
        'name = "mine"\nusers = 1\nnum_requests = 5\napi = "chat"\n'
        '[workload]\nkind = "dataset"\npath = "chats.jsonl"\nmax_output_tokens = 4\n'
        '[dataset]\nfields = ["p"]\n[dataset.columns]\nmessages = "conversation"\n'
        'max_tokens = "n"\n[request]\ntop_k = 3\n'
    )
    s = load_scenario(str(toml))
    assert s.workload.path == str(path) and scenario_from_dict(s.to_dict()) == s
    plan = build_plan(s, TOK)
    assert [r.max_tokens for r in plan.requests] == [4] * 5
    assert [r.fields for r in plan.requests][:3] == [{"top_k": 3, "p": 0.5 + i} for i in range(3)]
    rows_json = load_section(plan, "asyncio", 1)["rows"]
    assert rows_json["refused"] == {"unknown role 'robot'": 1}
    assert rows_json["usable"] == 3 and rows_json["requests"] == 5 and rows_json["reused"] == 2


def test_sharegpt_counts_what_it_refuses_and_sends_the_system_prompt(tmp_path: Path) -> None:
    path = tmp_path / "sg.json"
    data = [
        {
            "conversations": [
                {"from": "system", "value": "be brief and kind"},
                {"from": "human", "value": sentence(8, 1)},
                {"from": "gpt", "value": sentence(9, 2)},
            ]
        },
        {"conversations": [{"from": "human", "value": sentence(8, 3)}]},  # no answer
        {"conversations": [{"from": "robot", "value": "x"}]},
    ]
    path.write_text(json.dumps(data))
    report = RowReport(str(path))
    specs = sharegpt_requests(path, TOK, 3, 0, api="chat", report=report)
    assert specs[0].messages == (("system", "be brief and kind"), ("user", sentence(8, 1)))
    assert report.refused == {
        "no answer after the first user turn to take the length from": 1,
        "a turn of unknown role 'robot' or without a text": 1,
    }
    assert report.read == 3 and report.usable == 1 and report.reused == 2
    # With output lengths given, a conversation needs no answer.
    report = RowReport(str(path))
    fixed = sharegpt_requests(
        path, TOK, 2, 0, output_len=LengthDist("fixed", value=5), report=report
    )
    assert report.usable == 2 and {s.max_tokens for s in fixed} == {5}


def test_multiturn_says_what_it_cut_and_reused(tmp_path: Path) -> None:
    path = write_sharegpt(tmp_path / "sg.json", n=2, turns=3)
    report = RowReport(str(path))
    sessions = sharegpt_sessions(path, TOK, 10, 0, report=report)
    assert sum(len(s) for s in sessions) == 10
    assert report.refused == {
        "first turn cannot be sent: a user turn without an answer to take the length from": 1
    }
    assert report.usable == 2 and report.requests == len(sessions) and report.reused == 2
    ids = [spec.request_id for s in sessions for spec in s]
    assert len(set(ids)) == 10 and ids[3] == "s00001-t000"
    assert any("repeated to make 4 requests" in line for line in report.lines())
