"""The shared test kit behaves as the tests that use it assume."""

from __future__ import annotations

import asyncio
import gc
import weakref

from tests.support.http_server import LocalServer, run
from tests.support.sse_streams import fixture_events, replay_handler
from tests.support.tokenizers import make_tokenizer


def test_server_replays_a_fixture_with_keep_alive() -> None:
    async def main() -> None:
        events = fixture_events("vllm-completions")
        async with LocalServer(replay_handler(events)) as server:
            port = int(server.base_url.rsplit(":", 1)[1])
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            for _ in range(2):
                writer.write(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}")
                await reader.readuntil(b"0\r\n\r\n")
            writer.close()
            assert server.connections == 1
            assert len(server.requests) == 2
            assert server.in_flight == 0

    run(main())


def test_tokenizer_round_trips() -> None:
    tok = make_tokenizer()
    text = "kalo strings, 42!\n level"
    assert tok.decode(tok.encode(text)) == text
    assert tok.vocab_size == 512


def test_a_stopped_server_leaves_no_engine_alive() -> None:
    # FastAPI keeps every route function it classified for the life of the process: the routes
    # must reach the engine through the app, never close over it, or each test server's engine
    # (and its 512 MiB KV cache) would outlive it. Imported here: torch (the engine), which
    # this module's other tests do not need.
    import httpx

    from engine.config import EngineConfig
    from engine.llm_engine import LLMEngine
    from tests.support.server_fixture import running_server

    gc.collect()
    before = {id(o) for o in gc.get_objects() if isinstance(o, LLMEngine)}
    with running_server(EngineConfig.from_flat(dict(model="tiny", dtype="float32"))) as url:
        served = [o for o in gc.get_objects() if isinstance(o, LLMEngine) and id(o) not in before]
        assert len(served) == 1
        engine = weakref.ref(served.pop())
        body = {"model": "tiny", "prompt": "hi", "max_tokens": 2, "stream": True}
        assert httpx.post(url + "/v1/completions", json=body, timeout=60).status_code == 200
        assert httpx.post(url + "/tokenize", json={"prompt": "hi"}, timeout=60).status_code == 200
    gc.collect()
    assert engine() is None
