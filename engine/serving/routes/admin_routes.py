"""The reference engine's routes beside the OpenAI API: GET /health (503 once the engine died),
/version, /metrics (Prometheus), /debug/engine and /debug/steps, and vLLM's POST
/reset_prefix_cache.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as distribution_version
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from engine.serving.core_messages import Describe, ResetPrefixCache, StepsSince
from engine.serving.protocol import error_body
from engine.serving.routes.serving_state import serving_state

__all__ = ["package_version", "router"]

router = APIRouter()


def package_version() -> str:
    """This project's installed version ("unknown" when run from an uninstalled tree)."""
    try:
        return distribution_version("llm-perf-lab")
    except PackageNotFoundError:
        return "unknown"


@router.get("/health")
async def health(request: Request) -> Response:
    if serving_state(request).llm.dead is not None:
        return JSONResponse(error_body("engine step loop failed", 503), status_code=503)
    return Response(status_code=200)


@router.get("/version")
async def version() -> dict[str, Any]:
    """vLLM's /version shape: what bench records as the engine's version."""
    return {"version": package_version()}


@router.get("/debug/engine")
async def engine_info(request: Request) -> dict[str, Any]:
    """What this engine runs: its settings, the model's shape, dtypes and KV capacity."""
    info: dict[str, Any] = await serving_state(request).llm.call(Describe())
    return info


@router.get("/debug/steps")
async def steps(request: Request, since: int = 0) -> dict[str, Any]:
    """Per-step records (engine.core.telemetry.STEP_COLUMNS) from step number ``since`` on.

    Times are time.perf_counter_ns of the engine's host (CLOCK_MONOTONIC on Linux).
    """
    columns = await serving_state(request).llm.call(StepsSince(since))
    return {"clock": "perf_counter_ns", "columns": columns}


@router.post("/reset_prefix_cache")
async def reset_prefix_cache(request: Request) -> dict[str, bool]:
    """Empty the prefix cache, as vLLM's endpoint of that name: ``{"success": bool}``, false
    while requests are running (retry when they are done)."""
    return {"success": bool(await serving_state(request).llm.call(ResetPrefixCache()))}


@router.get("/metrics")
async def prometheus_metrics(request: Request) -> Response:
    return Response(serving_state(request).metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
