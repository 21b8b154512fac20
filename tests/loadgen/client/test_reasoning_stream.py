"""Reasoning streams against a real local server: ``delta.reasoning`` and
``delta.reasoning_content`` chunks are recorded as reasoning, the first ``content`` as the first
answer token, and the reasoning tokens come from usage when reported, else from the stream."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.client.readers.token_counts import count_stream_tokens
from results.folder.records import RequestRecord
from tests.support.http_server import run
from tests.support.loadgen_requests import send_once, spec
from tests.support.sse_streams import chat_events, replay_handler
from tests.support.tokenizers import make_tokenizer

pytestmark = pytest.mark.timeout(30)

THINKING = [{"reasoning": " kalo"}, {"reasoning": " mine"}, {"reasoning": " tra"}]
ANSWER = [{"content": " strings"}, {"content": " pro"}]


def _send(events: list[bytes], delay_s: float = 0.01, **client_kw: Any) -> RequestRecord:
    handler = replay_handler(events, delay_s=delay_s)
    return run(send_once(handler, spec("chat", max_tokens=8), **client_kw))


def test_reasoning_without_usage_details_is_counted_per_chunk() -> None:
    # vLLM >= 0.10 and OpenRouter say "reasoning"; no completion_tokens_details at all.
    record = _send(chat_events(THINKING + ANSWER, usage={"completion_tokens": 5}))
    assert record.status == "ok", record.error
    assert [c.reasoning for c in record.chunks] == [True, True, True, False, False]
    assert record.output_tokens == 5 and record.output_tokens_source == "usage"
    assert record.reasoning_tokens == 3 and record.reasoning_tokens_source == "chunks"
    assert record.first_token_s == record.chunks[0].t_s
    assert record.first_answer_token_s == record.chunks[3].t_s
    assert record.first_token_s <= record.first_answer_token_s <= record.done_s


def test_reasoning_without_any_usage_is_counted_with_the_tokenizer() -> None:
    tok = make_tokenizer()
    record = _send(chat_events(THINKING + ANSWER), tokenizer=tok)
    thinking = "".join(d["reasoning"] for d in THINKING)
    answer = "".join(d["content"] for d in ANSWER)
    expected = len(tok.encode(thinking, add_special_tokens=False))
    assert record.reasoning_tokens == expected and record.reasoning_tokens_source == "tokenizer"
    assert record.output_tokens == expected + len(tok.encode(answer, add_special_tokens=False))
    assert sum(c.n_tokens for c in record.chunks if c.reasoning) == expected
    assert sum(c.n_tokens for c in record.chunks) == record.output_tokens


def test_reported_reasoning_tokens_are_shared_among_the_reasoning_chunks() -> None:
    # vLLM's reasoning parsers (and DeepSeek) say "reasoning_content"; usage carries the count.
    thinking = [{"reasoning_content": d["reasoning"]} for d in THINKING]
    usage = {"completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 6}}
    record = _send(chat_events(thinking + ANSWER, usage=usage), tokenizer=make_tokenizer())
    assert record.reasoning_tokens == 6 and record.reasoning_tokens_source == "usage"
    assert sum(c.n_tokens for c in record.chunks if c.reasoning) == 6
    assert sum(c.n_tokens for c in record.chunks if not c.reasoning) == 3
    assert all(c.n_tokens >= 1 for c in record.chunks)


def test_an_event_with_reasoning_and_content_becomes_two_chunks() -> None:
    deltas = [{"reasoning_content": " kalo"}, {"reasoning_content": " mi", "content": " ne"}]
    record = _send(chat_events(deltas + ANSWER, usage={"completion_tokens": 5}))
    assert [c.reasoning for c in record.chunks] == [True, True, False, False, False]
    assert record.chunks[1].t_s == record.chunks[2].t_s == record.first_answer_token_s
    assert record.reasoning_tokens == 2


def test_a_placeholder_zero_beside_streamed_reasoning_is_not_taken_for_a_count() -> None:
    usage = {"completion_tokens": 5, "completion_tokens_details": {"reasoning_tokens": 0}}
    record = _send(chat_events(THINKING + ANSWER, usage=usage))
    assert record.reasoning_tokens == 3 and record.reasoning_tokens_source == "chunks"


def test_a_stream_without_reasoning_records_none() -> None:
    record = _send(chat_events(ANSWER, usage={"completion_tokens": 2}))
    assert record.reasoning_tokens == 0 and record.reasoning_tokens_source is None
    assert record.first_answer_token_s == record.first_token_s == record.chunks[0].t_s
    assert not any(c.reasoning for c in record.chunks)


def test_a_request_cut_while_reasoning_has_no_first_answer_token() -> None:
    record = _send(chat_events(THINKING, usage={"completion_tokens": 3}))
    assert record.first_answer_token_s is None and record.first_token_s is not None
    assert record.reasoning_tokens == record.output_tokens == 3


def test_hidden_reasoning_reported_by_usage_is_kept() -> None:
    # OpenAI's o-series report reasoning tokens without streaming them: all chunks are answer.
    usage = {"completion_tokens": 10, "completion_tokens_details": {"reasoning_tokens": 8}}
    counts = count_stream_tokens([" a", " b"], [False, False], usage, None)
    assert (counts.output_tokens, counts.reasoning_tokens) == (10, 8)
    assert counts.reasoning_source == "usage" and sum(counts.per_chunk) == 10
