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
    """Behaviour, not speed: the server reports the predicted step times, its steps never end
    before their predicted ends (a lower bound that holds on a loaded machine too), and the
    tokens stream one by one as the steps make them. How a late step is caught up is the
    pacer's (tests/engine/sim/test_executor.py, on a clock the test drives)."""
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
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
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
        after = httpx.get(url + "/debug/engine").json()["simulated"]
    predicted_s = after["predicted_s_total"] - info["simulated"]["predicted_s_total"]
    # One prefill step, then a decode step per further token.
    assert steps["num_prefill_tokens"][0] > 0 and steps["num_prefill_tokens"][1:] == [0] * 39
    # A decode step of Llama-3-70B on 4 A100s is predicted at ~21 ms (35 GB of weights per GPU
    # at ~1.8 TB/s, plus all-reduces), the 200-token prefill step a little more.
    assert 0.015 * 40 < predicted_s < 0.03 * 40
    # Chained deadlines: the steps span at least their predicted time at 10x, however slow the
    # machine (a pacer that did not sleep, or slept the wrong time, would end sooner).
    span_s = (steps["end_ns"][-1] - steps["start_ns"][0]) / 1e9
    assert span_s >= predicted_s / 10 * 0.999
    # Streamed as made: 40 chunks spread over the decode steps, not sent together at the end.
    assert len(arrivals) == 40 and arrivals[-1] - arrivals[0] >= 0.5 * predicted_s / 10
    gaps = sorted(b - a for a, b in itertools.pairwise(arrivals))
    assert gaps[len(gaps) // 2] >= 0.0015 * 0.5  # half a predicted decode step at 10x
