"""The pre-flight's check of the request fields and ignore_eos, against servers on 127.0.0.1 that
take them, refuse them or ignore them; and run.json's record of the fields sent."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from bench.run.endpoint.preflight import PreflightError
from bench.run.endpoint.preflight_fields import (
    PROBE_MAX_TOKENS,
    check_request_fields,
    fields_section,
)
from loadgen.drivers.driver import LoadPlan
from loadgen.request_images import data_url
from loadgen.request_spec import RequestSpec
from loadgen.request_tools import as_tool_choice, as_tools
from loadgen.workloads.images import synthetic_image
from tests.support.threaded_http import Reply, SeenRequest, threaded_server

pytestmark = pytest.mark.timeout(60)


def _plan(*fields: dict[str, Any] | None, ignore_eos: bool = False) -> LoadPlan:
    specs = [
        RequestSpec(f"r{i}", "a prompt", 2, 8, api="chat", ignore_eos=ignore_eos, fields=f)
        for i, f in enumerate(fields)
    ]
    return LoadPlan(mode="closed", sessions=[[s] for s in specs], users=1)


def _server(refuse: set[str] = frozenset(), stop_early: bool = False):  # type: ignore[no-untyped-def]
    """A server refusing the body fields in ``refuse``; else answering all max_tokens, or 3
    tokens ending in stop (it ignores ignore_eos)."""

    def route(request: SeenRequest) -> Reply:
        body = json.loads(request.body)
        if bad := sorted(refuse & set(body)):
            error = {"error": {"message": f"Unrecognized request argument: {bad[0]}"}}
            return 400, {"Content-Type": "application/json"}, json.dumps(error).encode()
        tokens = 3 if stop_early else body["max_tokens"]
        choice = {"message": {"content": "x"}, "finish_reason": "stop" if stop_early else "length"}
        answer = {"choices": [choice], "usage": {"completion_tokens": tokens}}
        return 200, {"Content-Type": "application/json"}, json.dumps(answer).encode()

    return threaded_server(route)


def test_nothing_is_sent_without_fields_or_an_unknown_ignore_eos() -> None:
    with _server() as (url, seen):
        assert check_request_fields(_plan(None, None), url, "m", check_ignore_eos=True) is None
        # An adapter that vouches for ignore_eos: no check's tokens in the engine's counters.
        assert check_request_fields(_plan(None, ignore_eos=True), url, "m") is None
    assert seen == []


def test_the_fields_and_ignore_eos_are_sent_once_per_set_of_names() -> None:
    plan = _plan({"top_k": 5}, {"top_k": 6}, {"top_k": 5, "min_tokens": 2}, ignore_eos=True)
    with _server() as (url, seen):
        check = check_request_fields(plan, url, "m")
    assert check is not None and check.ignore_eos == "kept" and check.notes == []
    assert check.fields == ["min_tokens", "top_k"]
    bodies = [json.loads(r.body) for r in seen]
    assert [r.path for r in seen] == ["/v1/chat/completions"] * 2
    assert bodies[0]["top_k"] == 5 and bodies[0]["ignore_eos"] is True
    assert bodies[0]["stream"] is False and bodies[0]["max_tokens"] == PROBE_MAX_TOKENS
    assert bodies[1]["min_tokens"] == 2
    assert "a prompt" not in json.dumps(bodies)  # no prompt of the load is cached ahead of it


@pytest.mark.parametrize("fields", [{"top_k": 5}, None])
def test_a_server_that_refuses_ignore_eos_is_named_and_sent_none(
    fields: dict[str, Any] | None,
) -> None:
    with _server(refuse={"ignore_eos"}) as (url, seen):
        plan = _plan(fields, ignore_eos=True)
        check = check_request_fields(plan, url, "m", check_ignore_eos=True)
    assert check is not None and check.ignore_eos == "rejected"
    assert check.notes == [
        f"{url} refuses it: requests are sent without it: ignore_eos cannot hold, outputs end "
        "where the model stops, so output lengths are as served, not as asked"
    ]
    assert len(seen) == 2  # once with it, once without: the rest is taken


def test_a_server_that_refuses_a_field_is_named_and_the_run_refused() -> None:
    plan = _plan({"response_format": {"type": "json_object"}}, ignore_eos=True)
    refused = r"does not take the request fields \(response_format\): drop them"
    with (
        _server(refuse={"response_format"}) as (url, _),
        pytest.raises(PreflightError, match=refused),
    ):
        check_request_fields(plan, url, "m")


def test_a_server_that_ignores_ignore_eos_is_noted() -> None:
    with _server(stop_early=True) as (url, _):
        check = check_request_fields(_plan(None, ignore_eos=True), url, "m", check_ignore_eos=True)
    assert check is not None and check.ignore_eos == "ignored"
    assert "output lengths are as served, not as asked" in check.notes[0]


def test_a_server_error_is_a_note_not_a_refusal() -> None:
    def route(request: SeenRequest) -> Reply:
        return 503, {"Content-Type": "application/json"}, b'{"error": {"message": "busy"}}'

    with threaded_server(route) as (url, _):
        check = check_request_fields(_plan({"top_k": 1}), url, "m")
    assert check is not None and "HTTP 503: busy" in check.notes[0]


def test_run_json_records_every_field_and_hides_secrets() -> None:
    plan = _plan(
        {"top_k": 5, "api_key": "sk-secret", "extra": {"hf_token": "t"}, "seed": 1},
        {"top_k": 5, "api_key": "sk-secret", "extra": {"hf_token": "t"}, "seed": 2},
    )
    section = fields_section(plan)
    assert section == {
        "every_request": {"top_k": 5, "api_key": "***", "extra": {"hf_token": "***"}},
        "per_request": {"seed": 2},
    }
    assert "sk-secret" not in json.dumps(section)


TOOLS = as_tools([{"name": "get_weather", "parameters": {"type": "object", "properties": {}}}])


def _tool_plan(api: str = "chat") -> LoadPlan:
    spec = RequestSpec("r0", "a prompt", 2, 8, api=api, tools=TOOLS,  # type: ignore[arg-type]
                       tool_choice=as_tool_choice("required", TOOLS))  # fmt: skip
    return LoadPlan(mode="closed", sessions=[[spec]], users=1)


def test_a_chat_requests_tools_are_checked_once() -> None:
    with _server() as (url, seen):
        check = check_request_fields(_tool_plan(), url, "m")
    assert check is not None and check.fields == ["tool_choice", "tools"]
    (body,) = [json.loads(r.body) for r in seen]
    assert body["tools"] == [dict(t) for t in TOOLS] and body["tool_choice"] == "required"
    # The check speaks chat or completions: the other APIs' tools are not sent to either.
    with _server() as (url, seen):
        assert check_request_fields(_tool_plan("messages"), url, "m") is None
    assert seen == []


def test_a_server_that_refuses_tools_refuses_the_run_saying_how_to_take_them() -> None:
    refused = (
        r"HTTP 400: Unrecognized request argument: tools\); it does not take tools: start "
        r"it with tool calling on \(vLLM: --enable-auto-tool-choice --tool-call-parser NAME\)"
    )
    with _server(refuse={"tools"}) as (url, _), pytest.raises(PreflightError, match=refused):
        check_request_fields(_tool_plan(), url, "m")


def _image_plan(*images: str) -> LoadPlan:
    spec = RequestSpec("r0", "a prompt", 2, 8, api="chat", images=images)
    return LoadPlan(mode="closed", sessions=[[spec]], users=1)


def _image_parts(body: dict[str, Any]) -> list[str]:
    (turn,) = body["messages"]
    return [p["image_url"]["url"] for p in turn["content"] if p["type"] == "image_url"]


def test_a_chat_requests_images_are_checked_with_one_image_not_the_loads() -> None:
    load_image = data_url(synthetic_image(40, 20, "png", np.random.default_rng(3)))
    fetched = "http://127.0.0.1:9/cat.png"
    with _server() as (url, seen):
        check = check_request_fields(_image_plan(load_image, fetched), url, "m")
        assert check is not None and check.fields == ["images"]
        check_request_fields(_image_plan(fetched, load_image), url, "m")
    own, first_url = (_image_parts(json.loads(r.body)) for r in seen)
    # A data URL: a picture of the check's own, so no image of the load is cached ahead.
    assert len(own) == 1 and own[0] != load_image and own[0].startswith("data:image/png;base64,")
    assert first_url == [fetched]


def test_a_server_that_refuses_images_refuses_the_run_saying_why() -> None:
    refused = r"it does not take images: run against a vision-language model's server"

    def route(request: SeenRequest) -> Reply:
        error = {"error": {"message": "a content part of type 'image_url': text only"}}
        return 400, {"Content-Type": "application/json"}, json.dumps(error).encode()

    with threaded_server(route) as (url, _), pytest.raises(PreflightError, match=refused):
        check_request_fields(_image_plan("http://127.0.0.1:9/cat.png"), url, "m")
