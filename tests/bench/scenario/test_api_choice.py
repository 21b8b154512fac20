"""The scenario's ``api`` key and what goes with it (bench.scenario.api_choice): every API of
the client, ``inputs_per_request`` for the pooling APIs only, and one-line refusals naming the
key for what a pooling API cannot have."""

from __future__ import annotations

from typing import Any

import pytest

from bench.run.load_plan import build_plan
from bench.scenario.scenario import ScenarioError, scenario_from_dict
from results.schema.api_kinds import API_KINDS
from tests.support.tokenizers import make_tokenizer

BASE: dict[str, Any] = {
    "name": "t", "users": 2, "num_requests": 4,
    "input_len": {"kind": "fixed", "value": 12}, "output_len": {"kind": "fixed", "value": 4},
}  # fmt: skip


@pytest.mark.parametrize("api", API_KINDS)
def test_every_api_loads_and_round_trips(api: str) -> None:
    scenario = scenario_from_dict({**BASE, "api": api})
    assert scenario.api == api
    assert scenario_from_dict(scenario.to_dict()) == scenario
    assert "inputs_per_request" not in scenario.to_dict()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"api": "chat", "inputs_per_request": 2}, "key 'inputs_per_request': only api"),
        ({"api": "embeddings", "inputs_per_request": 0}, "key 'inputs_per_request': must be >= 1"),
        (
            {"api": "rerank", "slo": {"ttft_ms": 100}},
            "key 'slo.ttft_ms': api 'rerank' has no first",
        ),
        ({"api": "embeddings", "slo": {"tpot_ms": 9}}, "key 'slo.tpot_ms'"),
        ({"api": "messages", "abandon": {"share": 0.5, "after_tokens": 2}}, "key 'abandon'"),
        ({"api": "embedings"}, "did you mean 'embeddings'"),
    ],
)
def test_what_an_api_cannot_take_is_refused_naming_the_key(
    extra: dict[str, Any], message: str
) -> None:
    with pytest.raises(ScenarioError, match=message) as info:
        scenario_from_dict({**BASE, **extra}, source="s.toml")
    assert "\n" not in str(info.value)


def test_a_pooling_plan_groups_prompts_into_inputs() -> None:
    tok = make_tokenizer()
    embed = build_plan(
        scenario_from_dict({**BASE, "api": "embeddings", "inputs_per_request": 3}), tok
    )
    rerank = build_plan(scenario_from_dict({**BASE, "api": "rerank", "inputs_per_request": 3}), tok)
    for plan, inputs in ((embed, 2), (rerank, 3)):
        assert len(plan.requests) == 4
        for spec in plan.requests:
            assert len(spec.inputs) == inputs and spec.prompt not in spec.inputs
            assert spec.prompt_tokens == 12 * (inputs + 1)
    assert {s.num_inputs for s in embed.requests} == {3}
    assert {s.num_inputs for s in rerank.requests} == {3}
    assert len({s.request_id for s in rerank.requests}) == 4
