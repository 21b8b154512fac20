"""Each API the client speaks, one entry apiece: how its body is built, which headers it
sends, and which reader reads its answer. The entry carries the API's traits
(results.schema.api_kinds.ApiKind: its path, what it takes, which figures apply).

    completions  POST /v1/completions        SSE, OpenAI chunks  (readers.openai_stream)
    chat         POST /v1/chat/completions   SSE, OpenAI chunks  (readers.openai_stream)
    responses    POST /v1/responses          SSE, typed events   (readers.responses_stream)
    messages     POST /v1/messages           SSE, Anthropic's    (readers.anthropic_stream)
    embeddings   POST /v1/embeddings         one JSON body       (readers.pooling)
    rerank       POST /v1/rerank             one JSON body       (readers.pooling)

Anthropic's API takes its key in ``x-api-key`` and wants ``anthropic-version``: a request to
/v1/messages carries the key of ``Authorization: Bearer KEY`` there too (vLLM, which serves
/v1/messages, checks ``Authorization``), unless ``--header`` gave either already. The pooling
APIs answer JSON, so they accept it.

A request's tools, tool choice and tool turns go in each API's own form
(loadgen.client.tool_bodies), and so do its images (loadgen.client.image_bodies).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from loadgen.client.image_bodies import (
    ANTHROPIC_IMAGES,
    CHAT_IMAGES,
    RESPONSES_IMAGES,
    with_images,
)
from loadgen.client.readers.anthropic_stream import ANTHROPIC_VERSION, MessagesAccumulator
from loadgen.client.readers.openai_stream import StreamAccumulator
from loadgen.client.readers.pooling import (
    PoolingAccumulator,
    embeddings_body,
    embeddings_problem,
    rerank_body,
    rerank_problem,
)
from loadgen.client.readers.reader import BodyReader, StreamReader
from loadgen.client.readers.responses_stream import ResponsesAccumulator
from loadgen.client.tool_bodies import (
    ToolChoice,
    Tools,
    anthropic_tools,
    anthropic_turns,
    chat_tools,
    responses_input,
    responses_tools,
)
from loadgen.request_spec import RequestSpec, message_dict, message_text
from perfmodel.files import JSONObject, JSONView
from results.schema.api_kinds import APIS, Api, ApiKind

__all__ = ["API_CLIENTS", "ApiClient", "api_client", "generation_body", "request_body"]

Body = JSONObject


@dataclass(frozen=True)
class ApiClient:
    """How the client speaks one API (module docstring).

    ``body``: the request's own body (the model given) before the common generation fields
    and the extra ones; ``tools``: its tool fields (None: it takes no tools);
    ``stream_reader`` / ``body_reader``: a fresh reader of its answer, exactly one of them
    set; ``headers``: the client's headers as this API wants them.
    """

    kind: ApiKind
    body: Callable[[RequestSpec, str], Body]
    stream_reader: Callable[[RequestSpec], StreamReader] | None = None
    body_reader: Callable[[RequestSpec], BodyReader] | None = None
    tools: Callable[[Tools, ToolChoice], Body] | None = None
    headers: Callable[[Mapping[str, str]], dict[str, str]] = dict

    def __post_init__(self) -> None:
        assert (self.stream_reader is None) != (self.body_reader is None), (
            f"{self.kind.name}: one reader, of a stream or of a body"
        )


def _json_answer(headers: Mapping[str, str]) -> dict[str, str]:
    out = dict(headers)
    for name in [n for n in out if n.lower() == "accept"]:
        out[name] = "application/json"
    return out


def _anthropic_headers(headers: Mapping[str, str]) -> dict[str, str]:
    out = dict(headers)
    lower = {name.lower(): name for name in out}
    scheme, _, token = out.get(lower.get("authorization", ""), "").partition(" ")
    if token and scheme.lower() == "bearer" and "x-api-key" not in lower:
        out["x-api-key"] = token
    if "anthropic-version" not in lower:
        out["anthropic-version"] = ANTHROPIC_VERSION
    return out


def _conversation(spec: RequestSpec) -> list[JSONObject]:
    turns = spec.messages or (("user", spec.prompt),)
    return [message_dict(turn) for turn in turns]


def _completions_body(spec: RequestSpec, model: str) -> Body:
    return {"model": model, "prompt": spec.prompt, "max_tokens": spec.max_tokens,
            "stream_options": {"include_usage": True}}  # fmt: skip


def _chat_body(spec: RequestSpec, model: str) -> Body:
    messages = with_images(CHAT_IMAGES, _conversation(spec), spec.images)
    return {"model": model, "messages": messages, "max_tokens": spec.max_tokens,
            "stream_options": {"include_usage": True}}  # fmt: skip


def _responses_body(spec: RequestSpec, model: str) -> Body:
    # The Responses API streams usage unasked.
    items = with_images(RESPONSES_IMAGES, responses_input(_conversation(spec)), spec.images)
    return {"model": model, "input": items, "max_output_tokens": spec.max_tokens}


def _messages_body(spec: RequestSpec, model: str) -> Body:
    turns = _conversation(spec)
    system = [message_text(t)[1] for t in turns if t["role"] in ("system", "developer")]
    chat = anthropic_turns([t for t in turns if t["role"] not in ("system", "developer")])
    body = {"model": model, "max_tokens": spec.max_tokens,
            "messages": with_images(ANTHROPIC_IMAGES, chat, spec.images)}  # fmt: skip
    if any(system):
        body["system"] = "\n\n".join(system)
    return body


def _openai_reader(spec: RequestSpec) -> StreamReader:
    return StreamAccumulator(spec.api, spec.max_tokens)


def _responses_reader(spec: RequestSpec) -> StreamReader:
    return ResponsesAccumulator(spec.api, spec.max_tokens)


def _messages_reader(spec: RequestSpec) -> StreamReader:
    return MessagesAccumulator(spec.api, spec.max_tokens)


def _embeddings_reader(spec: RequestSpec) -> BodyReader:
    return PoolingAccumulator(spec, embeddings_problem)


def _rerank_reader(spec: RequestSpec) -> BodyReader:
    return PoolingAccumulator(spec, rerank_problem)


_ENTRIES = (
    ApiClient(APIS["completions"], _completions_body, _openai_reader),
    ApiClient(APIS["chat"], _chat_body, _openai_reader, tools=chat_tools),
    ApiClient(APIS["responses"], _responses_body, _responses_reader, tools=responses_tools),
    ApiClient(
        APIS["messages"],
        _messages_body,
        _messages_reader,
        tools=anthropic_tools,
        headers=_anthropic_headers,
    ),
    ApiClient(
        APIS["embeddings"], embeddings_body, body_reader=_embeddings_reader, headers=_json_answer
    ),
    ApiClient(APIS["rerank"], rerank_body, body_reader=_rerank_reader, headers=_json_answer),
)
API_CLIENTS: dict[Api, ApiClient] = {client.kind.name: client for client in _ENTRIES}
assert tuple(API_CLIENTS) == tuple(APIS), "every API of results.schema.api_kinds has its entry"


def api_client(spec: RequestSpec) -> ApiClient:
    """The entry of ``spec``'s API."""
    return API_CLIENTS[spec.api]


def generation_body(spec: RequestSpec, model: str) -> Body:
    """The JSON body of ``spec`` before the extra fields: its API's own, then, for a generation
    API, the temperature, the stream asked for, its tools, ``ignore_eos`` and ``seed``."""
    client = api_client(spec)
    body = client.body(spec, spec.model or model)
    if client.kind.pooling:
        return body
    body.update(temperature=spec.temperature, stream=True)
    if spec.tools and client.tools is not None:
        body.update(client.tools(spec.tools, spec.tool_choice))
    if spec.ignore_eos:
        body["ignore_eos"] = True
    if spec.seed is not None:
        body["seed"] = spec.seed
    return body


def request_body(spec: RequestSpec, model: str, extra_body: JSONView) -> bytes:
    """The JSON bytes every driver sends for ``spec``: :func:`generation_body`, then the run's
    ``extra_body`` and the request's own ``fields`` over it (they may not set the reserved
    fields, request_spec.RESERVED_FIELDS)."""
    body = generation_body(spec, model)
    body.update(extra_body)
    if spec.fields:
        body.update(spec.fields)
    return json.dumps(body, separators=(",", ":")).encode()
