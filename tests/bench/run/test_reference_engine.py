"""`bench run`'s reference engine: its settings: the scenario's [engine] table under the command
line's, checked as one EngineConfig before any engine process starts."""

from __future__ import annotations

from typing import Any

import pytest

from bench.run.orchestrate import RunError, reference_engine
from bench.scenario.scenario import scenario_from_dict
from engine.config import EngineConfig

BASE: dict[str, Any] = {
    "name": "settings",
    "users": 1,
    "num_requests": 1,
    "input_len": {"kind": "fixed", "value": 4},
    "output_len": {"kind": "fixed", "value": 4},
}


def test_overrides_win_over_the_scenario() -> None:
    engine = {"preset": "tiny", "max_num_seqs": 8, "options": {"batching": "static"}}
    scenario = scenario_from_dict({**BASE, "engine": engine})
    engine = reference_engine(scenario, {"batching": "continuous", "block_size": 32})
    assert engine.settings() == {"model": "tiny", "max_num_seqs": 8, "batching": "continuous",
                                 "block_size": 32}  # fmt: skip
    # One config, built as the run begins; the engine parses its flags back into the same.
    assert engine.config == EngineConfig.from_flat(engine.settings())


def test_settings_that_do_not_go_together_fail_before_the_launch() -> None:
    engine = {"options": {"speculative": "draft"}}
    scenario = scenario_from_dict({**BASE, "engine": engine}, source="draft.toml")
    with pytest.raises(RunError, match=r"^draft\.toml: engine settings: draft_model or draft_num"):
        reference_engine(scenario, {})
    engine = reference_engine(scenario, {"draft_num_layers": 1})
    assert engine.settings()["draft_num_layers"] == 1
