"""The scenario's ``[[models]]`` array: read strictly, split in exact counts by the seed."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from bench.run.load_plan import assign_models, build_plan, model_counts
from bench.scenario.models import ModelShare
from bench.scenario.scenario import ScenarioError, scenario_from_dict
from loadgen.request_spec import RequestSpec
from tests.support.tokenizers import make_tokenizer

BASE: dict[str, Any] = {
    "name": "models",
    "users": 2,
    "num_requests": 30,
    "input_len": {"kind": "fixed", "value": 8},
    "output_len": {"kind": "fixed", "value": 4},
}


def with_models(models: Any) -> dict[str, Any]:
    return {**BASE, "models": models}


def test_models_are_read_in_file_order_and_round_trip_through_run_json() -> None:
    scenario = scenario_from_dict(with_models([{"name": "base", "share": 3}, {"name": "a"}]))
    assert scenario.models == (ModelShare("base", 3.0), ModelShare("a", 1.0))
    data = scenario.to_dict()
    assert data["models"] == [{"name": "base", "share": 3.0}, {"name": "a", "share": 1.0}]
    assert scenario_from_dict(data) == scenario
    # A scenario without the array keeps run.json's scenario as it was.
    assert "models" not in scenario_from_dict(BASE).to_dict()


@pytest.mark.parametrize(
    ("models", "message"),
    [
        ([{"name": "a", "share": 0}], "key 'models[0].share': must be > 0"),
        ([{"name": "a"}, {"name": "a"}], "key 'models[1].name': 'a' is listed twice"),
        ([{"name": " "}], "key 'models[0].name': must not be empty"),
        ([{"name": "a", "weight": 2}], "unknown key 'models[0].weight'"),
        ([], "key 'models': must list at least one [[models]] entry"),
        ({"name": "a"}, "key 'models': expected an array of tables ([[models]])"),
    ],
)
def test_a_bad_models_entry_is_one_line_naming_the_key(models: Any, message: str) -> None:
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(with_models(models), source="s.toml")
    assert str(info.value).startswith("s.toml: ") and message in str(info.value)
    assert "\n" not in str(info.value)


def test_counts_are_exact_largest_remainders_of_the_shares() -> None:
    shares = [ModelShare("a", 0.5), ModelShare("b", 0.3), ModelShare("c", 0.2)]
    assert model_counts(10, shares) == [5, 3, 2]
    assert model_counts(7, [ModelShare("a", 2), ModelShare("b", 1)]) == [5, 2]
    assert model_counts(31, [ModelShare("a"), ModelShare("b"), ModelShare("c")]) == [11, 10, 10]
    assert sum(model_counts(1000, shares)) == 1000


def session(i: int, turns: int = 1, model: str | None = None) -> list[RequestSpec]:
    return [RequestSpec(f"r{i}-{t}", "p", 1, 1, model=model) for t in range(turns)]


def test_the_split_keeps_sessions_whole_keeps_a_workloads_own_model_and_follows_the_seed() -> None:
    sessions = [session(i, turns=2) for i in range(9)] + [session(9, model="row-model")]
    shares = [ModelShare("a", 2), ModelShare("b", 1)]
    split = assign_models(sessions, shares, seed=1)
    # Every turn of a session asks the same model; the workload's own model is kept.
    assert all(len({s.model for s in turns}) == 1 for turns in split)
    assert split[9][0].model == "row-model"
    assert Counter(turns[0].model for turns in split[:9]) == {"a": 6, "b": 3}
    # The same seed gives the same split; the counts stay exact under another seed.
    assert assign_models(sessions, shares, seed=1) == split
    other = [[s.model for s in t] for t in assign_models(sessions, shares, seed=2)]
    assert Counter(t[0] for t in other[:9]) == {"a": 6, "b": 3}
    assert other != [[s.model for s in t] for t in split]


def test_a_plan_of_a_scenario_with_models_names_a_model_on_every_request() -> None:
    scenario = scenario_from_dict(with_models([{"name": "base"}, {"name": "a"}, {"name": "b"}]))
    plan = build_plan(scenario, make_tokenizer())
    assert Counter(spec.model for spec in plan.requests) == {"base": 10, "a": 10, "b": 10}
