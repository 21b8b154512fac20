"""Start every sampler of a run before the load and stop them after it.

:class:`ProbeSession` runs the samplers as threads of the calling process. :class:`ProbeProcess`
runs a ProbeSession in a child process (spawned, so it shares no lock or thread with the
parent): the load generator's event loop then never waits on the interpreter lock while a
sampler parses a large /metrics page, and the probes' whole cost is one process's CPU, which is
measured. Both return a :class:`ProbeResult`: the readings (columns t_ns, source, name, value,
labels, as probes.sampler) and one report per sampler (status, reason, ticks, missed ticks,
errors, cost per tick). Given a parts folder (a run folder's ``samples.parts``), either streams
the readings there as they are taken (probes.sample_stream), from the process that takes them,
and its result holds none of them: only their count and the stream's report.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probes.sample_stream import SampleStream
from probes.sampler import SAMPLE_COLUMNS, Sampler, SamplerThread
from probes.sampler_kinds import SAMPLER_KINDS


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

    def to_json(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self),
            "processes": dict(self.processes),
            "engine_metric_names": {k: list(v) for k, v in self.engine_metric_names.items()},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProbeSpec:
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

    def build(self, engine_headers: Mapping[str, str] | None = None) -> list[Sampler]:
        """The samplers of every kind in probes.sampler_kinds that this spec wants, in that
        order; ``engine_headers`` go with each /metrics scrape. They are an argument, not a field,
        so that a spec, which may be shown or stored, never holds a secret."""
        samplers: list[Sampler] = []
        for kind in SAMPLER_KINDS:
            if kind.applies(self):
                samplers += kind.build(self, engine_headers)
        return samplers


@dataclass
class ProbeResult:
    """What the probes recorded: columnar readings and a report per sampler; or, when they were
    streamed to the run folder, no readings and the stream's report
    (probes.sample_stream.SampleStream.report)."""

    columns: dict[str, list[Any]]
    reports: list[dict[str, Any]]
    process: dict[str, Any] | None = None  # the probe process's own cost, when there was one
    stream: dict[str, Any] | None = None

    @property
    def num_samples(self) -> int:
        """Readings taken: those held, plus those written to the folder's parts."""
        return len(self.columns["t_ns"]) + (self.stream["samples"] if self.stream else 0)

    def messages(self) -> list[str]:
        """One line per sampler that failed while running (unavailable ones were said at
        start), saying why."""
        lines = []
        for r in self.reports:
            if r["status"] in ("failed", "hung"):
                lines.append(f"probe {r['source']}: {r['status']}: {r['reason']}")
            elif r["errors"]:
                lines.append(f"probe {r['source']}: {r['errors']} failed ticks: {r['first_error']}")
        if self.stream and self.stream["errors"]:
            lines.append(
                f"probe samples: {self.stream['errors']} failed writes of a part, "
                f"{self.stream['unwritten']} readings never written: {self.stream['first_error']}"
            )
        return lines

    def to_json(self) -> dict[str, Any]:
        """run.json's "probes" section."""
        return {
            # A fleet's /metrics samplers share a source: each is keyed by its replica too, and
            # each --metrics-url by its label.
            "samplers": {
                f"{r['source']} {r.get('scrape') or r['endpoint']}"
                if r.get("scrape") or r.get("endpoint")
                else r["source"]: r
                for r in self.reports
            },
            "process": self.process,
            "samples": self.num_samples,
            **({"stream": self.stream} if self.stream else {}),
        }


class ProbeSession:
    """Samplers as threads of this process: ``start()``, then ``stop()`` for the result.

    ``parts``: a folder the readings are streamed to as parts every ``flush_s`` seconds
    (probes.sample_stream); None holds them all for the result.
    """

    def __init__(
        self, samplers: Sequence[Sampler], parts: Path | None = None, flush_s: float = 0.0
    ) -> None:
        self.threads = [SamplerThread(s) for s in samplers]
        self.stream = SampleStream(self.threads, parts, flush_s) if parts is not None else None

    def start(self) -> list[str]:
        """Open and start every sampler; returns why each unavailable one cannot run."""
        reasons = []
        for thread in self.threads:
            reason = thread.start()
            if reason is not None:
                reasons.append(f"probe {thread.sampler.source}: {reason}")
        if self.stream is not None:
            self.stream.start()
        return reasons

    def stop(self) -> ProbeResult:
        """Stop every sampler (each after a closing tick) and, when streaming, write the last
        part; the result."""
        for thread in self.threads:
            thread.stop()
        columns: dict[str, list[Any]] = {name: [] for name in SAMPLE_COLUMNS}
        reports = [t.report() for t in self.threads]
        if self.stream is not None:
            self.stream.close()
            return ProbeResult(columns, reports, stream=self.stream.report())
        for thread in self.threads:
            for name, values in thread.buffer.columns().items():
                columns[name].extend(values)
        return ProbeResult(columns, reports)
