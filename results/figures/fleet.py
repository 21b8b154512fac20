"""Fleets: one run against several replicas (`bench run --url A --url B ...`).

The run folder says which replica served what, and every figure is broken down by it:

- requests.parquet's ``endpoint`` (results.folder.records.RequestRecord) names each request's
  replica,
  as its base URL; a folder written before fleets has no such column, and reads it as
  run.json's ``engine.url`` (results.folder.endpoints.fill_endpoints), the one engine it ran
  against;
- run.json's ``engine`` section lists the replicas, in ``--url`` order (``endpoints``), and the
  routing policy (``route``) for a fleet run, and nothing more for a run against one URL;
- summary.json's ``endpoints`` section (:func:`endpoint_section`, only for a fleet run) holds,
  per replica, the same request figures as the run's totals (:data:`ENDPOINT_FIGURES`), computed
  by the same function (results.figures.summary.compute_summary) on that replica's requests, over
  the
  run's window: the replicas' request counts and throughputs add up to the totals; and, where
  the probes scraped the replicas' /metrics, each replica's engine figures (``engine``: the
  gauges, counters and rates of summary.json's ``probes.engine``, from the series labelled with
  its endpoint).
"""

from __future__ import annotations

import json

import pandas as pd

from perfmodel.files import JSONObject, JSONView
from results.figures.samples_summary import samples_summary
from results.figures.summary import compute_summary
from results.folder import sample_sources
from results.folder.endpoints import fleet_endpoints
from results.folder.token_source import TokenSource, token_source

__all__ = [
    "ENDPOINT_FIGURES",
    "endpoint_section",
    "part_figures",
]

# The summary.json sections repeated per replica: requests by status, errors, tokens,
# throughput, and the latency distributions (ms).
ENDPOINT_FIGURES = (
    "counts",
    "errors",
    "tokens",
    "throughput",
    "ttft_ms",
    "itl_ms",
    "tpot_ms",
    "e2el_ms",
)


def _endpoint_label(labels: str) -> str | None:
    """The ``endpoint`` label of a samples.parquet ``labels`` text (JSON), or None."""
    try:
        parsed = json.loads(labels)
    except (TypeError, ValueError):
        return None
    return parsed.get("endpoint") if isinstance(parsed, dict) else None


def _replica_samples(samples: pd.DataFrame | None, url: str) -> pd.DataFrame | None:
    """The engine /metrics readings of the replica ``url`` (labelled ``endpoint``), or None."""
    if samples is None or samples.empty:
        return None
    engine = samples[samples["source"] == sample_sources.ENGINE]
    ours = {text for text in engine["labels"].unique() if _endpoint_label(text) == url}
    part = engine[engine["labels"].isin(ours)]
    return part if not part.empty else None


def run_span(window: JSONView) -> tuple[float, float] | None:
    """The run's window (summary.json's ``window``) as (start, end) run seconds, or None."""
    start, end = window.get("run_start_s"), window.get("run_end_s")
    return (float(start), float(end)) if start is not None and end is not None else None


def part_figures(
    part: pd.DataFrame,
    tokens: pd.DataFrame | TokenSource,
    run_json: JSONView,
    window: JSONView,
    total: int,
) -> JSONObject:
    """:data:`ENDPOINT_FIGURES` of ``part``, some of a run's requests (one replica's, one
    model's), computed as the run's totals are but over the run's ``window``, so the parts'
    counts and throughputs add up to the totals; with ``share``, its part of the run's
    ``total`` requests (0..1; None for a run of none)."""
    scenario = run_json.get("scenario") or {}
    part_tokens = token_source(tokens).only(part["request_id"])
    figures = compute_summary(
        part,
        part_tokens,
        scenario.get("warmup_s") or 0.0,
        scenario.get("cooldown_s") or 0.0,
        scenario.get("slo"),
        span_s=run_span(window) if not part.empty else None,
    )
    # A pooling run's summary has no token figures (results.figures.workloads.pooling).
    out: JSONObject = {n: figures[n] for n in ENDPOINT_FIGURES if n in figures}  # type: ignore[literal-required]
    out["share"] = len(part) / total if total else None
    return out


def endpoint_section(
    requests: pd.DataFrame,
    tokens: pd.DataFrame | TokenSource,
    run_json: JSONView,
    window: JSONView,
    samples: pd.DataFrame | None = None,
) -> JSONObject | None:
    """summary.json's ``endpoints`` section, or None for a run against one endpoint.

    ``window`` is the run's (summary.json's ``window``): each replica's figures are cut to the
    same seconds. Returns ``{"route": policy, "by_endpoint": {url: {figure: ...}}}``, the
    replicas in ``--url`` order, each with :data:`ENDPOINT_FIGURES`, ``share``, its part of
    the run's requests (0..1), and ``engine``, its engine figures from ``samples``
    (samples.parquet; None where no reading of it was taken).
    """
    urls = fleet_endpoints(run_json)
    if len(urls) < 2:
        return None
    engine = run_json.get("engine") or {}
    by_endpoint: JSONObject = {}
    for url in urls:
        part = requests[requests["endpoint"] == url]
        part_tokens = token_source(tokens).only(part["request_id"])
        by_endpoint[url] = part_figures(part, part_tokens, run_json, window, len(requests))
        readings = _replica_samples(samples, url)
        probes = samples_summary(readings, part_tokens, window) if readings is not None else {}
        by_endpoint[url]["engine"] = probes.get("engine")
    return {"route": engine.get("route"), "by_endpoint": by_endpoint}
