"""The scenario's [trace] table: how a trace workload is replayed, checked as it loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.run.load_plan import arrival_rows, build_plan
from bench.scenario.scenario import ScenarioError, scenario_from_dict
from tests.support.tokenizers import make_tokenizer
from tests.support.traces import write_azure_trace, write_mooncake_trace

TOK = make_tokenizer()


def replay(path: Path, **extra: Any):
    data = {"name": "t", "workload": {"kind": "trace", "path": str(path)}, **extra}
    return scenario_from_dict(data, source="t.toml")


def test_trace_table_windows_and_paces_the_plan(tmp_path: Path) -> None:
    path = write_azure_trace(tmp_path / "conv.csv", [(float(i), 6 + i, 3) for i in range(8)])
    s = replay(path, num_requests=3, trace={"start_s": 2.0, "speed": 2.0})
    assert scenario_from_dict(s.to_dict()) == s and s.to_dict()["trace"]["speed"] == 2.0
    plan = build_plan(s, TOK)
    assert plan.mode == "open" and plan.schedule_s.tolist() == pytest.approx([0, 0.5, 1.0])
    rows = arrival_rows(s, plan)
    assert rows is not None
    assert [(r.planned_offset_s, r.input_length, r.num_hash_ids) for r in rows] == [
        (0.0, 8, 0), (0.5, 9, 0), (1.0, 10, 0),
    ]  # fmt: skip
    assert [r.request_id for r in rows] == [r.request_id for r in plan.requests]
    rate = replay(path, trace={"target_rate_rps": 7.0})
    assert build_plan(rate, TOK).schedule_s[-1] == pytest.approx(1.0)


def test_mooncake_hash_ids_reach_the_arrival_plan(tmp_path: Path) -> None:
    path = write_mooncake_trace(tmp_path / "m.jsonl", [(0, 40, 2, (1, 2, 3)), (5, 20, 2, (1, 4))])
    s = replay(path, trace={"block_tokens": 16, "format": "mooncake"})
    rows = arrival_rows(s, build_plan(s, TOK))
    assert rows is not None and [r.num_hash_ids for r in rows] == [3, 2]


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"trace": {"speed": 2.0, "target_rate_rps": 3.0}}, r"key 'trace.target_rate_rps': give"),
        ({"trace": {"fromat": "azure"}}, r"unknown key 'trace.fromat'; did you mean 'format'"),
        ({"trace": {"format": "mooncak"}}, r"key 'trace.format': expected one of"),
        ({"trace": {"end_s": 0.0}}, r"key 'trace.end_s': must be > start_s"),
    ],
)
def test_bad_trace_keys_name_the_key(tmp_path: Path, extra: dict, match: str) -> None:
    path = write_mooncake_trace(tmp_path / "m.jsonl", [(0, 4, 2, ())])
    with pytest.raises(ScenarioError, match=match):
        replay(path, **extra)


def test_trace_table_needs_a_trace_and_one_pace(tmp_path: Path) -> None:
    path = write_mooncake_trace(tmp_path / "m.jsonl", [(0, 4, 2, ())])
    fixed = {"kind": "fixed", "value": 4}
    lengths = {"input_len": fixed, "output_len": fixed}
    with pytest.raises(ScenarioError, match=r"key 'trace': only workload kind 'trace'"):
        scenario_from_dict({"name": "t", "users": 1, "num_requests": 1, **lengths,
                            "trace": {"speed": 2.0}}, source="t.toml")  # fmt: skip
    with pytest.raises(ScenarioError, match=r"key 'workload.time_scale': set the pace once"):
        scenario_from_dict({"name": "t", "trace": {"speed": 2.0},
                            "workload": {"kind": "trace", "path": str(path), "time_scale": 0.5}},
                           source="t.toml")  # fmt: skip
