"""`bench serve`'s vLLM-compatible /tokenize and /detokenize, and /v1/models' root, over HTTP."""

from __future__ import annotations

import httpx
import pytest

from engine.config import EngineConfig
from engine.tokenizer.tokenizer import Tokenizer
from perfmodel.presets import PRESETS

MODEL = "tiny"
TEXT = "Tokens in, tokens out: 17 probes of a round trip."

# The engine the module's base_url fixture (tests/conftest.py) serves.
SERVER_CONFIG = EngineConfig.from_flat(
    dict(model=MODEL, dtype="float32", device="cpu", max_model_len=128)
)


@pytest.fixture(scope="module")
def local() -> Tokenizer:
    """The tokenizer the server loaded, loaded here too: the preset's synthetic one."""
    return Tokenizer.for_preset(PRESETS[MODEL].vocab_size)


def test_models_report_what_was_loaded_as_root(base_url: str) -> None:
    (entry,) = httpx.get(base_url + "/v1/models").json()["data"]
    assert (entry["id"], entry["root"], entry["max_model_len"]) == (MODEL, MODEL, 128)


def test_tokenize_has_vllms_shape_and_the_servers_ids(base_url: str, local: Tokenizer) -> None:
    body = httpx.post(base_url + "/tokenize", json={"model": MODEL, "prompt": TEXT}).json()
    assert set(body) == {"count", "max_model_len", "tokens", "token_strs"}
    # add_special_tokens defaults to true, as vLLM's: the BOS the completion route adds too.
    assert body["tokens"] == local.encode(TEXT, add_special_tokens=True)
    assert body["tokens"][0] == local.bos_token_id
    assert (body["count"], body["max_model_len"], body["token_strs"]) == (
        len(body["tokens"]),
        128,
        None,
    )
    plain = httpx.post(
        base_url + "/tokenize",
        json={"prompt": TEXT, "add_special_tokens": False, "return_token_strs": True},
    ).json()
    assert plain["tokens"] == local.encode(TEXT) == body["tokens"][1:]
    assert plain["token_strs"] == [local.backend.id_to_token(i) for i in plain["tokens"]]


def test_tokenize_counts_what_a_completion_is_charged(base_url: str) -> None:
    count = httpx.post(base_url + "/tokenize", json={"prompt": TEXT}).json()["count"]
    completion = httpx.post(
        base_url + "/v1/completions", json={"model": MODEL, "prompt": TEXT, "max_tokens": 1}
    ).json()
    assert completion["usage"]["prompt_tokens"] == count


def test_detokenize_round_trips(base_url: str) -> None:
    ids = httpx.post(
        base_url + "/tokenize", json={"prompt": TEXT, "add_special_tokens": False}
    ).json()["tokens"]
    r = httpx.post(base_url + "/detokenize", json={"model": MODEL, "tokens": ids})
    assert r.status_code == 200 and r.json() == {"prompt": TEXT}


def test_tokenize_renders_chat_messages_with_the_template(base_url: str, local: Tokenizer) -> None:
    messages = [{"role": "user", "content": TEXT}]
    body = httpx.post(base_url + "/tokenize", json={"model": MODEL, "messages": messages}).json()
    rendered = local.apply_chat_template(messages, add_generation_prompt=True)
    assert body["tokens"] == local.encode(rendered, add_special_tokens=False)
    assert body["count"] == len(body["tokens"])


@pytest.mark.parametrize(
    ("route", "body", "param"),
    [
        ("/tokenize", {"model": "other", "prompt": "x"}, "model"),
        ("/tokenize", {"model": MODEL}, None),
        ("/detokenize", {"tokens": [0, 10**9]}, "tokens"),
        ("/detokenize", {"model": "other", "tokens": [1]}, "model"),
    ],
)
def test_bad_bodies_get_openai_400s(base_url: str, route: str, body: dict, param: str) -> None:
    r = httpx.post(base_url + route, json=body)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    if param is not None:
        assert error["param"] == param
