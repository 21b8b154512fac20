"""bench.run.step_follower against a real HTTP server on 127.0.0.1 whose /debug/steps answers
from a real engine.core.telemetry.StepRecorder, as the reference engine's route does: every
step read once, in order, across polls that fail midway (a 5xx, a timeout); what was read kept
when the engine dies; no steps at all from an engine without /debug/steps."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pandas as pd
import pyarrow.parquet as pq
import pytest

from bench.run.step_follower import StepFollower, steps_taken
from engine.core.telemetry import StepRecorder
from results.folder.engine_steps import STEPS_SCHEMA, steps_frame
from results.folder.parts.writer import STEPS_PARTS
from results.folder.run_folder import STEPS_PARQUET
from results.folder.table_columns import STEP_COUNT_COLUMNS
from results.folder.tables import to_frame
from tests.support.threaded_http import Reply, SeenRequest, threaded_server

pytestmark = pytest.mark.timeout(120)
# Polls come fast here so that a test sees many; what is checked never depends on their pace.
POLL_S = 0.05
WAIT_S = 60.0


@dataclass
class FakeEngineSteps:
    """A StepRecorder behind /debug/steps, as engine.serving.routes.admin_routes serves it.
    ``failing`` meanwhile: "503" answers so, "hang" answers after ``hang_s`` (past the
    follower's timeout). Every connection is closed after its answer, so that once the server
    is shut down a poll finds no engine."""

    recorder: StepRecorder = field(default_factory=StepRecorder)
    failing: str | None = None
    hang_s: float = 1.5

    def record(self, n: int) -> None:
        for _ in range(n):
            now = time.perf_counter_ns()
            self.recorder.record(
                start_ns=now, end_ns=now + 1000, forward_ns=500,
                **{name: 1 for name in STEP_COUNT_COLUMNS},
            )  # fmt: skip

    def __call__(self, request: SeenRequest) -> Reply:
        url = urlsplit(request.path)
        if url.path != "/debug/steps":
            return 404, {}, b"not found"
        if self.failing == "503":
            return 503, {"Connection": "close"}, b"busy"
        if self.failing == "hang":
            time.sleep(self.hang_s)
        since = int(parse_qs(url.query).get("since", ["0"])[0])
        body = {"clock": "perf_counter_ns", "columns": self.recorder.since(since)}
        headers = {"Content-Type": "application/json", "Connection": "close"}
        return 200, headers, json.dumps(body).encode()


def wait_until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(POLL_S)


@contextmanager
def engine_steps() -> Iterator[tuple[FakeEngineSteps, str, list[SeenRequest]]]:
    engine = FakeEngineSteps()
    with threaded_server(engine) as (url, seen):
        yield engine, url, seen


def sealed(folder: Path, follower: StepFollower) -> pd.DataFrame:
    """steps.parquet of what ``follower`` read, once it stopped, as the run writer seals it."""
    parts = follower.stop()
    assert parts is not None, follower.notes
    parts.seal()
    assert not (folder / STEPS_PARTS).exists()
    return read_steps(folder / STEPS_PARQUET)


def read_steps(path: Path) -> pd.DataFrame:
    """A steps table as the run folder reads it: its nullable counts as Int64, nulls or not."""
    return to_frame(pq.read_table(path), STEPS_SCHEMA, str(path))


def test_every_step_is_read_once_in_order_across_failed_polls(tmp_path: Path) -> None:
    with engine_steps() as (engine, url, seen):
        engine.record(5)  # before the run: left out
        t0_ns = time.perf_counter_ns()
        follower = StepFollower(url, tmp_path, first_step=2, poll_s=POLL_S, timeout_s=0.5)
        follower.start(t0_ns)
        engine.record(30)
        wait_until(lambda: follower.next_step == 35, "the first steps were read")
        engine.failing = "503"
        engine.record(20)
        wait_until(lambda: follower.failures >= 3, "polls failed")
        engine.failing = "hang"
        engine.record(5)
        wait_until(lambda: follower.failures >= 5, "polls timed out")
        engine.failing = None
        engine.record(5)
        wait_until(lambda: follower.next_step == 65, "the follower caught up")
        engine.record(7)  # read by the last poll, which stop() makes
        steps = sealed(tmp_path, follower)
        one_read = steps_frame(engine.recorder.since(0), t0_ns)
    assert steps["step"].tolist() == list(range(5, 72))
    pd.testing.assert_frame_equal(steps, one_read)
    # Polling went on from the step after the last one read: none asked twice, none skipped.
    asked = [int(parse_qs(urlsplit(r.path).query)["since"][0]) for r in seen]
    assert asked[0] == 2 and asked == sorted(asked)
    assert follower.supported and len(follower.notes) == 2, follower.notes
    assert "polling went on from step 35" in follower.notes[0]
    assert f"{follower.failures} of {follower.polls} polls failed" in follower.notes[1]


def test_an_engine_that_dies_midway_leaves_the_steps_read_before(tmp_path: Path) -> None:
    with engine_steps() as (engine, url, _):
        t0_ns = time.perf_counter_ns()
        follower = StepFollower(url, tmp_path, poll_s=POLL_S, timeout_s=2.0)
        follower.start(t0_ns)
        engine.record(40)
        wait_until(lambda: follower.next_step == 40, "the steps were read")
        before = steps_frame(engine.recorder.since(0), t0_ns)
    # The server is gone: every later poll fails, and the run's end still seals what was read.
    wait_until(lambda: follower.failures >= 2, "polls of the dead engine failed")
    # Before the seal (a run killed now), the folder holds those steps in parts.
    pd.testing.assert_frame_equal(
        pd.concat([read_steps(p) for p in sorted((tmp_path / STEPS_PARTS).iterdir())])
        .reset_index(drop=True),
        before,
    )  # fmt: skip
    steps = sealed(tmp_path, follower)
    pd.testing.assert_frame_equal(steps, before)
    assert "polling went on from step 40" in follower.notes[0], follower.notes


def test_steps_the_engine_dropped_before_a_poll_read_them_are_noted(tmp_path: Path) -> None:
    engine = FakeEngineSteps(StepRecorder(max_steps=10))  # keeps its last 10 or fewer
    with threaded_server(engine) as (url, _):
        t0_ns = time.perf_counter_ns()
        follower = StepFollower(url, tmp_path, poll_s=POLL_S)
        follower.start(t0_ns)
        engine.record(5)
        wait_until(lambda: follower.next_step == 5, "the first steps were read")
        engine.failing = "503"
        engine.record(30)  # most of them dropped by the recorder while no poll reads them
        wait_until(lambda: follower.failures >= 1, "a poll failed")
        engine.failing = None
        wait_until(lambda: follower.next_step == 35, "the follower caught up")
        steps = sealed(tmp_path, follower)
    (dropped,) = [n for n in follower.notes if "dropped" in n]
    match = re.search(r"engine steps 5\.\.(\d+) were dropped by the engine", dropped)
    assert match is not None, dropped
    kept_from = int(match[1]) + 1
    assert steps["step"].tolist() == [*range(5), *range(kept_from, 35)]


@pytest.mark.parametrize(
    "reply",
    [(404, {}, b"not found"), (200, {"Content-Type": "application/json"}, b'{"steps": []}')],
    ids=["404", "another-shape"],
)
def test_an_engine_without_debug_steps_gives_no_steps(tmp_path: Path, reply: Reply) -> None:
    with threaded_server(lambda _: reply) as (url, seen):
        follower = StepFollower(url, tmp_path, poll_s=POLL_S)
        follower.start(time.perf_counter_ns())
        wait_until(lambda: follower.supported is False, "the follower gave up")
        assert follower.stop() is None
    assert len(seen) == 1  # not asked again
    assert not (tmp_path / STEPS_PARTS).exists() and not (tmp_path / STEPS_PARQUET).exists()
    assert follower.notes == []


def test_an_engine_that_never_answers_gives_no_steps_and_says_so(tmp_path: Path) -> None:
    with threaded_server(lambda _: (503, {}, b"starting")) as (url, _):
        follower = StepFollower(url, tmp_path, poll_s=POLL_S)
        follower.start(time.perf_counter_ns())
        wait_until(lambda: follower.failures >= 2, "polls failed")
        assert follower.stop() is None
    assert not (tmp_path / STEPS_PARTS).exists()
    assert any("never answered; no steps.parquet" in n for n in follower.notes), follower.notes


def test_the_first_step_asked_is_the_engines_count_when_it_describes_itself() -> None:
    assert steps_taken({"stats": {"num_steps": 1234}}) == 1234
    assert steps_taken({"stats": {}}) == steps_taken(None) == steps_taken({"stats": 3}) == 0
