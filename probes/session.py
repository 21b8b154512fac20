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

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfmodel.files import JSONObject
from probes.sample_stream import SampleStream
from probes.sampler import SAMPLE_COLUMNS, Sampler, SamplerThread


@dataclass
class ProbeResult:
    """What the probes recorded: columnar readings and a report per sampler; or, when they were
    streamed to the run folder, no readings and the stream's report
    (probes.sample_stream.SampleStream.report)."""

    columns: dict[str, list[Any]]
    reports: list[JSONObject]
    process: JSONObject | None = None  # the probe process's own cost, when there was one
    stream: JSONObject | None = None

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

    def to_json(self) -> JSONObject:
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
