"""OpenAI's routes on the reference engine: POST /v1/completions and /v1/chat/completions (each
checked, tokenized off the event loop by engine/serving/prompt_input.py, then answered by
engine/serving/routes/completion_responses.py) and GET /v1/models.

A request naming another model, an empty prompt or one past the context, and sampling settings
the engine cannot honour get a 400 naming the field (engine/serving/errors.py).
"""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from engine.core.request import SamplingParams
from engine.serving.errors import BadRequest
from engine.serving.protocol import ChatCompletionRequest, CompletionRequest
from engine.serving.routes.completion_responses import respond
from engine.serving.routes.serving_state import serving_state

__all__ = ["router"]

router = APIRouter()


def _sampling(max_tokens: int, req: CompletionRequest | ChatCompletionRequest) -> SamplingParams:
    try:
        return req.sampling_params(max_tokens)
    except ValueError as e:
        raise BadRequest(str(e)) from e


@router.post("/v1/completions")
async def completions(req: CompletionRequest, request: Request) -> Response:
    state = serving_state(request)
    state.check_model(req.model)
    if isinstance(req.prompt, str):
        prompt_ids = await state.prompts.encode_text(req.prompt, "prompt")
    else:
        prompt_ids = list(req.prompt)
        state.prompts.check_ids(prompt_ids, "prompt")
    state.check_length(prompt_ids, req.max_tokens, "prompt")
    params = _sampling(req.max_tokens, req)
    rid = f"cmpl-{uuid.uuid4().hex}"
    return await respond(
        request, state, "completion", rid, prompt_ids, params, req.stream, req.include_usage
    )


@router.post("/v1/chat/completions")
async def chat_completions(req: ChatCompletionRequest, request: Request) -> Response:
    state = serving_state(request)
    state.check_model(req.model)
    prompt_ids = await state.prompts.encode_chat(req.chat_messages())
    max_tokens = req.max_completion_tokens or req.max_tokens
    if max_tokens is None:
        max_tokens = max(1, state.max_model_len - len(prompt_ids))
    state.check_length(prompt_ids, max_tokens, "messages")
    params = _sampling(max_tokens, req)
    rid = f"chatcmpl-{uuid.uuid4().hex}"
    return await respond(
        request, state, "chat", rid, prompt_ids, params, req.stream, req.include_usage
    )


@router.get("/v1/models")
async def models(request: Request) -> dict[str, Any]:
    state = serving_state(request)
    return {
        "object": "list",
        "data": [
            {
                "id": state.model_name,
                "object": "model",
                "created": 0,
                "owned_by": "llm-perf-lab",
                # What the engine loaded (a preset or a directory), as vLLM's `root`.
                "root": state.engine.config.model.model,
                "max_model_len": state.max_model_len,
            }
        ],
    }
