"""The engine's dtype "auto" on a CPU: bfloat16 where the CPU computes bf16 natively (from its
/proc/cpuinfo flags, faked here), float32 where bf16 would be emulated; and the docs say so."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine, resolve_dtype
from engine.native import cpu_features
from perfmodel.presets import get_preset

CPU = torch.device("cpu")
# The page of the reference engine, "How it runs".
ENGINE_PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference-engine.md"


def _fake_flags(monkeypatch: pytest.MonkeyPatch, flags: set[str]) -> None:
    monkeypatch.delenv("LLM_PERF_LAB_CPU_BF16", raising=False)
    monkeypatch.setattr(cpu_features, "cpu_flags", lambda: frozenset(flags))


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"avx512f", "avx512_bf16"}, torch.bfloat16),
        ({"amx_bf16", "amx_tile"}, torch.bfloat16),
        ({"avx512f", "avx2"}, torch.float32),  # bf16 emulated: slower than fp32
        (set(), torch.float32),
    ],
)
def test_auto_follows_the_cpus_bf16_flags(
    monkeypatch: pytest.MonkeyPatch, flags: set[str], expected: torch.dtype
) -> None:
    _fake_flags(monkeypatch, flags)
    assert resolve_dtype("auto", CPU, "bfloat16") is expected


def test_a_float32_checkpoint_stays_float32_and_explicit_names_win(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fake_flags(monkeypatch, {"avx512_bf16"})
    assert resolve_dtype("auto", CPU, "float32") is torch.float32  # no precision is dropped
    assert resolve_dtype("float32", CPU, "bfloat16") is torch.float32
    _fake_flags(monkeypatch, set())
    assert resolve_dtype("bfloat16", CPU, "bfloat16") is torch.bfloat16


def test_the_environment_overrides_the_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_features, "cpu_flags", lambda: frozenset({"avx512_bf16"}))
    monkeypatch.setenv("LLM_PERF_LAB_CPU_BF16", "0")
    assert resolve_dtype("auto", CPU, "bfloat16") is torch.float32


@pytest.mark.parametrize(("flags", "expected"), [({"amx_bf16"}, "bfloat16"), (set(), "float32")])
def test_the_tiny_engine_describes_the_dtype_it_resolved(
    monkeypatch: pytest.MonkeyPatch, flags: set[str], expected: str
) -> None:
    """What run.json records (engine.description.dtype) is the resolved dtype, not "auto"."""
    _fake_flags(monkeypatch, flags)
    engine = LLMEngine(EngineConfig.from_flat({"model": "tiny", "device": "cpu", "seed": 1}))
    description = engine.describe()
    assert description["engine_config"]["dtype"] == "auto"
    assert description["dtype"] == expected
    assert next(engine.executor.model.parameters()).dtype == getattr(torch, expected)


def test_the_docs_say_what_tiny_runs_in() -> None:
    text = " ".join(ENGINE_PAGE.read_text(encoding="utf-8").split())
    assert get_preset("tiny").dtype == "bfloat16"
    assert "runs in the checkpoint's bfloat16 where the CPU has native bf16" in text
    assert "`--dtype auto` (the default) runs `tiny` in bf16 on such a CPU" in text
    assert "`engine.description.dtype` in run.json" in text
