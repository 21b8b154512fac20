"""A scenario's ``[engine]`` table: its keys are EngineConfig's settings, checked when the
scenario loads, so a typo names the file, the key and the setting meant."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.scenario.scenario import ScenarioError, load_scenario, scenario_from_dict
from engine.config import SETTINGS, EngineConfig
from tests.support.paths import REPO_ROOT

SCENARIO = """\
name = "engine-table"
users = 2
num_requests = 4

[input_len]
kind = "fixed"
value = 8

[output_len]
kind = "fixed"
value = 4

[engine]
preset = "tiny"
max_num_seqs = 8
{engine}
[engine.options]
{options}
"""

BASE: dict[str, Any] = {
    "name": "s",
    "users": 1,
    "num_requests": 1,
    "input_len": {"kind": "fixed", "value": 4},
    "output_len": {"kind": "fixed", "value": 4},
}


def write(tmp_path: Path, engine: str = "", options: str = "") -> Path:
    path = tmp_path / "scenario.toml"
    path.write_text(SCENARIO.format(engine=engine, options=options))
    return path


def load_error(path: Path) -> str:
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    return str(info.value)


def test_a_misspelt_option_fails_at_load_naming_file_key_and_setting(tmp_path: Path) -> None:
    path = write(tmp_path, options='batchng = "static"')
    message = load_error(path)
    assert message.startswith(f"{path}: unknown key 'engine.options.batchng'")
    assert "did you mean 'batching'?" in message
    assert "\n" not in message


def test_a_misspelt_engine_key_names_the_closest_setting(tmp_path: Path) -> None:
    message = load_error(write(tmp_path, engine="kv_cache_dtpye = 'fp8'"))
    # The closest first: kv_cache_dtype, then kv_cache.
    assert "unknown key 'engine.kv_cache_dtpye'; did you mean 'kv_cache_dtype'" in message


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ('batching = "dynamic"', "key 'engine.options.batching': expected one of 'continuous',"),
        ("max_num_batched_tokens = 0", "key 'engine.options.max_num_batched_tokens': must be at"),
        ("enable_prefix_caching = 1", "key 'engine.options.enable_prefix_caching': expected a b"),
        ("gpu_memory_utilization = 1.5", "'engine.options.gpu_memory_utilization': must be in ("),
        ("max_num_seqs = 4", "key 'engine.max_num_seqs': is given in both [engine] and [engine"),
    ],
)
def test_values_are_checked_as_the_engine_checks_them(
    tmp_path: Path, options: str, expected: str
) -> None:
    message = load_error(write(tmp_path, options=options))
    assert expected in message


def test_every_setting_but_the_model_is_a_key_of_both_tables(tmp_path: Path) -> None:
    defaults = {s.name: s.default for s in SETTINGS if s.name != "model"}
    given = {name: value for name, value in defaults.items() if value is not None}
    scenario = scenario_from_dict({**BASE, "engine": {"options": given}})
    assert scenario.engine.options == given
    direct = scenario_from_dict({**BASE, "engine": given})
    assert direct.engine.settings == given
    assert EngineConfig.from_flat(direct.engine.engine_settings()) == EngineConfig()


def test_settings_reach_the_engine_and_the_table_round_trips(tmp_path: Path) -> None:
    path = write(tmp_path, engine="block_size = 32", options='speculative = "ngram"')
    scenario = load_scenario(path)
    settings = scenario.engine.engine_settings()
    assert settings == {"model": "tiny", "max_num_seqs": 8, "block_size": 32,
                        "speculative": "ngram"}  # fmt: skip
    config = EngineConfig.from_flat(settings)
    assert config.speculative.method == "ngram" and config.cache.block_size == 32
    again = scenario_from_dict(json.loads(json.dumps(scenario.to_dict())))
    assert again == scenario


def test_an_engine_table_written_before_the_grouping_still_loads() -> None:
    """run.json's resolved scenario: every [engine] key of the time, unset ones as null."""
    baseline = json.loads((REPO_ROOT / "benchmarks/perf-gate/smoke-baseline.json").read_text())
    scenario = scenario_from_dict(baseline["scenario"], "smoke-baseline.json")
    assert scenario.engine.engine_settings() == {
        "model": "tiny", "dtype": "float32", "device": "cpu", "num_threads": 1,
    }  # fmt: skip
