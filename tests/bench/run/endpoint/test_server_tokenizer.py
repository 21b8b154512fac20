"""ServerTokenizer against SGLang's /tokenize and /detokenize shapes, on a real HTTP server."""

from __future__ import annotations

import json

import pytest

from bench.run.endpoint.server_tokenizer import ServerTokenizer
from loadgen.workloads.prompts import synthetic_requests
from loadgen.workloads.spec import LengthDist
from tests.support.threaded_http import Reply, SeenRequest, threaded_server
from tests.support.tokenizers import make_tokenizer


def sglang_route(request: SeenRequest) -> Reply:
    """SGLang's answers: /tokenize as vLLM's, /detokenize under "text"; backed by a real BPE."""
    tok = make_tokenizer()
    body = json.loads(request.body or b"{}")
    as_json = {"Content-Type": "application/json"}
    if request.path == "/tokenize":
        ids = tok.encode(body["prompt"], add_special_tokens=body.get("add_special_tokens", True))
        answer = {"tokens": ids, "count": len(ids), "max_model_len": 4096}
        return 200, as_json, json.dumps(answer).encode()
    if request.path == "/detokenize":
        return 200, as_json, json.dumps({"text": tok.decode(body["tokens"])}).encode()
    return 404, {}, b""


def test_prompts_of_exact_lengths_from_sglangs_routes() -> None:
    tok = make_tokenizer()
    with threaded_server(sglang_route) as (url, seen):
        server = ServerTokenizer.probe(url, "served")
        assert isinstance(server, ServerTokenizer)
        specs = synthetic_requests(
            server, 40, LengthDist("uniform", low=4, high=50), LengthDist("fixed", value=8), seed=1
        )
        calls = server.calls
        server.close()
    assert all(len(tok.encode(s.prompt)) == s.prompt_tokens for s in specs)
    assert len({s.prompt_tokens for s in specs}) > 5
    assert calls == len(seen)  # every round trip counted, the probe's two included
    assert calls < 2 * 192 + 4 + 3 * 40
    assert all(json.loads(r.body)["model"] == "served" for r in seen)


def test_a_server_without_tokenize_is_said_in_one_line() -> None:
    with threaded_server(lambda _: (404, {}, b"")) as (url, _):
        assert ServerTokenizer.probe(url, "served") == "POST /tokenize answered HTTP 404"


def test_it_is_never_sent_to_another_process() -> None:
    import pickle

    with threaded_server(sglang_route) as (url, _):
        server = ServerTokenizer.probe(url, "served")
        assert isinstance(server, ServerTokenizer)
        with pytest.raises(TypeError, match="not sent to other processes"):
            pickle.dumps(server)
        server.close()
