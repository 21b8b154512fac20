"""Which samplers a run wants: a picklable spec, built into samplers in the probe process
(probes.sampler_kinds.build_samplers)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from perfmodel.files import JSONObject, JSONView

__all__ = ["ProbeSpec"]


@dataclass(frozen=True)
class ProbeSpec:
    """Which samplers a run wants (picklable, so a child process can build them).

    processes: role -> pid of each group's root for the CPU sampler ("client": bench itself,
    "engine": the engine's first process); the sampler follows each root's children too. The
    engine's root also scopes the NVML sampler to the engine's GPUs (probes.gpu_scope), with
    ``cuda_visible_devices`` / ``cuda_device_order`` (the engine's, when bench launched it) and
    ``gpus`` (the user's --gpus) when its processes are not seen on a GPU.
    engine_url / engine_metric_names / engine_metrics_path: the engine's base URL, its adapter's
    map and where it serves Prometheus text; no URL or an empty map means no engine scraping.
    engine_endpoints: a fleet's replicas (several ``--url``): one /metrics sampler per replica
    instead of engine_url's, each sample labelled ``endpoint`` with its replica's URL.
    engine_scrapes: (label, metrics URL) of each ``--metrics-url``: one sampler per URL instead
    of engine_url's and the replicas', each sample labelled ``scrape`` with its label.
    """

    nvml: bool = True
    nvml_interval_s: float = 0.2
    gpm: bool = True
    gpus: str | None = None
    cuda_visible_devices: str | None = None
    cuda_device_order: str | None = None
    cpu: bool = True
    cpu_interval_s: float = 0.5
    processes: Mapping[str, int] = field(default_factory=dict)
    engine_url: str | None = None
    engine_metric_names: Mapping[str, Sequence[str]] = field(default_factory=dict)
    engine_interval_s: float = 0.5
    engine_metrics_path: str = "/metrics"  # TensorRT-LLM serves them at /prometheus/metrics
    engine_endpoints: tuple[str, ...] = ()
    engine_scrapes: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> JSONObject:
        return {
            **dataclasses.asdict(self),
            "processes": dict(self.processes),
            "engine_metric_names": {k: list(v) for k, v in self.engine_metric_names.items()},
        }

    @classmethod
    def from_json(cls, data: JSONView) -> ProbeSpec:
        names = {k: tuple(v) for k, v in data.get("engine_metric_names", {}).items()}
        endpoints = tuple(data.get("engine_endpoints") or ())
        scrapes = tuple((str(label), str(url)) for label, url in data.get("engine_scrapes") or ())
        return cls(
            **{
                **data,
                "engine_metric_names": names,
                "engine_endpoints": endpoints,
                "engine_scrapes": scrapes,
            }
        )
