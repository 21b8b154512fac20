"""A scenario of agent sessions: the [sessions] table read and round-tripped, the shipped
scenario planned from its trace, and the combinations refused at their keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.run.load_plan import build_plan
from bench.scenario.scenario import ScenarioError, load_scenario, scenario_from_dict
from loadgen.workloads.sessions.generate import DelayDist
from loadgen.workloads.spec import LengthDist
from tests.support.tokenizers import make_tokenizer

GENERATED = {
    "name": "s", "users": 2, "api": "chat", "num_requests": 6,
    "workload": {"kind": "sessions", "tool_result_tokens": 8},
    "input_len": {"kind": "fixed", "value": 8}, "output_len": {"kind": "fixed", "value": 4},
    "sessions": {"turns": {"kind": "fixed", "value": 3},
                 "delay_s": {"kind": "uniform", "low": 0.1, "high": 0.4}},
}  # fmt: skip


def test_the_sessions_table_reads_and_round_trips() -> None:
    scenario = scenario_from_dict(GENERATED)
    assert scenario.sessions is not None
    assert scenario.sessions.turns == LengthDist("fixed", value=3)
    assert scenario.sessions.delay_s == DelayDist("uniform", low=0.1, high=0.4)
    assert scenario_from_dict(scenario.to_dict()) == scenario
    plan = build_plan(scenario, make_tokenizer())
    assert plan.mode == "closed" and [len(s) for s in plan.sessions] == [3, 3]


def test_the_shipped_scenario_plans_its_trace_on_users() -> None:
    scenario = load_scenario("agent-sessions")
    plan = build_plan(scenario, make_tokenizer())
    assert plan.mode == "closed" and plan.users == 4
    ids = [[spec.session.session_id for spec in s] for s in plan.sessions]
    assert [s[0] for s in ids] == ["agent-a", "agent-b", "agent-c"]
    assert all(len(set(s)) == 1 for s in ids)
    # A recorded tool call's result goes back as a `tool` message answering its id.
    second = plan.sessions[0][1].messages
    assert second[-2]["tool_calls"][0]["id"] == second[-1]["tool_call_id"] == "call_a1"


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"api": "completions"}, r"'api'.*agent sessions send chat"),
        ({"workload": {"kind": "synthetic"}}, r"'sessions'.*only generated agent sessions"),
        (
            {"sessions": {"delay_s": {"kind": "uniform", "low": 2.0, "high": 1.0}}},
            r"'sessions.delay_s.high'.*must be >= low",
        ),
        ({"sessions": {"delay_s": {"kind": "exponential", "value": 1.0}}}, r"delay_s"),
        ({"workload": {"kind": "sessions", "time_scale": 1.0}}, r"'workload.time_scale'"),
    ],
)
def test_bad_combinations_are_named_at_their_key(change: dict, match: str) -> None:
    with pytest.raises(ScenarioError, match=match):
        scenario_from_dict({**GENERATED, **change})


def test_a_session_trace_with_time_scale_starts_at_its_timestamps(tmp_path: Path) -> None:
    trace = Path(__file__).parents[3] / "bench" / "scenario" / "scenarios" / "agent-sessions.jsonl"
    scenario = scenario_from_dict({
        "name": "t", "api": "chat", "workload": {"kind": "sessions", "path": str(trace),
                                                 "time_scale": 2.0},
    })  # fmt: skip
    plan = build_plan(scenario, make_tokenizer())
    assert plan.mode == "open" and plan.schedule_s.tolist() == [0.0, 1.0, 2.4]
