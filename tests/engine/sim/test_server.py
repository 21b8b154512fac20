"""`bench serve --device sim`: the server streams a simulated 70B as it would a real engine, paced
by the predicted step times (here ten times faster than real time)."""

from __future__ import annotations

import itertools
import json
import time

import httpx

from engine.config import EngineConfig
from tests.support.server_fixture import running_server


def test_a_simulated_70b_streams_at_its_predicted_pace() -> None:
    config = EngineConfig.from_flat(dict(model="llama-3-70b", device="sim", gpu="a100-80gb", tp=4,
                                         sim_speedup=10.0))  # fmt: skip
    with running_server(config) as url:
        info = httpx.get(url + "/debug/engine").json()
        assert info["device"] == "sim" and info["simulated"]["tp"] == 4
        body = {
            "model": "llama-3-70b",
            "prompt": "hello " * 200,
            "max_tokens": 40,
            "stream": True,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
        }
        arrivals, usage = [], None
        start = time.perf_counter()
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=30) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if event["choices"]:
                    arrivals.append(time.perf_counter() - start)
                usage = event.get("usage") or usage
        assert usage is not None and usage["completion_tokens"] == 40
        steps = httpx.get(url + "/debug/steps").json()["columns"]
    bounds = zip(steps["start_ns"], steps["end_ns"], steps["num_prefill_tokens"], strict=True)
    decode_s = [(end - start) / 1e9 for start, end, prefill in bounds if prefill == 0]
    # A decode step of Llama-3-70B on 4 A100s is predicted at ~21 ms: 2.1 ms at 10x.
    assert all(0.0015 < d < 0.006 for d in decode_s)
    gaps = sorted(b - a for a, b in itertools.pairwise(arrivals))
    assert 0.0015 < gaps[len(gaps) // 2] < 0.006
