"""The scenario's [tools] table and a dataset's tools columns: read, checked, refused with the
key and the fix, and on every request of the plan (a row's own tools over the table's)."""

from __future__ import annotations

import csv
import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from bench.run.load_plan import build_plan
from bench.scenario.request_tables import parse_extra_body
from bench.scenario.scenario import ScenarioError, load_scenario, scenario_from_dict
from loadgen.workloads.dataset import DatasetSource, dataset_requests
from loadgen.workloads.rows import RowReport
from loadgen.workloads.spec import WorkloadSpec
from tests.support.tokenizers import make_tokenizer

TOK = make_tokenizer()
LENGTHS = {"input_len": {"kind": "fixed", "value": 8}, "output_len": {"kind": "fixed", "value": 4}}
TABLE = """
name = "t"
users = 2
num_requests = 4
api = "{api}"
[input_len]
kind = "fixed"
value = 8
[output_len]
kind = "fixed"
value = 4
[tools]
{choice}
[[tools.functions]]
name = "get_weather"
description = "the weather"
[tools.functions.parameters]
type = "object"
required = ["city"]
properties = {{ city = {{ type = "string" }} }}
[[tools.functions]]
name = "get_time"
"""


def _scenario(api: str = "chat", choice: str = 'choice = "get_time"') -> Any:
    data = tomllib.loads(TABLE.format(api=api, choice=choice))
    return scenario_from_dict(data, source="t.toml")


def test_the_table_reaches_every_request_and_round_trips() -> None:
    s = _scenario()
    assert scenario_from_dict(s.to_dict()) == s
    assert s.to_dict()["tools"]["functions"][1] == {
        "name": "get_time", "parameters": {"type": "object", "properties": {}},
    }  # fmt: skip
    plan = build_plan(s, TOK)
    for request in plan.requests:
        assert [t["function"]["name"] for t in request.tools] == ["get_weather", "get_time"]
        assert request.tool_choice == {"type": "function", "function": {"name": "get_time"}}
        assert request.tools[0]["function"]["parameters"]["required"] == ["city"]
    assert "tools" not in scenario_from_dict({"name": "t", "users": 1, "num_requests": 1,
                                              **LENGTHS}).to_dict()  # fmt: skip


def test_the_shipped_scenario_loads() -> None:
    s = load_scenario("tool-calls")
    assert s.api == "chat" and s.tools is not None and s.tools.choice == "required"


@pytest.mark.parametrize(
    ("api", "choice", "match"),
    [
        ("completions", "", r"key 'tools': only api \['chat', 'messages', 'responses'\] takes"),
        ("chat", 'choice = "get_wether"', r"key 'tools.choice': tool choice 'get_wether': "
         r"expected one of \['auto', 'none', 'required'\] or the name of a tool given"),
        ("chat", 'choise = "auto"', r"unknown key 'tools.choise'; did you mean 'choice'\?"),
    ],
)  # fmt: skip
def test_a_bad_table_is_refused_naming_the_key(api: str, choice: str, match: str) -> None:
    with pytest.raises(ScenarioError, match=match):
        _scenario(api, choice)


def test_a_table_without_functions_and_tools_as_request_fields_are_refused() -> None:
    with pytest.raises(ScenarioError, match=r"key 'tools.functions': missing"):
        scenario_from_dict({"name": "t", "users": 1, "num_requests": 1, "api": "chat",
                            "tools": {"choice": "auto"}, **LENGTHS}, source="t.toml")  # fmt: skip
    with pytest.raises(ScenarioError, match=r"key 'request.tools': .*use the scenario's \[tools\]"):
        scenario_from_dict({"name": "t", "users": 1, "num_requests": 1, "api": "chat",
                            "request": {"tools": []}, **LENGTHS}, source="t.toml")  # fmt: skip
    with pytest.raises(ScenarioError, match=r"--extra-body: key 'tool_choice': .*\[tools\] choice"):
        parse_extra_body('{"tool_choice": "auto"}')


OWN = [{"name": "lookup", "parameters": {"type": "object", "properties": {"q": {}}}}]


def _rows(tmp_path: Path) -> list[dict[str, Any]]:
    return [
        {"prompt": "kalo strings", "max_tokens": 4, "tools": OWN, "tool_choice": "lookup"},
        {"prompt": "kalo mine", "max_tokens": 4},
        {"prompt": "pro ion", "max_tokens": 4, "tools": [{"description": "no name"}]},
        {"prompt": "ed at th", "max_tokens": 4, "tool_choice": "auto"},
        {"prompt": "ka lo", "max_tokens": 4, "tools": OWN, "tool_choice": "other"},
    ]


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_rows_own_tools_win_and_bad_ones_are_refused(tmp_path: Path, fmt: str) -> None:
    rows = _rows(tmp_path)
    path = tmp_path / f"rows.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        with path.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=["prompt", "max_tokens", "tools", "tool_choice"])
            writer.writeheader()
            for r in rows:
                writer.writerow({**r, "tools": json.dumps(r["tools"]) if "tools" in r else ""})
    report = RowReport(str(path))
    workload = WorkloadSpec(kind="dataset", path=str(path))
    specs = dataset_requests(workload, DatasetSource(), TOK, 5, 0, "chat", report=report)
    assert specs[0].tools == ({"type": "function", "function": {
        "name": "lookup", "parameters": {"type": "object", "properties": {"q": {}}}}},)  # fmt: skip
    assert specs[0].tool_choice == {"type": "function", "function": {"name": "lookup"}}
    assert specs[1].tools == () and specs[1].tool_choice is None
    assert dict(report.refused) == {
        "tools: a tool without a function name": 1,
        "tool_choice without tools": 1,
        "tool_choice that is none of auto, none, required, a tool's name": 1,
    }
    completions = RowReport(str(path))
    dataset_requests(workload, DatasetSource(), TOK, 5, 0, "completions", report=completions)
    assert completions.refused["tools on the completions API (set api = 'chat', 'responses' "
                               "or 'messages')"] == 3  # fmt: skip


def test_the_tables_tools_go_to_the_rows_without_their_own(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows(tmp_path)[:2]))
    data = tomllib.loads(TABLE.format(api="chat", choice='choice = "auto"'))
    data.update(workload={"kind": "dataset", "path": str(path)}, num_requests=2)
    for key in ("input_len", "output_len"):
        data.pop(key)
    plan = build_plan(scenario_from_dict(data, source="t.toml"), TOK)
    first, second = plan.requests
    assert [t["function"]["name"] for t in first.tools] == ["lookup"]
    assert [t["function"]["name"] for t in second.tools] == ["get_weather", "get_time"]
    assert second.tool_choice == "auto"
