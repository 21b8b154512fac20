"""The workload types check themselves and name the parameter at fault."""

from __future__ import annotations

import pytest

from loadgen.workloads.spec import LengthDist, ParameterError, SharedPrefix, WorkloadSpec


@pytest.mark.parametrize(
    ("kwargs", "field", "problem"),
    [
        ({"kind": "fixed", "value": 4, "low": 2}, "low", "kind 'fixed' does not take it"),
        ({"kind": "fixed", "value": 8, "min": 10}, "value", "must lie within min..max [10, inf]"),
        ({"kind": "normal", "mean": 0.0, "std": 1.0}, "mean", "must be > 0, got 0.0"),
        ({"kind": "uniform", "low": 8, "high": 16, "max": 4}, "low", "must overlap min..max"),
        ({"kind": "pareto", "shape": 1.5, "scale": 10.0, "max": 8}, "scale", "must be <= max"),
        ({"kind": "uniform", "low": 1, "high": 4, "max": 0}, "max", "must be at least 1 token"),
    ],
)
def test_length_bounds_must_fit_the_distribution(kwargs: dict, field: str, problem: str) -> None:
    with pytest.raises(ParameterError) as info:
        LengthDist(**kwargs)
    assert info.value.field == field and problem in info.value.problem
    assert str(info.value).startswith(f"LengthDist(kind={kwargs['kind']!r}).{field}: ")


@pytest.mark.parametrize(
    ("kwargs", "field", "problem"),
    [
        ({"kind": "shargpt"}, "kind", "expected one of"),
        ({"kind": "sharegpt"}, "path", "missing; kind 'sharegpt' reads its requests from a file"),
        ({"kind": "multiturn"}, "turns", "missing; set turns"),
        ({"kind": "trace", "path": "t.jsonl", "turns": 2}, "turns", "does not take it"),
        ({"kind": "trace", "path": "t.jsonl", "time_scale": 0.0}, "time_scale", "must be > 0"),
        ({"kind": "multiturn", "turns": 0}, "turns", "must be >= 1, got 0"),
        ({"kind": "multiturn", "path": "s.json", "system_prompt_tokens": 4},
         "system_prompt_tokens", "a file of chats has its own"),
        ({"kind": "sharegpt", "path": 3}, "path", "expected a string"),
    ],
)  # fmt: skip
def test_workload_parameters_are_checked(kwargs: dict, field: str, problem: str) -> None:
    with pytest.raises(ParameterError) as info:
        WorkloadSpec(**kwargs)
    assert info.value.field == field and problem in info.value.problem


def test_to_dict_keeps_only_what_is_set() -> None:
    spec = WorkloadSpec("multiturn", turns=3, system_prompt_tokens=0)
    assert spec.to_dict() == {"kind": "multiturn", "turns": 3, "system_prompt_tokens": 0}
    assert WorkloadSpec(**spec.to_dict()) == spec and not spec.open_loop
    assert WorkloadSpec("trace", path="t.jsonl").open_loop
    prefix = SharedPrefix(tokens=16, share_ratio=0.25)
    assert prefix.to_dict() == {"tokens": 16, "num_prefixes": 1, "share_ratio": 0.25}
    with pytest.raises(ParameterError, match=r"SharedPrefix\.num_prefixes: must be >= 1"):
        SharedPrefix(tokens=16, num_prefixes=0)
