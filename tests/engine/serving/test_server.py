"""The reference engine's OpenAI-compatible server, driven by the official `openai` client."""

from __future__ import annotations

import time

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.config import EngineConfig

MODEL = "tiny"


# The engine the module's base_url fixture (tests/conftest.py) serves.
SERVER_CONFIG = EngineConfig.from_flat(
    dict(model="tiny", dtype="float32", device="cpu", max_model_len=256)
)


@pytest.fixture(scope="module")
def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url + "/v1", api_key="none", max_retries=0)


def metric_values(base_url: str) -> dict[str, float]:
    text = httpx.get(base_url + "/metrics").text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("model_name") == MODEL and "finished_reason" not in sample.labels:
                out[sample.name] = sample.value
    return out


def test_models_and_health(client: openai.OpenAI, base_url: str) -> None:
    assert [m.id for m in client.models.list()] == [MODEL]
    assert httpx.get(base_url + "/health").status_code == 200


def test_completion_not_streamed(client: openai.OpenAI) -> None:
    r = client.completions.create(
        model=MODEL, prompt="hello world", max_tokens=7, temperature=0,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    assert r.usage is not None and r.usage.completion_tokens == 7
    assert r.choices[0].finish_reason == "length"
    assert isinstance(r.choices[0].text, str)


def test_completion_streamed_matches_not_streamed(client: openai.OpenAI) -> None:
    kwargs = {"model": MODEL, "prompt": "the same prompt", "max_tokens": 12, "temperature": 0}
    whole = client.completions.create(**kwargs, extra_body={"ignore_eos": True})
    chunks = list(
        client.completions.create(
            **kwargs, stream=True, stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
    )  # fmt: skip
    content = [c for c in chunks if c.choices]
    assert "".join(c.choices[0].text for c in content) == whole.choices[0].text
    assert content[-1].choices[0].finish_reason == "length"
    usage_chunks = [c for c in chunks if c.usage is not None]
    assert len(usage_chunks) == 1 and not usage_chunks[0].choices
    assert usage_chunks[0].usage.completion_tokens == 12
    assert usage_chunks[0].usage.prompt_tokens == whole.usage.prompt_tokens


def test_chat_streamed_and_not(client: openai.OpenAI) -> None:
    messages = [{"role": "user", "content": "Say something."}]
    whole = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=9, temperature=0,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    assert whole.choices[0].message.role == "assistant"
    assert whole.usage.completion_tokens == 9
    stream = client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=9, temperature=0, stream=True,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content


def test_stop_string_cuts_the_text(client: openai.OpenAI) -> None:
    kwargs = {"model": MODEL, "prompt": "stop strings", "max_tokens": 40, "temperature": 0}
    full = client.completions.create(**kwargs, extra_body={"ignore_eos": True}).choices[0].text
    assert len(full) > 10
    stop = full[5:8]
    cut = client.completions.create(**kwargs, stop=[stop], extra_body={"ignore_eos": True})
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].text == full[: full.index(stop)]


def test_seeded_sampling_is_reproducible(client: openai.OpenAI) -> None:
    kwargs = {"model": MODEL, "prompt": "seeded", "max_tokens": 10, "temperature": 1.0}
    a = client.completions.create(**kwargs, seed=3, extra_body={"ignore_eos": True})
    b = client.completions.create(**kwargs, seed=3, extra_body={"ignore_eos": True})
    assert a.choices[0].text == b.choices[0].text


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b'{"model": "tiny", "prompt": ', "not valid JSON"),
        (b'{"model": "tiny", "prompt": "x", "max_tokens": "many"}', "max_tokens"),
        (b'{"model": "tiny", "prompt": "x", "max_tokens": 0}', "max_tokens"),
        (b'{"model": "tiny", "prompt": "x", "temperature": -1}', "temperature"),
        (b'{"model": "nope", "prompt": "x"}', "does not exist"),
        (b'{"prompt": "x"}', "model"),
        (b'{"model": "tiny", "prompt": [1, 2, 999999]}', "out of range"),
        (b'{"model": "tiny", "prompt": "' + b"word " * 400 + b'"}', "maximum context length"),
        (b'{"model": "tiny", "prompt": "x", "max_tokens": 10000}', "maximum context length"),
    ],
)
def test_bad_requests_get_openai_400s(base_url: str, body: bytes, fragment: str) -> None:
    r = httpx.post(
        base_url + "/v1/completions", content=body, headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert fragment in error["message"]
    assert error["type"] == "invalid_request_error"
    # ... and the server goes on serving.
    ok = httpx.post(
        base_url + "/v1/completions",
        json={"model": MODEL, "prompt": "still here", "max_tokens": 2},
    )
    assert ok.status_code == 200


def test_openai_client_raises_bad_request(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="nope", prompt="x", max_tokens=3)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=[], max_tokens=3)


def test_disconnect_aborts_the_request_and_metrics_count_tokens(base_url: str) -> None:
    before = metric_values(base_url)
    body = {
        "model": MODEL, "prompt": "long", "max_tokens": 200, "ignore_eos": True, "stream": True,
    }  # fmt: skip
    with (
        httpx.Client() as http,
        http.stream("POST", base_url + "/v1/completions", json=body) as r,
    ):
        for i, _ in enumerate(r.iter_lines()):
            if i >= 3:
                break
    deadline = time.monotonic() + 10
    while metric_values(base_url)["vllm:num_requests_running"] != 0:
        assert time.monotonic() < deadline, "the abandoned request kept running"
        time.sleep(0.05)
    # A request served to the end adds exactly its tokens to generation_tokens_total.
    mid = metric_values(base_url)
    assert mid["vllm:generation_tokens_total"] < before["vllm:generation_tokens_total"] + 200
    httpx.post(
        base_url + "/v1/completions",
        json={"model": MODEL, "prompt": "count me", "max_tokens": 5, "ignore_eos": True},
    )
    after = metric_values(base_url)
    assert after["vllm:generation_tokens_total"] - mid["vllm:generation_tokens_total"] == 5
    assert after["vllm:kv_cache_usage_perc"] == 0.0
    assert after["vllm:time_to_first_token_seconds_count"] > before.get(
        "vllm:time_to_first_token_seconds_count", 0
    )
