"""`bench serve --reasoning-tokens N`: the first N generated tokens of each chat answer are
streamed as reasoning, split where the N-th token ends, and counted in usage as vLLM does."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from engine.llm_engine import RequestOutput
from engine.serving.output_processor import RequestTextState
from engine.serving.reasoning import ReasoningPrefix
from engine.tokenizer.tokenizer import Tokenizer
from engine_adapters.launcher import free_port, launch

pytestmark = pytest.mark.timeout(180)
PREFIX = 5


def _outputs(ids: list[int], sizes: list[int]) -> Iterator[RequestOutput]:
    """``ids`` delivered in outputs of ``sizes`` tokens (several at once, as accepted drafts)."""
    done = 0
    for n in sizes:
        new = ids[done : done + n]
        done += n
        yield RequestOutput(
            "r", new, 3, done, done == len(ids), "length" if done == len(ids) else None
        )


def test_the_text_splits_where_the_prefix_last_token_ends() -> None:
    tok = Tokenizer.for_preset(512)
    ids = tok.encode("kalo strings mine tra pro at the end", add_special_tokens=False)
    assert len(ids) >= 6
    # The boundary falls inside the second output of three tokens.
    state = RequestTextState(tok, (), 0.0, None, reasoning_tokens=4)
    deltas = [state.process(out) for out in _outputs(ids, [2, 3, len(ids) - 5])]
    reasoning = "".join(d.text[: d.reasoning_chars] for d in deltas)
    answer = "".join(d.text[d.reasoning_chars :] for d in deltas)
    assert reasoning == tok.decode(ids[:4])
    assert reasoning + answer == tok.decode(ids)
    plain = RequestTextState(tok, (), 0.0, None)
    assert all(plain.process(out).reasoning_chars == 0 for out in _outputs(ids, [1] * len(ids)))


def test_bad_options_are_refused_naming_them() -> None:
    with pytest.raises(ValueError, match="--reasoning-field"):
        ReasoningPrefix(2, "thinking")
    with pytest.raises(ValueError, match="--reasoning-tokens"):
        ReasoningPrefix(-1)
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "serve", "--reasoning-field", "thinking"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "--reasoning-field" in proc.stderr and "Traceback" not in proc.stderr


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    port = free_port()
    command = [
        sys.executable, "-m", "bench", "serve", "--port", str(port), "--model", "tiny",
        "--dtype", "float32", "--device", "cpu", "--max-model-len", "128",
        "--no-engine-core-process", "--reasoning-tokens", str(PREFIX),
        "--reasoning-field", "reasoning",
    ]  # fmt: skip
    with launch(command, f"http://127.0.0.1:{port}", timeout_s=120) as engine:
        yield engine.base_url


def _chat(max_tokens: int, stream: bool) -> dict[str, Any]:
    return {
        "model": "tiny", "messages": [{"role": "user", "content": "kalo strings"}],
        "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": stream,
        "stream_options": {"include_usage": True},
    }  # fmt: skip


def _events(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    with httpx.stream("POST", url, json=body, timeout=60) as response:
        assert response.status_code == 200
        data = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(d) for d in data[:-1]]


def test_a_streamed_chat_answer_opens_with_its_reasoning(url: str) -> None:
    events = _events(url + "/v1/chat/completions", _chat(12, stream=True))
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    kinds = [k for d in deltas for k in ("reasoning", "content") if d.get(k)]
    first_content = kinds.index("content")
    assert set(kinds[:first_content]) == {"reasoning"} and "reasoning" not in kinds[first_content:]
    assert not any("reasoning_content" in d for d in deltas)
    usage = events[-1]["usage"]
    assert usage["completion_tokens"] == 12
    assert usage["completion_tokens_details"] == {"reasoning_tokens": PREFIX}
    # The same greedy answer whole: the labels split the text, they change none of it.
    whole = httpx.post(url + "/v1/chat/completions", json=_chat(12, stream=False), timeout=60)
    message = whole.json()["choices"][0]["message"]
    streamed = "".join(d.get("reasoning", "") for d in deltas)
    assert message["reasoning"] == streamed
    assert message["content"] == "".join(d.get("content") or "" for d in deltas)
    assert whole.json()["usage"]["completion_tokens_details"] == {"reasoning_tokens": PREFIX}


def test_an_answer_shorter_than_the_prefix_is_all_reasoning(url: str) -> None:
    events = _events(url + "/v1/chat/completions", _chat(3, stream=True))
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    assert not any(d.get("content") for d in deltas)
    assert events[-1]["usage"]["completion_tokens_details"] == {"reasoning_tokens": 3}


def test_text_completions_carry_no_reasoning(url: str) -> None:
    body = {"model": "tiny", "prompt": "kalo", "max_tokens": 8, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
    events = _events(url + "/v1/completions", body)
    assert "completion_tokens_details" not in events[-1]["usage"]
    assert all("reasoning" not in c for e in events for c in e["choices"])
