"""`bench serve`'s /v1/responses, /v1/messages, /v1/embeddings and /v1/rerank over HTTP, with
the engine stepping in the server's own process (the front that answers an Embed query itself):
what each accepts and refuses, an embedding taken while a stream runs, and the simulated
device's refusal."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from engine.config import EngineConfig
from tests.support.server_fixture import running_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
MODEL = "tiny"
TURNS = [{"role": "user", "content": "kalo strings pro mine"}]

# The engine the module's base_url fixture (tests/conftest.py) serves.
SERVER_CONFIG = EngineConfig.from_flat(
    dict(model=MODEL, dtype="float32", device="cpu", max_model_len=128)
)


def _events(raw: bytes) -> list[dict]:
    return [
        json.loads(line[len("data: ") :])
        for line in raw.decode().splitlines()
        if line.startswith("data: ")
    ]


def test_an_embedding_while_a_stream_runs(base_url: str) -> None:
    async def both() -> tuple[list[dict], dict]:
        async with httpx.AsyncClient(base_url=base_url, timeout=120) as client:
            body = {"model": MODEL, "messages": TURNS, "max_tokens": 24, "stream": True,
                    "ignore_eos": True}  # fmt: skip
            stream = client.post("/v1/messages", json=body)
            embed = client.post("/v1/embeddings", json={"model": MODEL, "input": "kalo"})
            streamed, embedded = await asyncio.gather(stream, embed)
            return _events(streamed.content), embedded.json()

    events, embedded = asyncio.run(both())
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds.count("content_block_delta") >= 1
    assert events[-2]["usage"]["output_tokens"] == 24
    assert len(embedded["data"]) == 1 and embedded["usage"]["prompt_tokens"] >= 2


def test_responses_stream_its_events_with_instructions(base_url: str) -> None:
    body = {"model": MODEL, "input": "kalo", "instructions": "be brief", "stream": True,
            "max_output_tokens": 4, "ignore_eos": True}  # fmt: skip
    events = _events(httpx.post(base_url + "/v1/responses", json=body, timeout=60).content)
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.incomplete"  # max_output_tokens cut it
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    done = next(e for e in events if e["type"] == "response.output_text.done")
    assert deltas == done["text"] and events[-1]["response"]["usage"]["output_tokens"] == 4


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/messages", {"model": MODEL, "messages": TURNS}, "max_tokens"),
        ("/v1/messages", {"model": "other", "messages": TURNS, "max_tokens": 2}, "model"),
        ("/v1/responses", {"model": MODEL, "input": []}, "input"),
        ("/v1/embeddings", {"model": MODEL, "input": []}, "input"),
        ("/v1/embeddings", {"model": MODEL, "input": ["a" * 4000]}, "input.0"),
        ("/v1/rerank", {"model": MODEL, "query": "q", "documents": []}, "documents"),
    ],
)
def test_a_bad_body_is_a_400_naming_the_field(
    base_url: str, path: str, body: dict, field: str
) -> None:
    reply = httpx.post(base_url + path, json=body, timeout=60)
    assert reply.status_code in (400, 422), reply.text
    assert field in reply.text


def test_the_simulated_device_refuses_embeddings() -> None:
    config = EngineConfig.from_flat(dict(model="llama-3-8b", device="sim", gpu="a100-80gb"))
    with running_server(config) as url:
        served = httpx.get(url + "/v1/models").json()["data"][0]["id"]
        reply = httpx.post(url + "/v1/embeddings", json={"model": served, "input": "kalo"})
    assert reply.status_code == 400 and "no weights" in reply.json()["error"]["message"]
