"""The engine core in its own process: same tokens as in-process, errors and death reported
(to the requests in flight and to /health)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
from collections.abc import Iterator

import httpx
import pytest

from engine.config import EngineConfig
from engine.core.request import SamplingParams
from engine.serving.async_engine import EngineDeadError, RemoteAsyncLLM
from engine.serving.core_messages import Describe, StepsSince
from engine.serving.core_process import EngineCoreError, EngineCoreProcess
from engine.serving.metrics import EngineMetrics
from tests.support.engine_fixtures import make_engine, ragged_workload
from tests.support.server_fixture import running_server

SETTINGS = {"model": "tiny", "dtype": "float32", "device": "cpu", "seed": 1, "max_model_len": 256}


@pytest.fixture
def core() -> Iterator[EngineCoreProcess]:
    """A fresh core per test: a core has one reader (its RemoteAsyncLLM), as in the server."""
    proc = EngineCoreProcess(EngineConfig.from_flat(SETTINGS))
    yield proc
    proc.close()


async def _collect(llm: RemoteAsyncLLM, rid: str, prompt: list[int], params: SamplingParams):
    tokens: list[int] = []
    async for out in llm.generate(rid, prompt, params):
        tokens.extend(out.new_token_ids)
    return tokens


def _run(core: EngineCoreProcess, coro_fn):
    async def main():
        llm = RemoteAsyncLLM(core, EngineMetrics(core.served_model_name))
        llm.start(asyncio.get_running_loop())
        try:
            return await coro_fn(llm)
        finally:
            llm.shutdown()

    return asyncio.run(main())


def test_tokens_match_the_in_process_engine(core: EngineCoreProcess) -> None:
    workload = ragged_workload(12, seed=3)
    expected = make_engine(max_model_len=256).generate(
        [p for p, _ in workload], [s for _, s in workload]
    )

    async def body(llm: RemoteAsyncLLM):
        return await asyncio.gather(
            *(_collect(llm, f"r{i}", p, s) for i, (p, s) in enumerate(workload))
        )

    assert _run(core, body) == expected
    assert core.max_model_len == 256
    assert core.served_model_name == "tiny"


def test_calls_and_rejections_cross_the_pipe(core: EngineCoreProcess) -> None:
    async def body(llm: RemoteAsyncLLM):
        described = await llm.call(Describe())
        steps = await llm.call(StepsSince(0))
        # The server checks limits itself; a request the core refuses comes back as ValueError.
        with pytest.raises(ValueError, match="maximum context length"):
            await _collect(llm, "long", [5] * 300, SamplingParams(max_tokens=1))
        return described, steps

    described, steps = _run(core, body)
    assert described["engine_config"]["model"] == "tiny"
    assert described["max_model_len"] == 256
    assert set(steps) >= {"step", "start_ns", "end_ns", "forward_ns"}


def test_a_core_that_fails_to_start_says_why() -> None:
    # Refused by the engine inside the child: the parent reports the child's reason.
    bad = EngineConfig.from_flat(dict(**SETTINGS, attention_backend="native", kv_cache_dtype="fp8"))
    with pytest.raises(EngineCoreError, match="attention_backend='native' cannot run here"):
        EngineCoreProcess(bad)


def test_a_dead_core_fails_requests_instead_of_hanging(core: EngineCoreProcess) -> None:
    async def body(llm: RemoteAsyncLLM):
        os.kill(core.process.pid, signal.SIGKILL)
        for _ in range(200):
            if llm.dead is not None:
                break
            await asyncio.sleep(0.05)
        assert llm.dead is not None
        with pytest.raises(EngineDeadError):
            await _collect(llm, "after", [1, 2, 3], SamplingParams(max_tokens=2))

    _run(core, body)


def test_a_dead_core_fails_the_stream_in_flight_and_health_says_503() -> None:
    # 20 ms a step: the 200-token stream is still running when the core is killed.
    config = EngineConfig.from_flat({**SETTINGS, "step_delay_ms": 20.0})
    body = {"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 200, "ignore_eos": True}
    with running_server(config, core_process=True) as base_url:
        (child,) = [p for p in multiprocessing.active_children() if p.name == "engine-core"]
        url = base_url + "/v1/completions"
        with httpx.stream("POST", url, json={**body, "stream": True}, timeout=30) as response:
            events = (line for line in response.iter_lines() if line.startswith("data: "))
            assert '"text"' in next(events)
            assert child.pid is not None
            os.kill(child.pid, signal.SIGKILL)
            rest = list(events)
        assert rest[-1] == "data: [DONE]"
        assert "the engine core exited (exit code" in rest[-2]
        assert httpx.get(base_url + "/health").status_code == 503
        # Every later request gets a JSON 503 in OpenAI's shape, not a text/plain 500.
        after = httpx.post(url, json=body, timeout=30)
        assert after.status_code == 503
        assert after.json()["error"]["code"] == "engine_dead"
