"""The engine's steps followed while a served run goes on, streamed into the run folder.

An engine that exposes /debug/steps (the reference engine) keeps only its last million steps
(engine.core.telemetry.StepRecorder). Read once at the end of the run, a long run's steps were
all held until then, a SIGKILL lost every one, and a run of more than a million lost its oldest.
:class:`StepFollower` instead polls ``GET /debug/steps?since=N`` every ``poll_s`` seconds
(results.folder.parts.writer.FLUSH_S, the interval records are flushed at), N one past the
last step it read, in a thread of its own, so that decoding the answers never runs on the load's
event loop. Each batch becomes one part of the folder's steps.parts
(results.folder.parts.step_parts.StepParts, which leaves out the steps that began before the
run's t0_ns); :meth:`StepFollower.stop` polls once more and hands the parts to the run writer, which
seals them into steps.parquet: the table one read of every step at the end would give. A killed
run keeps the steps polled before the kill (at most one interval is lost), which
results.folder.run_folder.load_run reads from the parts.

An engine without /debug/steps (a 404, or an answer not of its shape) is not followed: no parts,
no steps.parquet. A poll that fails (a timeout, a refused connection, a 5xx) is noted and the
next one asks again from the same step, so no step is missed or read twice; steps the engine's
recorder dropped before a poll read them are noted too.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa

from results.folder.engine_steps import STEPS_CLOCK, STEPS_PATH
from results.folder.parts.step_parts import StepParts
from results.folder.parts.writer import FLUSH_S

__all__ = ["StepFollower", "steps_taken"]


def steps_taken(description: Any) -> int:
    """The steps the engine had taken when it described itself (/debug/engine's
    ``stats.num_steps``; 0 when it does not say): where a run that began later starts to poll,
    so that its first poll does not fetch the engine's whole history."""
    stats = description.get("stats") if isinstance(description, dict) else None
    taken = stats.get("num_steps") if isinstance(stats, dict) else None
    return taken if isinstance(taken, int) and taken >= 0 else 0


class StepFollower:
    """Polls ``base_url``'s /debug/steps into ``folder``'s steps.parts (module docstring).

    ``first_step``: the first step number asked for (:func:`steps_taken`); ``poll_s`` and
    ``timeout_s``: seconds between polls, and the most one poll waits for its answer.
    """

    def __init__(
        self,
        base_url: str,
        folder: Path,
        headers: Mapping[str, str] | None = None,
        first_step: int = 0,
        poll_s: float = FLUSH_S,
        timeout_s: float = 10.0,
    ) -> None:
        if not poll_s > 0 or not timeout_s > 0:
            raise ValueError(f"poll_s and timeout_s must be > 0: {poll_s}, {timeout_s}")
        self.url = base_url.rstrip("/") + STEPS_PATH
        self.folder = Path(folder)
        self.headers = dict(headers or {})
        self.poll_s = poll_s
        self.timeout_s = timeout_s
        # The next step number to ask for: one past the last step read.
        self.next_step = first_step
        # None until the engine answers: True once it answered with steps, False when it has none.
        self.supported: bool | None = None
        self.polls = 0
        self.failures = 0
        self.notes: list[str] = []
        self._parts: StepParts | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._last_poll = True
        self._lock = threading.Lock()
        self._closed = False

    def start(self, t0_ns: int) -> None:
        """Follow from now on; steps that began before ``t0_ns`` (the run's start,
        perf_counter_ns of this host) are left out."""
        if self._thread is not None:
            raise RuntimeError(f"{self.url}: the step follower was already started")
        self._parts = StepParts(self.folder, t0_ns)
        self._thread = threading.Thread(target=self._follow, name="step-follower", daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        with httpx.Client(headers=self.headers, timeout=self.timeout_s) as client:
            while not self._stopping.wait(self.poll_s):
                if not self.poll(client):
                    return
            if self._last_poll:
                self.poll(client)

    def poll(self, client: httpx.Client) -> bool:
        """Read the steps from :attr:`next_step` on into one part. False once the engine is no
        longer followed (it has no /debug/steps, or stopped answering with its shape)."""
        self.polls += 1
        try:
            response = client.get(self.url, params={"since": self.next_step})
        except httpx.HTTPError as exc:
            return self._failed(f"{type(exc).__name__}: {exc}")
        if response.status_code >= 500:
            return self._failed(f"HTTP {response.status_code}")
        try:
            data = response.json() if response.status_code == 200 else None
        except ValueError:
            data = None
        columns = data.get("columns") if isinstance(data, dict) else None
        if (
            not isinstance(columns, dict)
            or data.get("clock") != STEPS_CLOCK
            or not isinstance(columns.get("step"), list)
        ):
            return self._unfollowed(f"HTTP {response.status_code}, not its steps")
        try:
            self._append(columns)
        except (TypeError, ValueError, KeyError, pa.ArrowException) as exc:
            return self._unfollowed(f"steps of another shape ({type(exc).__name__}: {exc})")
        self.supported = True
        return True

    def _append(self, columns: dict[str, Any]) -> None:
        steps: list[int] = columns["step"]
        # An engine that ignored ``since`` would repeat steps already read: those are cut.
        start = bisect.bisect_left(steps, self.next_step)
        if start == len(steps):
            return
        # Before the first read, steps not kept are older than the run (the recorder keeps a
        # million); after it, they are the run's.
        if steps[start] > self.next_step and self.supported:
            self.notes.append(
                f"engine steps {self.next_step}..{steps[start] - 1} were dropped by the engine "
                "before they were read"
            )
        batch = {name: values[start:] for name, values in columns.items()}
        with self._lock:
            if self._closed or self._parts is None:
                return
            self._parts(batch)
        self.next_step = steps[-1] + 1

    def _failed(self, why: str) -> bool:
        self.failures += 1
        if self.failures == 1:
            self.notes.append(
                f"engine steps: a poll of {self.url} failed ({why}); polling went on from step "
                f"{self.next_step}"
            )
        return True

    def _unfollowed(self, why: str) -> bool:
        if self.supported:
            self.notes.append(
                f"engine steps: {self.url} answered {why}; steps after {self.next_step - 1} "
                "were not followed"
            )
        else:
            self.supported = False
        return False

    def _join(self) -> None:
        if self._thread is not None:
            # A poll under way, then the last one: each waits at most timeout_s.
            self._thread.join(timeout=2 * self.timeout_s + self.poll_s)
            if self._thread.is_alive():
                self.notes.append(f"engine steps: {self.url} did not answer the last poll")
        with self._lock:
            self._closed = True

    def stop(self) -> StepParts | None:
        """Poll once more, stop following, and return the parts to seal into steps.parquet
        (bench.run.end.run_writer.RunWriter.seal_steps); None when the engine gave no steps
        (no /debug/steps, or it never answered), as a run without steps.parquet."""
        self._stopping.set()
        self._join()
        if self.failures > 1:
            self.notes.append(f"engine steps: {self.failures} of {self.polls} polls failed")
        if self.supported is None and self.failures:
            self.notes.append(f"engine steps: {self.url} never answered; no steps.parquet")
        return self._parts if self.supported else None

    def abandon(self) -> None:
        """Stop following without the last poll (a run that failed): the parts written stay,
        as a killed run's, unsealed."""
        self._last_poll = False
        self._stopping.set()
        self._join()
