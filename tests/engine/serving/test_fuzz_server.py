"""A bounded property test of /v1/completions and /v1/chat/completions, from the server's own
OpenAPI schema (schemathesis: bodies that follow it and bodies that break it), against a real
`bench serve` on 127.0.0.1.

Every answer: no 5xx; an error is JSON in OpenAI's shape naming the field at fault; no
traceback text; /health still 200 after it; and a greedy request gives the same text after
the fuzzing of each endpoint as before. Bounded by MAX_EXAMPLES per operation and a short
context (128 tokens), so that no generated request generates for long; under a minute here.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from engine.serving.protocol import ChatCompletionRequest, CompletionRequest
from tests.support.server_fixture import ServeProcess, bench_serve

MAX_EXAMPLES = 100
# The fields an error's param may name: the bodies' own, and "body" for a body that is not
# a JSON object at all.
FIELDS = set(CompletionRequest.model_fields) | set(ChatCompletionRequest.model_fields) | {"body"}
GREEDY = {"model": "tiny", "prompt": "the same text", "max_tokens": 16, "temperature": 0}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    log = tmp_path_factory.mktemp("fuzz") / "serve.log"
    with bench_serve(log, "--max-model-len", "128") as s:
        s.greedy_before = greedy_text(s.url)  # type: ignore[attr-defined]
        yield s


def greedy_text(url: str) -> str:
    r = httpx.post(url + "/v1/completions", json=GREEDY, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def check_error(status: int, content: bytes, sent: object) -> None:
    """An error is {"error": {"message", "type", "param", "code"}}, naming a field of the
    request (a 400), or the size limit (a 413)."""
    error = json.loads(content)["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"], error
    if status == 413:
        return
    param = error["param"]
    if param is None:  # only a body that is not JSON at all names no field
        assert "not valid JSON" in error["message"], (error, sent)
        return
    field = param.split(".")[0]
    assert field in FIELDS, (error, sent)
    assert field in error["message"], error


@pytest.mark.timeout(300)
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_fuzzed_requests_get_defined_answers(served: ServeProcess, path: str) -> None:
    # schemathesis' own pytest plugin does not run on pytest 9: its strategies under
    # hypothesis' given do the same, bodies that follow the schema and bodies that break it.
    operation = schemathesis.openapi.from_url(served.url + "/openapi.json")[path]["POST"]
    cases = st.one_of(operation.as_strategy(mode) for mode in GenerationMode)
    tried: Counter[str] = Counter()

    @given(case=cases, served_model=st.booleans())
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=timedelta(seconds=10),
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
    )
    def answers_are_defined(case: schemathesis.Case, served_model: bool) -> None:
        # Half the bodies name the served model, so that they reach the engine rather than
        # all stopping at "model does not exist".
        if served_model and isinstance(case.body, dict):
            case.body["model"] = "tiny"
        response = case.call(base_url=served.url, timeout=30)
        tried["requests"] += 1
        tried[f"status {response.status_code}"] += 1
        text = response.content.decode("utf-8", "replace")
        assert response.status_code < 500, text[:500]
        assert "Traceback" not in text
        if response.status_code >= 400:
            check_error(response.status_code, response.content, case.body)
        assert httpx.get(served.url + "/health", timeout=10).status_code == 200

    answers_are_defined()
    print(f"fuzzed {path}:", dict(tried))
    assert tried["requests"] >= MAX_EXAMPLES
    assert served.process.poll() is None
    assert greedy_text(served.url) == served.greedy_before  # type: ignore[attr-defined]
