"""The plan's duration ends a Locust run: what is in flight on every worker is recorded
cancelled, what finished before is kept, and nothing is sent after the cut.

The engine steps no faster than one step per ``STEP_DELAY_MS``, so the test's outcome does not
hang on the machine's speed: each user's first request (2 tokens) finishes long before the cut,
and its second (400 tokens: at least 8 s of steps) cannot finish before it, however fast the
machine."""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest

from engine.config import EngineConfig
from engine.tokenizer.tokenizer import Tokenizer
from loadgen.clock import RunClock
from loadgen.drivers.driver import ClientConfig, LoadPlan
from loadgen.drivers.locust.driver import run_locust
from loadgen.workloads.prompts import synthetic_requests
from loadgen.workloads.spec import LengthDist

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        importlib.util.find_spec("locust") is None, reason="locust is not installed"
    ),
]

STEP_DELAY_MS = 20.0
DURATION_S = 3.0
LONG_TOKENS = 400  # >= 8 s of steps at STEP_DELAY_MS: well past DURATION_S

# The engine the module's base_url fixture (tests/conftest.py) serves.
SERVER_CONFIG = EngineConfig.from_flat(
    dict(
        model="tiny", dtype="float32", device="cpu", max_model_len=512,
        step_delay_ms=STEP_DELAY_MS,
    )
)  # fmt: skip


def test_the_plans_duration_cancels_what_is_in_flight_on_every_worker(base_url: str) -> None:
    tok = Tokenizer.for_preset(4096)
    specs = synthetic_requests(
        tok, 16, LengthDist("uniform", low=8, high=24), LengthDist("fixed", value=2), seed=1,
        ignore_eos=True,
    )  # fmt: skip
    # Sessions of a short request, then a long one: a user is in its long request at the cut.
    sessions = [
        [specs[i], dataclasses.replace(specs[i + 1], max_tokens=LONG_TOKENS)]
        for i in range(0, 16, 2)
    ]
    p = LoadPlan("closed", sessions, users=4, duration_s=DURATION_S)
    events: list[dict] = []
    result = run_locust(
        p, ClientConfig(base_url, "tiny", timeout_s=60), RunClock(), 2, on_event=events.append
    )
    (started,) = [e["t_s"] for e in events if e["event"] == "started"]
    records = result.records
    by_status = {s: [r for r in records if r.status == s] for s in {r.status for r in records}}
    summary = [(r.request_id, r.user_id, r.status, r.output_tokens) for r in records]
    assert set(by_status) == {"ok", "cancelled"}, summary
    assert len({r.request_id for r in records}) == len(records) == 8, summary
    # Each of the 4 users (2 per worker: user u runs on worker u % 2) finished its short
    # request and was cut in its long one.
    assert sorted(r.user_id for r in by_status["ok"]) == [0, 1, 2, 3], summary
    assert sorted(r.user_id for r in by_status["cancelled"]) == [0, 1, 2, 3], summary
    assert all(r.output_tokens == 2 for r in by_status["ok"])
    for r in by_status["cancelled"]:
        assert r.error == "cancelled: the run ended while the request was in flight"
        assert r.done_s is not None and r.done_s >= started + DURATION_S
        assert r.output_tokens < LONG_TOKENS
    # Nothing is sent after the cut: the sessions not begun are not records.
    assert max(r.sent_s for r in records) < started + DURATION_S
