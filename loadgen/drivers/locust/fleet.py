"""The master's book of its workers: who joined, what each was given, what came back, who was lost.

Plain bookkeeping, no Locust and no gevent, so that loadgen.drivers.locust.master stays the glue
and the rules here are tested alone. Worker ``i`` of ``W`` (numbered in the order they joined)
is given sessions ``i, i + W, i + 2W, ...`` of the plan. Each worker reports every request as it
sends it and again when it ends; so when a worker is lost (its heartbeats stop: killed, crashed,
cut off), the master knows exactly which of its requests were in flight and which it never sent,
and records each as a failed row naming the worker and when it was lost. Nothing the plan gave
that worker disappears from the run's tables.

Open loop: request ``i`` of the precomputed schedule goes to worker ``i mod W`` with its planned
time (each share is the schedule thinned, so at W times less the rate it keeps its shape); the
master starts the schedule at one run second on its own clock (``start_s``) and each worker
sends its share at ``start_s + due``. A lost worker's unsent share is recorded at its planned
times. Each worker's schedule lag (the moment it got to send a request minus its planned time,
from its self-check samples) is summarised per worker, and a worker whose p99 lag passes the
client check's limit is named as one that could not keep up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from loadgen.drivers.clock_sync import ClockOffset
from loadgen.request_spec import RequestSpec
from perfmodel.files import JSONObject
from results.figures.client_check import DEFAULT_THRESHOLDS
from results.folder.records import RequestRecord

__all__ = ["Fleet", "WorkerSlot", "lag_summary", "lost_cause"]

# A worker whose schedule lag p99 passes this could not keep up (the client check's limit).
BEHIND_P99_S = DEFAULT_THRESHOLDS["schedule_lag_p99_ms"] / 1000.0


def lag_summary(lags_s: Sequence[float]) -> JSONObject:
    """p50, p99 and max of schedule lags (seconds), their count, and ``behind``: p99 past
    :data:`BEHIND_P99_S`."""
    if not len(lags_s):
        return {"samples": 0, "p50_s": None, "p99_s": None, "max_s": None, "behind": False}
    arr = np.asarray(lags_s, dtype=np.float64)
    p50, p99 = (float(v) for v in np.percentile(arr, [50, 99]))
    return {"samples": int(arr.size), "p50_s": p50, "p99_s": p99, "max_s": float(arr.max()),
            "behind": p99 > BEHIND_P99_S}  # fmt: skip


SlotState = Literal["joining", "ready", "running", "done", "lost"]


def lost_cause(index: int, host: str, t_s: float, last_heard_s: float | None) -> str:
    """The error text of a lost worker's requests (one wording for every row and message):
    when it was declared lost, and when the master last heard from it (run seconds)."""
    heard = "never heard" if last_heard_s is None else f"last heard at t={last_heard_s:.2f}s"
    return f"worker {index} ({host}) lost at t={t_s:.2f}s ({heard})"


@dataclass
class WorkerSlot:
    """One worker of the run.

    Attributes:
        index: 0-based, in the order workers joined (a place freed before the load started
            goes to the next worker that joins).
        client_id: Locust's id of the worker process (``<hostname>_<hex>``).
        sessions: the plan sessions given to it.
        state: joining (clock and plan being sent), ready, running, done or lost.
        clock: its measured clock offset (None until measured).
        in_flight: request id -> (user_id, scheduled_s, sent_s) of requests sent, not yet ended.
        recorded: ids of the requests whose records came back.
        last_heard_s: run seconds of its latest message (it sends its self-check samples
            every 0.25 s while it runs).
        lost_at_s: run seconds when it was declared lost.
        failed_as_lost: how many of its requests were recorded as failed because it was lost.
        due_s: open loop: each request's planned time, s from the schedule's start (None:
            closed loop).
        start_s: open loop: the run second the schedule started at (the master's clock).
        lags_s: open loop: its schedule lags, seconds, as its samples arrive.
        first_clock: the offset measured before the load (drift is measured against it).
        resyncs: how many times its clock was measured again during the run.
        stamps: its connections' stamp records, per replica, sent with its last message
            (loadgen.drivers.locust.raw.WorkerStamps; empty for a worker lost before).
    """

    index: int
    client_id: str
    sessions: list[list[RequestSpec]]
    state: SlotState = "joining"
    clock: ClockOffset | None = None
    in_flight: dict[str, tuple[int, float, float]] = field(default_factory=dict)
    recorded: set[str] = field(default_factory=set)
    last_heard_s: float | None = None
    lost_at_s: float | None = None
    failed_as_lost: int = 0
    due_s: list[float] | None = None
    start_s: float | None = None
    lags_s: list[float] = field(default_factory=list)
    first_clock: ClockOffset | None = None
    resyncs: int = 0
    stamps: list[JSONObject] = field(default_factory=list)

    @property
    def host(self) -> str:
        """The worker's hostname, as Locust put it in its id."""
        return self.client_id.rpartition("_")[0] or self.client_id

    @property
    def requests(self) -> list[RequestSpec]:
        return [spec for session in self.sessions for spec in session]

    def to_json(self) -> JSONObject:
        """run.json's entry for this worker (load.locust_workers)."""
        row: JSONObject = {
            "index": self.index,
            "host": self.host,
            "status": "lost" if self.state == "lost" else "ok",
            "requests_assigned": len(self.requests),
            "requests_recorded": len(self.recorded),
        }
        if self.clock is not None:
            row.update(self.clock.to_json())
        if self.first_clock is not None and self.clock is not None and self.resyncs:
            row["clock_resyncs"] = self.resyncs
            row["clock_drift_s"] = (self.clock.offset_ns - self.first_clock.offset_ns) / 1e9
        if self.due_s is not None:
            row["schedule_lag"] = lag_summary(self.lags_s)
        if self.lost_at_s is not None:
            row["lost_at_s"] = self.lost_at_s
            row["last_heard_s"] = self.last_heard_s
            row["requests_failed_as_lost"] = self.failed_as_lost
        return row


class Fleet:
    """The workers of one run (module docstring)."""

    def __init__(
        self, sessions: Sequence[Sequence[RequestSpec]], workers: int,
        schedule_s: Sequence[float] | None = None,
    ) -> None:  # fmt: skip
        if workers < 1:
            raise ValueError(f"Fleet: workers must be >= 1, got {workers}")
        self.sessions = sessions
        self.schedule_s = None if schedule_s is None else [float(t) for t in schedule_s]
        self.expected = workers
        self.slots: list[WorkerSlot] = []
        self._by_id: dict[str, WorkerSlot] = {}

    def join(self, client_id: str) -> WorkerSlot | None:
        """The slot of a newly connected worker; None when the run has all it waits for (or
        the same process connects again)."""
        if client_id in self._by_id or len(self.slots) >= self.expected:
            return None
        index = min(set(range(self.expected)) - {s.index for s in self.slots})
        given = [list(s) for s in self.sessions[index :: self.expected]]
        due = None if self.schedule_s is None else self.schedule_s[index :: self.expected]
        slot = WorkerSlot(index, client_id, given, due_s=due)
        self.slots.append(slot)
        self.slots.sort(key=lambda s: s.index)
        self._by_id[client_id] = slot
        return slot

    def release(self, slot: WorkerSlot) -> bool:
        """Free the place of a worker gone before the load started (nothing of the plan was
        sent by it), for the next one to join; False once the load has started."""
        if slot.state not in ("joining", "ready") or self._by_id.get(slot.client_id) is not slot:
            return False
        self.slots.remove(slot)
        del self._by_id[slot.client_id]
        return True

    def get(self, client_id: str) -> WorkerSlot | None:
        return self._by_id.get(client_id)

    def heard(self, client_id: str, t_s: float) -> WorkerSlot | None:
        """The slot of ``client_id``, noting that it was heard from at run second ``t_s``."""
        slot = self._by_id.get(client_id)
        if slot is not None:
            slot.last_heard_s = t_s
        return slot

    @property
    def joined(self) -> int:
        return len(self.slots)

    @property
    def set_up(self) -> int:
        """Workers whose clock has been measured (and plan sent)."""
        return sum(1 for s in self.slots if s.clock is not None)

    @property
    def all_ready(self) -> bool:
        return self.joined == self.expected and all(s.state == "ready" for s in self.slots)

    @property
    def finished(self) -> bool:
        """Every worker is done or lost."""
        return self.joined == self.expected and all(s.state in ("done", "lost") for s in self.slots)

    def started(self, slot: WorkerSlot, rows: Sequence[Sequence[Any]]) -> None:
        """Requests ``slot`` just sent: ``[request_id, user_id, scheduled_s, sent_s]`` rows."""
        for rid, user_id, scheduled_s, sent_s in rows:
            if rid not in slot.recorded:
                slot.in_flight[str(rid)] = (int(user_id), float(scheduled_s), float(sent_s))

    def recorded(self, slot: WorkerSlot, record: RequestRecord) -> bool:
        """Note a record from ``slot``; False (drop it) when its worker was already declared
        lost, whose requests are failed rows already, or when it came twice."""
        if slot.state == "lost" or record.request_id in slot.recorded:
            return False
        slot.recorded.add(record.request_id)
        slot.in_flight.pop(record.request_id, None)
        return True

    def lose(self, slot: WorkerSlot, t_s: float) -> list[RequestRecord]:
        """Declare ``slot`` lost at run second ``t_s``: a failed record for each of its requests
        in flight (sent then) and each it never sent (scheduled and "sent" at ``t_s``, no
        response; open loop: scheduled at its planned time, "sent" then or at ``t_s``, whichever
        is later). Its later records are dropped (:meth:`recorded`)."""
        if slot.state in ("done", "lost"):
            return []
        slot.state = "lost"
        slot.lost_at_s = t_s
        cause = lost_cause(slot.index, slot.host, t_s, slot.last_heard_s)
        failed: list[RequestRecord] = []
        planned = slot.due_s if slot.due_s is not None and slot.start_s is not None else None
        for i, spec in enumerate(slot.requests):
            if spec.request_id in slot.recorded:
                continue
            sent = slot.in_flight.get(spec.request_id)
            if sent is not None:
                user_id, scheduled_s, sent_s = sent
                error = f"{cause} with the request in flight"
            elif planned is not None:
                due = slot.start_s + planned[i]  # type: ignore[operator]
                user_id, scheduled_s, sent_s = -1, due, max(due, t_s)
                error = f"{cause} before sending the request"
            else:
                user_id, scheduled_s, sent_s = -1, t_s, t_s
                error = f"{cause} before sending the request"
            record = RequestRecord.unanswered(
                spec.request_id, user_id, scheduled_s, sent_s, None, spec.prompt_tokens,
                "error", error,
            )  # fmt: skip
            record.model = spec.model  # None: the run's model, filled when the folder is read
            failed.append(record)
            slot.recorded.add(spec.request_id)
        slot.in_flight.clear()
        slot.failed_as_lost = len(failed)
        return failed
