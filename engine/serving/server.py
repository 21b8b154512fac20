"""The OpenAI-compatible HTTP server of the reference engine (FastAPI + uvicorn).

Routes: POST /v1/completions and /v1/chat/completions (streaming as server-sent events, with
``stream_options.include_usage`` giving a final chunk with empty choices and the usage, as vLLM
does), GET /v1/models, /health and /metrics, vLLM's POST /tokenize and /detokenize
(engine/serving/tokenization.py). Every bad request gets a 400 with OpenAI's error body; the
server keeps serving. What one client may hold (body size, read deadline, connections) is
ServerLimits' (engine/serving/guards/limits.py); prompts are checked and tokenized off the event
loop
(engine/serving/prompt_input.py). When the engine dies, in-flight requests get a 503 and
``run_server`` stops with EngineDiedError, so that a supervisor can restart it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as distribution_version
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST

from engine.config import EngineConfig
from engine.core.request import SamplingParams
from engine.llm_engine import LLMEngine
from engine.native.cpu_allocator import retain_freed_memory
from engine.serving.async_engine import AsyncLLM, EngineDeadError, RemoteAsyncLLM
from engine.serving.core_messages import Describe, ResetPrefixCache, StepsSince
from engine.serving.core_process import EngineCoreError, EngineCoreProcess
from engine.serving.errors import BadRequest, error_response, install_error_handlers
from engine.serving.guards.auth import ApiKeyMiddleware
from engine.serving.guards.body_limit import BodyLimit
from engine.serving.guards.connection_guard import ServerConfig, within_file_limit
from engine.serving.guards.disconnect import ClientDisconnected, until_disconnected
from engine.serving.guards.limits import ServerLimits
from engine.serving.metrics import EngineMetrics
from engine.serving.output_processor import RequestTextState, TextDelta
from engine.serving.process_title import FRONT_TITLE, SINGLE_PROCESS_TITLE, set_process_title
from engine.serving.prompt_input import PromptInput
from engine.serving.protocol import ChatCompletionRequest, CompletionRequest, error_body
from engine.serving.reasoning import ReasoningPrefix
from engine.serving.tokenization import add_tokenize_routes

log = logging.getLogger(__name__)

# Seconds between the engine's death and the server's exit: in-flight requests get their 503.
_EXIT_AFTER_DEATH_S = 0.5


class EngineDiedError(EngineCoreError):
    """The engine died while serving; the server has stopped."""


def package_version() -> str:
    """This project's installed version ("unknown" when run from an uninstalled tree)."""
    try:
        return distribution_version("llm-perf-lab")
    except PackageNotFoundError:
        return "unknown"


def _dumps(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _sse(obj: dict[str, Any]) -> str:
    return f"data: {_dumps(obj)}\n\n"


def _usage(d: TextDelta) -> dict[str, int]:
    return {
        "prompt_tokens": d.num_prompt_tokens,
        "completion_tokens": d.num_output_tokens,
        "total_tokens": d.num_prompt_tokens + d.num_output_tokens,
    }


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
    prefix = reasoning or ReasoningPrefix()
    metrics = EngineMetrics(engine.served_model_name)
    llm = (
        RemoteAsyncLLM(engine, metrics)
        if isinstance(engine, EngineCoreProcess)
        else AsyncLLM(engine, metrics)
    )
    llm.on_dead = on_engine_dead
    tokenizer = engine.tokenizer
    model_name = engine.served_model_name
    prompts = PromptInput(tokenizer, engine.model_config.vocab_size, engine.max_model_len)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        llm.start(asyncio.get_running_loop())
        try:
            yield
        finally:
            llm.shutdown()
            prompts.close()

    app = FastAPI(title="reference engine", lifespan=lifespan)
    app.state.llm = llm
    app.add_middleware(BodyLimit, max_bytes=limits.max_body_bytes)
    install_error_handlers(app)
    if api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=api_key)

    @app.exception_handler(EngineDeadError)
    async def _on_engine_dead(_: Request, exc: EngineDeadError) -> Response:
        return error_response(str(exc), 503, code="engine_dead", err_type="internal_error")

    def check_model(name: str) -> None:
        if name != model_name:
            raise BadRequest(
                f"the model {name!r} does not exist; this server serves {model_name!r}",
                "model",
                "model_not_found",
            )

    def sampling(max_tokens: int, req: CompletionRequest | ChatCompletionRequest) -> SamplingParams:
        try:
            return req.sampling_params(max_tokens)
        except ValueError as e:
            raise BadRequest(str(e)) from e

    def usage(d: TextDelta, is_chat: bool) -> dict[str, Any]:
        return {**_usage(d), **prefix.usage_details(d.num_output_tokens, is_chat)}

    def check_length(prompt_ids: list[int], max_tokens: int, prompt_field: str) -> None:
        if not prompt_ids:
            raise BadRequest(f"{prompt_field} is empty; send at least one token", prompt_field)
        try:
            engine.check_request(len(prompt_ids), SamplingParams(max_tokens=max_tokens))
        except ValueError as e:
            # max_tokens alone past the context: no prompt could fit, so it is the field to fix.
            field = "max_tokens" if max_tokens >= engine.max_model_len else prompt_field
            message = str(e) if field in str(e) else f"{field}: {e}"
            raise BadRequest(message, field, "context_length_exceeded") from e

    async def run(
        request_id: str, prompt_ids: list[int], params: SamplingParams, reasoning_tokens: int
    ) -> AsyncIterator[TextDelta]:
        state = RequestTextState(
            tokenizer, params.stop, time.perf_counter(), metrics, reasoning_tokens
        )
        outputs = llm.generate(request_id, prompt_ids, params)
        try:
            async for out in outputs:
                delta = state.process(out)
                yield delta
                if delta.finished:
                    return
        finally:
            # Closing the engine's generator early (a stop string, a client that left) aborts
            # the request there, which frees its KV blocks.
            await outputs.aclose()

    async def first_then_rest(
        gen: AsyncIterator[TextDelta],
    ) -> tuple[TextDelta | None, AsyncIterator[TextDelta]]:
        # Pull the first output before answering, so that a request the engine rejects gets
        # a 400 instead of a 200 stream that breaks.
        try:
            first = await gen.__anext__()
        except StopAsyncIteration:
            return None, gen
        except ValueError as e:  # the engine refused it (Rejected): its message says why
            raise BadRequest(str(e)) from e
        return first, gen

    async def respond(
        request: Request,
        kind: str,
        request_id: str,
        prompt_ids: list[int],
        params: SamplingParams,
        stream: bool,
        include_usage: bool,
    ) -> Response:
        try:
            # Until its first output a request may wait in the queue: watch its client there
            # too, and throughout a response that is sent whole at the end.
            reasoning_tokens = prefix.tokens_for(kind == "chat")
            first, gen = await until_disconnected(
                request.receive,
                first_then_rest(run(request_id, prompt_ids, params, reasoning_tokens)),
            )
            if stream:
                return stream_response(kind, request_id, first, gen, include_usage)
            return await until_disconnected(
                request.receive, whole_response(kind, request_id, first, gen)
            )
        except ClientDisconnected:
            # No one reads this; the request was aborted when its generator was cancelled.
            return Response(status_code=499)

    def stream_response(
        kind: str,
        request_id: str,
        first: TextDelta | None,
        gen: AsyncIterator[TextDelta],
        include_usage: bool,
    ) -> Response:
        created = int(time.time())
        is_chat = kind == "chat"
        obj = "chat.completion.chunk" if is_chat else "text_completion"

        def chunk(choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> str:
            body: dict[str, Any] = {
                "id": request_id,
                "object": obj,
                "created": created,
                "model": model_name,
                "choices": choices,
            }
            if usage is not None:
                body["usage"] = usage
            return _sse(body)

        def choice(d: TextDelta) -> dict[str, Any]:
            if is_chat:
                delta = prefix.delta(d.text, d.reasoning_chars)
                return {"index": 0, "delta": delta, "finish_reason": d.finish_reason}
            return {"index": 0, "text": d.text, "finish_reason": d.finish_reason}

        async def events() -> AsyncIterator[str]:
            last = first
            try:
                if is_chat:
                    role = {"index": 0, "delta": {"role": "assistant", "content": ""}}
                    yield chunk([{**role, "finish_reason": None}])
                if first is not None and (first.text or first.finished):
                    yield chunk([choice(first)])
                async for d in gen:
                    last = d
                    if d.text or d.finished:
                        yield chunk([choice(d)])
            except EngineDeadError as e:
                yield _sse(error_body(str(e), 503, code="engine_dead", err_type="internal_error"))
            finally:
                await gen.aclose()
            if include_usage and last is not None:
                yield chunk([], usage(last, is_chat))
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def whole_response(
        kind: str, request_id: str, first: TextDelta | None, gen: AsyncIterator[TextDelta]
    ) -> Response:
        created = int(time.time())
        is_chat = kind == "chat"
        texts, last = [first.text if first else ""], first
        reasoning_chars = first.reasoning_chars if first else 0
        async for d in gen:
            texts.append(d.text)
            reasoning_chars += d.reasoning_chars
            last = d
        assert last is not None
        text = "".join(texts)
        if is_chat:
            result = {"index": 0, "message": prefix.message(text, reasoning_chars)}
        else:
            result = {"index": 0, "text": text}
        result["finish_reason"] = last.finish_reason
        return JSONResponse(
            {
                "id": request_id,
                "object": "chat.completion" if is_chat else "text_completion",
                "created": created,
                "model": model_name,
                "choices": [result],
                "usage": usage(last, is_chat),
            }
        )

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request) -> Response:
        check_model(req.model)
        if isinstance(req.prompt, str):
            prompt_ids = await prompts.encode_text(req.prompt, "prompt")
        else:
            prompt_ids = list(req.prompt)
            prompts.check_ids(prompt_ids, "prompt")
        check_length(prompt_ids, req.max_tokens, "prompt")
        params = sampling(req.max_tokens, req)
        rid = f"cmpl-{uuid.uuid4().hex}"
        return await respond(
            request, "completion", rid, prompt_ids, params, req.stream, req.include_usage
        )

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest, request: Request) -> Response:
        check_model(req.model)
        messages = [{"role": m.role, "content": m.text()} for m in req.messages]
        prompt_ids = await prompts.encode_chat(messages)
        max_tokens = req.max_completion_tokens or req.max_tokens
        if max_tokens is None:
            max_tokens = max(1, engine.max_model_len - len(prompt_ids))
        check_length(prompt_ids, max_tokens, "messages")
        params = sampling(max_tokens, req)
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        return await respond(
            request, "chat", rid, prompt_ids, params, req.stream, req.include_usage
        )

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": model_name,
                    "object": "model",
                    "created": 0,
                    "owned_by": "llm-perf-lab",
                    # What the engine loaded (a preset or a directory), as vLLM's `root`.
                    "root": engine.config.model.model,
                    "max_model_len": engine.max_model_len,
                }
            ],
        }

    add_tokenize_routes(app, tokenizer, engine.max_model_len, check_model)

    @app.get("/health")
    async def health() -> Response:
        if llm.dead is not None:
            return JSONResponse(error_body("engine step loop failed", 503), status_code=503)
        return Response(status_code=200)

    @app.get("/version")
    async def version() -> dict[str, Any]:
        """vLLM's /version shape: what bench records as the engine's version."""
        return {"version": package_version()}

    @app.get("/debug/engine")
    async def engine_info() -> dict[str, Any]:
        """What this engine runs: its settings, the model's shape, dtypes and KV capacity."""
        return await llm.call(Describe())

    @app.get("/debug/steps")
    async def steps(since: int = 0) -> dict[str, Any]:
        """Per-step records (engine.core.telemetry.STEP_COLUMNS) from step number ``since`` on.

        Times are time.perf_counter_ns of the engine's host (CLOCK_MONOTONIC on Linux).
        """
        return {"clock": "perf_counter_ns", "columns": await llm.call(StepsSince(since))}

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> dict[str, bool]:
        """Empty the prefix cache, as vLLM's endpoint of that name: ``{"success": bool}``, false
        while requests are running (retry when they are done)."""
        return {"success": bool(await llm.call(ResetPrefixCache()))}

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

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
