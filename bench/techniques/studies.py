"""How `bench techniques` measures each claim: one ablation per study, same requests.

A study is a scenario and one switch with its values (the first, the technique off, is the
ablation's baseline), plus settings fixed for every value; ``measured_only`` settings apply to
this machine's runs and not to the simulated GPUs (a KV budget sized for the tiny preset would
cripple an 80 GB part). A row of the table takes its study's "off" and "on" values; the two
quantization rows share one study. ``--quick`` shrinks every workload, never the comparison.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.scenario.scenario import Scenario, scenario_from_dict
from perfmodel.files import JSONObject
from perfmodel.presets import get_preset

# The tiny preset's KV bytes per token in float32, the dtype the KV-budget study runs in.
_TINY_KV_BYTES_PER_TOKEN_FP32 = get_preset("tiny").kv_bytes_per_token(4)


@dataclass(frozen=True)
class Study:
    key: str
    switch: str
    values: tuple[Any, ...]
    workload: JSONObject
    quick_workload: JSONObject
    fixed: JSONObject = field(default_factory=dict)
    measured_only: JSONObject = field(default_factory=dict)

    def scenario(self, quick: bool) -> Scenario:
        """The study's scenario: greedy, every request generating its sampled length."""
        data: JSONObject = {
            "name": f"technique-{self.key}",
            "seed": 0,
            "ignore_eos": True,
            "temperature": 0.0,
            "input_len": {"kind": "uniform", "low": 96, "high": 160},
            "output_len": {"kind": "uniform", "low": 96, "high": 160},
        }
        data.update(self.quick_workload if quick else self.workload)
        return scenario_from_dict(data, source=f"bench techniques:{self.key}")


@dataclass(frozen=True)
class RowStudy:
    """Which study a claim's row reads, and its values for the technique off and on."""

    technique: str
    study: str
    off: Any
    on: Any


def _lengths(low: int, high: int, out_low: int, out_high: int) -> JSONObject:
    return {
        "input_len": {"kind": "uniform", "low": low, "high": high},
        "output_len": {"kind": "uniform", "low": out_low, "high": out_high},
    }


STUDIES: tuple[Study, ...] = (
    Study(
        "kv_cache", "kv_cache", (False, True),
        {"users": 1, "num_requests": 2, **_lengths(64, 96, 64, 96)},
        {"users": 1, "num_requests": 2, **_lengths(32, 64, 32, 64)},
        # Every recomputed sequence fits one step's budget, as a decode would.
        fixed={"max_num_batched_tokens": 4096},
    ),
    Study(
        "gqa", "model", ("tiny-mha", "tiny"),
        {"users": 16, "num_requests": 32}, {"users": 8, "num_requests": 8},
    ),
    Study(
        "quantization", "quantization", ("none", "int8", "int4"),
        {"users": 1, "num_requests": 3},
        {"users": 1, "num_requests": 2, **_lengths(32, 64, 32, 64)},
    ),
    Study(
        "speculative", "speculative", ("off", "ngram"),
        {"users": 1, "num_requests": 3},
        {"users": 1, "num_requests": 2, **_lengths(32, 64, 64, 96)},
    ),
    Study(
        "batching", "batching", ("static", "continuous"),
        {"users": 32, "num_requests": 64,
         "output_len": {"kind": "pareto", "shape": 1.5, "scale": 20, "max": 512}},
        {"users": 16, "num_requests": 32,
         "output_len": {"kind": "pareto", "shape": 1.5, "scale": 10, "max": 256}},
        fixed={"max_num_seqs": 32},
    ),
    Study(
        "kv_layout", "kv_layout", ("contiguous", "paged"),
        {"users": 32, "num_requests": 64}, {"users": 16, "num_requests": 32},
        fixed={"enable_prefix_caching": False},
        # 4,096 token slots: 8 contiguous reservations of max_model_len 512.
        measured_only={
            "dtype": "float32",
            "max_model_len": 512,
            "kv_cache_memory_bytes": 4096 * _TINY_KV_BYTES_PER_TOKEN_FP32,
        },
    ),
    Study(
        # torch runs prefills in sdpa, CPU torch's fused attention kernel (the row's "on");
        # auto is the C kernel where it builds, made for decode: it takes prefill rows one
        # query at a time, shown beside them in the ablation.
        "attention", "attention_backend", ("naive", "torch", "auto"),
        {"users": 1, "num_requests": 3, **_lengths(768, 1024, 8, 8)},
        {"users": 1, "num_requests": 2, **_lengths(384, 512, 4, 4)},
    ),
    Study(
        "prefix_caching", "enable_prefix_caching", (False, True),
        {"users": 8, "num_requests": 16, **_lengths(8, 24, 16, 16),
         "shared_prefix": {"tokens": 1024, "num_prefixes": 1, "share_ratio": 1.0}},
        {"users": 4, "num_requests": 8, **_lengths(8, 24, 8, 8),
         "shared_prefix": {"tokens": 512, "num_prefixes": 1, "share_ratio": 1.0}},
    ),
)  # fmt: skip

ROWS: tuple[RowStudy, ...] = (
    RowStudy("kv_cache", "kv_cache", False, True),
    RowStudy("gqa", "gqa", "tiny-mha", "tiny"),
    RowStudy("int8", "quantization", "none", "int8"),
    RowStudy("int4", "quantization", "none", "int4"),
    RowStudy("speculative", "speculative", "off", "ngram"),
    RowStudy("continuous_batching", "batching", "static", "continuous"),
    RowStudy("paged_attention", "kv_layout", "contiguous", "paged"),
    RowStudy("flash_attention", "attention", "naive", "torch"),
    RowStudy("prefix_caching", "prefix_caching", False, True),
)


def study(key: str) -> Study:
    for s in STUDIES:
        if s.key == key:
            return s
    raise KeyError(f"no study {key!r}; known: {', '.join(s.key for s in STUDIES)}")
