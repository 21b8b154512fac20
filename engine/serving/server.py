"""The OpenAI-compatible HTTP server of the reference engine (FastAPI + uvicorn).

Routes: POST /v1/completions and /v1/chat/completions (streaming as server-sent events, with
``stream_options.include_usage`` giving a final chunk with empty choices and the usage, as vLLM
does), GET /v1/models, /health and /metrics, vLLM's POST /tokenize and /detokenize
(engine/serving/tokenization.py). Every bad request gets a 400 with OpenAI's error body;
the server keeps serving.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.config import EngineConfig
from engine.core.request import SamplingParams
from engine.llm_engine import LLMEngine
from engine.native.cpu_allocator import retain_freed_memory
from engine.serving.async_engine import AsyncLLM, EngineDeadError, RemoteAsyncLLM
from engine.serving.auth import ApiKeyMiddleware
from engine.serving.core_messages import Describe, StepsSince
from engine.serving.core_process import EngineCoreError, EngineCoreProcess
from engine.serving.metrics import EngineMetrics
from engine.serving.output_processor import RequestTextState, TextDelta
from engine.serving.protocol import ChatCompletionRequest, CompletionRequest, error_body
from engine.serving.reasoning import ReasoningPrefix
from engine.serving.tokenization import add_tokenize_routes

log = logging.getLogger(__name__)


class BadRequest(Exception):
    def __init__(self, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


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


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    parts, param = [], None
    for err in exc.errors():
        loc = [str(x) for x in err.get("loc", ()) if x != "body"]
        field = ".".join(loc) or "body"
        param = param or field
        if err.get("type") == "json_invalid":
            return "the request body is not valid JSON: " + str(err.get("msg")), None
        parts.append(f"{field}: {err.get('msg')} (got {err.get('input')!r})")
    return "invalid request: " + "; ".join(parts), param


def build_app(
    engine: LLMEngine | EngineCoreProcess,
    api_key: str | None = None,
    reasoning: ReasoningPrefix | None = None,
) -> FastAPI:
    """The OpenAI-compatible app over an in-process engine (stepped in a thread) or an engine
    core process; with ``api_key``, /v1 needs ``Authorization: Bearer <api_key>``
    (engine.serving.auth); ``reasoning`` labels a prefix of each chat answer as reasoning."""
    prefix = reasoning or ReasoningPrefix()
    metrics = EngineMetrics(engine.served_model_name)
    llm = (
        RemoteAsyncLLM(engine, metrics)
        if isinstance(engine, EngineCoreProcess)
        else AsyncLLM(engine, metrics)
    )
    tokenizer = engine.tokenizer
    model_name = engine.served_model_name

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        import asyncio

        llm.start(asyncio.get_running_loop())
        try:
            yield
        finally:
            llm.shutdown()

    app = FastAPI(title="reference engine", lifespan=lifespan)
    app.state.llm = llm
    if api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=api_key)

    @app.exception_handler(RequestValidationError)
    async def _on_validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(exc)
        return JSONResponse(error_body(message, 400, param), status_code=400)

    @app.exception_handler(BadRequest)
    async def _on_bad_request(_: Request, exc: BadRequest) -> JSONResponse:
        return JSONResponse(error_body(str(exc), 400, exc.param, exc.code), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _on_http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        body = error_body(str(exc.detail), exc.status_code, err_type="http_error")
        return JSONResponse(body, status_code=exc.status_code)

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
        except ValueError as e:
            raise BadRequest(str(e), "max_tokens") from e
        return first, gen

    async def respond(
        kind: str,
        request_id: str,
        prompt_ids: list[int],
        params: SamplingParams,
        stream: bool,
        include_usage: bool,
    ) -> Response:
        is_chat = kind == "chat"
        reasoning_tokens = prefix.tokens_for(is_chat)
        first, gen = await first_then_rest(run(request_id, prompt_ids, params, reasoning_tokens))
        created = int(time.time())

        def usage(d: TextDelta) -> dict[str, Any]:
            return {**_usage(d), **prefix.usage_details(d.num_output_tokens, is_chat)}

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

        if stream:

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
                    yield _sse(error_body(str(e), 500, err_type="internal_error"))
                finally:
                    await gen.aclose()
                if include_usage and last is not None:
                    yield chunk([], usage(last))
                yield "data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")

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
                "usage": usage(last),
            }
        )

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest) -> Response:
        check_model(req.model)
        if isinstance(req.prompt, str):
            prompt_ids = tokenizer.encode(req.prompt, add_special_tokens=True)
        else:
            vocab = tokenizer.vocab_size
            bad = [t for t in req.prompt if not 0 <= t < vocab]
            if bad:
                raise BadRequest(f"prompt token ids out of range [0, {vocab}): {bad[:5]}", "prompt")
            prompt_ids = list(req.prompt)
        _check_length(engine, prompt_ids, req.max_tokens)
        params = sampling(req.max_tokens, req)
        rid = f"cmpl-{uuid.uuid4().hex}"
        return await respond("completion", rid, prompt_ids, params, req.stream, req.include_usage)

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest) -> Response:
        check_model(req.model)
        messages = [{"role": m.role, "content": m.text()} for m in req.messages]
        try:
            prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        except Exception as e:  # the template is user data: any error it raises is a 400
            raise BadRequest(f"the chat template failed on these messages: {e}", "messages") from e
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        max_tokens = req.max_completion_tokens or req.max_tokens
        if max_tokens is None:
            max_tokens = max(1, engine.max_model_len - len(prompt_ids))
        _check_length(engine, prompt_ids, max_tokens)
        params = sampling(max_tokens, req)
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        return await respond("chat", rid, prompt_ids, params, req.stream, req.include_usage)

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

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    return app


def _check_length(
    engine: LLMEngine | EngineCoreProcess, prompt_ids: list[int], max_tokens: int
) -> None:
    try:
        engine.check_request(len(prompt_ids), SamplingParams(max_tokens=max_tokens))
    except ValueError as e:
        raise BadRequest(str(e), "prompt", "context_length_exceeded") from e


def run_server(
    config: EngineConfig,
    host: str = "127.0.0.1",
    port: int = 8000,
    core_process: bool = True,
    api_key: str | None = None,
    reasoning: ReasoningPrefix | None = None,
) -> None:
    """Load the engine, then serve until interrupted. /health answers once the model is loaded.
    ``reasoning``: the reasoning prefix of chat answers (engine.serving.reasoning).

    ``core_process`` runs the engine in its own process (engine/serving/core_process.py); without it
    the engine steps in a thread of the server's process and shares its GIL. ``api_key``
    guards /v1 (engine.serving.auth); it stays in this process. Raises EngineCoreError when
    the core cannot start."""
    if not core_process:
        # The engine steps in this process: it gets the model's malloc settings.
        why = retain_freed_memory()
        if why is not None:
            log.info("malloc settings left as they were: %s", why)
    engine: LLMEngine | EngineCoreProcess = (
        EngineCoreProcess(config) if core_process else LLMEngine(config)
    )
    log.info("serving %s on http://%s:%d", engine.served_model_name, host, port)
    try:
        # uvloop and httptools, uvicorn's fast event loop and HTTP parser: per SSE event they
        # cost about half what asyncio's loop and h11 do, and a stream is one event per token.
        uvicorn.run(
            build_app(engine, api_key, reasoning), host=host, port=port, log_level="warning",
            access_log=False, loop="uvloop", http="httptools",
        )  # fmt: skip
    finally:
        if isinstance(engine, EngineCoreProcess):
            engine.close()


__all__ = ["EngineCoreError", "build_app", "run_server"]
