"""POST /reset_prefix_cache on `bench serve`, as vLLM's: {"success": bool}, then no hits."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.config import EngineConfig
from tests.support.server_fixture import running_server

pytestmark = pytest.mark.timeout(120)

CONFIG = EngineConfig.from_flat(
    dict(model="tiny", dtype="float32", device="cpu", max_model_len=256)
)
PROMPT = list(range(100, 100 + 65))  # four full blocks of 16 and one more token


def hits(base_url: str) -> float:
    text = httpx.get(base_url + "/metrics").text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "vllm:prefix_cache_hits_total"
    )


def complete(base_url: str) -> None:
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 1}
    assert httpx.post(base_url + "/v1/completions", json=body, timeout=60).status_code == 200


@pytest.mark.parametrize("core_process", [False, True], ids=["thread", "core-process"])
def test_reset_empties_the_prefix_cache(core_process: bool) -> None:
    with running_server(CONFIG, core_process=core_process) as url:
        complete(url)
        before = hits(url)
        complete(url)
        assert hits(url) - before == 64  # the repeat took its four full blocks from the cache
        reply = httpx.post(url + "/reset_prefix_cache", timeout=30)
        assert reply.status_code == 200 and reply.json() == {"success": True}
        before = hits(url)
        complete(url)
        assert hits(url) == before  # emptied: nothing to hit
        complete(url)
        assert hits(url) - before == 64
