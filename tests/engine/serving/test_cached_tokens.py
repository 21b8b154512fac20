"""`bench serve` reports the prompt tokens its prefix cache held, as vLLM does with
``--enable-prompt-tokens-details``: ``usage.prompt_tokens_details.cached_tokens``."""

from __future__ import annotations

import json

import httpx

from engine.config import EngineConfig

BLOCK = 16
# The engine the module's base_url fixture (tests/conftest.py) serves: the prefix cache on.
SERVER_CONFIG = EngineConfig.from_flat(
    dict(model="tiny", dtype="float32", device="cpu", max_model_len=512, block_size=BLOCK,
         enable_prefix_caching=True)
)  # fmt: skip

HISTORY = [
    {"role": "system", "content": "You are a careful agent. " * 12},
    {"role": "user", "content": "List the files of the repository, then read the largest."},
]


def _usage(base_url: str, messages: list[dict[str, str]]) -> dict:
    body = {"model": "tiny", "messages": messages, "max_tokens": 3, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    with httpx.stream("POST", base_url + "/v1/chat/completions", json=body, timeout=60) as r:
        assert r.status_code == 200
        events = [json.loads(line[6:]) for line in r.iter_lines()
                  if line.startswith("data: ") and line != "data: [DONE]"]  # fmt: skip
    return events[-1]["usage"]


def test_a_resent_history_reports_the_blocks_the_cache_held(base_url: str) -> None:
    first = _usage(base_url, HISTORY)
    assert first["prompt_tokens_details"] == {"cached_tokens": 0}
    longer = [*HISTORY, {"role": "assistant", "content": "a.py b.py"},
              {"role": "user", "content": "Now read b.py."}]  # fmt: skip
    second = _usage(base_url, longer)
    cached = second["prompt_tokens_details"]["cached_tokens"]
    # The shared history's full blocks, never the whole prompt (its last token is computed).
    assert cached > 0 and cached % BLOCK == 0
    assert cached <= first["prompt_tokens"] < second["prompt_tokens"]
