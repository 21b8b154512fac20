"""`bench serve` serves text only: a request whose messages carry an image (the bodies the load
generator sends for each chat API: chat's image_url part, the Responses API's input_image,
Anthropic's image block) is refused with a 400 that says why and what to do, never answered as
if the image were not there; text parts in a list are served."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from engine.config import EngineConfig
from loadgen.client.apis import generation_body
from loadgen.request_images import data_url
from loadgen.request_spec import RequestSpec
from loadgen.workloads.images import synthetic_image
from results.schema.api_kinds import APIS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
MODEL = "tiny"
SERVER_CONFIG = EngineConfig.from_flat(
    dict(model=MODEL, dtype="float32", device="cpu", max_model_len=128)
)


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
@pytest.mark.parametrize("where", ["data", "url"])
def test_a_request_with_an_image_is_a_400_saying_why(base_url: str, api: str, where: str) -> None:
    image = (
        data_url(synthetic_image(32, 24, "png", np.random.default_rng(0)))
        if where == "data"
        else "http://127.0.0.1:9/cat.png"
    )
    spec = RequestSpec("r", "kalo strings", 2, 2, api=api, images=(image,))  # type: ignore[arg-type]
    reply = httpx.post(base_url + "/v1" + APIS[api].path, json=generation_body(spec, MODEL),
                       timeout=60)  # fmt: skip
    assert reply.status_code == 400, reply.text
    message = reply.json()["error"]["message"]
    kind = {"chat": "image_url", "responses": "input_image", "messages": "image"}[api]
    assert f"a content part of type '{kind}'" in message, message
    assert "serves text only and sees no images" in message and "[images]" in message
    assert len(message) < 400 and "Traceback" not in message


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_text_parts_in_a_list_are_served(base_url: str, api: str) -> None:
    part = {"chat": "text", "responses": "input_text", "messages": "text"}[api]
    turn = {"role": "user", "content": [{"type": part, "text": "kalo"}]}
    spec = RequestSpec("r", "", 0, 2, api=api, messages=(turn,))  # type: ignore[arg-type]
    body = {**generation_body(spec, MODEL), "stream": False}
    body.pop("stream_options", None)
    reply = httpx.post(base_url + "/v1" + APIS[api].path, json=body, timeout=60)
    assert reply.status_code == 200, reply.text
