"""EngineConfig: grouped settings that check themselves, and the flat view run.json keeps."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from engine.config import (
    SETTINGS,
    CacheSettings,
    EngineConfig,
    SchedulerSettings,
    SettingError,
    SpeculativeSettings,
)
from tests.support.paths import REPO_ROOT


def test_settings_are_read_by_group() -> None:
    config = EngineConfig.from_flat(
        {"model": "tiny", "block_size": 32, "max_num_seqs": 8, "speculative": "ngram", "tp": 1}
    )
    assert config.model.model == "tiny"
    assert config.cache.block_size == 32
    assert config.scheduler.max_num_seqs == 8
    assert config.speculative.method == "ngram"
    assert config.parallel.tp == 1
    assert config == EngineConfig(
        cache=CacheSettings(block_size=32),
        scheduler=SchedulerSettings(max_num_seqs=8),
        speculative=SpeculativeSettings(method="ngram"),
    )


def test_every_setting_declares_help_and_a_unique_name() -> None:
    names = [s.name for s in SETTINGS]
    assert len(names) == len(set(names))
    assert all(s.help.strip() for s in SETTINGS)
    # The flat view covers every field of every group, and nothing else.
    fields = [
        (group.name, f.name)
        for group in dataclasses.fields(EngineConfig)
        for f in dataclasses.fields(getattr(EngineConfig(), group.name))
    ]
    assert fields == [(s.group, s.attr) for s in SETTINGS]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"dtype": "fp16"}, "dtype must be one of auto, float32, bfloat16, float16, got 'fp16'"),
        ({"batching": "statc"}, "batching must be one of continuous, static, got 'statc'; did"),
        ({"block_size": 12}, "block_size must be a power of two, got 12"),
        ({"max_num_seqs": 0}, "max_num_seqs must be at least 1, got 0"),
        ({"max_num_seqs": True}, "max_num_seqs must be an integer, got True (bool)"),
        ({"max_model_len": 1}, "max_model_len must be at least 2, got 1"),
        ({"num_threads": 0}, "num_threads must be at least 1, got 0"),
        ({"step_delay_ms": -1}, "step_delay_ms must be at least 0, got -1.0"),
        ({"gpu_memory_utilization": 0}, "gpu_memory_utilization must be in (0, 1], got 0.0"),
        ({"kv_layout": "contiguous", "enable_prefix_caching": True}, "needs kv_layout='paged'"),
        ({"speculative": "draft"}, "speculative='draft' needs exactly one"),
        ({"prompt_lookup_min": 5}, "prompt_lookup_max must be >= prompt_lookup_min (5), got 4"),
        ({"device": "sim"}, "gpu is needed by device='sim'"),
        ({"gpu": "h100-sxm"}, "set device='sim' too"),
        ({"tp": 2}, "tp above 1 runs only on the simulated device"),
        (
            {"device": "sim", "gpu": "h100-sxm", "speculative": "ngram"},
            "sim_acceptance_rate is needed by speculative decoding",
        ),
        ({"batchng": "static"}, "batchng is not an engine setting; did you mean 'batching'?"),
    ],
)
def test_bad_settings_are_refused_naming_the_setting(
    settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(SettingError) as info:
        EngineConfig.from_flat(settings)
    assert message in str(info.value)
    assert info.value.name in str(info.value)


def test_a_group_checks_itself_when_built_directly() -> None:
    with pytest.raises(SettingError, match="block_size must be a power of two"):
        CacheSettings(block_size=24)
    with pytest.raises(SettingError, match="batching must be one of"):
        SchedulerSettings(batching="dynamic")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"EngineConfig\.cache must be a CacheSettings"):
        EngineConfig(cache={"block_size": 16})  # type: ignore[arg-type]


def test_flat_view_round_trips_and_none_means_the_default() -> None:
    config = EngineConfig.from_flat(
        {"device": "sim", "gpu": "a100-80gb", "tp": 4, "speculative": "ngram",
         "sim_acceptance_rate": 0.7, "kv_cache_dtype": "fp8", "num_threads": None}
    )  # fmt: skip
    flat = config.to_flat()
    assert list(flat) == [s.name for s in SETTINGS]
    assert EngineConfig.from_flat(json.loads(json.dumps(flat))) == config
    assert flat["num_threads"] is None and flat["speculative"] == "ngram"
    assert EngineConfig.from_flat({"max_num_seqs": None}) == EngineConfig()
    # An integer where a number is expected is that number.
    assert EngineConfig.from_flat({"gpu_memory_utilization": 1}).sim.gpu_memory_utilization == 1.0
    assert isinstance(
        EngineConfig.from_flat({"gpu_memory_utilization": 1}).sim.gpu_memory_utilization, float
    )
    assert isinstance(SchedulerSettings(step_delay_ms=1).step_delay_ms, float)


def test_an_engine_config_written_before_the_grouping_still_loads() -> None:
    """The committed perf-gate baseline carries run.json's flat engine_config of its runs."""
    baseline = json.loads((REPO_ROOT / "benchmarks/perf-gate/smoke-baseline.json").read_text())
    old = baseline["engine"]["config"]
    config = EngineConfig.from_flat(old)
    assert config.model.dtype == old["dtype"] and config.parallel.num_threads == old["num_threads"]
    # Settings added since load at their defaults.
    assert config.to_flat() == {**EngineConfig().to_flat(), **old}
