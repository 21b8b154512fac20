"""The probes of one `bench run`: which samplers, and where their readings go.

- :func:`probe_spec`: NVML and CPU samplers when the engine runs on this host, engine /metrics
  through the adapter's name map always: the load URL's, or, with ``--metrics-url``
  (:func:`metrics_targets`), those URLs' instead, each series labelled ``scrape``. The NVML
  sampler measures the engine's GPUs only
  (probes.gpu_scope, in the probe process: the engine's processes on a GPU, else its
  CUDA_VISIBLE_DEVICES, which a launched engine inherits from bench, else ``--gpus``, else all,
  said plainly).
  The CPU sampler follows two groups of processes: "client" (bench, its load generator workers
  and its probe process) and "engine" (the engine bench launched, or the process listening on
  a local ``--url``'s port: :func:`listening_pid`), each with every child it starts.
- :func:`gpu_scope_of`: that scope, for run.json's analytic section (the engine's GPUs' roofs).
- :func:`start_probes`: the probe process, each unavailable probe said once; it streams the
  readings into the run folder's ``samples.parts`` as it takes them (probes.sample_stream), which
  the folder's writer seals into samples.parquet at the end
  (bench.run.end.run_writer.RunWriter.seal_samples).

Starting the engine itself (and Nsight Systems around it) is bench.run.launch.engine_launch;
run.json's
analytic section (model shape, dtypes, roofs) is results.figures.analytic.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
from rich.console import Console

from bench.run.messages import print_warning
from engine_adapters.base import EngineAdapter
from probes.probe_process import ProbeProcess
from probes.probe_spec import ProbeSpec
from probes.session import ProbeResult
from results.folder import sample_sources
from results.folder.parts.writer import FLUSH_S, SAMPLES_PARTS

# `--metrics-url LABEL=URL`: a label is a short name, the URL http(s).
_LABELLED = re.compile(r"(?P<label>[A-Za-z0-9_.:-]+)=(?P<url>https?://.+)")


def metrics_targets(values: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """(label, URL) of each ``--metrics-url`` value, in order: ``LABEL=URL``, or a bare URL,
    labelled with itself. A URL with no path scrapes the adapter's metrics path there
    (:func:`probe_spec`); any other path is taken as given.

    Raises:
        ValueError: a value that is no http(s) URL, or a label given twice; the message names
            the option and the fix.
    """
    targets: list[tuple[str, str]] = []
    for value in values:
        match = _LABELLED.fullmatch(value.strip())
        if match is not None:
            label, url = match["label"], match["url"]
        elif value.strip().startswith(("http://", "https://")):
            label = url = value.strip()
        else:
            raise ValueError(
                f"--metrics-url {value!r}: expected URL or LABEL=URL with an http:// or "
                "https:// URL, e.g. router=http://10.0.0.5:9000/metrics"
            )
        if any(label == seen for seen, _ in targets):
            raise ValueError(f"--metrics-url label {label!r} is given twice: give each one name")
        targets.append((label, url))
    return tuple(targets)


def _metrics_url(url: str, adapter: EngineAdapter) -> str:
    """``url`` to scrape: the adapter's metrics path appended where ``url`` has no path."""
    return url.rstrip("/") + adapter.metrics_path if urlsplit(url).path in ("", "/") else url


def probe_spec(
    adapter: EngineAdapter, base_url: str, engine_pid: int | None, local: bool,
    gpus: str | None = None,
    endpoints: Sequence[str] = (),
    metrics_urls: Sequence[tuple[str, str]] = (),
) -> ProbeSpec:  # fmt: skip
    """Samplers for a run against ``base_url`` (``local``: the engine runs on this host);
    ``gpus``: the user's --gpus.

    ``endpoints``: a fleet's replicas (every ``--url``, ``base_url`` the first): each gets its
    own /metrics sampler, its samples labelled ``endpoint``, and, when local, its own CPU group
    (``engine-1``, ``engine-2``, ... in ``--url`` order), so that no replica's CPU counts as
    another process's; NVML stays the machine's.

    ``metrics_urls``: (label, URL) of each ``--metrics-url`` (:func:`metrics_targets`): those
    are scraped instead of the load URL's and the replicas' /metrics, each sample labelled
    ``scrape``; to keep the load URL's too, give it as one more ``--metrics-url``.
    """
    processes = {"client": os.getpid()}
    if len(endpoints) > 1:
        for n, url in enumerate(endpoints, start=1):
            pid = listening_pid(url) if local else None
            if pid is not None:
                processes[f"engine-{n}"] = pid
    else:
        if engine_pid is None and local:
            engine_pid = listening_pid(base_url)
        if engine_pid is not None:
            processes["engine"] = engine_pid
    return ProbeSpec(
        nvml=local,
        gpus=gpus,
        # A launched engine inherits bench's environment (engine_adapters.launcher).
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        cuda_device_order=os.environ.get("CUDA_DEVICE_ORDER"),
        cpu=True,
        processes=processes,
        engine_url=base_url if adapter.metric_names else None,
        engine_metric_names=adapter.metric_names,
        engine_metrics_path=adapter.metrics_path,
        engine_endpoints=tuple(endpoints) if len(endpoints) > 1 else (),
        engine_scrapes=tuple((label, _metrics_url(url, adapter)) for label, url in metrics_urls),
    )


def listening_pid(base_url: str) -> int | None:
    """The pid of the process of this host listening on ``base_url``'s port, when it is another
    process than this one (an engine in this process is the client's) and may be seen; else
    None (then the engine's CPU counts as other processes')."""
    parts = urlsplit(base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):  # some systems show other processes' sockets to root only
        return None
    for conn in connections:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            return conn.pid if conn.pid not in (None, os.getpid()) else None
    return None


def gpu_scope_of(result: ProbeResult | None) -> dict[str, Any] | None:
    """The NVML sampler's GPU scope (probes.gpu_scope) in ``result``, or None."""
    for report in result.reports if result else []:
        if report.get("source") == sample_sources.NVML and report.get("scope"):
            return dict(report["scope"])
    return None


def start_probes(
    console: Console, adapter: EngineAdapter, base_url: str, engine_pid: int | None, local: bool,
    headers: Mapping[str, str] | None = None, gpus: str | None = None,
    endpoints: Sequence[str] = (), metrics_urls: Sequence[tuple[str, str]] = (),
    folder: Path | None = None,
) -> tuple[ProbeProcess | None, list[str]]:  # fmt: skip
    """Start the probe process; a probe that cannot run is said once, and the run goes on.
    ``headers`` (``--api-key``/``--header``) go with each /metrics scrape; ``gpus``: --gpus;
    ``endpoints``: a fleet's replicas; ``metrics_urls``: the ``--metrics-url`` targets
    (:func:`probe_spec`); ``folder``: the run folder, whose ``samples.parts`` the readings are
    streamed to every FLUSH_S seconds (None: they come back in the probes' result)."""
    spec = probe_spec(adapter, base_url, engine_pid, local, gpus, endpoints, metrics_urls)
    parts = folder / SAMPLES_PARTS if folder is not None else None
    probes = ProbeProcess(spec, headers, parts, FLUSH_S)
    try:
        reasons = probes.start()
    except RuntimeError as e:
        probes, reasons = None, [f"probes: {e}; the run goes on without them"]
    for reason in reasons:
        print_warning(console, reason)
    return probes, reasons
