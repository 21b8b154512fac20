"""What differs between the APIs the client speaks: the path, the headers, the body, and the
accumulator that reads the answer.

    completions  POST /v1/completions        SSE, OpenAI chunks  (readers.openai_stream)
    chat         POST /v1/chat/completions   SSE, OpenAI chunks  (readers.openai_stream)
    responses    POST /v1/responses          SSE, typed events   (readers.responses_stream)
    messages     POST /v1/messages           SSE, Anthropic's    (readers.anthropic_stream)
    embeddings   POST /v1/embeddings         one JSON body       (readers.pooling)
    rerank       POST /v1/rerank             one JSON body       (readers.pooling)

Anthropic's API takes its key in ``x-api-key`` and wants ``anthropic-version``: a request to
/v1/messages carries the key of ``Authorization: Bearer KEY`` there too (vLLM, which serves
/v1/messages, checks ``Authorization``), unless ``--header`` gave either already.

A request's tools, tool choice and tool turns go in each API's own form
(loadgen.client.tool_bodies), and so do its images (loadgen.client.image_bodies).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from loadgen.client.image_bodies import with_images
from loadgen.client.readers.anthropic_stream import ANTHROPIC_VERSION, MessagesAccumulator
from loadgen.client.readers.openai_stream import StreamAccumulator
from loadgen.client.readers.pooling import PoolingAccumulator, pooling_body
from loadgen.client.readers.responses_stream import ResponsesAccumulator
from loadgen.client.tool_bodies import anthropic_turns, responses_input, tool_fields
from loadgen.request_spec import API_KINDS, POOLING_APIS, RequestSpec, message_dict, message_text

__all__ = ["API_PATHS", "accumulator_for", "api_headers", "generation_body", "request_body"]

# Each API's path under the server's /v1 root.
API_PATHS: dict[str, str] = {
    "completions": "/completions",
    "chat": "/chat/completions",
    "responses": "/responses",
    "messages": "/messages",
    "embeddings": "/embeddings",
    "rerank": "/rerank",
}
assert set(API_PATHS) == set(API_KINDS), "every API of loadgen.request_spec has its path"


def api_headers(api: str, headers: Mapping[str, str]) -> dict[str, str]:
    """The headers of a request to ``api``, from the client's own ``headers`` (module
    docstring): JSON is accepted from the pooling APIs, Anthropic's headers go to /v1/messages."""
    out = dict(headers)
    lower = {name.lower(): name for name in out}
    if api in POOLING_APIS and "accept" in lower:
        out[lower["accept"]] = "application/json"
    if api == "messages":
        scheme, _, token = out.get(lower.get("authorization", ""), "").partition(" ")
        if token and scheme.lower() == "bearer" and "x-api-key" not in lower:
            out["x-api-key"] = token
        if "anthropic-version" not in lower:
            out["anthropic-version"] = ANTHROPIC_VERSION
    return out


def _conversation(spec: RequestSpec) -> list[dict[str, Any]]:
    turns = spec.messages or (("user", spec.prompt),)
    return [message_dict(turn) for turn in turns]


def generation_body(spec: RequestSpec, model: str) -> dict[str, Any]:
    """The JSON body of ``spec`` before the extra fields: OpenAI's for completions and chat,
    the Responses API's (``input``, ``max_output_tokens``; it streams usage unasked),
    Anthropic's (``system`` apart from ``messages``), or a pooling body."""
    model = spec.model or model
    if spec.api in POOLING_APIS:
        return pooling_body(spec, model)
    body: dict[str, Any] = {"model": model, "temperature": spec.temperature, "stream": True}
    if spec.api == "responses":
        items = with_images(spec.api, responses_input(_conversation(spec)), spec.images)
        body.update(input=items, max_output_tokens=spec.max_tokens)
    elif spec.api == "messages":
        turns = _conversation(spec)
        system = "\n\n".join(
            message_text(t)[1] for t in turns if t["role"] in ("system", "developer")
        )
        body["messages"] = with_images(
            spec.api,
            anthropic_turns([t for t in turns if t["role"] not in ("system", "developer")]),
            spec.images,
        )
        body["max_tokens"] = spec.max_tokens
        if system:
            body["system"] = system
    else:
        body.update(max_tokens=spec.max_tokens, stream_options={"include_usage": True})
        if spec.api == "chat":
            body["messages"] = with_images(spec.api, _conversation(spec), spec.images)
        else:
            body["prompt"] = spec.prompt
    body.update(tool_fields(spec.api, spec.tools, spec.tool_choice))
    if spec.ignore_eos:
        body["ignore_eos"] = True
    if spec.seed is not None:
        body["seed"] = spec.seed
    return body


def request_body(spec: RequestSpec, model: str, extra_body: Mapping[str, Any]) -> bytes:
    """The JSON bytes every driver sends for ``spec``: :func:`generation_body`, then the run's
    ``extra_body`` and the request's own ``fields`` over it (they may not set the reserved
    fields, request_spec.RESERVED_FIELDS)."""
    body = generation_body(spec, model)
    body.update(extra_body)
    if spec.fields:
        body.update(spec.fields)
    return json.dumps(body, separators=(",", ":")).encode()


def accumulator_for(spec: RequestSpec) -> StreamAccumulator | PoolingAccumulator:
    """A fresh accumulator for the answer to ``spec`` (module docstring)."""
    if spec.api == "responses":
        return ResponsesAccumulator(spec.api, spec.max_tokens)
    if spec.api == "messages":
        return MessagesAccumulator(spec.api, spec.max_tokens)
    if spec.api in POOLING_APIS:
        return PoolingAccumulator(spec)
    return StreamAccumulator(spec.api, spec.max_tokens)
