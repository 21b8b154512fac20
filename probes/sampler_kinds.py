"""The kinds of sampler a run can have, in the order the probes start them.

Each :class:`SamplerKind` says when a :class:`probes.probe_spec.ProbeSpec` wants it and how its
samplers are built from that spec; :func:`build_samplers` walks :data:`SAMPLER_KINDS` in order
and nothing else knows the kinds. To add a sampler: write its module (a probes.sampler.Sampler
subclass whose ``source`` is a name of results.folder.sample_sources), give ProbeSpec the fields
it needs, and append one entry here. Each builder imports its sampler's module itself, so that a
spec can be pickled into the probe process without loading every sampler's dependencies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from probes.probe_spec import ProbeSpec
from probes.sampler import Sampler

__all__ = ["SAMPLER_KINDS", "EngineHeaders", "SamplerKind", "build_samplers"]

EngineHeaders = Mapping[str, str] | None
"""The headers of each /metrics scrape (an endpoint behind a key); never part of a spec."""


@dataclass(frozen=True)
class SamplerKind:
    """One kind of sampler: ``applies(spec)`` says whether the run wants it; ``build(spec,
    engine_headers)`` returns its samplers (several for a fleet's per-replica scrapes)."""

    name: str
    applies: Callable[[ProbeSpec], bool]
    build: Callable[[ProbeSpec, EngineHeaders], list[Sampler]]


def _nvml(spec: ProbeSpec, engine_headers: EngineHeaders) -> list[Sampler]:
    """The NVML sampler (GPM too, where ``spec.gpm``), scoped to the engine's GPUs."""
    # Imported here: a spec is pickled into the probe process, which
    # loads only the samplers it runs.
    from probes.nvml import NvmlSampler

    nvml = NvmlSampler(
        spec.nvml_interval_s, gpm=spec.gpm, engine_pid=spec.processes.get("engine"),
        cuda_visible_devices=spec.cuda_visible_devices,
        cuda_device_order=spec.cuda_device_order, gpus=spec.gpus,
    )  # fmt: skip
    return [nvml]


def _cpu(spec: ProbeSpec, engine_headers: EngineHeaders) -> list[Sampler]:
    """The CPU sampler of the machine and of ``spec.processes``' groups."""
    # Imported here: a spec is pickled into the probe process, which
    # loads only the samplers it runs.
    from probes.cpu import CpuSampler

    return [CpuSampler(spec.processes, spec.cpu_interval_s)]


def _engine_metrics(spec: ProbeSpec, engine_headers: EngineHeaders) -> list[Sampler]:
    """One /metrics sampler for the engine, or one per replica of a fleet, or one per
    ``--metrics-url`` (instead of the load URL's: a router's, a gateway's)."""
    # Imported here: a spec is pickled into the probe process, which
    # loads only the samplers it runs.
    from probes.engine_metrics import EngineMetricsSampler

    if spec.engine_scrapes:
        return [
            EngineMetricsSampler(
                url, spec.engine_metric_names, spec.engine_interval_s, path="",
                headers=engine_headers, scrape=label,
            )
            for label, url in spec.engine_scrapes
        ]  # fmt: skip
    assert spec.engine_url is not None  # applies() said so
    replicas: tuple[str | None, ...] = spec.engine_endpoints or (None,)
    return [
        EngineMetricsSampler(
            replica or spec.engine_url,
            spec.engine_metric_names,
            spec.engine_interval_s,
            path=spec.engine_metrics_path,
            headers=engine_headers,
            endpoint=replica,
        )
        for replica in replicas
    ]


SAMPLER_KINDS: tuple[SamplerKind, ...] = (
    SamplerKind("nvml", lambda spec: spec.nvml, _nvml),
    SamplerKind("cpu", lambda spec: spec.cpu, _cpu),
    SamplerKind(
        "engine_metrics",
        lambda spec: bool(spec.engine_url or spec.engine_scrapes),
        _engine_metrics,
    ),
)
"""Every kind, in start order (NVML, CPU, then the engine's /metrics)."""


def build_samplers(spec: ProbeSpec, engine_headers: EngineHeaders = None) -> list[Sampler]:
    """The samplers of every kind that ``spec`` wants, in :data:`SAMPLER_KINDS`' order;
    ``engine_headers`` go with each /metrics scrape. They are an argument, not a field of the
    spec, so that a spec, which may be shown or stored, never holds a secret."""
    samplers: list[Sampler] = []
    for kind in SAMPLER_KINDS:
        if kind.applies(spec):
            samplers += kind.build(spec, engine_headers)
    return samplers
