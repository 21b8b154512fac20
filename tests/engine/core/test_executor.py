"""Both executors implement every member of the Executor protocol, with its signature and the
types its properties declare; the check itself fails on an executor that lacks one."""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any

import pytest
import torch

from engine.config import SpeculativeSettings
from engine.core.executor import Executor
from engine.core.scheduler import SchedulerOutput
from engine.core.speculation import SpecStats
from engine.model.model_runner import ModelRunner
from engine.model.spec_decode import DraftModelProposer, NgramProposer
from engine.sim.executor import SimExecutor
from tests.support.engine_fixtures import make_engine
from tests.support.sim_fixtures import a100_engine


def _declared() -> dict[str, Any]:
    """Executor's public members: its methods and properties, by name."""
    return {n: v for n, v in vars(Executor).items() if not n.startswith("_")}


def _accepts(value: object, hint: Any) -> bool:
    """isinstance against a resolved annotation: a class, or a union of classes and None."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return any(_accepts(value, arm) for arm in typing.get_args(hint))
    if hint is None or hint is type(None):
        return value is None
    return isinstance(value, hint)


def _parameters(fn: Any) -> list[tuple[str, Any, Any]]:
    """(name, kind, resolved annotation) of each parameter after self."""
    hints = typing.get_type_hints(fn)
    params = list(inspect.signature(fn).parameters.values())[1:]
    return [(p.name, p.kind, hints.get(p.name)) for p in params]


def conformance_errors(executor: object) -> list[str]:
    """What ``executor`` lacks or gets wrong against Executor, one line per member."""
    errors = []
    for name, declared in _declared().items():
        if not hasattr(executor, name):
            errors.append(f"{name}: missing")
            continue
        actual = getattr(executor, name)
        if isinstance(declared, property):
            hint = typing.get_type_hints(declared.fget)["return"]
            if not _accepts(actual, hint):
                errors.append(f"{name}: {actual!r} is not a {hint}")
        elif not inspect.ismethod(actual):
            errors.append(f"{name}: not a method ({actual!r})")
        elif _parameters(actual.__func__) != _parameters(declared):
            errors.append(f"{name}: parameters {_parameters(actual.__func__)}")
    return errors


@pytest.fixture(scope="module")
def executors() -> dict[str, Any]:
    return {"torch": make_engine().executor, "sim": a100_engine().executor}


def test_the_protocol_declares_what_the_engine_reads() -> None:
    assert set(_declared()) == {
        "execute_model",
        "clock_ns",
        "make_proposer",
        "describe",
        "num_kv_blocks",
        "kv_cache_dtype",
        "weight_bytes",
        "native_decode",
        "native_custom_ops",
        "replayed_graph",
        "spec_stats",
        "embed",
    }


@pytest.mark.parametrize(("kind", "cls"), [("torch", ModelRunner), ("sim", SimExecutor)])
def test_both_executors_implement_every_member(
    executors: dict[str, Any], kind: str, cls: type
) -> None:
    executor = executors[kind]
    assert type(executor) is cls
    assert conformance_errors(executor) == []


def test_neutral_values_of_members_that_do_not_apply(executors: dict[str, Any]) -> None:
    runner, sim = executors["torch"], executors["sim"]
    assert runner.describe() is None
    assert runner.weight_bytes > 0 and runner.kv_cache_dtype == torch.float32
    assert (sim.weight_bytes, sim.native_decode, sim.native_custom_ops) == (None, False, False)
    assert sim.describe()["tp"] == 4
    before = runner.clock_ns()
    assert before <= runner.clock_ns()


class _Incomplete:
    """An executor written against the two members the protocol used to declare."""

    num_kv_blocks = 8
    spec_stats = SpecStats()

    def execute_model(
        self, scheduler_output: SchedulerOutput, block_tables: dict[str, list[int]]
    ) -> dict[str, list[int]]:
        return {}

    def clock_ns(self, offset_ns: int) -> int:
        return offset_ns

    def describe(self) -> dict[str, Any] | None:
        return None

    native_decode = "no"


def test_the_check_names_each_missing_or_mismatched_member() -> None:
    errors = conformance_errors(_Incomplete())
    assert {e.split(":")[0] for e in errors} == {
        "make_proposer",
        "kv_cache_dtype",
        "weight_bytes",
        "native_custom_ops",
        "native_decode",
        "replayed_graph",
        "clock_ns",
        "embed",
    }
    assert "native_decode: 'no' is not a <class 'bool'>" in errors


def test_each_executor_builds_and_keeps_its_own_proposer(executors: dict[str, Any]) -> None:
    runner, sim = executors["torch"], executors["sim"]
    ngram = SpeculativeSettings(method="ngram", num_speculative_tokens=2)
    proposer = runner.make_proposer(ngram)
    assert isinstance(proposer, NgramProposer) and runner.proposer is proposer
    assert not proposer.writes_lookahead
    drafted = runner.make_proposer(SpeculativeSettings(method="draft", draft_num_layers=1))
    assert isinstance(drafted, DraftModelProposer) and drafted.writes_lookahead
    with pytest.raises(ValueError, match="set sim_acceptance_rate"):
        sim.make_proposer(SpeculativeSettings(method="ngram"))
    with pytest.raises(ValueError, match="speculative='off' has no proposer"):
        runner.make_proposer(SpeculativeSettings())
