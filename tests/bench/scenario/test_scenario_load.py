"""Scenario keys for workloads and arrivals, and the load plans they become."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench.run.load_plan import build_plan, load_section, plan_ran_out, planned_requests
from bench.scenario.scenario import (
    OPEN_LOOP_USERS,
    ScenarioError,
    load_scenario,
    scenario_from_dict,
)
from tests.support.sharegpt import write_sharegpt
from tests.support.tokenizers import make_tokenizer

TOK = make_tokenizer()
LENGTHS = {"input_len": {"kind": "fixed", "value": 8}, "output_len": {"kind": "fixed", "value": 4}}


def scenario(**extra: Any):
    data = {"name": "t", "num_requests": 6, "users": 2, **LENGTHS, **extra}
    return scenario_from_dict({k: v for k, v in data.items() if v is not None}, source="t.toml")


def test_open_loop_scenario_round_trips_and_plans() -> None:
    s = scenario(users=None, arrival={"kind": "gamma", "rate_rps": 20.0, "burstiness": 0.5},
                 ramp_up_s=0.5)  # fmt: skip
    assert s.open_loop and s.users == OPEN_LOOP_USERS and s.ramp_up_s == 0.5
    assert scenario_from_dict(s.to_dict()) == s
    plan = build_plan(s, TOK)
    assert plan.mode == "open" and len(plan.sessions) == 6 and plan.cap == OPEN_LOOP_USERS
    assert np.array_equal(plan.schedule_s, build_plan(s, TOK).schedule_s)  # seeded
    assert plan.ramp_up_s == 0.0  # the ramp is in the schedule
    assert load_section(plan, "asyncio", 1)["mode"] == "open"


def test_closed_loop_keeps_users_and_ramp() -> None:
    s = scenario(ramp_up_s=1.0, think_time_s=0.1)
    plan = build_plan(s, TOK)
    assert plan.mode == "closed" and plan.users == 2 and plan.ramp_up_s == 1.0
    assert [len(x) for x in plan.sessions] == [1] * 6 and plan.think_time_s == 0.1
    assert scenario_from_dict(s.to_dict()) == s


def test_sharegpt_and_multiturn_from_a_file(tmp_path: Path) -> None:
    path = write_sharegpt(tmp_path / "sg.json")
    s = scenario(input_len=None, output_len=None, workload={"kind": "sharegpt", "path": str(path),
                 "max_input_tokens": 200})  # fmt: skip
    plan = build_plan(s, TOK)
    assert len(plan.requests) == 6 and all(r.max_tokens >= 4 for r in plan.requests)
    fixed = scenario(input_len=None, workload={"kind": "sharegpt", "path": str(path)})
    assert {r.max_tokens for r in build_plan(fixed, TOK).requests} == {4}
    chats = scenario(input_len=None, output_len=None, api="chat",
                     workload={"kind": "multiturn", "path": str(path), "turns": 2})  # fmt: skip
    plan = build_plan(chats, TOK)
    assert plan.mode == "closed" and sum(len(x) for x in plan.sessions) == 6
    assert all(len(x) <= 2 for x in plan.sessions) and plan.requests[1].messages is not None
    assert scenario_from_dict(chats.to_dict()) == chats


def test_synthetic_multiturn_and_relative_paths(tmp_path: Path) -> None:
    s = scenario(workload={"kind": "multiturn", "turns": 3, "system_prompt_tokens": 5})
    plan = build_plan(s, TOK)
    assert [len(x) for x in plan.sessions] == [3, 3]
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(json.dumps({"timestamp": 100 * i, "input_length": 5 + i,
                                           "output_length": 3}) for i in range(4)))  # fmt: skip
    toml = tmp_path / "replay.toml"
    toml.write_text('users = 3\n[workload]\nkind = "trace"\npath = "trace.jsonl"\n'
                    "time_scale = 2.0\n")  # fmt: skip
    replay = load_scenario(str(toml))
    assert replay.workload.path == str(trace) and replay.open_loop and replay.users == 3
    plan = build_plan(replay, TOK)
    assert plan.mode == "open" and plan.schedule_s.tolist() == pytest.approx([0, 0.2, 0.4, 0.6])
    assert [r.prompt_tokens for r in plan.requests] == [5, 6, 7, 8]


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"workload": {"kind": "shargpt"}}, "workload.kind': expected one of .* did you mean"),
        ({"workload": {"kind": "sharegpt"}, "input_len": None}, "workload.path': missing"),
        (
            {"workload": {"kind": "sharegpt", "path": "/no/such.json"}, "input_len": None},
            "workload.path': no such file",
        ),
        (
            {
                "workload": {"kind": "trace", "path": "/etc/hostname", "turns": 2},
                "input_len": None,
                "output_len": None,
            },
            "unknown key 'workload.turns'",
        ),
        ({"workload": {"kind": "multiturn"}}, "workload.turns': missing"),
        ({"workload": {"kind": "multiturn", "turns": 0}}, "workload.turns': must be >= 1"),
        ({"input_len": None}, "key 'input_len': missing"),
        (
            {"workload": {"kind": "trace", "path": "/etc/hostname"}, "output_len": None},
            "'input_len': workload kind 'trace' takes its prompts from a file",
        ),
        ({"arrival": {"kind": "poisson"}}, "arrival.rate_rps': missing"),
        ({"arrival": {"kind": "poisson", "rate_rps": -1.0}}, "arrival.rate_rps': must be > 0"),
        (
            {"arrival": {"kind": "poisson", "rate_rps": 1.0, "burstiness": 2.0}},
            "only kind 'gamma' takes burstiness",
        ),
        (
            {
                "arrival": {"kind": "poisson", "rate_rps": 1.0},
                "workload": {"kind": "multiturn", "turns": 2},
            },
            "closed-loop users",
        ),
        ({"users": None}, "key 'users': missing"),
        ({"ramp_up_s": -1.0}, "ramp_up_s': must be >= 0"),
        (
            {"shared_prefix": {"tokens": 4}, "workload": {"kind": "multiturn", "turns": 2}},
            "only workload kind 'synthetic' takes shared prefixes",
        ),
    ],
)
def test_bad_keys_are_named(extra: dict, match: str) -> None:
    with pytest.raises(ScenarioError, match=match):
        scenario(**extra)


def test_planned_requests_for_duration_runs() -> None:
    assert planned_requests(scenario(num_requests=None, duration_s=30.0)) == 2 * 30
    open_loop = scenario(num_requests=None, duration_s=10.0,
                         arrival={"kind": "poisson", "rate_rps": 5.0})  # fmt: skip
    assert planned_requests(open_loop) == 70


def test_a_plan_that_ran_out_before_its_duration_is_named() -> None:
    bound = scenario(num_requests=None, duration_s=30.0)
    line = plan_ran_out(bound, 60, 60, 12.0)
    assert line is not None and "after 12 s of duration_s = 30 s" in line
    assert "set num_requests" in line
    assert plan_ran_out(bound, 60, 60, 30.0) is None  # the duration ended it
    assert plan_ran_out(bound, 60, 59, 12.0) is None  # requests were left
    assert plan_ran_out(scenario(duration_s=30.0), 6, 6, 1.0) is None  # num_requests is the end


# run.json's "scenario" as bench wrote it before the scenario held loadgen's own types (engine
# table left out): old run folders must read back to the same dict.
OLD_RUN_SCENARIO: dict[str, Any] = {
    "name": "old", "description": "", "seed": 0, "users": 3, "num_requests": 6,
    "duration_s": None, "think_time_s": 0.0, "ramp_up_s": 0.5,
    "arrival": {"kind": "gamma", "rate_rps": 5.0, "burstiness": 0.5},
    "api": "completions", "ignore_eos": False, "temperature": 0.0,
    "workload": {"kind": "synthetic"},
    "input_len": {"kind": "normal", "mean": 20.0, "std": 4.0, "max": 40},
    "output_len": {"kind": "fixed", "value": 4},
    "shared_prefix": {"tokens": 8, "num_prefixes": 1, "share_ratio": 0.5},
    "warmup_s": 0.0, "cooldown_s": 0.0,
    "slo": {"ttft_ms": None, "tpot_ms": None, "e2el_ms": None},
}  # fmt: skip


def test_old_run_json_scenarios_read_back_to_the_same_dict() -> None:
    s = scenario_from_dict(OLD_RUN_SCENARIO, "run.json scenario")
    assert {k: v for k, v in s.to_dict().items() if k != "engine"} == OLD_RUN_SCENARIO
    assert list(s.to_dict())[:-1] == list(OLD_RUN_SCENARIO)  # the same order, engine last
    explicit_min = {**OLD_RUN_SCENARIO["output_len"], "min": 1}  # the default, written out
    again = scenario_from_dict({**OLD_RUN_SCENARIO, "output_len": explicit_min})
    assert again == s
    schedule = build_plan(s, TOK).schedule_s
    assert np.array_equal(schedule, s.arrival.schedule(6, s.seed, ramp_up_s=0.5))
