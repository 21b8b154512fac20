"""The core's side of the pipe: typed messages in, typed replies out, and anything else
reported as CoreDied naming what arrived. The serving loop runs in a thread here, on a real
engine and a real multiprocessing Pipe (the messages are pickled as between processes)."""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

import pytest

from engine.core.request import SamplingParams
from engine.serving.core_messages import (
    AddRequest,
    Call,
    CallResult,
    CoreDied,
    Describe,
    Idle,
    Rejected,
    Shutdown,
    StepOutputs,
    StepsSince,
)
from engine.serving.core_process import serve
from tests.support.engine_fixtures import make_engine


@pytest.fixture
def pipe() -> Iterator[tuple[Connection, threading.Thread]]:
    """The server's end of a pipe that a tiny engine is served on, and the serving thread."""
    ours, theirs = multiprocessing.Pipe()
    thread = threading.Thread(target=serve, args=(make_engine(max_model_len=256), theirs))
    thread.start()
    yield ours, thread
    if thread.is_alive():
        ours.send(Shutdown())
    thread.join(timeout=10)
    ours.close()


def _until(conn: Connection, kind: type, timeout_s: float = 60.0) -> tuple[Any, list[Any]]:
    """The next message of ``kind``, and every message before it."""
    before = []
    while conn.poll(timeout_s):
        msg = conn.recv()
        if isinstance(msg, kind):
            return msg, before
        before.append(msg)
    raise AssertionError(f"no {kind.__name__} within {timeout_s} s; got {before}")


def test_requests_and_queries_get_typed_replies(
    pipe: tuple[Connection, threading.Thread],
) -> None:
    conn, thread = pipe
    params = SamplingParams(max_tokens=5, ignore_eos=True)
    conn.send(AddRequest("r", [1, 2, 3], params))
    tokens: list[int] = []
    finished = False
    while not finished:
        step, _ = _until(conn, StepOutputs)
        assert step.stats.num_running + step.stats.num_waiting <= 1
        for out in step.outputs():
            tokens.extend(out.new_token_ids)
            finished = out.finished
    assert tokens == make_engine(max_model_len=256).generate([[1, 2, 3]], params)[0]

    conn.send(AddRequest("long", [5] * 300, SamplingParams(max_tokens=1)))
    rejected, _ = _until(conn, Rejected)
    assert rejected.request_id == "long" and "maximum context length" in rejected.message

    conn.send(Call(7, StepsSince(0)))
    conn.send(Call(8, Describe()))
    steps, _ = _until(conn, CallResult)
    described, _ = _until(conn, CallResult)
    assert steps.call_id == 7 and len(steps.value["step"]) == 5
    assert described.call_id == 8 and described.value["max_model_len"] == 256

    idle, _ = _until(conn, Idle, timeout_s=5)
    assert idle.kv_cache_usage == 0.0
    conn.send(Shutdown())
    thread.join(timeout=10)
    assert not thread.is_alive()


@pytest.mark.parametrize(
    ("message", "fragment"),
    [
        # The string-tagged tuple the pipe used to carry.
        (("add", "r", [1], SamplingParams()), "a tuple (('add', 'r', [1], "),
        (Call(1, "describe"), "a str ('describe') where one of Describe, StepsSince, "),  # type: ignore[arg-type]
    ],
)
def test_an_unknown_message_is_reported_and_ends_serving(
    pipe: tuple[Connection, threading.Thread], message: object, fragment: str
) -> None:
    conn, thread = pipe
    conn.send(message)
    died, _ = _until(conn, CoreDied)
    assert fragment in died.reason
    thread.join(timeout=10)
    assert not thread.is_alive()
