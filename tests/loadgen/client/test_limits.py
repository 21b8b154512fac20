"""The client's limits: a stream past its length, a usage beyond belief, the answers that are no
stream (loadgen.client.limits, loadgen.client.readers.openai_stream, loadgen.client.answers)."""

from __future__ import annotations

import json

import pytest

from loadgen.client.answers import answer_problem, is_stream, key_headers, redirect_message
from loadgen.client.limits import CHUNK_CHARS, output_cap, usage_problem
from loadgen.client.readers.openai_stream import StreamAccumulator, StreamError


def _event(text: str, chat: bool = False, reasoning: bool = False) -> str:
    if chat:
        delta = {"reasoning_content" if reasoning else "content": text}
        return json.dumps({"choices": [{"index": 0, "delta": delta}]})
    return json.dumps({"choices": [{"index": 0, "text": text}]})


@pytest.mark.parametrize(("chat", "reasoning"), [(False, False), (True, False), (True, True)])
def test_a_stream_far_past_max_tokens_fails(chat: bool, reasoning: bool) -> None:
    acc = StreamAccumulator("chat" if chat else "completions", max_tokens=4)
    cap = output_cap(4)
    assert cap is not None
    for i in range(cap):
        acc.add_event(_event(f" t{i}", chat, reasoning), i)
    with pytest.raises(StreamError, match=rf"streamed {cap + 1} content chunks .* max_tokens 4"):
        for i in range(cap, cap + 40):
            acc.add_event(_event(f" t{i}", chat, reasoning), i)


def test_a_stream_of_too_much_text_fails_before_its_chunk_cap() -> None:
    acc = StreamAccumulator("completions", max_tokens=4)
    cap = output_cap(4)
    assert cap is not None
    with pytest.raises(StreamError, match="for max_tokens 4"):
        for i in range(cap):
            acc.add_event(_event("x" * (4 * CHUNK_CHARS)), i)
    assert len(acc.texts) < cap


def test_without_max_tokens_nothing_is_capped() -> None:
    acc = StreamAccumulator("completions")
    for i in range(500):
        acc.add_event(_event(" t"), i)
    assert len(acc.texts) == 500


@pytest.mark.parametrize(
    ("usage", "found"),
    [
        ({"prompt_tokens": -1, "completion_tokens": 3}, "prompt_tokens=-1"),
        ({"prompt_tokens": 3, "completion_tokens": 10**15}, "completion_tokens=1e+15"),
        ({"total_tokens": 10**12}, "total_tokens=1e+12"),
        ({"completion_tokens": 200}, "completion_tokens=200 for max_tokens 4"),
        (
            {"completion_tokens": 3, "completion_tokens_details": {"reasoning_tokens": -2}},
            "reasoning_tokens=-2",
        ),
        ([1, 2], "not an object"),
    ],
)
def test_an_absurd_usage_is_named(usage: object, found: str) -> None:
    problem = usage_problem(usage, 4)
    assert problem is not None and found in problem


@pytest.mark.parametrize(
    "usage",
    [None, {"prompt_tokens": 3, "completion_tokens": 4}, {"completion_tokens": "n/a"}, {}],
)
def test_a_plausible_or_unfilled_usage_passes(usage: object) -> None:
    assert usage_problem(usage, 4) is None


def test_which_answers_are_streams() -> None:
    assert is_stream("text/event-stream; charset=utf-8") and is_stream("")
    assert not is_stream("text/html") and not is_stream("application/json")
    url = "http://127.0.0.1:8000/v1/completions"
    assert answer_problem(200, "text/event-stream", "", b"", url, []) is None
    html = answer_problem(200, "text/html", "", b"<html><title>Proxy</title>", url, [])
    assert html is not None and "got text/html" in html and "'Proxy'" in html


def test_key_headers_are_found_by_name() -> None:
    names = ["Accept", "Authorization", "X-Api-Key", "X-Team", "api-token"]
    assert key_headers(names) == ["Authorization", "X-Api-Key", "api-token"]


def test_a_redirect_says_where_without_its_query_or_credentials() -> None:
    url = "http://127.0.0.1:8000/v1/completions"
    other = redirect_message(302, "https://user:pw@login.example/sso?token=abc", url)
    assert "another origin, to https://login.example/sso;" in other
    assert "abc" not in other and "pw" not in other
    same = redirect_message(308, "/v2/completions", url)
    assert "on the same server, to http://127.0.0.1:8000/v2/completions" in same
