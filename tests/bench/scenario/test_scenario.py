"""Scenario loading and validation: shipped scenarios, round trips, and helpful errors."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from bench.scenario.scenario import (
    Scenario,
    ScenarioError,
    list_scenarios,
    load_scenario,
    scenario_from_dict,
)
from loadgen.workloads.spec import LengthDist

SOURCE = "my.toml"

VALID_TOML = """\
name = "small"
users = 4
num_requests = 10
ignore_eos = true

[input_len]
kind = "uniform"
low = 8
high = 16

[output_len]
kind = "fixed"
value = 4

[slo]
ttft_ms = 500

[engine]
preset = "tiny"
max_num_seqs = 8
block_size = 16

[engine.options]
enable_prefix_caching = false
"""

BASE: dict[str, Any] = {
    "name": "small",
    "users": 4,
    "num_requests": 10,
    "input_len": {"kind": "uniform", "low": 8, "high": 16},
    "output_len": {"kind": "fixed", "value": 4},
}


def _with(**changes: Any) -> dict[str, Any]:
    """BASE with dotted-key changes applied; a value of ... deletes the key."""
    data = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        table = data
        for parent in parents:
            table = table.setdefault(parent, {})
        if value is ...:
            del table[leaf]
        else:
            table[leaf] = value
    return data


def _error(data: dict[str, Any]) -> str:
    with pytest.raises(ScenarioError) as info:
        scenario_from_dict(data, source=SOURCE)
    return str(info.value)


def test_shipped_scenarios_load_by_name() -> None:
    assert {"100-users", "1-user"} <= set(list_scenarios())
    many = load_scenario("100-users")
    assert (many.name, many.users, many.num_requests, many.seed) == ("100-users", 100, 300, 0)
    assert many.ignore_eos is True
    assert many.input_len == LengthDist(kind="uniform", low=96, high=160)
    assert many.output_len == LengthDist(kind="uniform", low=96, high=160)
    one = load_scenario("1-user")
    assert (one.users, one.num_requests) == (1, 30)
    assert one.input_len == many.input_len and one.output_len == many.output_len
    assert one.source.endswith("1-user.toml")


@pytest.mark.parametrize("name", ["100-users", "1-user"])
def test_to_dict_is_json_and_round_trips(name: str) -> None:
    scenario = load_scenario(name)
    data = json.loads(json.dumps(scenario.to_dict()))
    assert data["input_len"] == {"kind": "uniform", "low": 96, "high": 160}
    assert data["slo"] == {"ttft_ms": None, "tpot_ms": None, "e2el_ms": None}
    assert data["engine"]["preset"] == "tiny"
    assert scenario_from_dict(data) == scenario


def test_load_from_path_with_defaults(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(VALID_TOML.replace('name = "small"\n', ""))
    scenario = load_scenario(path)
    assert scenario.name == "mine"  # the file's stem when the file has no name
    assert scenario.source == str(path)
    assert scenario.api == "completions" and scenario.duration_s is None
    assert scenario.slo.ttft_ms == 500.0 and isinstance(scenario.slo.ttft_ms, float)
    assert scenario.engine.settings == {"max_num_seqs": 8, "block_size": 16}
    assert scenario.engine.options == {"enable_prefix_caching": False}
    assert scenario.output_len.to_dict() == {"kind": "fixed", "value": 4}


def test_file_errors_name_the_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "typo.toml"
    path.write_text(VALID_TOML.replace("max_num_seqs = 8", "max_num_seq = 8"))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    message = str(info.value)
    assert str(path) in message
    assert "unknown key 'engine.max_num_seq'" in message
    assert "did you mean 'max_num_seqs'" in message

    path.write_text(VALID_TOML.replace("users = 4", 'users = "4"'))
    with pytest.raises(ScenarioError, match=r"typo\.toml: key 'users': expected an integer, "):
        load_scenario(path)

    path.write_text("users = [")
    with pytest.raises(ScenarioError, match=r"typo\.toml: not valid TOML"):
        load_scenario(path)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"usres": 4}, ["unknown key 'usres'", "did you mean 'users'"]),
        ({"users": "4"}, ["key 'users'", "expected an integer", "'4' (str)"]),
        ({"users": True}, ["key 'users'", "expected an integer", "True (bool)"]),
        ({"users": 4.0}, ["key 'users'", "expected an integer", "4.0 (float)"]),
        ({"ignore_eos": 1}, ["key 'ignore_eos'", "expected a boolean"]),
        ({"duration_s": "60"}, ["key 'duration_s'", "expected a number", "'60' (str)"]),
        ({"input_len": 5}, ["key 'input_len'", "expected a table", "5 (int)"]),
        ({"input_len__hgih": 3}, ["unknown key 'input_len.hgih'", "did you mean 'high'"]),
        ({"input_len__low": 1.5}, ["key 'input_len.low'", "expected an integer"]),
        ({"input_len__kind": "uniformm"}, ["key 'input_len.kind'", "did you mean 'uniform'"]),
        ({"output_len__low": 2}, ["unknown key 'output_len.low'", "for kind 'fixed'"]),
        ({"slo__ttft": 1}, ["unknown key 'slo.ttft'", "did you mean 'ttft_ms'"]),
        ({"engine__dtype": "fp16"}, ["key 'engine.dtype'", "'float16'"]),
        ({"engine__options__seed": {"y": 1}}, ["key 'engine.options.seed'", "(table)"]),
        ({"api": "chta"}, ["key 'api'", "did you mean 'chat'"]),
        ({"users": ...}, ["key 'users': missing", "expected an integer"]),
        ({"output_len": ...}, ["key 'output_len': missing"]),
    ],
)
def test_type_and_key_errors(changes: dict[str, Any], expected: list[str]) -> None:
    message = _error(_with(**changes))
    assert message.startswith(f"{SOURCE}: ")
    for part in expected:
        assert part in message


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"users": 0}, "key 'users': must be >= 1, got 0"),
        ({"num_requests": 0}, "key 'num_requests': must be >= 1"),
        ({"duration_s": 0}, "key 'duration_s': must be > 0 seconds"),
        ({"num_requests": ...}, "set 'num_requests', 'duration_s' or both"),
        ({"think_time_s": -1}, "key 'think_time_s': must be >= 0"),
        ({"input_len__high": 4}, "key 'input_len.high': must be >= low, got 4"),
        ({"input_len__low": 0}, "key 'input_len.low': must be at least 1 token"),
        ({"output_len__value": 0}, "key 'output_len.value': must be at least 1 token"),
        ({"slo__tpot_ms": 0}, "key 'slo.tpot_ms': must be > 0 milliseconds"),
        ({"request_timeout_s": 0}, "key 'request_timeout_s': must be > 0 seconds, got 0.0"),
        ({"read_timeout_s": -1}, "key 'read_timeout_s': must be > 0 seconds"),
        ({"read_timeout_s": "soon"}, "key 'read_timeout_s': expected"),
        ({"engine__block_size": 12}, "key 'engine.block_size': must be a power of two"),
        ({"engine__max_num_seqs": 0}, "key 'engine.max_num_seqs': must be at least 1"),
        (
            {"duration_s": 10, "warmup_s": 6, "cooldown_s": 4},
            "warmup_s + cooldown_s must be < duration_s",
        ),
    ],
)
def test_range_errors(changes: dict[str, Any], expected: str) -> None:
    assert expected in _error(_with(**changes))


def test_length_distributions_are_checked_for_consistency() -> None:
    normal = {"kind": "normal", "mean": 100, "std": 20, "min": 10, "max": 50}
    expected = "key 'input_len.mean': must lie within min..max [10, 50], got 100.0"
    assert expected in _error(_with(input_len=normal))
    normal.update(min=60, max=40, mean=50)
    assert "key 'input_len.max': must be >= min" in _error(_with(input_len=normal))
    pareto = {"kind": "pareto", "shape": 0, "scale": 10}
    assert "key 'input_len.shape': must be > 0" in _error(_with(input_len=pareto))
    pareto["shape"] = 1.5
    spec = scenario_from_dict(_with(input_len=pareto)).input_len
    assert spec == LengthDist(kind="pareto", shape=1.5, scale=10.0)
    pareto["max"] = 8
    assert "key 'input_len.scale': must be <= max (8)" in _error(_with(input_len=pareto))
    bounded = {"kind": "uniform", "low": 8, "high": 16, "max": 4}
    expected = "key 'input_len.low': low..high must overlap min..max [1, 4]"
    assert expected in _error(_with(input_len=bounded))
    fixed = {"kind": "fixed", "value": 8, "min": 10}
    assert "key 'input_len.value': must lie within min..max [10, inf]" in _error(
        _with(input_len=fixed)
    )


def test_duration_only_scenario() -> None:
    scenario = scenario_from_dict(_with(num_requests=..., duration_s=30, warmup_s=5))
    assert scenario.num_requests is None and scenario.duration_s == 30.0
    assert scenario.warmup_s == 5.0


def test_unknown_names_and_missing_paths() -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario("100-user")
    message = str(info.value)
    assert "unknown scenario '100-user'" in message
    assert "100-users" in message and "1-user" in message
    with pytest.raises(ScenarioError, match=re.escape("scenario file not found: nowhere/x.toml")):
        load_scenario("nowhere/x.toml")


def test_scenario_is_frozen_and_compares_without_source() -> None:
    a = scenario_from_dict(BASE, source="a.toml")
    b = scenario_from_dict(BASE, source="b.toml")
    assert a == b and isinstance(a, Scenario)
    with pytest.raises(AttributeError):
        a.users = 5  # type: ignore[misc]


def test_lengths_are_the_samplers_own_type() -> None:
    dist = scenario_from_dict(_with(input_len__max=12)).input_len
    assert isinstance(dist, LengthDist)
    assert (dist.kind, dist.low, dist.high, dist.min, dist.max) == ("uniform", 8, 16, 1, 12)
    assert dist.to_dict() == {"kind": "uniform", "low": 8, "high": 16, "max": 12}


def test_the_client_limits_are_kept_and_left_out_of_the_dict_when_unset() -> None:
    plain = scenario_from_dict(BASE, source=SOURCE)
    assert plain.request_timeout_s is None and plain.read_timeout_s is None
    assert "request_timeout_s" not in plain.to_dict()
    limited = scenario_from_dict(_with(request_timeout_s=30, read_timeout_s=2.5), source=SOURCE)
    assert (limited.request_timeout_s, limited.read_timeout_s) == (30.0, 2.5)
    assert scenario_from_dict(limited.to_dict(), source=SOURCE) == limited
