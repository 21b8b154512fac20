"""The engine's prefix cache before the load: flushed, primed or left (a scenario's
``[prefix_cache]``, bench.scenario.prefix_cache), and its hit rate over the load.

    cache = prepare_prefix_cache(scenario.prefix_cache, adapter, base_url, headers, plan, model)
    ... the load ...
    run_json["prefix_cache"] = cache.finish()

``flush`` POSTs the adapter's reset endpoint (``EngineAdapter.reset_prefix_cache_path``:
vLLM's and ours ``/reset_prefix_cache``, SGLang's ``/flush_cache``); an engine without one is
recorded as "not supported by <engine>" and the run goes on. ``prime`` flushes, then sends the
plan's first requests once with one output token each (they are not the run's records), so
their prompts are cached when the load starts. Either way the engine's prefix cache counters
(``prefix_cache_queries_total`` / ``prefix_cache_hits_total`` under the adapter's names) are
read from /metrics just before and just after the load: their increase is the hit rate of the
load's own requests, in tokens (hits / queried tokens).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping, Sequence

import httpx

from bench.scenario.prefix_cache import PrefixCacheSection
from engine_adapters.base import EngineAdapter
from loadgen.client.auth import RequestHeaders
from loadgen.clock import RunClock
from loadgen.drivers.driver import ClientConfig, LoadPlan
from loadgen.request_spec import RequestSpec
from perfmodel.files import JSONObject
from probes.engine_metrics import normalize

__all__ = ["PrefixCacheRun", "prepare_prefix_cache", "reset_prefix_cache"]

# Requests in flight at once while priming: enough to prime quickly, few enough not to queue.
_PRIME_CONCURRENCY = 8
_COUNTERS = ("prefix_cache_queries_total", "prefix_cache_hits_total")


def reset_prefix_cache(
    adapter: EngineAdapter, base_url: str, headers: Mapping[str, str] | None = None
) -> JSONObject:
    """POST the adapter's reset endpoint; what happened, for run.json: ``endpoint``,
    ``http_status``, ``success`` (the engine's answer, where it gives one), or ``supported``
    false with a ``note`` naming the engine, or ``error`` when the request failed."""
    path = adapter.reset_prefix_cache_path
    if path is None:
        return {"supported": False, "note": f"not supported by {adapter.name}"}
    out: JSONObject = {"supported": True, "endpoint": path}
    try:
        response = httpx.post(base_url.rstrip("/") + path, headers=headers, timeout=30.0)
    except httpx.HTTPError as exc:
        out["error"] = f"POST {path} failed: {type(exc).__name__}: {exc}"
        return out
    out["http_status"] = response.status_code
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("success"), bool):
        out["success"] = body["success"]
    else:
        out["success"] = response.status_code == 200
    if response.status_code == 404 and adapter.name == "vllm":
        out["note"] = "vLLM serves /reset_prefix_cache only with VLLM_SERVER_DEV_MODE=1"
    return out


def _counters(
    adapter: EngineAdapter, base_url: str, headers: Mapping[str, str] | None
) -> dict[str, float] | None:
    """The prefix cache counters summed over label sets, or None when the engine exports none."""
    names = {k: v for k, v in adapter.metric_names.items() if k in _COUNTERS}
    if len(names) < len(_COUNTERS):
        return None
    try:
        response = httpx.get(base_url.rstrip("/") + adapter.metrics_path, headers=headers,
                             timeout=10.0)  # fmt: skip
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None  # no /metrics here (an OpenAI-compatible server without it)
    out: dict[str, float] = {}
    try:
        for name, value, _ in normalize(response.text, names):
            out[name] = out.get(name, 0.0) + value
    except ValueError:  # not Prometheus text: no counters to read
        return None
    return out if len(out) == len(_COUNTERS) else None


async def _prime(
    requests: Sequence[RequestSpec], base_url: str, model: str, headers: RequestHeaders
) -> int:
    """Send each request once with one output token; how many came back ok."""
    client = ClientConfig(base_url, model, headers=headers).client(_PRIME_CONCURRENCY, None)
    clock = RunClock()
    gate = asyncio.Semaphore(_PRIME_CONCURRENCY)

    async def one(i: int, spec: RequestSpec) -> bool:
        short = dataclasses.replace(
            spec, request_id=f"prime-{spec.request_id}", max_tokens=1, abandon=None
        )
        async with gate:
            record = await client.send(short, i, clock.now_s(), clock)
        return record.status == "ok"

    try:
        done = await asyncio.gather(*(one(i, s) for i, s in enumerate(requests)))
    finally:
        await client.aclose()
    return sum(done)


@dataclasses.dataclass
class PrefixCacheRun:
    """What was done to the prefix cache before the load, and the counters then (see
    :func:`prepare_prefix_cache`); :meth:`finish` reads them again after the load."""

    adapter: EngineAdapter
    base_url: str
    headers: Mapping[str, str] | None
    record: JSONObject
    before: dict[str, float] | None

    def describe(self) -> str | None:
        """One line on what was done before the load, or None when the cache was left."""
        state = self.record["state"]
        if state == "leave":
            return None
        reset = self.record["reset"]
        if not reset["supported"]:
            done = f"cannot flush: {reset['note']}"
        elif "error" in reset:
            done = reset["error"]
        else:
            answer = "emptied" if reset["success"] else "NOT emptied (requests running?)"
            done = f"POST {reset['endpoint']}: HTTP {reset['http_status']}, {answer}"
            if "note" in reset:
                done += f" ({reset['note']})"
        if state == "prime":
            prime = self.record["prime"]
            done += f"; primed with {prime['ok']}/{prime['requests']} requests"
        return f"prefix cache {state}: {done}"

    def finish(self) -> JSONObject:
        """run.json's ``prefix_cache``: the state asked, the reset and priming done, and the
        load's ``hit_rate`` (hit tokens / queried tokens over the load; None where the engine
        exports no counters, or none was queried)."""
        after = _counters(self.adapter, self.base_url, self.headers)
        out = dict(self.record)
        if self.before is None or after is None:
            out.update(hit_rate=None, hit_rate_note=(
                f"no prefix cache counters of {self.adapter.name} were read from "
                f"{self.adapter.metrics_path} before and after the load"
            ))  # fmt: skip
            return out
        queries = after["prefix_cache_queries_total"] - self.before["prefix_cache_queries_total"]
        hits = after["prefix_cache_hits_total"] - self.before["prefix_cache_hits_total"]
        out.update(
            queried_tokens=int(queries), hit_tokens=int(hits),
            hit_rate=hits / queries if queries > 0 else None,
        )  # fmt: skip
        return out


def prepare_prefix_cache(
    section: PrefixCacheSection | None,
    adapter: EngineAdapter,
    base_url: str,
    headers: RequestHeaders,
    plan: LoadPlan,
    model: str,
) -> PrefixCacheRun:
    """Flush, prime or leave the engine's prefix cache (module docstring), then read its
    counters; the caller runs the load and then calls :meth:`PrefixCacheRun.finish`."""
    section = section or PrefixCacheSection()
    header_map = headers.as_dict()
    record: JSONObject = {"state": section.state}
    if section.state in ("flush", "prime"):
        record["reset"] = reset_prefix_cache(adapter, base_url, header_map)
    if section.state == "prime":
        requests = plan.requests[: section.prime_requests]
        t0 = time.perf_counter()
        ok = asyncio.run(_prime(requests, base_url, model, headers))
        record["prime"] = {
            "requests": len(requests),
            "ok": ok,
            "seconds": time.perf_counter() - t0,
        }
    before = _counters(adapter, base_url, header_map)
    return PrefixCacheRun(adapter, base_url, header_map, record, before)
