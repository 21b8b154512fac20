"""The other APIs on the reference engine: POST /v1/responses (OpenAI's Responses API), POST
/v1/messages (Anthropic's Messages), POST /v1/embeddings and POST /v1/rerank.

/v1/responses and /v1/messages run the request as a chat completion (the chat template over
their turns, the same sampling fields) and answer in their own events
(engine.serving.routes.api_events). /v1/embeddings returns each input's final hidden states,
mean-pooled and L2-normalized, computed by the model's own forward in the engine core between
steps (LLMEngine.embed): not batched with generation, not in /debug/steps, and refused on the
simulated device, which has no weights. /v1/rerank ranks documents as vLLM does with an
embedding model (a bi-encoder): by the cosine of each document's embedding and the query's.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from engine.serving.api_bodies import (
    EmbeddingsRequest,
    MessagesRequest,
    RerankRequest,
    ResponsesRequest,
)
from engine.serving.core_messages import Embed
from engine.serving.errors import BadRequest
from engine.serving.routes.completion_responses import respond
from engine.serving.routes.serving_state import ServingState, serving_state

__all__ = ["router"]

router = APIRouter()


async def _chat_ids(state: ServingState, messages: list[dict[str, str]], field: str) -> list[int]:
    if not messages:
        raise BadRequest(f"{field} is empty; send at least one turn", field)
    return await state.prompts.encode_chat(messages)


def _sampling(req: ResponsesRequest | MessagesRequest, max_tokens: int) -> Any:
    try:
        return req.sampling_params(max_tokens)
    except ValueError as e:
        raise BadRequest(str(e)) from e


@router.post("/v1/responses")
async def responses(req: ResponsesRequest, request: Request) -> Response:
    state = serving_state(request)
    state.check_model(req.model)
    prompt_ids = await _chat_ids(state, req.chat_messages(), "input")
    max_tokens = req.max_output_tokens or max(1, state.max_model_len - len(prompt_ids))
    state.check_length(prompt_ids, max_tokens, "input")
    rid = f"resp_{uuid.uuid4().hex}"
    params = _sampling(req, max_tokens)
    return await respond(request, state, "responses", rid, prompt_ids, params, req.stream, True)


@router.post("/v1/messages")
async def messages(req: MessagesRequest, request: Request) -> Response:
    state = serving_state(request)
    state.check_model(req.model)
    prompt_ids = await _chat_ids(state, req.chat_messages(), "messages")
    state.check_length(prompt_ids, req.max_tokens, "messages")
    rid = f"msg_{uuid.uuid4().hex}"
    params = _sampling(req, req.max_tokens)
    return await respond(request, state, "messages", rid, prompt_ids, params, req.stream, True)


async def _embed(
    state: ServingState, items: list[str | list[int]], field: str
) -> tuple[list[list[int]], list[list[float]]]:
    """The token ids of ``items`` (texts or ids, each checked) and their embeddings."""
    prompts: list[list[int]] = []
    for i, item in enumerate(items):
        where = f"{field}.{i}"
        if isinstance(item, str):
            ids = await state.prompts.encode_text(item, where)
        else:
            ids = list(item)
            state.prompts.check_ids(ids, where)
        state.check_length(ids, 1, where)
        prompts.append(ids)
    answer = await state.llm.call(Embed(prompts))
    if "error" in answer:
        raise BadRequest(answer["error"], "model", "embeddings_not_supported")
    return prompts, answer["embeddings"]


@router.post("/v1/embeddings")
async def embeddings(req: EmbeddingsRequest, request: Request) -> dict[str, Any]:
    state = serving_state(request)
    state.check_model(req.model)
    prompts, vectors = await _embed(state, req.inputs(), "input")
    data = [
        {"object": "embedding", "index": i, "embedding": vector} for i, vector in enumerate(vectors)
    ]
    tokens = sum(len(p) for p in prompts)
    return {
        "object": "list",
        "id": f"embd-{uuid.uuid4().hex}",
        "created": int(time.time()),
        "model": state.model_name,
        "data": data,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


@router.post("/v1/rerank")
async def rerank(req: RerankRequest, request: Request) -> dict[str, Any]:
    """A bi-encoder's ranking, as vLLM's rerank of an embedding model: each document's score
    is the cosine of its embedding and the query's (both unit vectors: their dot product)."""
    state = serving_state(request)
    state.check_model(req.model)
    prompts, vectors = await _embed(state, [req.query, *req.documents], "documents")
    query = vectors[0]
    scores = [sum(q * d for q, d in zip(query, v, strict=True)) for v in vectors[1:]]
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    if req.top_n:
        order = order[: req.top_n]
    results = [
        {"index": i, "document": {"text": req.documents[i]}, "relevance_score": scores[i]}
        for i in order
    ]
    tokens = sum(len(p) for p in prompts)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return {"id": f"rerank-{uuid.uuid4().hex}", "model": state.model_name, "usage": usage,
            "results": results}  # fmt: skip
