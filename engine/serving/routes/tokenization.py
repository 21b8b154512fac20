"""vLLM's /tokenize and /detokenize on the reference engine, with vLLM's request and answer shapes.

POST /tokenize ``{"model"?, "prompt", "add_special_tokens" = true, "return_token_strs" = false}``
or the chat form ``{"model"?, "messages", "add_generation_prompt" = true,
"add_special_tokens" = false}`` -> ``{"count", "max_model_len", "tokens", "token_strs"}``.
POST /detokenize ``{"model"?, "tokens"}`` -> ``{"prompt"}``. A client that finds no tokenizer
of its own (bench.run.endpoint.server_tokenizer) builds prompts of exact lengths with these.
Encoding and decoding run in a worker thread, so a long text never holds the event loop; the
tokenizer and the model's name are the app's (engine/serving/routes/serving_state.py).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from engine.serving.protocol import (
    DetokenizeRequest,
    TokenizeChatRequest,
    TokenizeCompletionRequest,
    error_body,
)
from engine.serving.routes.serving_state import serving_state
from engine.tokenizer.tokenizer import Tokenizer

__all__ = ["router"]

router = APIRouter()


def _tokenize_ids(
    tokenizer: Tokenizer, req: TokenizeCompletionRequest | TokenizeChatRequest
) -> list[int]:
    if isinstance(req, TokenizeCompletionRequest):
        return tokenizer.encode(req.prompt, add_special_tokens=req.add_special_tokens)
    messages = [{"role": m.role, "content": m.text()} for m in req.messages]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=req.add_generation_prompt)
    return tokenizer.encode(text, add_special_tokens=req.add_special_tokens)


@router.post("/tokenize")
async def tokenize(req: TokenizeCompletionRequest | TokenizeChatRequest, request: Request) -> Any:
    state = serving_state(request)
    if req.model is not None:
        state.check_model(req.model)
    tokenizer = state.tokenizer
    try:
        ids = await run_in_threadpool(_tokenize_ids, tokenizer, req)
    except Exception as e:  # the chat template is user data: any error it raises is a 400
        field = "messages" if isinstance(req, TokenizeChatRequest) else "prompt"
        body = error_body(f"could not tokenize the {field}: {str(e)[:200]}", 400, field)
        return JSONResponse(body, status_code=400)
    strs = [tokenizer.backend.id_to_token(i) or "" for i in ids] if req.return_token_strs else None
    return {
        "count": len(ids),
        "max_model_len": state.max_model_len,
        "tokens": ids,
        "token_strs": strs,
    }


@router.post("/detokenize")
async def detokenize(req: DetokenizeRequest, request: Request) -> Any:
    state = serving_state(request)
    if req.model is not None:
        state.check_model(req.model)
    vocab = state.tokenizer.vocab_size
    bad = [t for t in req.tokens if not 0 <= t < vocab]
    if bad:
        message = f"token ids out of range [0, {vocab}): {bad[:5]}"
        return JSONResponse(error_body(message, 400, "tokens"), status_code=400)
    # Special tokens are kept, as vLLM's /detokenize keeps them: the text round-trips.
    text = await run_in_threadpool(state.tokenizer.decode, req.tokens, False)
    return {"prompt": text}
