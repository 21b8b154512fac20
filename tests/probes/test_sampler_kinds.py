"""ProbeSpec.build walks the sampler registry: the kinds a spec wants, in start order, each
sampler's source one of results.folder.sample_sources."""

from __future__ import annotations

import os

from probes.cpu import CpuSampler
from probes.engine_metrics import EngineMetricsSampler
from probes.nvml import NvmlSampler
from probes.probe_spec import ProbeSpec
from probes.sampler_kinds import SAMPLER_KINDS, build_samplers
from results.folder.sample_sources import SAMPLE_SOURCES

NAMES = {"vllm:num_requests_running": ("num_requests_running",)}


def test_every_kind_in_start_order() -> None:
    spec = ProbeSpec(processes={"client": os.getpid()}, engine_url="http://e:8000",
                     engine_metric_names=NAMES)  # fmt: skip
    samplers = build_samplers(spec)
    assert [type(s) for s in samplers] == [NvmlSampler, CpuSampler, EngineMetricsSampler]
    assert [k.name for k in SAMPLER_KINDS] == ["nvml", "cpu", "engine_metrics"]
    assert {s.source for s in samplers} <= set(SAMPLE_SOURCES)


def test_kinds_off_are_not_built() -> None:
    assert build_samplers(ProbeSpec(nvml=False, cpu=False)) == []
    only_cpu = build_samplers(ProbeSpec(nvml=False, engine_url=None))
    assert [type(s) for s in only_cpu] == [CpuSampler]


def test_a_fleet_has_one_metrics_sampler_per_replica_with_the_headers() -> None:
    replicas = ("http://a:1", "http://b:2")
    spec = ProbeSpec(nvml=False, cpu=False, engine_url=replicas[0], engine_metric_names=NAMES,
                     engine_endpoints=replicas)  # fmt: skip
    samplers = build_samplers(spec, {"Authorization": "Bearer k"})
    assert [type(s) for s in samplers] == [EngineMetricsSampler] * 2
    assert [s.endpoint for s in samplers] == list(replicas)  # type: ignore[attr-defined]
    assert all(s._headers == {"Authorization": "Bearer k"} for s in samplers)  # type: ignore[attr-defined]
