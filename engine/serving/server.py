"""The OpenAI-compatible HTTP server of the reference engine (FastAPI + uvicorn): the app's
assembly (``build_app``) and its serving (``run_server``).

Routes, each module-level and registered from its module's APIRouter: POST /v1/completions and
/v1/chat/completions (streaming as server-sent events, with ``stream_options.include_usage``
giving a final chunk with empty choices and the usage, as vLLM does) and GET /v1/models
(engine/serving/routes/openai_routes.py); GET /health, /version, /metrics, /debug/engine,
/debug/steps
and POST /reset_prefix_cache (engine/serving/routes/admin_routes.py); vLLM's POST /tokenize and
/detokenize (engine/serving/routes/tokenization.py). They reach the engine through
``app.state.serving`` (engine/serving/routes/serving_state.py). Every bad request gets a 400 with
OpenAI's error body; the server keeps serving. What one client may hold (body size, read
deadline, connections) is ServerLimits' (engine/serving/guards/limits.py); prompts are checked
and tokenized off the event loop (engine/serving/prompt_input.py). When the engine dies,
in-flight requests get a 503 and ``run_server`` stops with EngineDiedError, so that a supervisor
can restart it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.native.cpu_allocator import retain_freed_memory
from engine.serving.async_engine import EngineDeadError
from engine.serving.core_process import EngineCoreError, EngineCoreProcess
from engine.serving.errors import error_response, install_error_handlers
from engine.serving.guards.auth import ApiKeyMiddleware
from engine.serving.guards.body_limit import BodyLimit
from engine.serving.guards.connection_guard import ServerConfig, within_file_limit
from engine.serving.guards.limits import ServerLimits
from engine.serving.process_title import FRONT_TITLE, SINGLE_PROCESS_TITLE, set_process_title
from engine.serving.reasoning import ReasoningPrefix
from engine.serving.routes import admin_routes, api_routes, openai_routes, tokenization
from engine.serving.routes.serving_state import ServingState

log = logging.getLogger(__name__)

# Seconds between the engine's death and the server's exit: in-flight requests get their 503.
_EXIT_AFTER_DEATH_S = 0.5

# In the order they were registered when build_app declared them: /tokenize comes between
# /v1/models and /health, as before.
_ROUTERS = (openai_routes.router, tokenization.router, admin_routes.router, api_routes.router)


class EngineDiedError(EngineCoreError):
    """The engine died while serving; the server has stopped."""


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    state: ServingState = app.state.serving
    state.llm.start(asyncio.get_running_loop())
    try:
        yield
    finally:
        state.llm.shutdown()
        state.prompts.close()


async def _on_engine_dead(_: Request, exc: EngineDeadError) -> Response:
    return error_response(str(exc), 503, code="engine_dead", err_type="internal_error")


def build_app(
    engine: LLMEngine | EngineCoreProcess,
    limits: ServerLimits | None = None,
    on_engine_dead: Callable[[BaseException], None] | None = None,
    *,
    api_key: str | None = None,
    reasoning: ReasoningPrefix | None = None,
) -> FastAPI:
    """The OpenAI-compatible app over an in-process engine (stepped in a thread) or an engine
    core process. ``on_engine_dead`` is called on the event loop when the engine dies, after
    every in-flight request has its error (run_server stops the server there). With
    ``api_key``, /v1 needs ``Authorization: Bearer <api_key>`` (engine.serving.guards.auth);
    ``reasoning`` labels a prefix of each chat answer as reasoning."""
    limits = limits or ServerLimits()
    state = ServingState.over(engine, reasoning)
    state.llm.on_dead = on_engine_dead
    app = FastAPI(title="reference engine", lifespan=_lifespan)
    app.state.serving = state
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes)
    install_error_handlers(app)
    if api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=api_key)
    app.add_exception_handler(EngineDeadError, _on_engine_dead)
    for router in _ROUTERS:
        app.include_router(router)
    return app


def run_server(
    config: EngineConfig,
    host: str = "127.0.0.1",
    port: int = 8000,
    core_process: bool = True,
    limits: ServerLimits | None = None,
    api_key: str | None = None,
    reasoning: ReasoningPrefix | None = None,
) -> None:
    """Load the engine, then serve until interrupted. /health answers once the model is loaded.
    ``api_key`` guards /v1 (engine.serving.guards.auth); it stays in this process. ``reasoning``:
    the
    reasoning prefix of chat answers (engine.serving.reasoning).

    ``core_process`` runs the engine in its own process (engine/serving/core_process.py); without it
    the engine steps in a thread of the server's process and shares its GIL. Raises
    EngineCoreError when the core cannot start, and EngineDiedError when the engine dies while
    serving: the requests in flight get a 503, then the server stops (a process that outlives
    its engine would answer 503 for ever, and no supervisor would restart it)."""
    limits = within_file_limit(limits or ServerLimits())
    set_process_title(FRONT_TITLE if core_process else SINGLE_PROCESS_TITLE)
    if not core_process:
        # The engine steps in this process: it gets the model's malloc settings.
        why = retain_freed_memory()
        if why is not None:
            log.info("malloc settings left as they were: %s", why)
    engine: LLMEngine | EngineCoreProcess = (
        EngineCoreProcess(config) if core_process else LLMEngine(config)
    )
    log.info("serving %s on http://%s:%d", engine.served_model_name, host, port)
    died: list[BaseException] = []

    def on_engine_dead(error: BaseException) -> None:
        died.append(error)
        asyncio.get_running_loop().call_later(_EXIT_AFTER_DEATH_S, stop)

    def stop() -> None:
        server.should_exit = True

    # uvloop and httptools, uvicorn's fast event loop and HTTP parser: per SSE event they
    # cost about half what asyncio's loop and h11 do, and a stream is one event per token.
    server = uvicorn.Server(
        ServerConfig(
            build_app(engine, limits, on_engine_dead, api_key=api_key, reasoning=reasoning),
            limits, host=host, port=port,
            log_level="warning", access_log=False, loop="uvloop",
        )
    )  # fmt: skip
    try:
        server.run()
    finally:
        if isinstance(engine, EngineCoreProcess):
            engine.close()
    if died:
        raise EngineDiedError(f"the engine died while serving: {died[0]}")


__all__ = ["EngineCoreError", "EngineDiedError", "build_app", "run_server"]
